"""What each seam's adapter finds in the installed vLLM is that line's row of
LINE_SEAMS; register() applies exactly those seams, also where the release
is newer than every measured one (fresh processes)."""

from tests.integration.helpers import registered_as, run_python
from tests.vllm_lines import INSTALLED_LINE
from vllm_sampling_plugin.integration.version import LINE_SEAMS


def test_adapters_find_the_shapes_of_the_table():
    out = run_python(
        """
        from vllm_sampling_plugin.integration.seams import detect_seams
        for seam, found in detect_seams().items():
            print(f"{seam}={found.shape}")
        """
    )
    detected = dict(line.split("=", 1) for line in out.strip().splitlines() if "=" in line)
    assert detected == {seam: str(shape) for seam, shape in LINE_SEAMS[INSTALLED_LINE].items()}


def test_a_release_newer_than_every_measured_one_takes_the_seams_it_recognises():
    """The installed vLLM reporting a release newer than every row of
    LINE_SEAMS: register() applies each seam whose shape its adapter
    recognises (here the installed line's row), says so in exactly one
    warning line naming the release and the seams left to upstream, and
    logs no error."""
    out = run_python(
        """

        import vllm.v1.worker.gpu.model_runner as mr
        from vllm_sampling_plugin.integration import draw
        from vllm_sampling_plugin.integration.register import registration_state
        from vllm_sampling_plugin.integration.seams import detect_seams
        found = detect_seams()
        assert mr.Sampler is draw.sampler_class(found["draw"].shape), mr.Sampler
        warms_up = getattr(mr.GPUModelRunner._dummy_sampler_run, "warms_up_plugin_kernels", False)
        assert warms_up == found["warm-up"].is_taken
        errors = [r.getMessage() for r in records if r.levelno >= logging.ERROR]
        warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
        assert not errors, errors
        assert len(warnings) == 1, warnings
        print(registration_state())
        print(warnings[0])
        for seam, f in found.items():
            print(f"{seam}={f.shape}")
        """,
        prelude=registered_as("0.99.0"),
        env={"VLLM_LOGGING_LEVEL": "WARNING"},  # the helpers' ERROR would hide the warning
    )
    lines = out.strip().splitlines()
    detected = dict(line.split("=", 1) for line in lines if line.split("=")[0] in LINE_SEAMS["0.20"])
    assert detected == {seam: str(shape) for seam, shape in LINE_SEAMS[INSTALLED_LINE].items()}
    state, warning = lines[-len(detected) - 2 : -len(detected)]
    assert state == "active"
    left = [seam for seam, shape in LINE_SEAMS[INSTALLED_LINE].items() if shape is None]
    assert "0.99.0" in warning, warning
    assert warning.split("leaves ")[1] == f"{', '.join(left) or 'none'} to upstream.", warning


def test_register_binds_the_draw_seams_sampler():
    out = run_python(
        """
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        import vllm.v1.worker.gpu.model_runner as mr
        from vllm_sampling_plugin.integration.register import registration_state
        from vllm_sampling_plugin.integration import draw
        from vllm_sampling_plugin.integration.version import LINE_SEAMS, installed_vllm_version, release_line
        shape = LINE_SEAMS[release_line(installed_vllm_version())]["draw"]
        assert mr.Sampler is draw.sampler_class(shape), mr.Sampler
        assert mr.GPUModelRunner._dummy_sampler_run.warms_up_plugin_kernels
        print(registration_state())
        """
    )
    assert out.strip().splitlines()[-1] == "active"


# Upstream's FP32 Gumbel noise in each line's sample/gumbel.py (the wheels'
# survey in docs/compatibility.md): none where it draws FP64 only.
UPSTREAM_FP32_NOISE = {
    "0.20": None,
    "0.21": None,
    **{f"0.{minor}": "Triton's tl.rand" for minor in range(22, 31)},
    "0.31": "murmur3",
    "0.32": "murmur3",
    "0.33": "murmur3",
    "0.34": "murmur3",
}


