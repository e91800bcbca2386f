"""The e2e benchmark's plumbing without a GPU: arguments, workload, run order,
statistics, the near-tie check, the results schema and its tables."""

from __future__ import annotations

import argparse
import json
import sys
import time
import types

import pytest

from tests.commands import last_line, run_lab
from benchmarks.e2e import copying, engine, hooks, report, run, workload


def test_defaults_cover_the_issue_cells():
    args = run.parse_args([])
    assert args.models == [("1b", 128256)]
    assert args.mixes == ["greedy", "t1", "topk_topp", "seeded_topp", "mixed", "ngram"]
    assert (args.pairs, args.num_requests, args.prompt_len, args.output_len) == (3, 1024, 64, 256)
    assert args.max_num_seqs == [64, 256]
    assert args.ngram_k == [3]
    assert args.breakdown_mixes == ["topk_topp", "ngram"]


def test_arguments_parse_lists():
    args = run.parse_args(["--models", "1b:128256,8b:151936", "--mixes", "topk_topp,ngram",
                           "--max-num-seqs", "256", "--pairs", "5", "--breakdown-mixes",
                           "none"])
    assert args.models == [("1b", 128256), ("8b", 151936)]
    assert args.mixes == ["topk_topp", "ngram"]
    assert args.max_num_seqs == [256]
    assert args.pairs == 5
    assert args.breakdown_mixes == []


@pytest.mark.parametrize("bad", [["--models", "70b:128256"], ["--models", "1b"],
                                 ["--mixes", "beam"], ["--max-num-seqs", "64,x"],
                                 ["--max-num-seqs", "0"], ["--pairs", "0"]])
