"""``bench e2e --trace-workloads`` without a GPU: the requests read from the
workload builder's JSONL, the engines' arguments per configuration, the
trace check, the cells, tables and plots (issue 63)."""

from __future__ import annotations

import json
import types

import pytest

from benchmarks.e2e import engine, report, run, traces
from tests.benchmarks.test_e2e_plumbing import RecordingRun
from tests.benchmarks.test_gpu_check import e2e_commands, gpu_check

REQUESTS = [
    {"request_id": "chat-0000", "workload": "chat", "prompt_token_ids": [5, 6, 7],
     "trace_token_ids": [8, 9]},
    {"request_id": "chat-0001", "workload": "chat", "prompt_token_ids": [1, 2],
     "trace_token_ids": [3, 4, 5, 6]},
]


@pytest.fixture
def workloads(tmp_path, monkeypatch):
    """A builder's folder with a two-request chat file, on vLLM 0.34."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.34.0")
    folder = tmp_path / "workloads"
    folder.mkdir()
    (folder / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    return folder


def trace_args(workloads, tmp_path, *extra):
    return run.parse_args(["--trace-workloads", str(workloads), "--mixes", "ngram",
                           "--out", str(tmp_path / "out"), *extra])


def test_requests_come_from_the_builders_jsonl(workloads):
    assert traces.parse_workloads(str(workloads)) == (str(workloads), ["chat"])
    assert traces.parse_workloads(f"{workloads}:chat") == (str(workloads), ["chat"])
    requests = traces.load(str(workloads), "chat")
    assert requests == [{"prompt_token_ids": [5, 6, 7], "trace_token_ids": [8, 9]},
                        {"prompt_token_ids": [1, 2], "trace_token_ids": [3, 4, 5, 6]}]
    # The longest prompt plus trace (6), the k drafts past it and a margin.
    assert traces.max_model_len(requests, 3) == 6 + 3 + 16
    assert traces.sampling_kwargs([3, 4, 5, 6]) == {
        "temperature": 0.0, "max_tokens": 4, "ignore_eos": True,
        "trace_decode_token_ids": [3, 4, 5, 6]}


@pytest.mark.parametrize("text, message", [
    (":chat", "no such file"),
    ("{dir}:chat,summarize", "summarize.jsonl: no such file"),
    ("{dir}:poetry", "unknown workloads ['poetry']"),
])
def test_workload_folders_and_names_are_checked(workloads, text, message):
    with pytest.raises(Exception, match=message.replace("[", r"\[").replace("]", r"\]")):
        traces.parse_workloads(text.format(dir=workloads))


@pytest.mark.parametrize("extra, message", [
    (["--ngram-method", "ngram_gpu"], "--ngram-method ngram or suffix"),
    (["--max-num-seqs", "16,32"], "not [32]"),
    (["--min-run-s", "4"], "--min-run-s"),
    (["--spec-mixes", "topk_topp"], "leave --spec-mixes out"),
    (["--spec-engines", "stock"], "leave --spec-engines"),
])
def test_trace_arguments_are_checked(workloads, tmp_path, capsys, extra, message):
    trace_args(workloads, tmp_path, "--max-num-seqs", "1,16,64,256")
    with pytest.raises(SystemExit):
        trace_args(workloads, tmp_path, *extra)
    assert message in capsys.readouterr().err


def test_trace_replay_needs_vllm_034_and_the_speculation_cells(workloads, tmp_path, capsys,
                                                              monkeypatch):
    with pytest.raises(SystemExit):
        run.parse_args(["--trace-workloads", str(workloads), "--mixes", "ngram,greedy"])
    assert "--mixes ngram" in capsys.readouterr().err
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.33.0")
    with pytest.raises(SystemExit):
        trace_args(workloads, tmp_path)
    assert "install vLLM 0.34" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["suffix", "ngram"])
def test_each_configuration_gets_its_engine(workloads, tmp_path, method):
    """The plugin's policy against no speculation, upstream's fixed k in a
    stock engine and, for suffix only, upstream's adaptive verification;
    every engine replays traces, on the peaked checkpoint."""
    # Suffix replays new requests in every run: 3 cells of 2 runs at B=64.
    (workloads / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in REQUESTS * 3))
    bench = RecordingRun(trace_args(workloads, tmp_path, "--spec-policies", "adaptive",
                                    "--ngram-method", method, "--pairs", "1",
                                    "--num-requests", "1", "--max-num-seqs", "64"))
    bench.model("8b", 151936)
    adaptive_too = method == "suffix"
    assert [e[3:] for e in bench.log if e[0] == "ngram"] == [
        ("nospec", ("nospec", "adaptive"), 3), ("upstream", ("adaptive", "upstream"), 3)] + (
        [("upstream-adaptive", ("adaptive", "upstream-adaptive"), 3)] if adaptive_too else [])
    kwargs = [spec.llm_kwargs() for spec in bench.specs]
    assert [spec.role for spec in bench.specs] == (
        ["plugin", "plugin", "stock"] + (["stock"] if adaptive_too else []))
    assert all(spec.model == "/ckpt/peaked" for spec in bench.specs)
    assert all(k["enable_trace_replay"] for k in kwargs)
    assert all(k["max_model_len"] == traces.max_model_len(REQUESTS, 3) for k in kwargs)
    assert "speculative_config" not in kwargs[0]
    assert kwargs[1]["speculation_policy"] == "adaptive"
    configs = [k["speculative_config"] for k in kwargs[1:]]
    assert all(c["method"] == method and c["num_speculative_tokens"] == 3 for c in configs)
    assert [c.get("enable_adaptive_verification", False) for c in configs] == (
        [False, False] + ([True] if adaptive_too else []))


class ReplayingEngine:
    """Answers ``throughput`` with trace replay: emits each request's trace
    (or, with ``wrong``, a changed last token for request 1) and counts one
    draft step of 3 tokens, 2 accepted, per request; ``seen`` gets (role,
    prompts, traces) of each call."""

    def __init__(self, role, tok_s, seen, wrong=False, drafts=True):
        self.role, self.tok_s, self.seen, self.wrong, self.drafts = role, tok_s, seen, wrong, drafts

    def call(self, command, **kwargs):
        assert command == "throughput"
        replayed = kwargs["traces"]
        self.seen.append((self.role, kwargs["prompts"], replayed))
        emitted = [list(t) for t in replayed]
        if self.wrong and len(emitted) > 1:
            emitted[1][-1] += 1
        n = len(replayed) if self.drafts else 0
        return {"tok_s": self.tok_s, "tokens": sum(map(len, emitted)), "seconds": 1.0,
                "host_cpu_s": {"engine_core": 0.5, "front_end": 0.5},
                "trace_mismatches": traces.mismatches(emitted, replayed),
                "spec": {"drafts": n, "drafted": 3 * n, "accepted": 2 * n}}


def test_trace_cells_replay_the_files_requests_and_report_acceptance(workloads, tmp_path):
    args = trace_args(workloads, tmp_path, "--pairs", "2", "--max-num-seqs", "1,16",
                      "--num-requests", "8", "--output-len", "1")
    seen = []
    engines = {"nospec": ReplayingEngine("nospec", 100.0, seen, drafts=False),
               "adaptive": ReplayingEngine("adaptive", 150.0, seen)}
    bench = run.Run(args)
    bench.ngram_cells("8b", 151936, engines, "adaptive", "nospec", 3)
    prompts = [r["prompt_token_ids"] for r in REQUESTS]
    trace_ids = [r["trace_token_ids"] for r in REQUESTS]
    # The warm-up (one wave: one request at B=1, --output-len tokens of its
    # trace), then two pairs of every request replaying its whole trace.
    assert seen[:2] == [("nospec", prompts[:1], [[8]]), ("adaptive", prompts[:1], [[8]])]
    assert seen[2:6] == [(role, prompts, trace_ids)
                         for role in ("nospec", "adaptive", "adaptive", "nospec")]
    cells = bench.results["speculation"]
    assert [(c["workload"], c["method"], c["max_num_seqs"]) for c in cells] == [
        ("chat", "ngram", 1), ("chat", "ngram", 16)]
    cell = cells[0]
    assert cell["trace_replay"] and cell["requests"] == 2
    assert cell["paired"]["median"] == pytest.approx(1.5)
    # The policy's counters over its two timed runs only (not the warm-up).
    assert cell["acceptance"]["drafts"] == 4 and cell["acceptance"]["accepted"] == 8
    assert cell["acceptance"]["mean_acceptance_length"] == pytest.approx(3.0)
    assert cell["base_acceptance"]["mean_acceptance_length"] is None
    table = report.render_markdown(bench.results)
    assert "| 8b | chat | ngram | 1 | 3 | adaptive vs nospec | 1.500 | 3.00 / - | 4 / 12 / 8 " \
           "| 2/2 |" in table
    saved = json.loads((tmp_path / "out" / "e2e.json").read_text())
    assert saved["speculation"][1]["max_num_seqs"] == 16


def test_suffix_replays_requests_no_engine_has_seen(workloads, tmp_path):
    """Suffix decoding drafts from the engine's earlier responses: the
    warm-up and each rotation replay their own slice of the file, the same
    slice for every engine of a rotation, and the next cell goes on from
    there, so the policy's engine (in every cell) never replays a request
    its corpus holds; n-gram runs repeat the first requests (the test
    above). An engine joining the policy for a later cell first serves,
    untimed, the runs the policy served before it, so both corpora hold the
    same responses; the engine without speculation never does."""
    folder = tmp_path / "many"
    folder.mkdir()
    many = [{"prompt_token_ids": [i], "trace_token_ids": [100 + i, 200 + i]} for i in range(18)]
    (folder / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in many))
    args = trace_args(folder, tmp_path, "--ngram-method", "suffix", "--spec-policies", "adaptive",
                      "--pairs", "2", "--max-num-seqs", "16", "--num-requests", "2",
                      "--output-len", "1")
    seen = []
    engines = {"nospec": ReplayingEngine("nospec", 100.0, seen, drafts=False),
               "adaptive": ReplayingEngine("adaptive", 150.0, seen),
               "upstream": ReplayingEngine("upstream", 120.0, seen)}
    bench = run.Run(args)
    bench.ngram_cells("8b", 151936, engines, "adaptive", "nospec", 3)
    bench.ngram_cells("8b", 151936, engines, "adaptive", "upstream", 3)
    assert [(role, prompts) for role, prompts, _ in seen] == [
        ("nospec", [[0], [1]]), ("adaptive", [[0], [1]]),
        ("nospec", [[2], [3]]), ("adaptive", [[2], [3]]),
        ("adaptive", [[4], [5]]), ("nospec", [[4], [5]]),
        ("upstream", [[0], [1]]), ("upstream", [[2], [3]]), ("upstream", [[4], [5]]),
        ("upstream", [[6], [7]]), ("adaptive", [[6], [7]]),
        ("upstream", [[8], [9]]), ("adaptive", [[8], [9]]),
        ("adaptive", [[10], [11]]), ("upstream", [[10], [11]])]
    assert seen[-1][2] == [[110, 210], [111, 211]]
    # The catch-up repeats each run as it was served: the warm-up with its
    # traces cut to --output-len, the timed runs whole.
    assert [traces_ for role, _, traces_ in seen[6:9]] == [
        [[100], [101]], [[102, 202], [103, 203]], [[104, 204], [105, 205]]]
    # A third cell with the same rotation replays nothing more.
    bench.ngram_cells("8b", 151936, engines, "adaptive", "upstream", 3)
    assert [role for role, _, _ in seen[15:]] == [
        "upstream", "adaptive", "upstream", "adaptive", "adaptive", "upstream"]
    with pytest.raises(IndexError, match="request set 9 of 2 is past the file's 18 requests"):
        bench.trace_sets["chat"].indices(2, 9)
    # Against no speculation, stock's fixed k and stock's adaptive
    # verification at two batch sizes: 3 cells a batch size, 3 sets a cell.
    with pytest.raises(SystemExit, match=r"each cell\): chat has 18, not 72; build 72 "):
        run.Run(trace_args(folder, tmp_path, "--ngram-method", "suffix", "--spec-policies",
                           "adaptive", "--pairs", "2", "--num-requests", "4",
                           "--max-num-seqs", "64,256"))


def test_requests_per_seq_sizes_each_run_by_its_concurrency(tmp_path, monkeypatch):
    """--requests-per-seq N: a run at B sequences replays N x B requests (the
    warm-up its first wave), so concurrency 1 and 16 fit beside 64 and 256;
    with suffix, sets of different sizes still never share a request, and
    the file must hold (pairs + 1) x the sum over B of N x B requests for
    each baseline."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.34.0")
    folder = tmp_path / "sized"
    folder.mkdir()
    # Baselines: none, stock's fixed k, stock's adaptive verification.
    needed = 3 * (1 + 1) * (2 * 1 + 2 * 16)
    many = [{"prompt_token_ids": [i], "trace_token_ids": [1000 + i]} for i in range(needed)]
    (folder / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in many))
    extra = ("--ngram-method", "suffix", "--spec-policies", "adaptive", "--pairs", "1",
             "--max-num-seqs", "1,16", "--requests-per-seq", "2", "--output-len", "1")
    args = trace_args(folder, tmp_path, *extra)
    assert run.trace_requests_needed(args) == needed
    assert [run.run_requests(args, wave) for wave in (1, 16, 256)] == [2, 32, 512]
    seen = []
    engines = {"nospec": ReplayingEngine("nospec", 100.0, seen, drafts=False),
               "adaptive": ReplayingEngine("adaptive", 150.0, seen)}
    bench = run.Run(args)
    bench.ngram_cells("8b", 151936, engines, "adaptive", "nospec", 3)
    firsts = [(role, len(prompts), prompts[0][0]) for role, prompts, _ in seen]
    assert firsts == [
        # B=1: the warm-up's first wave of set 0 (requests 0-1), then set 1's pair.
        ("nospec", 1, 0), ("adaptive", 1, 0), ("nospec", 2, 2), ("adaptive", 2, 2),
        # B=16: set 2 holds requests 4-35, set 3 the next 32.
        ("nospec", 16, 4), ("adaptive", 16, 4), ("nospec", 32, 36), ("adaptive", 32, 36)]
    assert [c["requests"] for c in bench.results["speculation"]] == [2, 32]
    (folder / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in many[:-1]))
    with pytest.raises(SystemExit, match=f"chat has {needed - 1}, not {needed}"):
        run.Run(trace_args(folder, tmp_path, *extra))


