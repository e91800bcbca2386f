"""``use_fp64_gumbel`` and ``VLLM_USE_FLASHINFER_SAMPLER`` from every front door
to the ModelConfig that workers receive, against the real vLLM 0.20 objects.

Each check runs in a fresh interpreter where the plugin is never imported by
hand: only its entry points exist, as on a user's machine.
"""

import pytest

from tests.integration.helpers import CPU_DEVICE_SHIM, run_python
from tests.tiny_model import write_tiny_llama
from tests.vllm_lines import needs_seam
from vllm_sampling_plugin.integration.common import shapes

pytestmark = needs_seam(shapes.SETTINGS, shapes.ENGINE_ARGS_WRAPPED)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(write_tiny_llama(tmp_path_factory.mktemp("tiny")))


def test_serve_help_lists_both_flags():
    out = run_python(
        prelude=CPU_DEVICE_SHIM,
        code="""
        import contextlib, io, sys
        from vllm.entrypoints.cli.main import main
        sys.argv = ["vllm", "serve", "--help=ModelConfig"]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
            main()
        print(buf.getvalue())
        """
    )
    assert "--use-fp64-gumbel, --no-use-fp64-gumbel" in out
    help_text = " ".join(out.split("--use-fp64-gumbel, --no-use-fp64-gumbel", 1)[1].split())
    assert "FP64" in help_text and "FP32" in help_text and "2x" in help_text
    assert "default: False" in help_text.lower() or "(default: false)" in help_text.lower()


@pytest.mark.parametrize(
    "flags, expected",
    [([], False), (["--use-fp64-gumbel"], True), (["--no-use-fp64-gumbel"], False)],
)
def test_cli_flag_reaches_async_engine_args_and_model_config(tiny_model, flags, expected):
    out = run_python(
        prelude=CPU_DEVICE_SHIM,
        code=f"""
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        parser = make_arg_parser(FlexibleArgumentParser())
        args = parser.parse_args(["--model", {tiny_model!r}, "--load-format", "dummy"] + {flags!r})
        engine_args = AsyncEngineArgs.from_cli_args(args)
        model_config = engine_args.create_model_config()
        print(engine_args.use_fp64_gumbel, model_config.use_fp64_gumbel)
        """
    )
    assert out.strip().splitlines()[-1].split() == [str(expected)] * 2


@pytest.mark.parametrize("cls", ["EngineArgs", "AsyncEngineArgs"])
def test_keyword_accepted_in_fresh_process(tiny_model, cls):
    out = run_python(
        f"""
        from vllm.engine.arg_utils import {cls}
        engine_args = {cls}(model={tiny_model!r}, load_format="dummy", use_fp64_gumbel=True)
        print(engine_args.use_fp64_gumbel, engine_args.create_model_config().use_fp64_gumbel)
        """
    )
    assert out.strip().splitlines()[-1].split() == ["True", "True"]


def test_llm_keyword_accepted_in_fresh_process(tiny_model):
    """LLM(...) binds its keywords before any plugin loads; the engine itself
    needs a GPU, so the engine constructor is replaced by a probe."""
    out = run_python(
        f"""
        from vllm import LLM
        from vllm.v1.engine.llm_engine import LLMEngine

        class Probe(Exception):
            pass

        def capture(engine_args, *args, **kwargs):
            model_config = engine_args.create_model_config()
            raise Probe(f"{{engine_args.use_fp64_gumbel}} {{model_config.use_fp64_gumbel}}")

        LLMEngine.from_engine_args = staticmethod(capture)
        try:
            LLM(model={tiny_model!r}, load_format="dummy", use_fp64_gumbel=True)
        except Probe as probe:
            print(probe)
        """
    )
    assert out.strip().splitlines()[-1].split() == ["True", "True"]


def test_wrong_type_is_rejected(tiny_model):
    out = run_python(
        f"""
        from vllm.engine.arg_utils import EngineArgs
        try:
            EngineArgs(model={tiny_model!r}, use_fp64_gumbel="yes")
        except TypeError as e:
            print(e)
        """
    )
    assert "use_fp64_gumbel must be a bool" in out


@pytest.mark.parametrize(
    "value, expected", [(None, "None"), ("1", "True"), ("0", "False")]
)
def test_flashinfer_env_resolved_into_model_config(tiny_model, value, expected):
    env = {} if value is None else {"VLLM_USE_FLASHINFER_SAMPLER": value}
    unset = "import os; os.environ.pop('VLLM_USE_FLASHINFER_SAMPLER', None)" if value is None else ""
    out = run_python(
        f"""
        {unset}
        import pickle
        from vllm.engine.arg_utils import EngineArgs
        model_config = EngineArgs(model={tiny_model!r}, load_format="dummy").create_model_config()
        # What a spawned worker receives.
        received = pickle.loads(pickle.dumps(model_config))
        print(model_config.flashinfer_sampler, received.flashinfer_sampler,
              received.use_fp64_gumbel)
        """,
        env=env,
    )
    assert out.strip().splitlines()[-1].split() == [expected, expected, "False"]


# Empty fails too: vLLM's own parse of the variable (int("")) would.
@pytest.mark.parametrize("value", ["yes", "2", "true", ""])
def test_malformed_flashinfer_env_fails_at_start_up(tiny_model, value):
    out = run_python(
        f"""
        from vllm.engine.arg_utils import EngineArgs
        try:
            EngineArgs(model={tiny_model!r}, load_format="dummy").create_model_config()
        except ValueError as e:
            print("ValueError:", e)
        """,
        env={"VLLM_USE_FLASHINFER_SAMPLER": value},
    )
    assert out.startswith("ValueError:") and "VLLM_USE_FLASHINFER_SAMPLER" in out
    assert repr(value) in out


def test_each_measured_lines_shapes_give_the_defaults_its_engine_runs_measured():
    """The defaults table is keyed by shape: a measured line's row of
    LINE_SEAMS gives the settings its seams add, each with its default."""
    from vllm_sampling_plugin.integration.settings.defaults import defaults
    from vllm_sampling_plugin.integration.version import LINE_SEAMS

    assert defaults(LINE_SEAMS["0.20"]) == {"use_fp64_gumbel": False, "speculation_policy": "adaptive"}
    assert defaults(LINE_SEAMS["0.21"]) == {"use_fp64_gumbel": False}
    # A line whose seams add no setting (upstream has use_fp64_gumbel).
    assert defaults(LINE_SEAMS["0.26"]) == {}
    for line in ("0.32", "0.33"):
        assert defaults(LINE_SEAMS[line]) == {
            "speculation_policy": "adaptive",
            "plugin_verification": "plugin",
        }