def test_bad_arguments_exit_with_usage(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        run.parse_args(bad)
    assert exc.value.code == 2


def test_sampling_kwargs_per_mix():
    assert workload.sampling_kwargs("greedy", 0, 8) == {
        "temperature": 0.0, "max_tokens": 8, "ignore_eos": True}
    assert workload.sampling_kwargs("topk_topp", 5, 8) == {
        "temperature": 0.7, "top_k": 50, "top_p": 0.9, "max_tokens": 8, "ignore_eos": True}
    seeded = [workload.sampling_kwargs("seeded_topp", i, 8)["seed"] for i in range(3)]
    assert len(set(seeded)) == 3
    mixed = [workload.sampling_kwargs("mixed", i, 8) for i in range(8)]
    assert [m["temperature"] for m in mixed] == [0.0, 1.0, 0.7, 1.0] * 2
    assert mixed[3]["seed"] == workload.SEED_BASE + 3 and "seed" not in mixed[2]
    assert workload.sampling_kwargs("ngram", 1, 8) == workload.sampling_kwargs("greedy", 1, 8)


def test_seeded_identity_draws_at_temperature_one_without_top_p():
    """The n-gram cells' seeded comparison keeps every token drawable (on the
    copy checkpoint top-p 0.95 would leave only the argmax), and is no mix of
    its own: not a CLI choice, not in ``mixed``."""
    assert workload.sampling_kwargs(workload.IDENTITY_SEEDED_MIX, 2, 8) == {
        "temperature": 1.0, "max_tokens": 8, "ignore_eos": True,
        "seed": workload.SEED_BASE + 2}
    assert workload.IDENTITY_SEEDED_MIX not in workload.MIXES


def test_the_penalties_mix_is_named_not_defaulted():
    """``penalties_topk`` (logits processors on top of top-k/top-p) runs where
    a run names it, for plain and speculative cells, and in no default."""
    kwargs = workload.sampling_kwargs("penalties_topk", 3, 8)
    assert kwargs == {**workload.sampling_kwargs("topk_topp", 3, 8),
                      "presence_penalty": 0.2, "frequency_penalty": 0.2}
    args = run.parse_args([])
    assert "penalties_topk" not in args.mixes and "penalties_topk" not in workload.MIXES
    args = run.parse_args(["--mixes", "penalties_topk", "--spec-mixes", "topk_topp,penalties_topk"])
    assert args.mixes == ["penalties_topk"]
    assert args.spec_mixes == ["topk_topp", "penalties_topk"]
    mixed = {workload.sampling_kwargs("mixed", i, 8).get("presence_penalty") for i in range(8)}
    assert mixed == {None}


def test_prompts_are_words_of_the_vocabulary():
    prompts = workload.random_prompts(4, 64, 1000, seed=1)
    assert [len(p) for p in prompts] == [64] * 4
    assert all(workload.FIRST_WORD_ID <= t < 1000 for p in prompts for t in p)
    assert prompts == workload.random_prompts(4, 64, 1000, seed=1)


def test_pairs_alternate_which_engine_goes_first():
    assert workload.pair_orders(4) == [("stock", "plugin"), ("plugin", "stock")] * 2
    assert workload.pair_orders(1, ("nospec", "spec")) == [("nospec", "spec")]
    # Three engines (--control-alongside): each goes first once in three
    # rotations, and each runs once in every position.
    orders = workload.pair_orders(3, ("nospec", "spec", "twin"))
    assert orders == [("nospec", "spec", "twin"), ("spec", "twin", "nospec"),
                      ("twin", "nospec", "spec")]
    assert all(sorted(o[i] for o in orders) == ["nospec", "spec", "twin"] for i in range(3))


def test_waves():
    assert workload.waves(list(range(5)), 2) == [[0, 1], [2, 3], [4]]


def test_engine_roles_and_arguments():
    stock = engine.EngineSpec("stock", "/m", 256, 0.4, 400)
    assert engine.child_env(stock, "/c")["VLLM_PLUGINS"] == "none"
    assert engine.child_env(stock, "/c")["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    # Each engine compiles afresh: its own Triton cache and vLLM compile cache.
    assert engine.child_env(stock, "/c")["TRITON_CACHE_DIR"] == "/c/triton"
    assert engine.child_env(stock, "/c")["VLLM_CACHE_ROOT"] == "/c/vllm"
    assert engine.triton_cache_dir("/c") == "/c/triton"
    plugin = engine.EngineSpec("plugin", "/m", 256, 0.4, 400)
    assert "VLLM_PLUGINS" not in engine.child_env(plugin, "/c")
    kwargs = stock.llm_kwargs()
    assert kwargs["max_num_seqs"] == 256 and "speculative_config" not in kwargs
    assert "compilation_config" not in kwargs  # vLLM's own CUDA-graph sizes unless asked
    capped = engine.EngineSpec("stock", "/m", 256, 0.4, 400, max_cudagraph_capture_size=256)
    assert capped.llm_kwargs()["compilation_config"] == {"max_cudagraph_capture_size": 256}
    full = engine.EngineSpec("plugin", "/m", 64, 0.4, 400, max_cudagraph_capture_size=256,
                             cudagraph_mode="FULL")
    assert full.llm_kwargs()["compilation_config"] == {
        "max_cudagraph_capture_size": 256, "cudagraph_mode": "FULL"}
    spec = engine.EngineSpec("plugin", "/m", 64, 0.4, 400, ngram_k=3)
    assert spec.llm_kwargs()["speculative_config"]["num_speculative_tokens"] == 3
    assert spec.label == "plugin+ngram3"


def test_engines_must_run_the_sampler_of_their_role():
    engine.check_sampler("plugin", "vllm_sampling_plugin.integration.draw.sample.PluginSampler")
    engine.check_sampler("stock", "vllm.v1.worker.gpu.sample.sampler.Sampler")
    with pytest.raises(RuntimeError, match="plugin did not load"):
        engine.check_sampler("plugin", "vllm.v1.worker.gpu.sample.sampler.Sampler")
    with pytest.raises(RuntimeError, match="VLLM_PLUGINS=none did not apply"):
        engine.check_sampler("stock", "vllm_sampling_plugin.integration.draw.sample.PluginSampler")


class FakeEngine:
    """Stands in for an engine process: records calls, returns set tokens/s."""

    def __init__(self, role, calls, tok_s):
        self.role, self.calls, self.tok_s = role, calls, tok_s

    def call(self, command, **kwargs):
        self.calls.append((self.role, command, len(kwargs["prompts"]), kwargs["output_len"]))
        return {"tok_s": self.tok_s, "tokens": 0, "seconds": 1.0,
                "host_cpu_s": {"engine_core": self.tok_s / 100, "front_end": 0.5}}


class SpeculatingEngine(FakeEngine):
    """A FakeEngine that also answers the identity calls: ``answer(self,
    kwargs)`` gives their tokens (and logprobs, or spec-decode counters other
    than none); ``seen`` gets (role, command, kwargs) of each."""

    def __init__(self, role, calls, tok_s, seen, answer):
        super().__init__(role, calls, tok_s)
        self.seen, self.answer = seen, answer

    def call(self, command, **kwargs):
        if command == "throughput":
            return super().call(command, **kwargs)
        self.seen.append((self.role, command, kwargs))
        return {"spec": {"drafts": 0, "drafted": 0, "accepted": 0},
                **self.answer(self, kwargs)}


def test_cells_warm_both_engines_then_interleave_and_save_each_cell(tmp_path):
    args = run.parse_args(["--pairs", "3", "--num-requests", "8", "--output-len", "32",
                           "--max-num-seqs", "4,8", "--out", str(tmp_path)])
    calls = []
    engines = {"stock": FakeEngine("stock", calls, 100.0),
               "plugin": FakeEngine("plugin", calls, 110.0)}
    bench = run.Run(args)
    bench.plain_cells("m", 1000, engines, ["topk_topp"])
    first_cell = calls[:8]
    assert first_cell == [
        ("stock", "throughput", 4, run.WARMUP_TOKENS),
        ("plugin", "throughput", 4, run.WARMUP_TOKENS),
        ("stock", "throughput", 8, 32), ("plugin", "throughput", 8, 32),
        ("plugin", "throughput", 8, 32), ("stock", "throughput", 8, 32),
        ("stock", "throughput", 8, 32), ("plugin", "throughput", 8, 32),
    ]
    saved = json.loads((tmp_path / "e2e.json").read_text())
    assert [(c["mix"], c["max_num_seqs"]) for c in saved["cells"]] == [
        ("topk_topp", 4), ("topk_topp", 8)]
    assert saved["cells"][0]["ratio"] == pytest.approx(1.1)
    assert saved["cells"][0]["requests"] == 8
    assert saved["cells"][0]["orders"] == [["stock", "plugin"], ["plugin", "stock"],
                                           ["stock", "plugin"]]
    host = saved["cells"][0]["host"]
    assert [r["engine_core_cpu_s"] for r in host["stock"]] == [1.0] * 3
    assert [r["engine_core_cpu_s"] for r in host["plugin"]] == [1.1] * 3
    # The stand-ins generate no tokens, so there is no cost per token to show.
    assert "| m | topk_topp | 4 | - | - |" in report.render_markdown(bench.results)


def test_min_run_s_sends_more_requests_where_runs_would_be_short(tmp_path):
    """At 110 tok/s (the faster engine's untimed run of the 8 requests at
    full length, after the short warm-up), 32-token requests keep a run busy
    for 4 s from 14 requests on: the timed runs get 14 instead of 8, from the
    same prompt generator, and the cell says how many ran."""
    args = run.parse_args(["--pairs", "1", "--num-requests", "8", "--output-len", "32",
                           "--max-num-seqs", "4", "--min-run-s", "4", "--out", str(tmp_path)])
    calls = []
    engines = {"stock": FakeEngine("stock", calls, 100.0),
               "plugin": FakeEngine("plugin", calls, 110.0)}
    bench = run.Run(args)
    bench.plain_cells("m", 1000, engines, ["topk_topp"])
    assert calls == [
        ("stock", "throughput", 4, run.WARMUP_TOKENS),
        ("plugin", "throughput", 4, run.WARMUP_TOKENS),
        ("stock", "throughput", 8, 32), ("plugin", "throughput", 8, 32),
        ("stock", "throughput", 14, 32), ("plugin", "throughput", 14, 32),
    ]
    assert bench.results["cells"][0]["requests"] == 14
    assert run.requests_for_run(0.0, 110.0, 32) == 0
    assert run.requests_for_run(4.0, 80.0, 32) == 10


def test_ngram_cells_run_identity_on_the_prompts_they_timed(tmp_path):
    """A speculation cell times ``--min-run-s``'s longer prompt list and
    checks greedy and seeded identity on the first of those same prompts."""
    args = run.parse_args(["--pairs", "1", "--num-requests", "8", "--output-len", "32",
                           "--max-num-seqs", "4", "--min-run-s", "4", "--identity-requests",
                           "3", "--spec-workloads", "nonrepeating", "--breakdown-mixes", "none",
                           "--out", str(tmp_path)])
    calls, seen = [], []

    def answer(engine, kwargs):
        return {"tokens": [[7] * 32 for _ in kwargs["prompts"]]}

    engines = {role: SpeculatingEngine(role, calls, tok_s, seen, answer)
               for role, tok_s in (("nospec", 100.0), ("adaptive", 110.0))}
    bench = run.Run(args)
    bench.ngram_cells("m", 1000, engines, "adaptive", "nospec", 3)
    full_length = [c for c in calls if c[3] == 32]
    assert full_length == [("nospec", "throughput", 8, 32), ("adaptive", "throughput", 8, 32),
                           ("nospec", "throughput", 14, 32), ("adaptive", "throughput", 14, 32)]
    expected = copying.workload_prompts("nonrepeating", 14, 64, 1000, seed=4)[:3]
    assert [(r, c, kw.get("mix")) for r, c, kw in seen] == [
        ("nospec", "greedy_tokens", None), ("adaptive", "greedy_tokens", None),
        ("nospec", "greedy_tokens", "seeded_t1"), ("adaptive", "greedy_tokens", "seeded_t1")]
    assert all(kw["prompts"] == expected for *_, kw in seen)
    cell = bench.results["speculation"][0]
    assert cell["requests"] == 14 and cell["identity"]["identical"] == 3


@pytest.mark.parametrize("mix", ["ngram", "topk_topp"])
def test_a_speculation_cells_breakdown_and_profile_run_its_own_mix_on_its_prompts(
        tmp_path, mix):
    """With "ngram" in --breakdown-mixes and --profile-mixes, after a cell's
    pairs each engine of the pair (not the twin) is timed per step and
    profiled once, in the mix the cell measured ("ngram" is greedy), on the
    prompts it timed."""
    args = run.parse_args(["--pairs", "1", "--num-requests", "8", "--output-len", "32",
                           "--max-num-seqs", "4", "--identity-requests", "2",
                           "--spec-workloads", "accepting", "--spec-mixes", mix,
                           "--breakdown-mixes", "ngram", "--profile-mixes", "ngram",
                           "--breakdown-output-len", "16", "--control", "--control-alongside",
                           "--gpu-memory-utilization", "0.3",
                           "--out", str(tmp_path)])
    calls, seen = [], []

    def answer(engine, kwargs):
        if "mix" in kwargs and kwargs.get("wave"):
            return {"steps": 5, "device": [], "host": [],
                    "step_gpu_ms": [1.0], "sampling_gpu_ms": [0.1], "host_ms": [0.5],
                    "execute_host_ms": [0.2], "run": {"tok_s": 1.0}}
        return {"tokens": [[7] * 32 for _ in kwargs["prompts"]]}

    engines = {role: SpeculatingEngine(role, calls, 100.0, seen, answer)
               for role in ("stock", "adaptive", "adaptive@control")}
    bench = run.Run(args)
    bench.ngram_cells("m", 1000, engines, "adaptive", "stock", 3, "adaptive@control")
    timed = [(role, command, kw["mix"], kw["wave"], kw["prompts"], kw["output_len"],
              kw.get("continuous")) for role, command, kw in seen
             if command in ("breakdown", "profile")]
    prompts = copying.workload_prompts("accepting", 8, 64, 1000, seed=4)
    # The breakdown: the cell's requests at full length in continuous
    # batching, as timed; the profile: one short wave.
    assert timed == [(role, "breakdown", mix, 4, prompts, 32, True)
                     for role in ("stock", "adaptive")] + [
                     (role, "profile", mix, 4, prompts[:4], 16, None)
                     for role in ("stock", "adaptive")]
    assert [(b["mix"], b["role"]) for b in bench.results["breakdown"]] == [
        (mix, "stock"), (mix, "adaptive")]
    assert [(p["mix"], p["role"], p["steps"]) for p in bench.results["profiles"]] == [
        (mix, "stock", 5), (mix, "adaptive", 5)]


def test_a_seeded_difference_asks_both_engines_again_with_logprobs(tmp_path):
    """Seeded tokens that differ get a second seeded run of both engines
    with logprobs; the cell keeps what it says (and identical seeded tokens
    ask nothing more: the test above)."""
    args = run.parse_args(["--pairs", "1", "--num-requests", "4", "--output-len", "3",
                           "--max-num-seqs", "4", "--identity-requests", "2",
                           "--spec-workloads", "nonrepeating", "--breakdown-mixes", "none",
                           "--out", str(tmp_path)])
    calls, seen = [], []

    def answer(engine, kwargs):
        tokens = [[7, 7, 7], [8, 8, 8]]
        if engine.role == "adaptive" and kwargs.get("mix"):
            tokens[1][2] = 9
        with_logprobs = kwargs.get("with_probabilities", False)
        return {"tokens": tokens,
                "token_logprobs": [[-0.1, -0.2, -0.3]] * 2 if with_logprobs else []}

    def asked(seen):
        return [(r, kw.get("mix"), kw.get("with_probabilities", False)) for r, _, kw in seen]

    engines = {role: SpeculatingEngine(role, calls, tok_s, seen, answer)
               for role, tok_s in (("nospec", 100.0), ("adaptive", 110.0))}
    bench = run.Run(args)
    bench.ngram_cells("m", 1000, engines, "adaptive", "nospec", 3)
    assert asked(seen)[-2:] == [("nospec", "seeded_t1", True), ("adaptive", "seeded_t1", True)]
    seeded = bench.results["speculation"][0]["seeded_identity"]
    assert seeded["identical"] == 1
    assert seeded["rerun"]["repeated"] == [2, 2]
    assert (seeded["rerun"]["equal_logprobs"], seeded["rerun"]["compared_logprobs"]) == (5, 5)
    assert "seeded rerun: each engine repeated 2/2 and 2/2" in report.render_markdown(
        bench.results)
    # With --seeded-rerun it asks again where nothing differed too.
    engines["adaptive"].role = "adaptive, seeded as nospec"
    for rerun_always in (False, True):
        seen.clear()
        args.seeded_rerun = rerun_always
        run.Run(args).ngram_cells("m", 1000, engines, "adaptive", "nospec", 3)
        assert any(probabilities for *_, probabilities in asked(seen)) is rerun_always


def test_control_pairs_stock_with_a_second_stock_engine(tmp_path):
    args = run.parse_args(["--pairs", "2", "--num-requests", "4", "--max-num-seqs", "4",
                           "--control", "--out", str(tmp_path)])
    calls = []
    engines = {"stock": FakeEngine("stock", calls, 100.0),
               "control": FakeEngine("control", calls, 99.0)}
    bench = run.Run(args)
    bench.plain_cells("m", 1000, engines, ["greedy"])
    assert {role for role, *_ in calls} == {"stock", "control"}
    cell = bench.results["cells"][0]
    assert cell["against"] == "control" and cell["paired"]["median"] == pytest.approx(0.99)
    assert "| m | greedy (A/A: stock vs stock) | 4 | 2 |" in report.render_markdown(bench.results)
    assert engine.child_env(engine.EngineSpec("control", "/m", 4, 0.4, 100),
                            "/c")["VLLM_PLUGINS"] == "none"
    engine.check_sampler("control", "vllm.v1.worker.gpu.sample.sampler.Sampler")


def test_profiles_run_each_engine_per_mix_and_batch_size(tmp_path):
    args = run.parse_args(["--profile-mixes", "t1", "--max-num-seqs", "4,8",
                           "--breakdown-output-len", "16", "--out", str(tmp_path)])
    calls = []

    class Profiled(FakeEngine):
        def call(self, command, **kwargs):
            self.calls.append((self.role, command, len(kwargs["prompts"]), kwargs["wave"]))
            return {"steps": 16, "device": [["_gumbel_kernel", 16, 1.6]],
                    "host": [["aten::copy_", 32, 0.8]]}

    engines = {"stock": Profiled("stock", calls, 0), "plugin": Profiled("plugin", calls, 0)}
    bench = run.Run(args)
    bench.profiles("m", 1000, engines, args.profile_mixes)
    assert calls == [("stock", "profile", 4, 4), ("plugin", "profile", 4, 4),
                     ("stock", "profile", 8, 8), ("plugin", "profile", 8, 8)]
    text = report.render_markdown(bench.results)
    assert "m t1 max_num_seqs=8 plugin, 16 steps under torch.profiler:" in text
    assert "| `_gumbel_kernel` | 16 | 0.100 |" in text


@pytest.mark.parametrize("name, short", [
    ("_gumbel_partial_kernel", "`_gumbel_partial_kernel`"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<cute::C<64>,"
     " 1> >(flash::Params)",
     "`void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttn...`"),
])
def test_profile_table_cuts_long_kernel_names(name, short):
    assert report.short_kernel_name(name) == short


def test_time_budget_skips_cells_but_keeps_the_finished_ones(tmp_path):
    args = run.parse_args(["--pairs", "1", "--num-requests", "4", "--max-num-seqs", "4",
                           "--time-budget", "0", "--out", str(tmp_path)])
    calls = []
    engines = {"stock": FakeEngine("stock", calls, 1.0), "plugin": FakeEngine("plugin", calls, 1.0)}
    bench = run.Run(args)
    bench.plain_cells("m", 1000, engines, ["greedy", "t1"])
    assert calls == [] and bench.results["cells"] == []
    bench.args.time_budget = None
    bench.plain_cells("m", 1000, engines, ["greedy"])
    assert len(bench.results["cells"]) == 1


def test_a_cell_keeps_its_pairs_when_the_budget_leaves_less_than_a_rotation(
        tmp_path, monkeypatch, capsys):
    """Each timed run takes 10 s of a 45 s budget (warm-ups 1 s): after two
    rotations of 20 s, 3 s are left, so the third is not started and the
    cell is saved with the two pairs it has instead of being cut off."""
    clock = [0.0]
    monkeypatch.setattr(run, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))

    class Timed(FakeEngine):
        def call(self, command, **kwargs):
            clock[0] += 1.0 if kwargs["output_len"] == run.WARMUP_TOKENS else 10.0
            return super().call(command, **kwargs)

    calls = []
    engines = {"stock": Timed("stock", calls, 100.0), "plugin": Timed("plugin", calls, 110.0)}
    bench = run.Run(run.parse_args(["--pairs", "3", "--num-requests", "8", "--output-len", "32",
                                    "--max-num-seqs", "4", "--time-budget", "45",
                                    "--out", str(tmp_path)]))
    bench.plain_cells("m", 1000, engines, ["topk_topp"])
    cell = json.loads((tmp_path / "e2e.json").read_text())["cells"][0]
    assert cell["orders"] == [["stock", "plugin"], ["plugin", "stock"]]
    assert len(cell["pair_ratios"]) == 2
    assert [c[0] for c in calls if c[3] == 32] == ["stock", "plugin", "plugin", "stock"]
    assert "time budget: 3 s left, less than a rotation (20 s): 2 of 3 pairs" in (
        capsys.readouterr().out)


def test_an_engine_that_would_start_after_the_time_budget_is_not_started(tmp_path, capsys):
    """A cell that starts an engine needs the slowest engine's start-up time
    so far left in the budget; a cell of engines already up needs only time
    left."""
    bench = run.Run(run.parse_args(["--time-budget", "60", "--out", str(tmp_path)]))
    bench.start = time.perf_counter() - 10
    assert not bench.out_of_time("first engines", starts_engine=True)  # none started yet
    bench.results["engines"].append({"model": "m", "role": "plugin", "sampler": "s",
                                     "startup_s": 55.0})
    assert not bench.out_of_time("a cell of running engines")
    assert bench.out_of_time("stock engine", starts_engine=True)
    assert "s left, less than the slowest engine's start (55 s): skipping stock engine" in (
        capsys.readouterr().out)
    # A faster start after it does not lower what the next engine needs.
    bench.results["engines"].append({"model": "m", "role": "stock", "sampler": "s",
                                     "startup_s": 30.0})
    assert bench.out_of_time("twin engine", starts_engine=True)
    bench.results["engines"][0]["startup_s"] = 40.0
    assert not bench.out_of_time("twin engine", starts_engine=True)


def test_distribution_and_pair_cell():
    dist = report.distribution([90.0, 100.0, 120.0])
    assert dist == {"median": 100.0, "min": 90.0, "max": 120.0, "spread": pytest.approx(0.3)}
    cell = report.pair_cell("m", "greedy", 64, [("stock", "plugin")] * 3,
                            [100.0, 98.0, 102.0], [105.0, 99.0, 110.0])
    assert cell["ratio"] == pytest.approx(1.05)
    assert cell["plugin"]["median"] == 105.0 and cell["stock"]["min"] == 98.0
    # Each pair's own ratio: 1.05, 99/98, 110/102; their median is 1.05.
    assert cell["pair_ratios"] == pytest.approx([1.05, 99 / 98, 110 / 102])
    assert cell["paired"]["median"] == pytest.approx(1.05)
    assert cell["paired"]["min"] == pytest.approx(99 / 98)
    assert cell["paired"]["max"] == pytest.approx(110 / 102)


def test_paired_ratio_cancels_a_drift_between_pairs():
    # The machine slows by half between pairs; each pair sees the plugin 2% ahead.
    stock = [100.0, 50.0, 75.0]
    cell = report.pair_cell("m", "greedy", 64, [], stock, [1.02 * s for s in stock])
    assert cell["paired"]["median"] == pytest.approx(1.02)
    assert cell["paired"]["spread"] == pytest.approx(0.0, abs=1e-12)
    assert cell["stock"]["spread"] == pytest.approx(2 / 3)


def test_compiled_kernels_lists_variants_not_group_files(tmp_path):
    for directory, files in {"aaaaaaaaaaaa": ["_gumbel_kernel.json", "_gumbel_kernel.cubin",
                                              "__grp___gumbel_kernel.json"],
                             "bbbbbbbbbbbb": ["_gumbel_kernel.json"]}.items():
        (tmp_path / directory).mkdir()
        for name in files:
            (tmp_path / directory / name).write_text("{}")
    assert engine.compiled_kernels(str(tmp_path)) == {"_gumbel_kernel@aaaaaaaa",
                                                      "_gumbel_kernel@bbbbbbbb"}


def test_acceptance_counts_the_bonus_token():
    acc = report.acceptance({"drafts": 10, "drafted": 30, "accepted": 24})
    assert acc["acceptance_rate"] == pytest.approx(0.8)
    assert acc["mean_acceptance_length"] == pytest.approx(3.4)
    assert report.acceptance({"drafts": 0, "drafted": 0, "accepted": 0})[
        "mean_acceptance_length"] is None


def test_first_difference():
    assert report.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert report.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert report.first_difference([1, 2], [1, 2, 3]) == 2


def test_near_tie_is_one_bf16_spacing():
    assert report.bf16_ulp(1.0) == 2.0**-7
    assert report.bf16_ulp(-12.0) == 2.0**-4
    assert report.is_near_tie([12.0, 12.0])
    assert report.is_near_tie([12.0625, 12.0])  # adjacent bf16 values
    assert not report.is_near_tie([12.125, 12.0])  # two spacings apart
    assert report.is_near_tie([0.5, 0.49609375])
    assert not report.is_near_tie([0.5, 0.49])


def test_identity_report_explains_differences_with_either_run():
    nospec = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 1, 1]]
    spec = [[1, 2, 3], [4, 9, 6], [7, 8, 0], [1, 1, 1]]
    result = report.identity_report(nospec, spec, nospec_top2=[[12.0, 12.0], [9.0, 7.0]],
                                    spec_top2=[[11.0, 10.0], [9.0, 8.0]])
    assert (result["requests"], result["identical"], result["fraction"]) == (4, 2, 0.5)
    assert [(d["request"], d["position"]) for d in result["differences"]] == [(1, 1), (2, 2)]
    assert [d["near_tie"] for d in result["differences"]] == [True, False]
    assert result["all_differences_near_ties"] is False
    same = report.identity_report(nospec, nospec)
    assert same["identical"] == 4 and same["all_differences_near_ties"] is True