def test_fp32_stream_of_an_engine_that_speculates_is_upstreams_where_the_plugin_has_it():
    """The draw seam's noise (integration/draw/noise.py): where upstream's RejectionSampler
    draws the steps with drafts, the plugin's FP32 draw is upstream's stream
    if it has it, and the log line says when it has not."""
    out = run_python(
        """
        import types
        from vllm_sampling_plugin.integration.draw import noise

        speculating = types.SimpleNamespace(speculative_config=object())
        plain = types.SimpleNamespace(speculative_config=None)
        print(f"upstream={noise.upstream_fp32_noise()}")
        print(f"speculating={noise.fp32_noise(speculating)[0]}")
        print(f"plain={noise.fp32_noise(plain)[0]}")
        print(f"no_match={'is not upstream' in noise.fp32_noise(speculating)[1]}")
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        print(f"registered={noise.fp32_noise(speculating)[0]}")
        print(f"matching={'matching its own draws' in noise.fp32_noise(speculating)[1]}")
        """
    )
    found = dict(line.split("=", 1) for line in out.strip().splitlines() if "=" in line)
    upstream = UPSTREAM_FP32_NOISE[INSTALLED_LINE]
    expected = "murmur3" if upstream == "murmur3" else "philox"
    assert found["upstream"] == str(upstream)
    assert (found["speculating"], found["plain"]) == (expected, "philox")
    assert found["no_match"] == str(upstream != "murmur3")
    assert found["registered"] == expected
    # 0.20: the plugin's RejectionSampler verifies drafts by matching its draws.
    assert found["matching"] == str(INSTALLED_LINE == "0.20")


def test_engine_speculating_in_fp32_keeps_upstreams_draw_where_the_plugin_lacks_its_noise():
    """0.21-0.30: upstream's RejectionSampler draws the steps with drafts in
    noise the plugin has no FP32 stream for, so an engine that speculates in
    FP32 keeps upstream's Sampler (its seeded requests stay reproducible, as
    in stock vLLM); FP64 engines and engines without speculation get the
    plugin's draw, and so does every engine on 0.20 and from 0.31 on."""
    out = run_python(
        """
        import types
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        from vllm_sampling_plugin.integration.draw import noise

        def engine(speculating, fp64):
            return types.SimpleNamespace(
                speculative_config=object() if speculating else None,
                model_config=types.SimpleNamespace(use_fp64_gumbel=fp64))
        for name, config in [("fp32_spec", engine(True, False)), ("fp64_spec", engine(True, True)),
                             ("fp32_plain", engine(False, False))]:
            print(f"{name}={noise.upstream_draw_reason(config) is not None}")
        built = noise.upstream_sampler_instead(
            lambda *args, **kwargs: ("upstream", args, kwargs), engine(True, False), (1,), {"x": 2})
        print(f"built={built}")
        """
    )
    found = dict(line.split("=", 1) for line in out.strip().splitlines() if "=" in line)
    upstreams = INSTALLED_LINE != "0.20" and UPSTREAM_FP32_NOISE[INSTALLED_LINE] != "murmur3"
    assert found["fp32_spec"] == str(upstreams)
    assert (found["fp64_spec"], found["fp32_plain"]) == ("False", "False")
    assert found["built"] == (str(("upstream", (1,), {"x": 2})) if upstreams else "None")


def test_the_draw_seams_sampler_builds_upstreams_for_an_engine_that_keeps_its_draw():
    """The plugin's Sampler class of the installed draw shape, built by the
    runner for such an engine, is upstream's Sampler from the same arguments
    (its ``__new__``), so nothing of the plugin's ``__init__`` runs. Upstream's
    class is a stub here: its real one needs a GPU."""
    out = run_python(
        """
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        from vllm_sampling_plugin.integration.draw import sample as whole_sample
        from vllm_sampling_plugin.integration import draw
        from vllm_sampling_plugin.integration.draw import noise

        class UpstreamSampler:
            def __init__(self, *args, **kwargs):
                self.arguments = (args, kwargs)
        plugin_class = draw.sampler_class(draw.detect().shape)
        noise.upstream_draw_reason = lambda config: "kept for this test"
        draw.upstream.Sampler = whole_sample.Sampler = UpstreamSampler
        built = plugin_class(4, 32, device="cpu", req_states=None)
        print(f"upstream={type(built) is UpstreamSampler}")
        print(f"arguments={built.arguments}")
        """
    )
    found = dict(line.split("=", 1) for line in out.strip().splitlines() if "=" in line)
    assert found["upstream"] == "True"
    assert found["arguments"] == str(((4, 32), {"device": "cpu", "req_states": None}))


# The dtype of the request slots each line's runner hands the sampler, read
# from the wheels' model_runner.py: ``idx_mapping_np = np.fromiter(...,
# dtype=np.int32)`` through 0.27, ``np.intp`` from 0.28, copied to the GPU in
# that dtype except on 0.31 (``dtype=torch.int32``) and 0.32-0.33 (int64).
STEP_SLOT_DTYPE = {
    f"0.{minor}": "int32" if minor <= 27 or minor == 31 else "int64" for minor in range(20, 35)
}