@pytest.mark.parametrize("wrong_role", ["nospec", "adaptive"])
def test_a_token_that_is_not_its_trace_fails_the_cell(workloads, tmp_path, wrong_role):
    args = trace_args(workloads, tmp_path, "--pairs", "1", "--max-num-seqs", "16")
    seen = []
    engines = {role: ReplayingEngine(role, 100.0, seen, wrong=role == wrong_role)
               for role in ("nospec", "adaptive")}
    bench = run.Run(args)
    with pytest.raises(traces.TraceMismatch,
                       match=f"{wrong_role}: 1 requests did not replay their trace; the first, "
                             "request 1, differs at token 3"):
        bench.ngram_cells("8b", 151936, engines, "adaptive", "nospec", 3)
    assert bench.results["speculation"] == []


def test_mismatches_name_the_request_and_position():
    assert traces.mismatches([[1, 2], [3, 4]], [[1, 2], [3, 4]]) == []
    assert traces.mismatches([[1, 2], [3]], [[1, 2], [3, 4]]) == [
        {"request": 1, "position": 1, "emitted": 1, "trace": 2}]
    with pytest.raises(ValueError):
        traces.mismatches([[1]], [[1], [2]])


class _Output(types.SimpleNamespace):
    pass


class _TraceEngineCore:
    """``add_request``/``step`` that finish requests in reverse order of
    arrival, each emitting its params' trace."""

    def __init__(self):
        self.waiting = []

    def add_request(self, request_id, prompt, params):
        self.waiting.append((request_id, params.trace_decode_token_ids))

    def step(self):
        request_id, trace = self.waiting.pop()
        return [_Output(request_id=request_id, finished=True,
                        outputs=[types.SimpleNamespace(token_ids=list(trace))])]