def test_seeded_rerun_compares_logprobs_only_before_each_difference():
    first = [[[1, 2, 3], [4, 5, 6]], [[1, 2, 7], [4, 9, 6]]]
    again = [[[1, 2, 3], [4, 5, 6]], [[1, 2, 7], [4, 5, 6]]]
    logprobs = [[[-0.1, -0.2, -0.3], [-0.4, -0.5, -0.6]],
                [[-0.1, -0.25, -9.0], [-0.4, -0.5, -0.6]]]
    rerun = report.seeded_rerun(first, again, logprobs)
    # nospec repeated both of its requests, spec only its first.
    assert rerun["repeated"] == [2, 1]
    assert [(d["request"], d["position"]) for d in rerun["differences"]] == [(0, 2)]
    # Request 0 compares positions 0-1 (it differs at 2), request 1 all three.
    assert (rerun["equal_logprobs"], rerun["compared_logprobs"]) == (4, 5)
    assert rerun["max_logprob_gap"] == pytest.approx(0.05)
    # Only request 0's logprobs differ, first at position 1, by 0.05.
    assert rerun["median_first_unequal"] == 1
    assert rerun["unequal_gaps"]["tokens"] == 1
    assert rerun["unequal_gaps"]["p50"] == pytest.approx(0.05)
    text = report.seeded_rerun_text(rerun)
    assert "repeated 2/2 and 1/2" in text and "1 still differ" in text and "4/5" in text
    assert "unequal gaps p10/p50/p90 5.0e-02/5.0e-02/5.0e-02" in text
    assert text.endswith("first unequal at position 1 (median)")


def test_sampling_ceilings_pair_stock_with_plugin():
    base = {"model": "m", "mix": "topk_topp", "max_num_seqs": 256, "steps": 5}
    rows = report.sampling_ceilings([
        {**base, "role": "stock", "step_gpu_ms": 10.0, "sampling_gpu_ms": 2.0},
        {**base, "role": "plugin", "step_gpu_ms": 8.6, "sampling_gpu_ms": 0.5},
        {**base, "role": "stock", "max_num_seqs": 64, "step_gpu_ms": 5.0,
         "sampling_gpu_ms": 1.0},
    ])
    assert len(rows) == 1
    assert rows[0]["expected"] == pytest.approx(10 / 8.5)
    assert rows[0]["ceiling"] == pytest.approx(1.25)


def test_quantiles():
    q = report.quantiles([i / 100 for i in range(100)])
    assert (q["p10"], q["p50"], q["p90"], q["tokens"]) == (0.1, 0.5, 0.9, 100)


def _sample_results():
    results = report.new_results({"pairs": 3})
    results.update(gpu="NVIDIA H100 80GB HBM3", vllm="0.20.0", torch="2.11.0")
    results["models"]["8b-v151936"] = {"shape": "8b", "vocab": 151936, "path": "/x",
                                       "top1_probability": report.quantiles([0.2, 0.4, 0.6])}
    results["cells"].append(report.pair_cell("8b-v151936", "topk_topp", 256, [],
                                             [1000.0, 1100.0, 1050.0], [1150.0, 1120.0, 1200.0]))
    results["breakdown"].append({"model": "8b-v151936", "mix": "topk_topp", "max_num_seqs": 256,
                                 "role": "stock", **hooks.summarize_timings({
                                     "step_gpu_ms": [10.0, 12.0, 11.0],
                                     "sampling_gpu_ms": [1.0, 1.0, 2.0],
                                     "host_ms": [3.0, 3.0, 3.0],
                                     "sampling_host_ms": [0.2, 0.1, 0.3],
                                     "period_ms": [11.0, 12.0]})})
    results["ngram"].append({
        "model": "1b-v128256", "max_num_seqs": 64, "k": 3,
        "nospec": report.distribution([100.0]), "spec": report.distribution([180.0]),
        "speedup": 1.8, "acceptance": report.acceptance({"drafts": 4, "drafted": 12,
                                                         "accepted": 9}),
        "identity": report.identity_report([[1]], [[1]])})
    results["speculation"].append(report.speculation_cell(
        "1b-v128256-copy", "mixed", 256, 3, "adaptive", "nospec", [], [100.0, 110.0],
        [150.0, 154.0], {"drafts": 4, "drafted": 9, "accepted": 6},
        report.identity_report([[1], [2]], [[1], [2]]), report.identity_report([[3]], [[4]])))
    results["cold_start"].append({"model": "8b-v151936", "role": "plugin",
                                  "order": ["greedy", "topk_topp", "seeded_topp"],
                                  "ttft_ms": [30.0, 21.0, 22.5], "warm_ttft_ms": 20.0,
                                  "ratio": 1.5})
    results["cold_start"].append({"model": "8b-v151936", "role": "stock",
                                  "order": ["greedy", "topk_topp", "seeded_topp"],
                                  "ttft_ms": [900.0, 25.0, 20.0], "warm_ttft_ms": 20.0,
                                  "ratio": 45.0, "compiled_at_start": 40,
                                  "compiled_by_request": [["_penalties@12345678",
                                                           "_bad_words@abcdef01"], [], []]})
    return results


def test_summarize_timings():
    summary = _sample_results()["breakdown"][0]
    assert summary["steps"] == 3 and summary["step_gpu_ms"] == 11.0
    assert summary["sampling_gpu_ms"] == 1.0 and summary["period_ms"] == 11.5
    assert summary["sampling_host_ms"] == 0.2
    assert summary["sampling_share"] == pytest.approx(4.0 / 33.0)
    assert hooks.summarize_timings({"step_gpu_ms": [], "sampling_gpu_ms": [], "host_ms": [],
                                    "sampling_host_ms": [], "period_ms": []}) == {"steps": 0}