# A plugin draw whose kernels only record each launch: (kernel, logits
# dtype, slot dtype, position dtype, rows, slots).
RECORDING_DRAW = """
import torch
from vllm_sampling_plugin.integration.draw.plugin_draw import PluginDrawMixin

class RecordingDraw(PluginDrawMixin):
    use_fp64_gumbel = False
    fp64_stream = fp32_stream = "philox"
    sampling_states = type("States", (), {"vocab_size": 64})()

    def __new__(cls):
        return object.__new__(cls)

    def __init__(self):
        self.launches = []

    def record(self, kernel, rows, slots, positions):
        self.launches.append((kernel, rows.dtype, slots.dtype, positions.dtype,
                              rows.shape[0], tuple(slots.tolist())))

    def draw_gumbel(self, rows, slots, positions):
        self.record("gumbel", rows, slots, positions)

    def draw_top_k_top_p(self, rows, slots, positions):
        self.record("fused", rows, slots, positions)
"""


def test_warm_up_launches_the_draw_in_the_request_slot_dtype_of_the_runners_steps():
    """Triton compiles one kernel per pointer dtype: a warm-up in a dtype the
    steps do not use leaves the first requests to compile (0.26, H200)."""
    out = run_python(
        """
        from vllm_sampling_plugin.integration.warmup import step_slot_dtypes, warm_up_plugin_draw

        (slot_dtype,) = step_slot_dtypes()
        sampler = RecordingDraw()
        warm_up_plugin_draw(sampler, 8, torch.device("cpu"), (torch.float32, torch.bfloat16), (slot_dtype,))
        seen = {launch[:4] for launch in sampler.launches}
        assert seen == {
            (kernel, logits, slot_dtype, torch.int64)
            for kernel in ("gumbel", "fused") for logits in (torch.float32, torch.bfloat16)
        }, seen
        print(str(slot_dtype).removeprefix("torch."))
        """,
        prelude=RECORDING_DRAW,
    )
    assert out.strip().splitlines()[-1] == STEP_SLOT_DTYPE[INSTALLED_LINE]


def test_warm_up_draws_every_logit_a_matching_verifier_draws():
    """Where the runner's verifier matches drafts against the Sampler's draws
    of every logit (the plugin's verification on 0.32/0.33), the draw's
    warm-up reaches max_num_reqs x (1 + K) rows, over the request slots."""
    out = run_python(
        """
        import types
        from vllm_sampling_plugin.integration import warmup

        # One launch at the largest batch the warm-up covers (on this CPU
        # every size is one compile variant).
        warmup.representatives = lambda max_rows, variant: [max_rows]

        class Matching:
            def warm_up_verification(self, max_num_reqs, device, logits_dtypes, slot_dtypes,
                                     draft_logits):
                self.asked = (max_num_reqs, logits_dtypes, draft_logits)
                return max_num_reqs * 4

        def runner(verifier):
            return types.SimpleNamespace(
                sampler=RecordingDraw(), rejection_sampler=verifier, max_num_reqs=8,
                device=torch.device("cpu"), speculator=types.SimpleNamespace(draft_logits=None),
                model_config=types.SimpleNamespace(dtype=torch.bfloat16))

        matching = runner(Matching())
        warmup.warm_up(matching)
        assert {launch[4] for launch in matching.sampler.launches} == {32}
        assert matching.rejection_sampler.asked == (8, (torch.float32, torch.bfloat16), None)
        assert set().union(*(launch[5] for launch in matching.sampler.launches)) == set(range(8))
        plain = runner(None)
        warmup.warm_up(plain)
        assert {launch[4] for launch in plain.sampler.launches} == {8}
        print("ok")
        """,
        prelude=RECORDING_DRAW,
    )
    assert out.strip().splitlines()[-1] == "ok"


def test_warm_up_covers_both_slot_dtypes_where_the_runner_has_no_source():
    """A vLLM installed without its .py files: the warm-up cannot read the
    steps' dtype, so it compiles both rather than failing the engine."""
    out = run_python(
        """
        import inspect
        import vllm.v1.worker.gpu.model_runner  # imported first: its imports read sources
        from vllm_sampling_plugin.integration import warmup

        def no_source(obj):
            raise OSError("could not get source code")

        inspect.getsource = no_source
        print(warmup.step_slot_dtypes.__wrapped__())
        """
    )
    assert out.strip().splitlines()[-1] == "(torch.int32, torch.int64)"