def _trace_server(monkeypatch, generate=None):
    """An engine server whose LLM replays traces (``_TraceEngineCore`` for
    continuous batching, ``generate`` for waves) and whose spec-decode
    counters read 1/3/1 before a run and 5/15/9 after it."""
    import vllm

    monkeypatch.setattr(vllm, "SamplingParams", lambda **kw: types.SimpleNamespace(**kw))
    server = engine._EngineServer.__new__(engine._EngineServer)
    counters = iter([{"drafts": 1, "drafted": 3, "accepted": 1},
                     {"drafts": 5, "drafted": 15, "accepted": 9}])
    server._spec_counters = lambda: next(counters)
    server._verification_batches = lambda: None
    server.llm = types.SimpleNamespace(llm_engine=_TraceEngineCore(), generate=generate)
    server.triton_cache, server.request_counter = "/nonexistent", 0
    return server


def test_waves_compare_each_wave_with_its_own_traces(monkeypatch):
    """The warm-up's waves: request 2 is the second wave's first; a token
    that is not its trace's is reported by request and position."""
    def generate(inputs, params, use_tqdm):
        tokens = [list(p.trace_decode_token_ids) for p in params]
        if inputs[0]["prompt_token_ids"] == [2]:
            tokens[0][1] = 0
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=t)])
                for t in tokens]

    server = _trace_server(monkeypatch, generate)
    result = server.throughput("ngram", [[0], [1], [2]], 0, wave=2,
                               traces=[[1, 2], [3, 4], [5, 6]])
    assert result["tokens"] == 6
    assert result["trace_mismatches"] == [{"request": 2, "position": 1, "emitted": 2,
                                           "trace": 2}]