def test_markdown_tables_show_every_section():
    text = report.render_markdown(_sample_results())
    assert "NVIDIA H100 80GB HBM3, vLLM 0.20.0" in text
    assert "| 8b-v151936 | 0.20 / 0.40 / 0.60 (3) |" in text
    # Pair ratios 1.150, 1.018, 1.143: their median and range.
    assert ("| 8b-v151936 | topk_topp | 256 | 3 | 1050 (9.5%) | 1150 (7.0%) | "
            "1.143 [1.018, 1.150] |") in text
    assert ("| 8b-v151936 | topk_topp | 256 | stock | 3 | 11.000 | 1.000 | 12.1% | 3.000 | "
            "0.200 | 11.500 |") in text
    assert "| 1b-v128256 | 64 | 3 | 100 (0.0%) | 180 (0.0%) | 1.80 | 3.250 | 1/1 | yes |" in text
    # Pair ratios 1.5 and 1.4: their median 1.45; 9 drafts verified, 6 accepted.
    assert ("| 1b-v128256-copy | mixed | 256 | 3 | adaptive vs nospec | 105 (9.5%) | "
            "152 (2.6%) | 1.450 [1.400, 1.500] | 9 / 6 | 2/2 (0/1) |") in text
    assert ("| 8b-v151936 | plugin | greedy 30.0, topk_topp 21.0, seeded_topp 22.5 | 20.0 | "
            "1.50 | - |") in text
    assert ("| 8b-v151936 | stock | greedy 900.0, topk_topp 25.0, seeded_topp 20.0 | 20.0 | "
            "45.00 | 40; _bad_words _penalties, none, none |") in text


def test_json_round_trip_and_render_command(tmp_path, capsys):
    path = report.write_json(_sample_results(), str(tmp_path))
    loaded = json.loads(open(path).read())
    assert loaded["schema"] == report.SCHEMA_VERSION
    assert set(loaded) >= {"gpu", "vllm", "torch", "args", "models", "engines", "cells",
                           "breakdown", "speculation", "ngram", "cold_start",
                           "profiles"}
    from benchmarks.__main__ import main

    assert main(["e2e", "--render", path]) == 0
    assert ("| 8b-v151936 | plugin | greedy 30.0, topk_topp 21.0, seeded_topp 22.5 | 20.0 | "
            "1.50 |") in capsys.readouterr().out


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = report.plot(_sample_results(), str(tmp_path / "e2e.png"))
    assert path and (tmp_path / "e2e.png").read_bytes()[:4] == b"\x89PNG"


def test_model_list_type():
    with pytest.raises(argparse.ArgumentTypeError):
        run._model_list("8b:big")


class FakeLLM:
    """Answers generate() like vLLM's LLM: token i of request r is r + i, with
    log-probability log(0.5); spec-decode counters grow by one draft per call,
    and so does the plugin verification's count of its own batches (a
    worker whose runner holds ``rejection_sampler``, for ``collective_rpc``)."""

    def __init__(self):
        from types import SimpleNamespace

        self.calls = []
        self.counter = 0
        self.worker = SimpleNamespace(model_runner=SimpleNamespace(
            rejection_sampler=SimpleNamespace(batches={"plugin": 0, "upstream": 0})))

    def collective_rpc(self, function):
        return [function(self.worker)]

    def generate(self, inputs, params, use_tqdm):
        import math
        from types import SimpleNamespace

        self.calls.append((len(inputs), [p.max_tokens for p in params]))
        self.counter += 1
        batches = getattr(self.worker.model_runner.rejection_sampler, "batches", None)
        if batches is not None:
            batches["plugin"] += 1
        outputs = []
        for r, p in enumerate(params):
            ids = [r + i for i in range(p.max_tokens)]
            logprobs = ([{t: SimpleNamespace(logprob=math.log(0.5))} for t in ids]
                        if p.logprobs is not None else None)
            outputs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids,
                                                                    logprobs=logprobs)]))
        return outputs

    def get_metrics(self):
        from types import SimpleNamespace

        return [SimpleNamespace(name="vllm:spec_decode_num_drafts", value=self.counter),
                SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", value=3 * self.counter),
                SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=self.counter),
                SimpleNamespace(name="vllm:other")]


def _server(cold_start_first="greedy", triton_cache="/nonexistent"):
    server = engine._EngineServer.__new__(engine._EngineServer)
    server.llm, server.vocab, server.triton_cache = FakeLLM(), 1000, triton_cache
    server.spec = engine.EngineSpec("plugin", "/m", 8, 0.4, 100,
                                    cold_start_first=cold_start_first)
    return server


def test_throughput_sends_waves_and_counts_tokens():
    server = _server()
    result = server.throughput("mixed", workload.random_prompts(10, 4, 1000), 6, wave=4)
    assert server.llm.calls == [(4, [6] * 4), (4, [6] * 4), (2, [6] * 2)]
    assert result["tokens"] == 60 and result["tok_s"] == pytest.approx(60 / result["seconds"])
    assert set(result["host_cpu_s"]) == {"front_end", "engine_core"}
    assert result["steal_s"] >= 0 and len(result["probe_ms"]) == 2
    assert report.host_use(result)["probe_ms"] == result["probe_ms"]
    # Three waves, each one verification batch of the plugin's (counted
    # since the engine started, so the run reports the difference).
    server.llm.worker.model_runner.rejection_sampler.batches["upstream"] = 7
    result = server.throughput("mixed", workload.random_prompts(10, 4, 1000), 6, wave=4)
    assert result["verification_batches"] == {"plugin": 3, "upstream": 0}
    assert report.host_use(result)["verification_batches"] == {"plugin": 3, "upstream": 0}


def test_an_engine_without_the_plugins_verification_reports_no_owner():
    """Stock engines and upstream's RejectionSampler count no batches; an
    engine without speculation has no RejectionSampler at all."""
    from types import SimpleNamespace

    for rejection_sampler in (SimpleNamespace(), None):
        server = _server()
        server.llm.worker.model_runner.rejection_sampler = rejection_sampler
        result = server.throughput("greedy", workload.random_prompts(4, 4, 1000), 6, wave=4)
        assert result["verification_batches"] is None
        assert report.verification_text([report.host_use(result)]) == ""


def test_a_run_records_the_triton_kernels_compiled_while_it_was_timed(tmp_path):
    """A kernel variant that appears in the engine's Triton cache during a
    timed run is named in the run's result and in the host row."""
    server = _server(triton_cache=str(tmp_path))
    (tmp_path / "aaaa1111").mkdir()
    (tmp_path / "aaaa1111" / "_gumbel_kernel.json").write_text("{}")

    generate = server.llm.generate

    def generate_compiling(inputs, params, use_tqdm):
        (tmp_path / "bbbb2222").mkdir(exist_ok=True)
        (tmp_path / "bbbb2222" / "_rejection_kernel.json").write_text("{}")
        (tmp_path / "bbbb2222" / "__grp___rejection_kernel.json").write_text("{}")
        return generate(inputs, params, use_tqdm)

    server.llm.generate = generate_compiling
    result = server.throughput("mixed", workload.random_prompts(4, 4, 1000), 6, wave=4)
    assert result["compiled_during_run"] == ["_rejection_kernel@bbbb2222"]
    again = server.throughput("mixed", workload.random_prompts(4, 4, 1000), 6, wave=4)
    assert again["compiled_during_run"] == []
    runs = [report.host_use(result), report.host_use(again)]
    assert report.host_text(runs).endswith("; compiled in a timed run: _rejection_kernel")
    assert report.compiled_text(runs[1:]) == ""


def test_host_text_says_who_verified_the_runs():
    base = {"seconds": 1.0, "tokens": 1000, "engine_core_cpu_s": 1.0, "front_end_cpu_s": 0.2}
    runs = [{**base, "verification_batches": {"plugin": 90, "upstream": 10}},
            {**base, "verification_batches": {"plugin": 0, "upstream": 100}}]
    assert report.host_text(runs).endswith(
        "front end 20%; verified by the plugin in 90 of 200 batches")


def test_the_speed_probe_times_its_fixed_work(monkeypatch):
    monkeypatch.setattr(engine, "PROBE_ITERATIONS", 1_000)
    short = min(engine.host_speed_probe_ms() for _ in range(3))
    monkeypatch.setattr(engine, "PROBE_ITERATIONS", 1_000_000)
    assert engine.host_speed_probe_ms() > 20 * short


def test_host_cpu_seconds_count_the_engine_core_below_the_front_end():
    """The engine core is a child process: CPU it burns counts as the engine
    core's, not the front end's."""
    import subprocess

    before = engine.host_cpu_seconds()
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nend = time.process_time() + 0.5\n"
                              "while time.process_time() < end: pass\ntime.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            used = engine.host_cpu_seconds()["engine_core"] - before["engine_core"]
            if used >= 0.45:
                break
            time.sleep(0.05)
        after = engine.host_cpu_seconds()
    finally:
        child.kill()
        child.wait()
    assert after["engine_core"] - before["engine_core"] >= 0.45
    assert after["front_end"] - before["front_end"] < 0.45


def test_host_summary_reads_busy_shares_and_cost_per_token():
    runs = [{"seconds": 2.0, "tokens": 1000, "engine_core_cpu_s": 2.1, "front_end_cpu_s": 1.0},
            {"seconds": 1.0, "tokens": 1000, "engine_core_cpu_s": 1.0, "front_end_cpu_s": 0.2},
            {"seconds": 4.0, "tokens": 1000, "engine_core_cpu_s": 4.0, "front_end_cpu_s": 1.2}]
    summary = report.host_summary(runs)
    assert summary["engine_core_busy"] == pytest.approx(1.0)
    assert summary["front_end_busy"] == pytest.approx(0.3)
    assert summary["engine_core_us_per_token"] == pytest.approx(2100.0)
    assert report.host_text(runs) == "engine core 100% busy, 2100.0 us/token; front end 30%"
    assert report.host_text([None, None]) == "-"
    runs[0]["probe_ms"], runs[2]["probe_ms"] = [20.0, 30.0], [40.0, 44.0]
    assert report.host_summary(runs)["probe_ms"] == pytest.approx(33.5)
    assert report.host_text(runs).endswith("front end 30%; speed probe 33.5 ms")


def test_greedy_tokens_reports_probabilities_and_counter_deltas():
    server = _server()
    result = server.greedy_tokens([[5, 6]] * 2, 3, with_probabilities=True)
    assert result["tokens"] == [[0, 1, 2], [1, 2, 3]]
    assert result["top1_probability"] == pytest.approx([0.5] * 6)
    assert result["spec"] == {"drafts": 1, "drafted": 3, "accepted": 1}
    assert server.greedy_tokens([[5, 6]], 2)["top1_probability"] == []


class FakeConn:
    def __init__(self, commands):
        self.commands, self.sent = list(commands), []

    def recv(self):
        return self.commands.pop(0)

    def send(self, message):
        self.sent.append(message)


def test_engine_child_stops_its_engine_core_and_exits(monkeypatch):
    """On "stop" the child shuts the engine core down (its GPU memory must be
    free before the parent starts the next engine) and leaves at once."""
    events = []

    class Server:
        def __init__(self, spec, triton_cache):
            pass

        def ready_info(self):
            return {"ready": True}

        def vocab_size(self):
            return 7

        def shutdown(self):
            events.append("shutdown")

    def leave(code):
        events.append(("exit", code))
        raise SystemExit(code)

    monkeypatch.setattr(engine, "_EngineServer", Server)
    monkeypatch.setattr(engine.os, "_exit", leave)
    monkeypatch.setattr(engine.os, "environ", {})
    monkeypatch.setattr(engine.tempfile, "mkdtemp", lambda prefix: "/nonexistent")
    conn = FakeConn([("vocab_size", {}), ("stop", {})])
    with pytest.raises(SystemExit):
        engine._serve(conn, engine.EngineSpec("plugin", "/m", 8, 0.4, 100))
    assert conn.sent == [{"ready": True}, 7]
    assert events == ["shutdown", ("exit", 0)]


def test_engine_server_shutdown_stops_the_engine_core():
    stopped = []
    server = _server()
    server.llm.llm_engine = types.SimpleNamespace(
        engine_core=types.SimpleNamespace(shutdown=lambda: stopped.append(True)))
    server.shutdown()
    assert stopped == [True]


@pytest.mark.parametrize("first", engine.COLD_START_MIXES)
def test_cold_start_times_each_routes_first_request_then_warm(first, monkeypatch):
    sent = []
    monkeypatch.setattr(workload, "sampling_kwargs",
                        lambda mix, i, n, real=workload.sampling_kwargs: (
                            sent.append(mix), real(mix, i, n))[1])
    server = _server(first)
    result = server._cold_start()
    assert result["order"][0] == first
    assert sorted(result["order"]) == sorted(engine.COLD_START_MIXES)
    assert sent == result["order"] + ["topk_topp"] * engine.WARM_REPEATS
    assert len(result["ttft_ms"]) == len(engine.COLD_START_MIXES)
    assert server.llm.calls == [(1, [1])] * len(sent)
    assert result["compiled_at_start"] == 0
    assert result["compiled_by_request"] == [[], [], []]


class RecordingRun(run.Run):
    """A Run whose engines and checkpoints are stand-ins that log what happens."""

    def __init__(self, args):
        super().__init__(args)
        self.log = []
        self.specs = []  # every started engine's whole EngineSpec, in order

    def checkpoint(self, shape, vocab, kind):
        return f"{shape}-{kind}", f"/ckpt/{kind}"

    def start_engine(self, spec, model):
        self.specs.append(spec)
        self.log.append(("start", spec.role, spec.model, spec.ngram_k, spec.cold_start_first,
                         spec.speculation_policy))
        log = self.log

        class Handle:
            def close(self):
                log.append(("close", spec.model, spec.ngram_k))
        return Handle()

    def peakedness(self, model, vocab, engine):
        self.log.append(("peakedness", model))

    def plain_cells(self, model, vocab, engines, mixes):
        self.log.append(("cells", model, tuple(engines)))

    def breakdowns(self, model, vocab, engines, mixes, waves=None, prompts=None):
        pass

    def profiles(self, model, vocab, engines, mixes, waves=None, prompts=None):
        pass

    def ngram_cells(self, model, vocab, engines, policy, baseline, k, twin=None):
        self.log.append(("ngram", model, policy, baseline, tuple(engines), k)
                        + ((twin,) if twin else ()))


def test_ngram_runs_on_the_copy_checkpoint_after_the_peaked_engines_are_closed(tmp_path):
    bench = RecordingRun(run.parse_args(["--mixes", "greedy,ngram", "--out", str(tmp_path)]))
    bench.model("1b", 128256)
    assert bench.log == [
        ("start", "stock", "/ckpt/peaked", 0, "greedy", None),
        ("start", "plugin", "/ckpt/peaked", 0, "greedy", None),
        ("peakedness", "1b-peaked"),
        ("cells", "1b-peaked", ("stock", "plugin")),
        ("close", "/ckpt/peaked", 0), ("close", "/ckpt/peaked", 0),
        # The fresh engine whose first request is top-k/top-p (cold-start split).
        ("start", "plugin", "/ckpt/copy", 0, "topk_topp", None),
        ("start", "plugin", "/ckpt/copy", 3, "greedy", "adaptive"),
        ("peakedness", "1b-copy"),
        ("ngram", "1b-copy", "adaptive", "nospec", ("nospec", "adaptive"), 3),
        # At most two engines: the fixed-k engine replaces the one without speculation.
        ("close", "/ckpt/copy", 0),
        ("start", "plugin", "/ckpt/copy", 3, "greedy", "fixed"),
        ("ngram", "1b-copy", "adaptive", "fixed", ("adaptive", "fixed"), 3),
        ("close", "/ckpt/copy", 3), ("close", "/ckpt/copy", 3),
    ]


def test_ngram_alone_starts_no_peaked_engine(tmp_path):
    bench = RecordingRun(run.parse_args(["--mixes", "ngram", "--out", str(tmp_path)]))
    bench.model("1b", 128256)
    assert [entry[2] for entry in bench.log if entry[0] == "start"] == ["/ckpt/copy"] * 3


def test_one_policy_is_measured_against_no_speculation_alone(tmp_path):
    bench = RecordingRun(run.parse_args(["--mixes", "ngram", "--spec-policies", "fixed",
                                         "--out", str(tmp_path)]))
    bench.model("1b", 128256)
    assert [e for e in bench.log if e[0] == "ngram"] == [
        ("ngram", "1b-copy", "fixed", "nospec", ("nospec", "fixed"), 3)]


def test_policies_can_be_measured_against_each_other_alone(tmp_path, capsys):
    bench = RecordingRun(run.parse_args(["--mixes", "ngram", "--no-spec-against-none",
                                         "--out", str(tmp_path)]))
    bench.model("1b", 128256)
    assert bench.log == [
        ("start", "plugin", "/ckpt/copy", 3, "greedy", "adaptive"),
        ("peakedness", "1b-copy"),
        ("start", "plugin", "/ckpt/copy", 3, "greedy", "fixed"),
        ("ngram", "1b-copy", "adaptive", "fixed", ("adaptive", "fixed"), 3),
        ("close", "/ckpt/copy", 3), ("close", "/ckpt/copy", 3),
    ]
    with pytest.raises(SystemExit):
        run.parse_args(["--no-spec-against-none", "--spec-policies", "fixed"])
    assert "nothing to measure" in capsys.readouterr().err


def test_a_policy_can_be_measured_against_stock_speculation_with_the_same_k(
        tmp_path, monkeypatch, capsys):
    """--spec-against-stock (issue 25's criterion: the plugin against stock
    0.33 with the same speculative config): the stock engine speculates with
    upstream's proposer and the same k, and takes the place of the policy the
    first one was last measured against."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.33.0")
    bench = RecordingRun(run.parse_args([
        "--mixes", "ngram", "--spec-policies", "adaptive", "--no-spec-against-none",
        "--spec-against-stock", "--spec-verification", "plugin", "--ngram-k", "7",
        "--out", str(tmp_path)]))
    bench.model("8b", 151936)
    assert bench.log == [
        ("start", "plugin", "/ckpt/copy", 7, "greedy", "adaptive"),
        ("peakedness", "8b-copy"),
        ("start", "stock", "/ckpt/copy", 7, "greedy", None),
        ("ngram", "8b-copy", "adaptive+verify-plugin", "upstream",
         ("adaptive+verify-plugin", "upstream"), 7),
        ("close", "/ckpt/copy", 7), ("close", "/ckpt/copy", 7),
    ]
    with pytest.raises(SystemExit):
        run.parse_args(["--spec-engines", "stock", "--spec-against-stock"])
    assert "--spec-against-stock" in capsys.readouterr().err
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.20.0")
    with pytest.raises(SystemExit):
        run.parse_args(["--spec-against-stock"])
    assert "from vLLM 0.32 on" in capsys.readouterr().err


def test_ngram_method_names_every_speculating_engines_method(tmp_path, monkeypatch):
    """--ngram-method ngram_gpu: stock's engines, too, speculate under the
    method stock 0.32 schedules asynchronously, so a cell against stock
    compares the parts with the scheduling alike; "ngram" stays the default."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.32.0")
    argv = ["--mixes", "ngram", "--spec-policies", "adaptive", "--no-spec-against-none",
            "--spec-against-stock", "--out", str(tmp_path)]
    for extra, method in (([], "ngram"), (["--ngram-method", "ngram_gpu"], "ngram_gpu")):
        bench = RecordingRun(run.parse_args(argv + extra))
        bench.model("8b", 151936)
        assert [s.role for s in bench.specs] == ["plugin", "stock"]
        assert [s.llm_kwargs()["speculative_config"]["method"] for s in bench.specs] == [method] * 2
        assert bench.specs[1].label == f"stock+{method}3"
    with pytest.raises(SystemExit):
        run.parse_args(["--ngram-method", "eagle"])


def test_a_draft_model_speculates_in_place_of_n_gram(tmp_path, monkeypatch, capsys):
    """--spec-draft SHAPE (vLLM 0.33): every speculating engine, stock ones
    included, proposes with a copy checkpoint of that shape and the target's
    vocabulary through vLLM's draft_model method; the engine without
    speculation has none."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.33.0")

    class DraftRun(RecordingRun):
        def checkpoint(self, shape, vocab, kind):
            return f"{shape}-{kind}", f"/ckpt/{shape}-v{vocab}-{kind}"

    bench = DraftRun(run.parse_args([
        "--mixes", "ngram", "--spec-policies", "fixed", "--spec-draft", "1b",
        "--spec-against-stock", "--spec-verification", "plugin", "--out", str(tmp_path)]))
    bench.model("8b", 151936)
    assert [(s.role, s.model, s.ngram_k, s.draft_model) for s in bench.specs] == [
        ("plugin", "/ckpt/8b-v151936-copy", 0, None),
        ("plugin", "/ckpt/8b-v151936-copy", 3, "/ckpt/1b-v151936-copy"),
        ("stock", "/ckpt/8b-v151936-copy", 3, "/ckpt/1b-v151936-copy"),
    ]
    drafting = bench.specs[1]
    kwargs = drafting.llm_kwargs()
    # Drafts with draft probabilities (vLLM's default drafts greedily,
    # without logits), verified as the label says.
    assert kwargs["speculative_config"] == {
        "method": "draft_model", "model": "/ckpt/1b-v151936-copy", "num_speculative_tokens": 3,
        "draft_sample_method": "probabilistic"}
    assert kwargs["plugin_verification"] == "plugin"
    assert "speculation_policy" not in kwargs
    assert "plugin_verification" not in bench.specs[0].llm_kwargs()
    assert drafting.label == "plugin+draft3-fixed-verify-plugin"
    with pytest.raises(SystemExit):
        run.parse_args(["--spec-draft", "1b"])  # the adaptive policy is n-gram's
    assert "--spec-policies fixed" in capsys.readouterr().err
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.32.0")
    with pytest.raises(SystemExit):
        run.parse_args(["--spec-draft", "1b", "--spec-policies", "fixed"])
    assert "vLLM 0.33" in capsys.readouterr().err


def test_control_measures_the_first_policy_against_a_twin_of_the_same_configuration(tmp_path):
    """--control in the ngram cells: a second engine with the first one's
    EngineSpec, so a policy against itself shows what the pairs resolve;
    with it, one policy and no engine without speculation is a valid run."""
    bench = RecordingRun(run.parse_args(["--control", "--mixes", "ngram", "--spec-policies",
                                         "fixed", "--no-spec-against-none",
                                         "--out", str(tmp_path)]))
    assert run.spec_variants(bench.args) == ["fixed", "fixed@control"]
    assert run.split_variant("fixed@control") == run.split_variant("fixed") == ("fixed", None)
    bench.model("1b", 128256)
    assert bench.log == [
        ("start", "plugin", "/ckpt/copy", 3, "greedy", "fixed"),
        ("peakedness", "1b-copy"),
        ("start", "plugin", "/ckpt/copy", 3, "greedy", "fixed"),
        ("ngram", "1b-copy", "fixed", "fixed@control", ("fixed", "fixed@control"), 3),
        ("close", "/ckpt/copy", 3), ("close", "/ckpt/copy", 3),
    ]
    assert len(bench.specs) == 2 and bench.specs[0] == bench.specs[1]


def test_control_twin_comes_after_stock_speculation_and_replaces_it(tmp_path, monkeypatch):
    """--spec-against-stock with --control: the twin of the first engine is
    measured last, in the place of the stock engine (two engines at a time);
    with --spec-engines stock the twin is upstream's, in a stock engine."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.33.0")
    bench = RecordingRun(run.parse_args([
        "--mixes", "ngram", "--spec-policies", "adaptive", "--no-spec-against-none",
        "--spec-against-stock", "--spec-verification", "plugin", "--control",
        "--ngram-k", "7", "--out", str(tmp_path)]))
    bench.model("8b", 151936)
    twin = "adaptive+verify-plugin@control"
    assert bench.log == [
        ("start", "plugin", "/ckpt/copy", 7, "greedy", "adaptive"),
        ("peakedness", "8b-copy"),
        ("start", "stock", "/ckpt/copy", 7, "greedy", None),
        ("ngram", "8b-copy", "adaptive+verify-plugin", "upstream",
         ("adaptive+verify-plugin", "upstream"), 7),
        ("close", "/ckpt/copy", 7),
        ("start", "plugin", "/ckpt/copy", 7, "greedy", "adaptive"),
        ("ngram", "8b-copy", "adaptive+verify-plugin", twin, ("adaptive+verify-plugin", twin), 7),
        ("close", "/ckpt/copy", 7), ("close", "/ckpt/copy", 7),
    ]
    assert bench.specs[2] == bench.specs[0]
    assert bench.specs[2].plugin_verification == "plugin"
    stock = RecordingRun(run.parse_args(["--mixes", "ngram", "--spec-engines", "stock",
                                         "--control", "--out", str(tmp_path)]))
    assert run.spec_variants(stock.args) == ["upstream", "upstream@control"]
    stock.model("8b", 151936)
    assert [e for e in stock.log if e[0] == "ngram"] == [
        ("ngram", "8b-copy", "upstream", "nospec", ("nospec", "upstream"), 3),
        ("ngram", "8b-copy", "upstream", "upstream@control", ("upstream", "upstream@control"), 3),
    ]
    assert stock.specs[1] == stock.specs[2] and stock.specs[2].role == "stock"