def test_the_engine_maps_finished_requests_back_to_their_traces(monkeypatch):
    """Continuous batching finishes requests out of order: the tokens are
    compared with the trace of the request that emitted them, and the run
    reports the spec-decode counters' change."""
    server = _trace_server(monkeypatch)
    replayed = [[1, 2, 3], [4, 5], [6]]
    result = server.throughput("ngram", [[9], [9], [9]], 0, wave=3, continuous=True,
                               traces=replayed)
    assert result["tokens"] == 6 and result["trace_mismatches"] == []
    assert result["spec"] == {"drafts": 4, "drafted": 12, "accepted": 8}


def test_speedups_and_plot_per_workload(tmp_path):
    """The policy's speed-up is its cell against no speculation; upstream's
    is the policy's over no speculation divided by the policy's over it."""
    def cell(seqs, against, ratio, workload="chat"):
        c = report.trace_cell("8b", workload, "suffix", seqs, 3, "adaptive", against,
                              [["nospec", "adaptive"]], [100.0], [100.0 * ratio], {}, {}, 2)
        return c

    results = {"gpu": "H100", "speculation": [
        cell(64, "nospec", 1.5), cell(64, "upstream", 1.2), cell(64, "adaptive@control", 1.0),
        cell(256, "nospec", 1.1), cell(256, "upstream-adaptive", 0.5),
        cell(64, "nospec", 2.0, "agentic")]}
    speedups = report.trace_speedups(results)
    assert speedups[("8b", "chat", "suffix")] == {
        "adaptive": {64: pytest.approx(1.5), 256: pytest.approx(1.1)},
        "upstream": {64: pytest.approx(1.25)},
        "upstream-adaptive": {256: pytest.approx(2.2)}}
    assert speedups[("8b", "agentic", "suffix")] == {"adaptive": {64: pytest.approx(2.0)}}
    pytest.importorskip("matplotlib")
    paths = report.plot_traces(results, str(tmp_path))
    assert sorted(paths) == sorted(str(tmp_path / f"e2e-trace-{w}.png")
                                   for w in ("chat", "agentic"))
    assert all((tmp_path / f"e2e-trace-{w}.png").stat().st_size > 0 for w in ("chat", "agentic"))


def test_the_gpu_check_step_runs_both_methods_on_the_built_workloads(tmp_path, monkeypatch):
    """scripts/gpu-check.sh e2e-trace (python3 a stand-in): a build already
    in $OUT/workloads is reused, and each method's bench e2e command parses."""
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "0.34.0")
    folder = tmp_path / "out" / "workloads"
    folder.mkdir(parents=True)
    (folder / "stats.json").write_text("{}")
    (folder / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    assert gpu_check(tmp_path, "e2e-trace").returncode == 0
    calls = (tmp_path / "python3-calls").read_text().splitlines()
    assert not any("benchmarks.workloads" in c for c in calls)
    parsed = [run.parse_args(argv) for argv in e2e_commands(tmp_path)]
    assert [a.ngram_method for a in parsed] == ["ngram", "suffix"]
    assert all(a.trace_workloads == (str(folder), ["chat"]) and a.max_num_seqs == [64, 256]
               and a.models == [("8b", 151936)] for a in parsed)