def test_a_speculation_cell_against_the_control_twin_is_marked_a_over_a(tmp_path):
    """The twin is the cell's baseline: timed in alternating pairs, greedy
    identity against it (no seeded check: that one is against no
    speculation), and the table names the policy twice, marked A/A."""
    args = run.parse_args(["--pairs", "2", "--num-requests", "4", "--output-len", "32",
                           "--max-num-seqs", "4", "--identity-requests", "3",
                           "--spec-workloads", "nonrepeating", "--breakdown-mixes", "none",
                           "--spec-policies", "fixed", "--control", "--out", str(tmp_path)])
    calls, seen = [], []

    def answer(engine, kwargs):
        return {"tokens": [[7] * 32 for _ in kwargs["prompts"]],
                "spec": {"drafts": 4, "drafted": 12, "accepted": 9}}

    engines = {role: SpeculatingEngine(role, calls, tok_s, seen, answer)
               for role, tok_s in (("fixed", 78.0), ("fixed@control", 100.0))}
    bench = run.Run(args)
    bench.ngram_cells("m", 1000, engines, "fixed", "fixed@control", 3)
    assert [c[0] for c in calls if c[3] == 32] == [
        "fixed@control", "fixed", "fixed", "fixed@control"]
    assert [(r, c, kw.get("mix")) for r, c, kw in seen] == [
        ("fixed@control", "greedy_tokens", None), ("fixed", "greedy_tokens", None)]
    cell = bench.results["speculation"][0]
    assert (cell["policy"], cell["against"], cell["seeded_identity"]) == (
        "fixed", "fixed@control", None)
    assert ("| m | nonrepeating | 4 | 3 | fixed vs fixed (A/A) | 100 (0.0%) | 78 (0.0%) | "
            "0.780 [0.780, 0.780] | 12 / 9 | 3/3 |") in report.render_markdown(bench.results)


def test_control_alongside_keeps_the_twin_up_beside_every_pair_of_the_first_policy(
        tmp_path, capsys):
    """--control-alongside: the twin starts right after the first policy and
    is passed to each of its cells (no A/A cell of its own at the end); the
    other policy still takes the engine without speculation's place. Three
    engines at once: at 0.42 of the GPU each, or without --control, the
    arguments are refused naming the field."""
    bench = RecordingRun(run.parse_args([
        "--mixes", "ngram", "--control", "--control-alongside",
        "--gpu-memory-utilization", "0.28", "--out", str(tmp_path)]))
    bench.model("1b", 128256)
    twin = "adaptive@control"
    assert bench.log == [
        ("start", "plugin", "/ckpt/copy", 0, "topk_topp", None),
        ("start", "plugin", "/ckpt/copy", 3, "greedy", "adaptive"),
        ("start", "plugin", "/ckpt/copy", 3, "greedy", "adaptive"),
        ("peakedness", "1b-copy"),
        ("ngram", "1b-copy", "adaptive", "nospec", ("nospec", "adaptive", twin), 3, twin),
        ("close", "/ckpt/copy", 0),
        ("start", "plugin", "/ckpt/copy", 3, "greedy", "fixed"),
        ("ngram", "1b-copy", "adaptive", "fixed", ("adaptive", twin, "fixed"), 3, twin),
        ("close", "/ckpt/copy", 3), ("close", "/ckpt/copy", 3), ("close", "/ckpt/copy", 3),
    ]
    assert bench.specs[1] == bench.specs[2]
    # Where the twin is the only engine to measure against, it is the baseline.
    alone = RecordingRun(run.parse_args([
        "--mixes", "ngram", "--spec-policies", "fixed", "--no-spec-against-none", "--control",
        "--control-alongside", "--gpu-memory-utilization", "0.28", "--out", str(tmp_path)]))
    alone.model("1b", 128256)
    assert [e for e in alone.log if e[0] == "ngram"] == [
        ("ngram", "1b-copy", "fixed", "fixed@control", ("fixed", "fixed@control"), 3)]
    with pytest.raises(SystemExit):
        run.parse_args(["--control-alongside", "--gpu-memory-utilization", "0.28"])
    assert "add --control" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run.parse_args(["--control", "--control-alongside"])
    assert "--gpu-memory-utilization 0.4 do not fit" in capsys.readouterr().err


class GroupingRun(RecordingRun):
    """A RecordingRun that also logs which engines were asked to start at once."""

    def start_engines(self, specs, model):
        if self.args.start_together and len(specs) > 1:
            self.log.append(("together", len(specs)))
        return [self.start_engine(spec, model) for spec in specs]


def test_start_together_brings_up_the_pair_and_the_twin_at_once(tmp_path, monkeypatch):
    """--start-together (issue 25's twin runs, whose three engine starts took
    most of a call): the policy, its twin and stock come up in one group
    before the first cell, each with the KV cache --kv-cache-gib names."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.33.0")
    argv = ["--mixes", "ngram", "--spec-policies", "adaptive", "--no-spec-against-none",
            "--spec-against-stock", "--spec-verification", "plugin", "--ngram-k", "7",
            "--control", "--control-alongside", "--gpu-memory-utilization", "0.28",
            "--out", str(tmp_path)]
    bench = GroupingRun(run.parse_args(argv + ["--start-together", "--kv-cache-gib", "6"]))
    bench.model("1b", 128256)
    twin = "adaptive+verify-plugin@control"
    assert bench.log == [
        ("together", 3),
        ("start", "plugin", "/ckpt/copy", 7, "greedy", "adaptive"),
        ("start", "plugin", "/ckpt/copy", 7, "greedy", "adaptive"),
        ("start", "stock", "/ckpt/copy", 7, "greedy", None),
        ("peakedness", "1b-copy"),
        ("ngram", "1b-copy", "adaptive+verify-plugin", "upstream",
         ("adaptive+verify-plugin", twin, "upstream"), 7, twin),
        ("close", "/ckpt/copy", 7), ("close", "/ckpt/copy", 7), ("close", "/ckpt/copy", 7),
    ]
    assert {spec.kv_cache_memory_bytes for spec in bench.specs} == {6 * 2**30}
    assert bench.specs[0].llm_kwargs()["kv_cache_memory_bytes"] == 6 * 2**30
    # One after another: the same engines and cells, stock started last, and
    # vLLM's own KV cache sizing.
    apart = GroupingRun(run.parse_args(argv))
    apart.model("1b", 128256)
    assert [e for e in apart.log if e[0] != "peakedness"] == bench.log[1:4] + bench.log[5:]
    assert apart.log.index(("peakedness", "1b-copy")) == 2
    assert {spec.kv_cache_memory_bytes for spec in apart.specs} == {None}
    assert "kv_cache_memory_bytes" not in apart.specs[0].llm_kwargs()


def test_start_together_against_no_speculation_brings_up_three_engines_at_once(
        tmp_path, monkeypatch):
    """Against no speculation and stock (scripts/gpu-check.sh e2e-spec-methods):
    the engine without speculation, the policy and stock start in one group,
    and stock is not started again for its cells."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.34.0")
    bench = GroupingRun(run.parse_args([
        "--mixes", "ngram", "--spec-policies", "adaptive", "--spec-against-stock",
        "--spec-verification", "plugin", "--ngram-method", "suffix", "--start-together",
        "--kv-cache-gib", "7", "--out", str(tmp_path)]))
    bench.model("8b", 151936)
    starts = [e for e in bench.log if e[0] == "start"]
    assert bench.log[0] == ("together", 3)
    assert [(e[1], e[5]) for e in starts] == [("plugin", None), ("plugin", "adaptive"),
                                            ("stock", None)]
    assert [e[2:4] for e in bench.log if e[0] == "ngram"] == [
        ("adaptive+verify-plugin", "nospec"), ("adaptive+verify-plugin", "upstream")]


def test_start_together_needs_a_set_kv_cache(capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--start-together"])
    assert "name the size with --kv-cache-gib" in capsys.readouterr().err


# What an engine process reports once up (engine._EngineServer.ready_info).
READY_INFO = {"gpu": "g", "vllm": "v", "torch": "t", "sampler": "s", "startup_s": 1.0,
              "cold_start": {"order": ["greedy"], "ttft_ms": [2.0], "warm_ttft_ms": 1.0}}


def test_engines_started_together_are_all_launched_before_any_is_awaited(tmp_path, monkeypatch):
    events = []

    class LaunchedEngine:
        def __init__(self, spec):
            self.spec = spec
            events.append(("launch", spec.role))

        @property
        def info(self):
            events.append(("up", self.spec.role))
            return READY_INFO

    monkeypatch.setattr(run, "Engine", LaunchedEngine)
    specs = [engine.EngineSpec(role, "/m", 8, 0.3, 100, kv_cache_memory_bytes=2**30)
             for role in ("plugin", "stock")]
    together = run.Run(run.parse_args(["--start-together", "--kv-cache-gib", "1",
                                       "--out", str(tmp_path)]))
    started = together.start_engines(specs, "m")
    assert [e.spec.role for e in started] == ["plugin", "stock"]
    assert events == [("launch", "plugin"), ("launch", "stock"), ("up", "plugin"),
                      ("up", "stock")]
    assert [e["started_together"] for e in together.results["engines"]] == [True, True]
    events.clear()
    apart = run.Run(run.parse_args(["--out", str(tmp_path)]))
    apart.start_engines(specs, "m")
    assert events == [("launch", "plugin"), ("up", "plugin"), ("launch", "stock"),
                      ("up", "stock")]
    assert [e["started_together"] for e in apart.results["engines"]] == [False, False]


@pytest.mark.parametrize("together", [True, False])
def test_engines_up_are_closed_when_another_fails_to_start(tmp_path, monkeypatch, together):
    """An engine process left running would hold its GPU memory and keep the
    bench from exiting: a failed start closes the others, then raises."""
    closed = []

    class FailingSecond:
        def __init__(self, spec):
            self.spec = spec

        @property
        def info(self):
            if self.spec.role == "stock":
                raise RuntimeError("stock engine: out of memory")
            return READY_INFO

        def close(self):
            closed.append(self.spec.role)

    monkeypatch.setattr(run, "Engine", FailingSecond)
    specs = [engine.EngineSpec(role, "/m", 8, 0.3, 100) for role in ("plugin", "stock")]
    argv = ["--start-together", "--kv-cache-gib", "1"] if together else []
    bench = run.Run(run.parse_args(argv + ["--out", str(tmp_path)]))
    with pytest.raises(RuntimeError, match="out of memory"):
        bench.start_engines(specs, "m")
    # Launched together, both processes exist when the second fails.
    assert closed == (["plugin", "stock"] if together else ["plugin"])


def test_a_cell_with_the_twin_alongside_rotates_three_engines_and_writes_two_cells(tmp_path):
    """With a twin, each pair is a rotation of baseline, policy and twin on
    the same prompts; the policy's runs give the cell against no
    speculation (greedy and seeded identity) and the A/A cell against the
    twin (greedy identity only, against the policy's greedy tokens of the
    first cell, not generated again), the same tok/s in both."""
    args = run.parse_args(["--pairs", "3", "--num-requests", "4", "--output-len", "32",
                           "--max-num-seqs", "4", "--identity-requests", "2",
                           "--spec-workloads", "nonrepeating", "--breakdown-mixes", "none",
                           "--spec-policies", "adaptive", "--control", "--control-alongside",
                           "--gpu-memory-utilization", "0.3", "--out", str(tmp_path)])
    calls, seen = [], []

    def answer(engine, kwargs):
        return {"tokens": [[7] * 32 for _ in kwargs["prompts"]]}

    twin = "adaptive@control"
    engines = {role: SpeculatingEngine(role, calls, tok_s, seen, answer)
               for role, tok_s in (("nospec", 100.0), ("adaptive", 98.0), (twin, 97.0))}
    bench = run.Run(args)
    bench.ngram_cells("m", 1000, engines, "adaptive", "nospec", 3, twin)
    assert [c[0] for c in calls if c[3] == 32] == [
        "nospec", "adaptive", twin, "adaptive", twin, "nospec", twin, "nospec", "adaptive"]
    assert [c[0] for c in calls if c[3] == run.WARMUP_TOKENS] == ["nospec", "adaptive", twin]
    assert [(r, kw.get("mix")) for r, _, kw in seen] == [
        ("nospec", None), ("adaptive", None), ("nospec", "seeded_t1"),
        ("adaptive", "seeded_t1"), (twin, None)]
    against_none, against_twin = bench.results["speculation"]
    assert (against_none["against"], against_twin["against"]) == ("nospec", twin)
    assert against_none["spec_tok_s"] == against_twin["spec_tok_s"] == [98.0] * 3
    assert against_none["paired"]["median"] == pytest.approx(0.98)
    assert against_twin["paired"]["median"] == pytest.approx(98 / 97)
    assert against_twin["seeded_identity"] is None
    # Each cell keeps its two engines' host use per run, in the order of their tok/s.
    assert [r["engine_core_cpu_s"] for r in against_none["host"]["base"]] == [1.0] * 3
    assert [r["engine_core_cpu_s"] for r in against_twin["host"]["base"]] == [0.97] * 3
    assert against_none["host"]["spec"] == against_twin["host"]["spec"]
    assert [r["engine_core_cpu_s"] for r in against_none["host"]["spec"]] == [0.98] * 3
    assert against_none["orders"] == against_twin["orders"] == [
        ["nospec", "adaptive", twin], ["adaptive", twin, "nospec"], [twin, "nospec", "adaptive"]]
    saved = json.loads((tmp_path / "e2e.json").read_text())
    assert len(saved["speculation"]) == 2


def test_stock_engines_measure_each_k_against_one_engine_without_speculation(
        tmp_path, monkeypatch):
    """--spec-engines stock (issue 25's baseline on 0.33): every engine is
    stock, upstream's speculation with k = 3 then k = 7 against the same
    engine without speculation, never three engines at once."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.33.0")
    bench = RecordingRun(run.parse_args(["--mixes", "ngram", "--spec-engines", "stock",
                                         "--ngram-k", "3,7", "--out", str(tmp_path)]))
    bench.model("8b", 151936)
    assert bench.log == [
        ("start", "stock", "/ckpt/copy", 0, "topk_topp", None),
        ("start", "stock", "/ckpt/copy", 3, "greedy", None),
        ("peakedness", "8b-copy"),
        ("ngram", "8b-copy", "upstream", "nospec", ("nospec", "upstream"), 3),
        ("close", "/ckpt/copy", 3),
        ("start", "stock", "/ckpt/copy", 7, "greedy", None),
        ("ngram", "8b-copy", "upstream", "nospec", ("nospec", "upstream"), 7),
        ("close", "/ckpt/copy", 7), ("close", "/ckpt/copy", 0),
    ]


def test_each_k_restarts_the_engine_without_speculation_that_a_policy_replaced(tmp_path):
    bench = RecordingRun(run.parse_args(["--mixes", "ngram", "--ngram-k", "3,5",
                                         "--out", str(tmp_path)]))
    bench.model("1b", 128256)
    starts = [(e[3], e[5]) for e in bench.log if e[0] == "start"]
    assert starts == [(0, None), (3, "adaptive"), (3, "fixed"),
                      (0, None), (5, "adaptive"), (5, "fixed")]
    closes = [e for e in bench.log if e[0] == "close"]
    assert len(closes) == len(starts)


def test_stock_speculation_is_refused_on_0_20_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.20.2")
    with pytest.raises(SystemExit) as exit_info:
        run.parse_args(["--spec-engines", "stock"])
    assert exit_info.value.code == 2
    assert "stock vLLM 0.20's V2 model runner has no n-gram proposer" in capsys.readouterr().err


def test_speculation_flags_are_checked():
    args = run.parse_args([])
    assert args.ngram_k == [3] and args.spec_engines == "plugin"
    assert args.spec_workloads == ["accepting", "nonrepeating", "mixed", "switching"]
    assert args.spec_policies == ["adaptive", "fixed"]
    with pytest.raises(SystemExit):
        run.parse_args(["--spec-policies", "greedy"])
    with pytest.raises(SystemExit):
        run.parse_args(["--spec-workloads", "repeating"])
    spec = engine.EngineSpec("plugin", "/m", 64, 0.4, 400, ngram_k=3, speculation_policy="fixed")
    assert spec.llm_kwargs()["speculation_policy"] == "fixed"
    assert spec.label == "plugin+ngram3-fixed"
    assert "speculation_policy" not in engine.EngineSpec("plugin", "/m", 64, 0.4, 400,
                                                         ngram_k=3).llm_kwargs()


def test_spec_verification_compares_plugin_and_upstream_verification(monkeypatch, capsys):
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.33.0")
    args = run.parse_args(["--spec-policies", "fixed", "--spec-verification", "both"])
    variants = run.spec_variants(args)
    assert variants == ["fixed+verify-plugin", "fixed+verify-upstream"]
    assert [run.split_variant(v) for v in variants] == [("fixed", "plugin"), ("fixed", "upstream")]
    assert run.spec_variants(run.parse_args(["--spec-policies", "fixed"])) == ["fixed"]
    assert run.split_variant("fixed") == ("fixed", None)
    stock = run.parse_args(["--spec-engines", "stock"])
    assert run.spec_variants(stock) == [run.UPSTREAM_POLICY]
    assert run.split_variant(run.UPSTREAM_POLICY) == (None, None)
    spec = engine.EngineSpec("plugin", "/m", 64, 0.4, 400, ngram_k=3, speculation_policy="fixed",
                             plugin_verification="plugin")
    assert spec.llm_kwargs()["plugin_verification"] == "plugin"
    assert spec.label == "plugin+ngram3-fixed-verify-plugin"
    assert "plugin_verification" not in engine.EngineSpec("plugin", "/m", 64, 0.4, 400,
                                                          ngram_k=3).llm_kwargs()
    with pytest.raises(SystemExit):
        run.parse_args(["--spec-engines", "stock", "--spec-verification", "plugin"])
    assert "stock engines" in capsys.readouterr().err
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.31.0")
    with pytest.raises(SystemExit):
        run.parse_args(["--spec-verification", "plugin"])
    assert "from vLLM 0.32 on" in capsys.readouterr().err


def test_ngram_engine_captures_its_verification_steps():
    """k = 3 at max_num_seqs 256 verifies 1024 tokens a step: past vLLM's 512."""
    args = run.parse_args(["--max-num-seqs", "64,256"])
    assert run.capture_size(args, 0) is None
    assert run.capture_size(args, 3) == 1024
    capped = run.parse_args(["--max-num-seqs", "64", "--max-cudagraph-capture-size", "512"])
    assert run.capture_size(capped, 0) == 512
    assert run.capture_size(capped, 3) == 512


def test_fp64_flag_reaches_every_engine_that_has_the_setting(monkeypatch):
    """--use-fp64-gumbel: the plugin engine always; a stock engine only on a
    line whose EngineArgs has use_fp64_gumbel (stock 0.20 draws FP64 anyway)."""
    args = run.parse_args(["--use-fp64-gumbel"])
    assert not run.fp64_kwarg(run.parse_args([]), "plugin")
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.20.2")
    assert run.fp64_kwarg(args, "plugin") and not run.fp64_kwarg(args, "stock")
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.32.0")
    assert run.fp64_kwarg(args, "stock") and run.fp64_kwarg(args, "control")
    spec = engine.EngineSpec("stock", "/m", 64, 0.4, 400, use_fp64_gumbel=True)
    assert spec.llm_kwargs()["use_fp64_gumbel"] is True
    assert "use_fp64_gumbel" not in engine.EngineSpec("stock", "/m", 64, 0.4, 400).llm_kwargs()


class _FakeEngineCore:
    """``LLMEngine.add_request``/``step`` of requests that each finish after a
    number of steps given by their prompt's first token."""

    def __init__(self):
        self.running = {}
        self.most_in_flight = 0

    def add_request(self, request_id, prompt, params):
        self.running[request_id] = prompt["prompt_token_ids"][0]
        self.most_in_flight = max(self.most_in_flight, len(self.running))

    def step(self):
        finished = []
        for request_id in list(self.running):
            self.running[request_id] -= 1
            if self.running[request_id] == 0:
                del self.running[request_id]
                finished.append(types.SimpleNamespace(
                    finished=True, outputs=[types.SimpleNamespace(token_ids=[7] * 3)]))
        return finished


def test_continuous_batching_keeps_at_most_the_wave_in_flight_and_refills():
    server = object.__new__(engine._EngineServer)
    server.llm = types.SimpleNamespace(llm_engine=_FakeEngineCore())
    server.request_counter = 0
    # Lengths 1, 5, 1, 1, 1: a lock-step wave of 2 would take 5 + 1 + 1 steps;
    # continuous batching refills the short request's place at once.
    prompts = [[1], [5], [1], [1], [1]]
    tokens = server._continuous(prompts, [None] * len(prompts), in_flight=2)
    assert tokens == 5 * 3
    assert server.llm.llm_engine.most_in_flight == 2
    assert server.request_counter == 5 and not server.llm.llm_engine.running


def test_without_a_gpu_the_command_fails_in_one_line_before_writing_a_checkpoint(tmp_path):
    proc = run_lab("e2e", "--models", "tiny:2048", "--out", str(tmp_path / "out"),
                   "--checkpoint-dir", str(tmp_path / "checkpoints"),
                   env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 1
    assert last_line(proc.stderr) == (
        "the e2e benchmark needs a CUDA GPU and torch sees none: run it on a machine with an "
        "NVIDIA GPU (docs/benchmarks.md)"
    )
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_dir_help_states_the_default(capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--help"])
    assert "default /tmp/e2e-checkpoints" in " ".join(capsys.readouterr().out.split())


def test_render_of_a_missing_report_is_a_one_line_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run.parse_args(["--render", str(tmp_path / "e2e.json")])
    assert exit_info.value.code == 2
    assert last_line(capsys.readouterr().err) == (
        f"python3 -m benchmarks e2e: error: argument --render: cannot read the report "
        f"{tmp_path / 'e2e.json'}: [Errno 2] No such file or directory: '{tmp_path / 'e2e.json'}'"
    )


# --ratios FILE / --record: the cells' plugin/stock ratios as integration/parts.py's rows.

TOPK = "top-k/top-p, batches FlashInfer may take"
SEEDED = "top-k/top-p, batches FlashInfer may not take"
GUMBEL = "Gumbel-max sampling (no top-k/top-p)"


def _recorded_results() -> dict:
    """Cells whose pair ratios give the medians below: topk_topp 1.022 (B=64)
    and 1.037 (B=256), seeded_topp 1.061 and 1.065, greedy 0.990, t1 1.013;
    a mixed cell and an A/A cell that are never recorded."""
    def cell(mix, wave, pair_ratios, against="plugin"):
        stock = [1000.0] * len(pair_ratios)
        return report.pair_cell("8b-v151936", mix, wave, [("stock", "plugin")] * len(stock),
                                stock, [1000.0 * r for r in pair_ratios], against=against)

    results = report.new_results({"use_fp64_gumbel": False})
    results.update(gpu="NVIDIA H200", vllm="0.26.0", torch="2.11.0+cu130")
    results["models"]["8b-v151936"] = {"shape": "8b", "vocab": 151936, "kind": "peaked"}
    # B=256 first: the text orders batch sizes.
    results["cells"] += [
        cell("topk_topp", 256, [1.037, 1.026, 1.045]),
        cell("topk_topp", 64, [1.015, 1.022, 1.043]),
        cell("seeded_topp", 64, [1.051, 1.061, 1.077]),
        cell("seeded_topp", 256, [1.053, 1.065, 1.076]),
        cell("greedy", 64, [0.990, 0.980, 1.000]),
        cell("t1", 64, [1.013, 1.010, 1.020]),
        cell("mixed", 64, [1.500, 1.500, 1.500]),
        cell("topk_topp", 128, [2.000, 2.000, 2.000], against="control"),
    ]
    return results


RECORDED = {
    TOPK: "8B engine tok/s plugin/stock 1.022 at B=64, 1.037 at B=256 (median of 3 pairs)",
    SEEDED: "8B engine tok/s plugin/stock 1.061 at B=64, 1.065 at B=256 (median of 3 pairs)",
    GUMBEL: "8B engine tok/s plugin/stock greedy 0.990 at B=64; t1 1.013 at B=64 "
            "(median of 3 pairs)",
}


def test_parts_ratios_map_each_mix_to_its_parts_py_row():
    from vllm_sampling_plugin.integration import parts

    assert set(report.PART_OF_MIX.values()) <= set(parts.PARTS)
    assert report.parts_ratios(_recorded_results()) == RECORDED


def test_ratios_record_writes_the_entries_under_the_runs_line(tmp_path, monkeypatch, capsys):
    from benchmarks import measurements

    path = tmp_path / "measurements.json"
    path.write_text(json.dumps({"0.26": {TOPK: {"ratio": "old", "source": "old"}},
                                "0.33": {TOPK: {"ratio": "kept", "source": "kept"}}}))
    monkeypatch.setattr(measurements, "PATH", path)
    report_path = report.write_json(_recorded_results(), str(tmp_path / "out"))
    assert run.main(["--ratios", report_path, "--record"]) == 0
    source = "bench e2e, NVIDIA H200, docs/benchmarks.md"
    assert json.loads(path.read_text()) == {
        "0.26": {part: {"ratio": text, "source": source} for part, text in RECORDED.items()},
        "0.33": {TOPK: {"ratio": "kept", "source": "kept"}},
    }
    out = capsys.readouterr().out.splitlines()
    assert f"{TOPK}: {RECORDED[TOPK]}" in out
    assert f"recorded for vLLM 0.26: {TOPK}: {RECORDED[TOPK]} ({source})" in out


def test_ratios_without_record_write_nothing(tmp_path, monkeypatch, capsys):
    from benchmarks import measurements

    monkeypatch.setattr(measurements, "PATH", tmp_path / "measurements.json")
    report_path = report.write_json(_recorded_results(), str(tmp_path / "out"))
    assert run.main(["--ratios", report_path]) == 0
    assert f"{SEEDED}: {RECORDED[SEEDED]}" in capsys.readouterr().out.splitlines()
    assert not (tmp_path / "measurements.json").exists()


def test_record_of_an_unsupported_line_fails_in_one_line(tmp_path, monkeypatch):
    from benchmarks import measurements

    monkeypatch.setattr(measurements, "PATH", tmp_path / "measurements.json")
    results = {**_recorded_results(), "vllm": "0.19.1"}
    report_path = report.write_json(results, str(tmp_path / "out"))
    with pytest.raises(SystemExit) as exit_info:
        run.main(["--ratios", report_path, "--record"])
    assert str(exit_info.value) == (
        "bench e2e --record: the report's vLLM version '0.19.1' is not a supported release "
        "line: nothing recorded")
    assert not (tmp_path / "measurements.json").exists()


def test_record_with_render_is_a_usage_error(tmp_path, capsys):
    report_path = report.write_json(_recorded_results(), str(tmp_path / "out"))
    with pytest.raises(SystemExit) as exit_info:
        run.parse_args(["--render", report_path, "--record"])
    assert exit_info.value.code == 2
    assert last_line(capsys.readouterr().err).endswith(
        "--record writes the ratios of a run or of --ratios FILE, not of --render")


def test_record_after_a_run_writes_its_cells(tmp_path, monkeypatch, capsys):
    from benchmarks import measurements

    path = tmp_path / "measurements.json"
    monkeypatch.setattr(measurements, "PATH", path)
    monkeypatch.setattr(run, "require_gpu", lambda area: None)
    monkeypatch.setattr(report, "plot", lambda results, png: None)
    measured = _recorded_results()

    def model(self, shape, vocab):
        self.results.update(gpu=measured["gpu"], vllm="0.31.0")
        self.results["models"].update(measured["models"])
        self.results["cells"] += [c for c in measured["cells"] if c["mix"] == "topk_topp"]

    monkeypatch.setattr(run.Run, "model", model)
    assert run.main(["--models", "8b:151936", "--out", str(tmp_path / "out"), "--record"]) == 0
    assert json.loads(path.read_text()) == {"0.31": {TOPK: {
        "ratio": RECORDED[TOPK], "source": "bench e2e, NVIDIA H200, docs/benchmarks.md"}}}


def test_gpu_checks_draft_step_starts_the_plugin_its_twin_and_stock_with_one_draft(
        tmp_path, monkeypatch):
    """scripts/gpu-check.sh e2e-draft: its bench arguments (read from the
    script with python3 a stand-in) are ones the bench takes on vLLM 0.33,
    and start a 1B plugin engine drafting with the tiny copy checkpoint, its
    A/A twin and stock vLLM with the same draft model."""
    import shlex

    from tests.benchmarks.test_gpu_check import gpu_check

    assert gpu_check(tmp_path, "e2e-draft").returncode == 0
    calls = (tmp_path / "python3-calls").read_text().splitlines()
    line = next(c for c in calls if "benchmarks e2e" in c)
    argv = shlex.split(line.split("benchmarks e2e", 1)[1])
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.33.0")

    class DraftRun(RecordingRun):
        def checkpoint(self, shape, vocab, kind):
            return f"{shape}-{kind}", f"/ckpt/{shape}-v{vocab}-{kind}"

    args = run.parse_args(argv)
    args.time_budget = None  # the stand-in's short step limit; no engine starts here
    bench = DraftRun(args)
    bench.model("1b", 128256)
    draft = "/ckpt/tiny-v128256-copy"
    assert [(s.role, s.ngram_k, s.draft_model) for s in bench.specs] == [
        ("plugin", 3, draft), ("plugin", 3, draft), ("stock", 3, draft)]
    assert bench.specs[0] == bench.specs[1]


@pytest.mark.parametrize("method, fresh", [("ngram", False), ("suffix", True)])
def test_suffix_cells_give_every_run_prompts_of_its_own(tmp_path, monkeypatch, method, fresh):
    """Suffix decoding drafts from the engine's earlier responses, so each of
    its runs (the warm-up, then each rotation, every engine of a rotation
    alike) gets other prompts; an n-gram cell's runs repeat one set."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.34.0")
    args = run.parse_args(["--mixes", "ngram", "--ngram-method", method, "--pairs", "2",
                           "--num-requests", "4", "--output-len", "8", "--max-num-seqs", "4",
                           "--spec-workloads", "nonrepeating", "--identity-requests", "2",
                           "--breakdown-mixes", "none", "--out", str(tmp_path)])
    runs = []

    class Recording(SpeculatingEngine):
        def call(self, command, **kwargs):
            if command == "throughput":
                runs.append((self.role, kwargs["prompts"]))
            return super().call(command, **kwargs)

    def answer(engine, kwargs):
        return {"tokens": [[7, 7]] * len(kwargs["prompts"]), "token_logprobs": []}

    engines = {role: Recording(role, [], 100.0, [], answer) for role in ("nospec", "adaptive")}
    run.Run(args).ngram_cells("m", 1000, engines, "adaptive", "nospec", 3)
    assert [role for role, _ in runs] == ["nospec", "adaptive", "nospec", "adaptive",
                                          "adaptive", "nospec"]
    sets = [prompts for _, prompts in runs]
    assert sets[0] == sets[1] and sets[2] == sets[3] and sets[4] == sets[5]
    assert (sets[0] != sets[2] != sets[4] != sets[0]) is fresh
    assert sets[0] == copying.workload_prompts("nonrepeating", 4, args.prompt_len, 1000, seed=4)
