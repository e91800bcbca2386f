"""``python3 -m benchmarks e2e``: the benchmark's driver (see the package docstring)."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable

from benchmarks.e2e import checkpoint, copying, report, traces, workload
from benchmarks.e2e.engine import Engine, EngineSpec
from benchmarks.harness import require_gpu
from benchmarks.report import read_json_argument
from vllm_sampling_plugin.config import FIXED as FIXED_POLICY
from vllm_sampling_plugin.config import NGRAM_METHODS
from vllm_sampling_plugin.config import SPECULATION_POLICIES as SPEC_POLICIES
from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.version import (
    LINE_SEAMS,
    installed_vllm_version,
    release_line,
)

PEAKEDNESS_PROMPTS = 64
# Whose speculation the ngram cells measure (--spec-engines), and the name
# the cells give upstream's own (no plugin policy: every request verifies k).
SPEC_ENGINES = ("plugin", "stock")
# The proposers without a draft model: n-gram, and vLLM 0.34's suffix decoding.
PROPOSER_METHODS = (*NGRAM_METHODS, "suffix")
UPSTREAM_POLICY = "upstream"
# Proposers that keep a corpus of finished responses across requests (vLLM
# 0.34's suffix decoding): an engine that runs the same requests again drafts
# its own earlier answers, so text that does not repeat would accept
# everything from the second run on. Each run of theirs gets requests of its
# own (``fresh_requests``); the copy checkpoint's prompts of run r take seed
# ``max_num_seqs + RUN_SEED_STEP * r``.
CORPUS_METHODS = ("suffix",)
RUN_SEED_STEP = 1000
# Upstream's speculation with its adaptive verification (vLLM 0.34's
# speculative_config "enable_adaptive_verification"): a stock engine too.
UPSTREAM_ADAPTIVE = "upstream-adaptive"
# --spec-verification: who verifies the plugin engines' drafts (0.32/0.33's
# --plugin-verification); "both" measures each policy with plugin, then
# upstream verification. Engine names: "<policy>+verify-<owner>".
SPEC_VERIFICATIONS = ("default", "plugin", "upstream", "both")
PEAKEDNESS_TOKENS = 32
WARMUP_TOKENS = 16
# The GPU memory share that engines up at once may claim together
# (--control-alongside): vLLM's default for one engine, 0.9, leaves the rest
# to the CUDA context and allocations outside its budget; 0.95 keeps 4 GB of
# an 80 GB card free for three contexts.
MAX_GPU_MEMORY_UTILIZATION = 0.95


def _model_list(text: str) -> list[tuple[str, int]]:
    models = []
    for item in text.split(","):
        shape, _, vocab = item.partition(":")
        if shape not in checkpoint.SHAPES or not vocab.isdigit():
            raise argparse.ArgumentTypeError(
                f"{item!r}: expected SHAPE:VOCAB with SHAPE in {sorted(checkpoint.SHAPES)}")
        models.append((shape, int(vocab)))
    return models


def _choice_list(kind: str, known: tuple[str, ...]):
    """An argparse type: a comma list of names from ``known``."""
    def parse(text: str) -> list[str]:
        values = text.split(",")
        unknown = [v for v in values if v not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {kind} {unknown}; known: {known}")
        return values
    return parse


def _mix_list(text: str) -> list[str]:
    """Mixes, or none at all with ``none``."""
    return [] if text == "none" else _choice_list("mixes", workload.NAMED_MIXES)(text)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers separated by commas")
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: values must be positive")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python3 -m benchmarks e2e", usage="%(prog)s [OPTION ...]",
        description="Real vLLM engines, stock against the plugin, interleaved on one GPU "
                    "(what and how: the docstring of benchmarks/e2e/__init__.py).")
    runs = parser.add_argument_group("what to run")
    runs.add_argument("--models", type=_model_list, default=_model_list("1b:128256"),
                      help="SHAPE:VOCAB list, SHAPE in 1b, 8b (tiny for smoke tests); "
                           "default 1b:128256")
    runs.add_argument("--mixes", type=_mix_list, default=list(workload.MIXES),
                      help=f"comma list of {','.join(workload.NAMED_MIXES)} (default "
                           f"{','.join(workload.MIXES)})")
    runs.add_argument("--pairs", type=int, default=3,
                      help="stock/plugin pairs per cell (default 3)")
    runs.add_argument("--num-requests", type=int, default=1024,
                      help="requests per timed run (default 1024)")
    runs.add_argument("--requests-per-seq", type=int, default=None, metavar="N",
                      help="each run sends N x max_num_seqs requests in place of "
                           "--num-requests, so that runs at concurrency 1 to 256 each last "
                           "about as long as N requests (the trace cells' sweep)")
    runs.add_argument("--min-run-s", type=float, default=0.0, metavar="SECONDS",
                      help="send more requests per timed run where --num-requests would last "
                           "less than this (default 0: --num-requests always)")
    runs.add_argument("--prompt-len", type=int, default=64, help="prompt tokens (default 64)")
    runs.add_argument("--output-len", type=int, default=256,
                      help="tokens every request generates (default 256)")
    runs.add_argument("--max-num-seqs", type=_int_list, default=[64, 256],
                      help="batch sizes (requests in flight), comma list; default 64,256")
    runs.add_argument("--breakdown-mixes", type=_mix_list, default=["topk_topp", "ngram"],
                      help="mixes whose steps are timed inside the engine ('none': skip); "
                           "default topk_topp,ngram")
    runs.add_argument("--breakdown-output-len", type=int, default=64,
                      help="tokens per request of the step breakdown (default 64)")
    runs.add_argument("--profile-mixes", type=_mix_list, default=[],
                      help="mixes to run once per engine and batch size under torch.profiler; "
                           "default none")
    runs.add_argument("--control", action="store_true",
                      help="A/A run: a second engine of the same kind takes the plugin's or "
                           "the speculating variant's place (ratios near 1)")
    runs.add_argument("--control-alongside", action="store_true",
                      help="with --control, the ngram cells' A/A twin runs in the same window "
                           "as the variant (three engines up at once)")
    spec = parser.add_argument_group("speculation (the ngram cells)")
    spec.add_argument("--ngram-k", type=_int_list, default=[3],
                      help="draft tokens per step, comma list, each with its own engines "
                           "(default 3)")
    spec.add_argument("--ngram-method", choices=PROPOSER_METHODS, default=NGRAM_METHODS[0],
                      help="speculative method of the speculating engines (default ngram; "
                           "ngram_gpu: stock vLLM 0.32 schedules it asynchronously, as the "
                           "plugin does both; suffix: vLLM 0.34's GPU suffix decoding)")
    spec.add_argument("--spec-draft", choices=sorted(checkpoint.SHAPES), default=None,
                      metavar="SHAPE",
                      help="speculate with a draft model of this shape instead of n-gram "
                           "(vLLM 0.33; with --spec-policies fixed)")
    spec.add_argument("--spec-engines", choices=SPEC_ENGINES, default="plugin",
                      help="whose speculation is measured: the plugin's (default) or stock "
                           "vLLM's (VLLM_PLUGINS=none)")
    spec.add_argument("--spec-verification", choices=SPEC_VERIFICATIONS, default="default",
                      help="who verifies the plugin engines' drafts on vLLM 0.32/0.33; 'both' "
                           "compares the two; default: the release's default")
    spec.add_argument("--spec-mixes", type=_choice_list("mixes", workload.NAMED_MIXES),
                      default=["ngram"],
                      help="sampling mixes, comma list (default ngram: greedy)")
    spec.add_argument("--spec-workloads", type=_choice_list("workloads", copying.SPEC_WORKLOADS),
                      default=list(copying.SPEC_WORKLOADS),
                      help=f"comma list of {','.join(copying.SPEC_WORKLOADS)} (default all)")
    spec.add_argument("--spec-policies", type=_choice_list("policies", SPEC_POLICIES),
                      default=list(SPEC_POLICIES),
                      help="the first against no speculation, then against each other one "
                           "(default adaptive,fixed)")
    spec.add_argument("--spec-against-none", action=argparse.BooleanOptionalAction,
                      default=True,
                      help="measure the first policy against no speculation (default on)")
    spec.add_argument("--spec-against-stock", action="store_true",
                      help="then measure the first policy against stock vLLM speculating with "
                           "the same k (vLLM 0.32 on)")
    spec.add_argument("--trace-workloads", type=traces.parse_workloads, default=None,
                      metavar="DIR[:NAME,...]",
                      help="vLLM 0.34: the speculation cells replay the traces in DIR "
                           "(python3 -m benchmarks.workloads build), each token checked; "
                           "against no speculation, stock's fixed k and, for suffix, stock's "
                           "adaptive verification (docs/workloads.md)")
    spec.add_argument("--identity-requests", type=int, default=256,
                      help="greedy (and seeded) requests compared with and without speculation "
                           "(default 256)")
    spec.add_argument("--seeded-rerun", action="store_true",
                      help="ask for the seeded tokens again with logprobs in every cell, not "
                           "only where they differ")
    engines = parser.add_argument_group("engines")
    engines.add_argument("--gpu-memory-utilization", type=float, default=0.4,
                         help="per engine; two engines share the GPU (default 0.4)")
    engines.add_argument("--kv-cache-gib", type=float, default=None, metavar="GIB",
                         help="every engine's KV cache in GiB, in place of vLLM's sizing")
    engines.add_argument("--start-together", action="store_true",
                         help="start a comparison's engines at once rather than one after "
                              "another (needs --kv-cache-gib)")
    engines.add_argument("--attention-backend", default=None,
                         help="vLLM attention backend (default: vLLM's choice)")
    engines.add_argument("--cudagraph-mode", default=None,
                         choices=["NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY",
                                  "FULL_AND_PIECEWISE"],
                         help="vLLM's CUDA-graph mode (default: vLLM's)")
    engines.add_argument("--max-cudagraph-capture-size", type=int, default=None,
                         help="largest CUDA-graph batch (default: vLLM's)")
    engines.add_argument("--use-fp64-gumbel", action="store_true",
                         help="FP64 Gumbel noise in every engine (stock vLLM 0.20 always "
                              "draws FP64)")
    engines.add_argument("--checkpoint-dir", default="/tmp/e2e-checkpoints",
                         help="where the random checkpoints are written and reused (an 8B one "
                              "takes about 16 GB); default /tmp/e2e-checkpoints")
    output = parser.add_argument_group("output")
    output.add_argument("--out", default="bench-results/e2e",
                        help="output directory (e2e.json, e2e.png); default bench-results/e2e")
    output.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help="start no new cell after this many seconds; default: no limit")
    output.add_argument("--render", metavar="JSON", type=read_json_argument,
                        help="print the markdown tables of an e2e.json and exit (no GPU needed)")
    output.add_argument("--ratios", metavar="FILE", type=read_json_argument,
                        help="print the info ratios of an e2e.json and exit (no GPU needed)")
    output.add_argument("--record", action="store_true",
                        help="write those ratios (of this run, or of --ratios FILE) into "
                             "vllm_sampling_plugin/data/measurements.json, which info reads")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    if args.requests_per_seq is not None and args.requests_per_seq < 1:
        parser.error("--requests-per-seq must be at least 1")
    if args.control_alongside:
        if not args.control:
            parser.error("--control-alongside places the --control twin beside the pair; "
                         "add --control")
        if 3 * args.gpu_memory_utilization > MAX_GPU_MEMORY_UTILIZATION:
            parser.error(f"--control-alongside: three engines of --gpu-memory-utilization "
                         f"{args.gpu_memory_utilization} do not fit one GPU (at most "
                         f"{math.floor(100 * MAX_GPU_MEMORY_UTILIZATION / 3) / 100} each)")
    if args.start_together and not args.kv_cache_gib:
        parser.error("--start-together: vLLM sizes each engine's KV cache from the GPU "
                     "memory left after its profiling, which the engines starting beside "
                     "it take; name the size with --kv-cache-gib")
    if args.record and args.render and not args.ratios:
        parser.error("--record writes the ratios of a run or of --ratios FILE, not of --render")
    installed_shapes = _installed_shapes()
    if (args.spec_engines == "stock"
            and installed_shapes.get(shapes.SPECULATOR) == shapes.NGRAM_BEFORE_REQUEST_STATE):
        parser.error("--spec-engines stock: stock vLLM 0.20's V2 model runner has no n-gram "
                     "proposer (the plugin brings one); use a vLLM >= 0.32 or --spec-engines "
                     "plugin")
    if not args.spec_against_none and len(spec_variants(args)) < 2:
        parser.error("--no-spec-against-none: name a second policy (--spec-policies "
                     "adaptive,fixed), --spec-verification both, --spec-against-stock or "
                     "--control, or there is nothing to measure")
    stock_speculates = installed_shapes.get(shapes.SPECULATOR) in shapes.POLICY_OVER_UPSTREAM
    if args.spec_against_stock and (args.spec_engines == "stock" or not stock_speculates):
        parser.error("--spec-against-stock: the plugin's engines against stock vLLM's own "
                     "speculation, which exists from vLLM 0.32 on, with --spec-engines plugin")
    if args.spec_draft:
        if release_line(installed_vllm_version()) != "0.33":
            parser.error("--spec-draft: the V2 model runner's draft-model speculator "
                         "(StandaloneARSpeculator) is vLLM 0.33's; install vLLM 0.33")
        if args.spec_policies != [FIXED_POLICY]:
            parser.error("--spec-draft: the adaptive policy applies to n-gram drafts "
                         "only; use --spec-policies fixed")
    if args.trace_workloads:
        trace_replay_errors(parser, args)
    if args.spec_verification != "default":
        if args.spec_engines == "stock":
            parser.error("--spec-verification: stock engines (VLLM_PLUGINS=none) verify "
                         "upstream's way; use --spec-engines plugin")
        if installed_shapes.get(shapes.REJECTION) not in shapes.VERIFY_STEPS:
            parser.error("--spec-verification: plugin_verification exists from vLLM 0.32 on")
    return args


def trace_replay_errors(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--trace-workloads``'s conditions, each a usage error."""
    if release_line(installed_vllm_version()) != "0.34":
        parser.error("--trace-workloads: trace replay of speculated tokens is vLLM 0.34's "
                     "(enable_trace_replay); install vLLM 0.34")
    if args.mixes != ["ngram"]:
        parser.error("--trace-workloads: the trace cells are the speculation cells; pass "
                     "--mixes ngram")
    if args.spec_mixes != ["ngram"]:
        parser.error("--trace-workloads: traces replay greedily; leave --spec-mixes out")
    if args.ngram_method not in traces.METHODS:
        parser.error(f"--trace-workloads: --ngram-method {' or '.join(traces.METHODS)}")
    if args.spec_engines != "plugin" or args.spec_draft:
        parser.error("--trace-workloads: the plugin's policies against upstream's "
                     "configurations; leave --spec-engines and --spec-draft out")
    other = sorted(set(args.max_num_seqs) - set(traces.CONCURRENCIES))
    if other:
        parser.error(f"--trace-workloads: --max-num-seqs from "
                     f"{','.join(map(str, traces.CONCURRENCIES))}, not {other}")
    if args.min_run_s > 0:
        parser.error("--trace-workloads: a workload's requests are its file's; build more "
                     "with --requests instead of --min-run-s")


def run_requests(args: argparse.Namespace, wave: int) -> int:
    """Requests a run of a cell at ``wave`` sequences sends:
    ``--requests-per-seq`` x ``wave``, or ``--num-requests``."""
    return args.requests_per_seq * wave if args.requests_per_seq else args.num_requests


def requests_for_run(min_run_s: float, tok_s: float, output_len: int) -> int:
    """Requests of ``output_len`` tokens that keep an engine generating
    ``tok_s`` busy for ``min_run_s`` seconds (0 when no minimum is asked)."""
    return math.ceil(min_run_s * tok_s / output_len) if min_run_s > 0 else 0


def kv_cache_bytes(args: argparse.Namespace) -> int | None:
    """Every engine's KV cache in bytes (``--kv-cache-gib``), or None."""
    return int(args.kv_cache_gib * 2**30) if args.kv_cache_gib else None


def fresh_requests(method: str) -> bool:
    """Whether every run of a speculation cell of ``method`` needs requests
    no earlier run of the engine has seen (``CORPUS_METHODS``)."""
    return method in CORPUS_METHODS


def trace_requests_needed(args: argparse.Namespace) -> int:
    """The requests a trace run hands out at most from each workload: a
    warm-up set and one per pair in each cell (:func:`run_requests` each), a
    cell per k, batch size and baseline (no speculation, then each other
    engine of :func:`spec_variants` but a twin kept beside the policy,
    :func:`twin_beside`)."""
    others = len(spec_variants(args)) - 1
    baselines = int(args.spec_against_none) + others - twin_beside(args, others)
    per_k = sum(run_requests(args, wave) for wave in args.max_num_seqs)
    return len(args.ngram_k) * baselines * (args.pairs + 1) * per_k


def twin_beside(args: argparse.Namespace, others: int) -> bool:
    """Whether ``--control-alongside`` keeps the twin (the last of the
    ``others`` engines after the policy) beside every pair instead of taking
    a baseline's place at the end; where it is the only engine to measure
    against, it stays that."""
    return args.control_alongside and (args.spec_against_none or others > 1)


def spec_variants(args: argparse.Namespace) -> list[str]:
    """The speculating engines' names, in order: policies, each with the
    verification owners of ``--spec-verification``, then, with
    ``--spec-against-stock`` or ``--trace-workloads``, stock vLLM's
    speculation (``UPSTREAM_POLICY``), then with ``--trace-workloads`` and
    the suffix method its adaptive verification (``UPSTREAM_ADAPTIVE``),
    then, with ``--control``, the first one's A/A twin
    (``report.CONTROL_SUFFIX``)."""
    if args.spec_engines == "stock":
        variants = [UPSTREAM_POLICY]
    else:
        owners = {"default": [None], "both": ["plugin", "upstream"]}.get(
            args.spec_verification, [args.spec_verification])
        variants = [p if owner is None else f"{p}+verify-{owner}"
                    for p in args.spec_policies for owner in owners]
        variants += [UPSTREAM_POLICY] if args.spec_against_stock or args.trace_workloads else []
        if args.trace_workloads and args.ngram_method in traces.ADAPTIVE_VERIFICATION_METHODS:
            variants.append(UPSTREAM_ADAPTIVE)
    return variants + ([variants[0] + report.CONTROL_SUFFIX] if args.control else [])


def original_variant(name: str) -> str:
    """The engine name an A/A twin of :func:`spec_variants` copies; any
    other name is its own."""
    return name.removesuffix(report.CONTROL_SUFFIX)


def split_variant(name: str) -> tuple[str | None, str | None]:
    """``(speculation_policy, plugin_verification)`` of an engine name of
    :func:`spec_variants` (None: the engine's default); a twin's are its
    original's."""
    policy, _, owner = original_variant(name).partition("+verify-")
    return (None if is_upstream(name) else policy), (owner or None)


def is_upstream(name: str) -> bool:
    """Whether an engine name of :func:`spec_variants` (or its twin) is
    upstream's speculation, which runs in a stock engine."""
    return original_variant(name) in (UPSTREAM_POLICY, UPSTREAM_ADAPTIVE)


def fp64_kwarg(args: argparse.Namespace, role: str) -> bool:
    """Whether ``role``'s engine gets ``use_fp64_gumbel=True``: with
    ``--use-fp64-gumbel``, every engine but a stock one on vLLM 0.20 (whose
    EngineArgs has no such field: the plugin adds it; stock always draws FP64)."""
    if not args.use_fp64_gumbel:
        return False
    return role == "plugin" or _installed_shapes().get(shapes.SETTINGS) != shapes.ENGINE_ARGS_WRAPPED


def _installed_shapes() -> dict[str, str | None]:
    """The seams' shapes on the installed vLLM, where it is a measured release."""
    return LINE_SEAMS.get(release_line(installed_vllm_version()), {})


def capture_size(args: argparse.Namespace, ngram_k: int) -> int | None:
    """The engine's largest CUDA-graph batch, in tokens (None: vLLM's default).

    A verification step of an n-gram engine runs max_num_seqs x (k + 1)
    tokens; vLLM's default stops capturing at 512, so at max_num_seqs 256 and
    k = 3 every such step would run without CUDA graphs (H100: 1.34x instead
    of the speed-up graphs give, docs/benchmarks.md).
    """
    if not ngram_k:
        return args.max_cudagraph_capture_size
    return max(args.max_cudagraph_capture_size or 0, max(args.max_num_seqs) * (ngram_k + 1))


def model_name(shape: str, vocab: int, kind: str = "peaked") -> str:
    return f"{shape}-v{vocab}" + ("" if kind == "peaked" else f"-{kind}")


def ensure_checkpoint(directory: str, shape: str, vocab: int, kind: str = "peaked") -> str:
    """Write the checkpoint in a separate process, so its GPU memory is
    returned before any engine profiles the GPU (the copy kind is also
    checked there, see ``checkpoint.check_copying``)."""
    path = os.path.join(directory, model_name(shape, vocab, kind))
    checked = kind != "copy" or os.path.exists(os.path.join(path, copying.CHECK_FILE))
    if not (checkpoint.is_written(path, shape, vocab, kind) and checked):
        subprocess.run([sys.executable, "-m", "benchmarks.e2e.checkpoint",
                        "--shape", shape, "--vocab", str(vocab), "--kind", kind,
                        "--out", path], check=True)
    return path


class Run:
    """State of one benchmark run: the arguments, the results so far, the clock."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.start = time.perf_counter()
        saved = {k: v for k, v in vars(args).items() if k not in ("render", "ratios")}
        self.results = report.new_results(saved)
        # The engine each stock engine is paired with.
        self.second = "control" if args.control else "plugin"
        # --trace-workloads: each workload's requests, read once.
        directory, names = args.trace_workloads or (None, [])
        self.trace_requests = {name: traces.load(directory, name) for name in names}
        # Request sets handed out so far (``measure_pairs``): with
        # ``fresh_requests``, no engine ever replays a set it has seen.
        self.request_sets = 0
        # With ``fresh_requests``: each run served, keyed by (request set,
        # requests, tokens) in the order first served, and the keys each
        # engine has served (``catch_up``).
        self.served_runs: dict[tuple[int, int, int], dict] = {}
        self.served: dict[Engine, set[tuple[int, int, int]]] = {}
        fresh = fresh_requests(args.ngram_method)
        self.trace_sets = {name: traces.RequestSets(len(requests), fresh)
                           for name, requests in self.trace_requests.items()}
        if fresh:
            needed = trace_requests_needed(args)
            for name, requests in self.trace_requests.items():
                if len(requests) < needed:
                    raise SystemExit(
                        f"bench e2e: {args.ngram_method} keeps finished responses across "
                        f"requests, so each of its runs replays requests no engine has seen "
                        f"(a warm-up and {args.pairs} pairs in each cell): {name} has "
                        f"{len(requests)}, not {needed}; build {needed} with python3 -m "
                        f"benchmarks.workloads build --requests")

    def say(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f} s] {text}", flush=True)

    def budget_left(self) -> float:
        """Seconds of ``--time-budget`` left (infinite without one)."""
        if self.args.time_budget is None:
            return math.inf
        return self.args.time_budget - (time.perf_counter() - self.start)

    def out_of_time(self, cell: str, starts_engine: bool = False) -> bool:
        """True (and says so) when ``--time-budget`` leaves no time for
        ``cell``. A cell that ``starts_engine`` also needs as long as the
        slowest engine so far took to start: an engine that would be up only
        after the budget is never started (on vLLM 0.33 a 1B engine takes
        100-140 s, and a lent machine's call is 10 minutes; on 0.34 an 8B
        engine speculating with the plugin took 114 s where the stock engine
        before it took 80 s, and came up after the budget)."""
        budget = self.args.time_budget
        if budget is None:
            return False
        elapsed = time.perf_counter() - self.start
        started = self.results["engines"]
        needed = max((e["startup_s"] for e in started), default=0.0) if starts_engine else 0.0
        if elapsed + needed < budget:
            return False
        if elapsed < budget:
            self.say(f"time budget of {budget:.0f} s: {budget - elapsed:.0f} s left, less than "
                     f"the slowest engine's start ({needed:.0f} s): skipping {cell}")
        else:
            self.say(f"time budget of {budget:.0f} s spent: skipping {cell}")
        return True

    def save(self) -> None:
        report.write_json(self.results, self.args.out)

    def start_engines(self, specs: list[EngineSpec], model: str) -> list[Engine]:
        """Engines for ``specs``, in order: one after another, or with
        ``--start-together`` (and more than one) all launched, then awaited.
        Where one fails to start, the others are closed (an engine process
        left running would hold its GPU memory and keep the bench from
        exiting) and the error raised."""
        together = self.args.start_together and len(specs) > 1
        if together:
            self.say(f"starting {', '.join(s.label for s in specs)} engines together "
                     f"for {model}")
        started: list[Engine] = []
        try:
            for spec in specs:
                started.append(Engine(spec) if together else self.start_engine(spec, model))
            if together:
                for engine in started:
                    self.engine_up(engine, model, together=True)
        except BaseException:
            for engine in started:
                engine.close()
            raise
        return started

    def start_engine(self, spec: EngineSpec, model: str) -> Engine:
        self.say(f"starting {spec.label} engine for {model}")
        return self.engine_up(Engine(spec), model)

    def engine_up(self, engine: Engine, model: str, together: bool = False) -> Engine:
        """Wait for ``engine`` to be up; record and say its start."""
        spec, info = engine.spec, engine.info
        self.results.update(gpu=info["gpu"], vllm=info["vllm"], torch=info["torch"])
        self.results["engines"].append({"model": model, "role": spec.label,
                                        "sampler": info["sampler"],
                                        "startup_s": info["startup_s"],
                                        "started_together": together})
        cold = info["cold_start"]
        self.results["cold_start"].append({
            "model": model, "role": spec.label, **cold,
            "ratio": cold["ttft_ms"][0] / cold["warm_ttft_ms"]})
        firsts = ", ".join(f"{mix} {ms:.1f}" for mix, ms in zip(cold["order"], cold["ttft_ms"]))
        self.say(f"{spec.label} up in {info['startup_s']:.0f} s; first requests' TTFT ms: "
                 f"{firsts}; warm top-k/top-p {cold['warm_ttft_ms']:.1f}")
        self.save()
        return engine

    def measure_pairs(self, engines: dict[str, Engine], roles: tuple[str, ...], mix: str,
                      prompts_for: Callable[[int, int], list[list[int]]], wave: int,
                      continuous: bool = False,
                      traces_for: Callable[[int, int], list[list[int]]] | None = None,
                      ) -> tuple[list, dict, list[list[int]], dict, dict]:
        """Bring the engines' corpora level (:meth:`catch_up`), warm them on
        this cell, then the interleaved pairs (rotations of ``roles``), each
        run on :func:`run_requests` prompts,
        or more where ``--min-run-s`` asks runs to last longer than that many
        would at the fastest engine's throughput. Returns the orders, each
        role's tok/s, the prompts it ran and each role's host use per run
        (:func:`report.host_use`) and the spec-decode counters of each role's
        timed runs together. A rotation that ``--time-budget`` no longer
        has the last rotation's time for is not started: the cell keeps the
        pairs it has.

        ``prompts_for(count, run)`` gives the prompts of a run: ``run`` counts
        the request sets of the whole benchmark (``self.request_sets``), the
        cell's first for the untimed runs (the warm-up), the next for each
        rotation; every engine of a rotation gets the same ones, and no engine
        sees a set twice (see :func:`fresh_requests`).
        With ``traces_for`` (trace replay), request i of ``prompts_for(n, run)``
        replays ``traces_for(n, run)[i]`` (an untimed run, such as the warm-up,
        only its first ``output_len`` tokens), and every run's tokens must be
        its traces (:func:`traces.check`); only then are the timed runs'
        counters summed (otherwise each role's are empty)."""
        a = self.args
        self.catch_up(engines)
        # This cell's request sets: the warm-up's, then one per rotation.
        first_set = self.request_sets
        self.request_sets += a.pairs + 1
        prompts = prompts_for(run_requests(a, wave), first_set)
        replayed = traces_for(len(prompts), first_set) if traces_for else None
        spec: dict[str, dict] = {role: {} for role in roles}
        current_set = first_set

        def throughput(role: str, count: int, output_len: int, timed: bool,
                       **kwargs) -> dict:
            if replayed:
                kwargs["traces"] = [trace[:None if timed else output_len]
                                    for trace in replayed[:count]]
            call = {"mix": mix, "prompts": prompts[:count], "output_len": output_len,
                    "wave": wave, **kwargs}
            result = self.serve(engines[role], role, (current_set, count, output_len), call)
            if replayed and timed:
                for key, value in result["spec"].items():
                    spec[role][key] = spec[role].get(key, 0) + value
            return result

        for role in engines:
            throughput(role, wave, min(WARMUP_TOKENS, a.output_len), timed=False)
        if a.min_run_s > 0:
            # One untimed run of the --num-requests prompts per engine sets the
            # count: a single short warm-up wave is mostly prefill and ramp, and
            # its rate (a quarter of the 1B engines' on 2026-11-27) made runs of
            # "--min-run-s 8" last 2 s.
            full_tok_s = [throughput(role, len(prompts), a.output_len, timed=False,
                                     continuous=continuous)["tok_s"] for role in engines]
            count = requests_for_run(a.min_run_s, max(full_tok_s), a.output_len)
        else:
            count = 0
        count = max(count, len(prompts))
        orders = workload.pair_orders(a.pairs, roles)
        tok_s: dict[str, list[float]] = {role: [] for role in roles}
        host: dict[str, list[dict]] = {role: [] for role in roles}
        rotation_s = 0.0
        for done, order in enumerate(orders):
            if done and self.budget_left() < rotation_s:
                # The cell keeps the pairs it has rather than lose them all to
                # the call's hard limit (three 1B engines on 0.33 left one call
                # 41 s for its first cell, 2026-11-29).
                self.say(f"time budget: {self.budget_left():.0f} s left, less than a "
                         f"rotation ({rotation_s:.0f} s): {done} of {len(orders)} pairs")
                orders = orders[:done]
                break
            current_set = first_set + done + 1
            prompts = prompts_for(count, current_set)
            replayed = traces_for(count, current_set) if traces_for else None
            started = time.perf_counter()
            for role in order:
                result = throughput(role, len(prompts), a.output_len, timed=True,
                                    continuous=continuous)
                tok_s[role].append(result["tok_s"])
                host[role].append(report.host_use(result))
            rotation_s = time.perf_counter() - started
        return orders, tok_s, prompts, host, spec

    def serve(self, engine: Engine, role: str, key: tuple[int, int, int], call: dict) -> dict:
        """One untimed or timed run of ``engine`` (``throughput`` with
        ``call``'s arguments), its tokens checked against their traces where
        it replays some, and noted where the method keeps responses."""
        result = engine.call("throughput", **call)
        if "traces" in call:
            traces.check(role, result)
        if fresh_requests(self.args.ngram_method):
            self.served_runs.setdefault(key, call)
            self.served.setdefault(engine, set()).add(key)
        return result

    def catch_up(self, rotation: dict[str, Engine]) -> None:
        """Before a cell (``measure_pairs``, once the time budget has let it
        start) of a method that drafts from the engine's finished
        responses (``fresh_requests``): each speculating engine of the
        rotation first serves, untimed, the runs another one has served and
        it has not, so every corpus holds the same responses when the cell
        starts. Otherwise an engine started for a later cell drafts from a
        smaller corpus than the policy's (chat traces, 2026-12-07: acceptance
        length 1.16 against the policy's 1.54)."""
        if not fresh_requests(self.args.ngram_method):
            return
        speculating = {role: e for role, e in rotation.items() if role != "nospec"}
        held = set().union(*(self.served.get(e, set()) for e in speculating.values()))
        for role, engine in speculating.items():
            missing = [key for key in self.served_runs
                       if key in held and key not in self.served.get(engine, set())]
            if missing:
                self.say(f"  {role} serves {len(missing)} earlier runs first, so that its "
                         f"corpus holds what the others' hold")
            for key in missing:
                self.serve(engine, role, key, self.served_runs[key])

    def plain_cells(self, model: str, vocab: int, engines: dict[str, Engine],
                    mixes: list[str]) -> None:
        a = self.args
        for mix in mixes:
            for wave in a.max_num_seqs:
                if self.out_of_time(f"{model} {mix} B={wave}"):
                    return
                orders, tok_s, prompts, host, _ = self.measure_pairs(
                    engines, ("stock", self.second), mix,
                    lambda n, _run: workload.random_prompts(n, a.prompt_len, vocab, seed=wave),
                    wave)
                cell = report.pair_cell(model, mix, wave, orders, tok_s["stock"],
                                        tok_s[self.second], against=self.second)
                cell["requests"] = len(prompts)
                cell["host"] = {"stock": host["stock"], "plugin": host[self.second]}
                self.results["cells"].append(cell)
                self.save()
                self.say(f"{model} {mix} B={wave}: stock {cell['stock']['median']:.0f} "
                         f"{self.second} {cell['plugin']['median']:.0f} tok/s, "
                         f"ratio of medians {cell['ratio']:.3f}, median of pair ratios "
                         f"{cell['paired']['median']:.3f} [{cell['paired']['min']:.3f}, "
                         f"{cell['paired']['max']:.3f}]")

    def breakdowns(self, model: str, vocab: int, engines: dict[str, Engine],
                   mixes: list[str], waves: list[int] | None = None,
                   prompts: list[list[int]] | None = None, continuous: bool = False) -> None:
        """One instrumented wave per engine, mix and batch size (on ``prompts``,
        by default random ones), ``--breakdown-output-len`` tokens a request;
        with ``continuous``, every one of ``prompts`` at ``--output-len``
        tokens, ``wave`` of them in flight: the regime a speculation cell
        times."""
        self._instrumented_passes("breakdown", model, vocab, engines, mixes, waves, prompts,
                                  continuous)

    def profiles(self, model: str, vocab: int, engines: dict[str, Engine],
                 mixes: list[str], waves: list[int] | None = None,
                 prompts: list[list[int]] | None = None) -> None:
        """One wave per engine, mix and batch size under torch.profiler (on
        ``prompts``, by default random ones)."""
        self._instrumented_passes("profile", model, vocab, engines, mixes, waves, prompts)

    def _instrumented_passes(self, command: str, model: str, vocab: int,
                             engines: dict[str, Engine], mixes: list[str],
                             waves: list[int] | None, prompts: list[list[int]] | None,
                             continuous: bool = False) -> None:
        """``breakdowns`` and ``profiles``: the engine server's ``command``
        per engine, mix and batch size, each result saved under the command's
        key of the report and said in one line."""
        a = self.args
        key = {"breakdown": "breakdown", "profile": "profiles"}[command]
        for mix in mixes:
            for wave in waves or a.max_num_seqs:
                if self.out_of_time(f"{model} {mix} B={wave} {command}"):
                    return
                wave_prompts = prompts or workload.random_prompts(
                    wave, a.prompt_len, vocab, seed=wave)
                if not continuous:
                    wave_prompts = wave_prompts[:wave]
                # Only a continuous pass says so: the engine's default is waves.
                regime = ({"output_len": a.output_len, "continuous": True} if continuous
                          else {"output_len": a.breakdown_output_len})
                for role, engine in engines.items():
                    result = engine.call(command, mix=mix, prompts=wave_prompts, wave=wave,
                                         **regime)
                    self.results[key].append(
                        {"model": model, "mix": mix, "max_num_seqs": wave, "role": role,
                         **result})
                    self.say(f"{model} {mix} B={wave} {role} per step: {result}"
                             if command == "breakdown" else
                             f"{model} {mix} B={wave} {role} profiled over "
                             f"{result['steps']} steps")
                self.save()

    def peakedness(self, model: str, vocab: int, engine: Engine) -> None:
        """Top-1 probability of greedy tokens on random prompts, in the engine."""
        prompts = workload.random_prompts(PEAKEDNESS_PROMPTS, self.args.prompt_len, vocab,
                                          seed=99)
        result = engine.call("greedy_tokens", prompts=prompts, output_len=PEAKEDNESS_TOKENS,
                             with_probabilities=True)
        summary = report.quantiles(result["top1_probability"])
        self.results["models"][model]["top1_probability"] = summary
        self.save()
        self.say(f"{model} greedy top-1 probability p10/p50/p90: "
                 f"{summary.get('p10', 0):.3f}/{summary.get('p50', 0):.3f}/"
                 f"{summary.get('p90', 0):.3f}")

    def identity(self, engines: dict[str, Engine], baseline: str, policy: str,
                 prompts: list[list[int]],
                 drafted: dict | None = None) -> tuple[dict, dict | None, dict]:
        """Greedy tokens of both engines compared (differences probed for near
        ties) and, against no speculation, seeded tokens compared as well
        (``workload.IDENTITY_SEEDED_MIX``: temperature 1, so that the
        comparison sees the draws, not only the argmax). Returns those and the
        policy engine's greedy result (its tokens and spec-decode counters
        over the call), which a later comparison on the same prompts passes
        back as ``drafted`` instead of generating it again."""
        a = self.args
        base = engines[baseline].call("greedy_tokens", prompts=prompts, output_len=a.output_len)
        if drafted is None:
            drafted = engines[policy].call("greedy_tokens", prompts=prompts,
                                           output_len=a.output_len)
        differing = [(p, b, report.first_difference(b, d))
                     for p, b, d in zip(prompts, base["tokens"], drafted["tokens"])]
        probes = [p + b[:pos] for p, b, pos in differing if pos is not None]
        top2 = {role: engines[role].call("top2_logits", prompts=probes)["top2"]
                for role in (baseline, policy)} if probes else {baseline: None, policy: None}
        greedy = report.identity_report(base["tokens"], drafted["tokens"],
                                        top2[baseline], top2[policy])
        seeded = None
        if baseline == "nospec":
            runs = [engines[role].call("greedy_tokens", prompts=prompts, output_len=a.output_len,
                                       mix=workload.IDENTITY_SEEDED_MIX)["tokens"]
                    for role in (baseline, policy)]
            seeded = report.identity_report(*runs)
            if seeded["differences"] or a.seeded_rerun:
                seeded["rerun"] = self.seeded_rerun(engines, baseline, policy, prompts, runs)
        return greedy, seeded, drafted

    def seeded_rerun(self, engines: dict[str, Engine], baseline: str, policy: str,
                     prompts: list[list[int]], first: list[list[list[int]]]) -> dict:
        """Seeded tokens that differed, asked again of both engines with the
        raw logprob of every sampled token: does each engine repeat its own
        tokens, and are the two engines' logits the same bit for bit where
        their tokens agree (a seeded draw at temperature 1 can flip on a
        rounding-level logit difference; ``report.seeded_rerun``)."""
        again = [engines[role].call("greedy_tokens", prompts=prompts,
                                    output_len=self.args.output_len,
                                    mix=workload.IDENTITY_SEEDED_MIX, with_probabilities=True)
                 for role in (baseline, policy)]
        rerun = report.seeded_rerun(first, [r["tokens"] for r in again],
                                    [r["token_logprobs"] for r in again])
        self.say(f"  seeded rerun: {report.seeded_rerun_text(rerun)}")
        return rerun

    def ngram_cells(self, model: str, vocab: int, engines: dict[str, Engine], policy: str,
                    baseline: str, k: int, twin: str | None = None) -> None:
        """Every workload and batch size: the ``policy`` engine against the
        ``baseline`` one (no speculation or another policy), both speculating
        with ``k`` drafts, interleaved pairs, then greedy (and seeded) identity
        and the spec-decode counters. With ``twin`` (``--control-alongside``)
        each pair is a rotation of three runs, and a second cell puts the
        policy against its twin over the same window."""
        a = self.args
        pair = {baseline: engines[baseline], policy: engines[policy]}
        rotation = {**pair, twin: engines[twin]} if twin else pair
        if self.trace_requests:
            self.trace_cells(model, rotation, policy, baseline, k, twin)
            return
        cells = [(w, mix) for w in a.spec_workloads for mix in a.spec_mixes]
        fresh = fresh_requests(a.ngram_method)
        for workload_name, mix in cells:
            name = workload_name if mix == "ngram" else f"{workload_name}/{mix}"
            for wave in a.max_num_seqs:
                if self.out_of_time(f"{model} {name} k={k} {policy} vs {baseline} B={wave}"):
                    return
                # Continuous batching: a request that speculation finishes
                # early frees its place, as in a server (lock-step waves would
                # wait for the wave's slowest request).
                orders, tok_s, prompts, host, _ = self.measure_pairs(
                    rotation, tuple(rotation), mix,
                    lambda n, run: copying.workload_prompts(
                        workload_name, n, a.prompt_len, vocab,
                        seed=wave + (RUN_SEED_STEP * run if fresh else 0)),
                    wave, continuous=True)
                drafted = None
                for against in [baseline] + ([twin] if twin else []):
                    greedy, seeded, drafted = self.identity(
                        rotation, against, policy, prompts[:a.identity_requests], drafted)
                    cell = report.speculation_cell(model, name, wave, k, policy, against,
                                                   orders, tok_s[against], tok_s[policy],
                                                   drafted["spec"], greedy, seeded)
                    cell["requests"] = len(prompts)
                    cell["host"] = {"base": host[against], "spec": host[policy]}
                    self.results["speculation"].append(cell)
                    self.save()
                    self.say_cell(model, name, wave, k, cell)
                # "ngram" in --breakdown-mixes / --profile-mixes: each
                # speculation cell's pair, in the cell's own sampling mix.
                if "ngram" in a.breakdown_mixes:
                    self.breakdowns(model, vocab, pair, [mix], waves=[wave], prompts=prompts,
                                    continuous=True)
                if "ngram" in a.profile_mixes:
                    self.profiles(model, vocab, pair, [mix], waves=[wave], prompts=prompts)

    def trace_cells(self, model: str, rotation: dict[str, Engine], policy: str, baseline: str,
                    k: int, twin: str | None) -> None:
        """``ngram_cells`` on ``--trace-workloads``: every workload and batch
        size, requests of the workload's file (:func:`run_requests` a run,
        ``traces.RequestSets`` says which) replaying their traces in continuous batching;
        the cells' counters are the timed runs' (``measure_pairs``), and a
        token that is not its trace's stops the run there."""
        a = self.args
        for name, requests in self.trace_requests.items():
            sets = self.trace_sets[name]
            prompts = [r["prompt_token_ids"] for r in requests]
            replayed = [r["trace_token_ids"] for r in requests]
            for wave in a.max_num_seqs:
                if self.out_of_time(f"{model} {name} k={k} {policy} vs {baseline} B={wave}"):
                    return
                orders, tok_s, timed, host, spec = self.measure_pairs(
                    rotation, tuple(rotation), "ngram",
                    lambda n, run: [prompts[i] for i in sets.indices(n, run)], wave,
                    continuous=True,
                    traces_for=lambda n, run: [replayed[i] for i in sets.indices(n, run)])
                for against in [baseline] + ([twin] if twin else []):
                    cell = report.trace_cell(model, name, a.ngram_method, wave, k, policy,
                                             against, orders, tok_s[against], tok_s[policy],
                                             spec[against], spec[policy], len(timed))
                    cell["host"] = {"base": host[against], "spec": host[policy]}
                    self.results["speculation"].append(cell)
                    self.save()
                    self.say_cell(model, f"{name} ({a.ngram_method})", wave, k, cell)

    def say_cell(self, model: str, name: str, wave: int, k: int, cell: dict) -> None:
        """One line per speculation cell: tok/s, pairs, drafts, identity."""
        paired, acc = cell["paired"], cell["acceptance"]
        greedy, seeded = cell["identity"], cell["seeded_identity"]
        self.say(f"{model} {name} B={wave} k={k}: {cell['against']} "
                 f"{cell['base']['median']:.0f} -> {cell['policy']} "
                 f"{cell['spec']['median']:.0f} tok/s, pairs {paired['median']:.3f} "
                 f"[{paired['min']:.3f}, {paired['max']:.3f}]; verified {acc['drafted']}, "
                 f"accepted {acc['accepted']}; greedy identical {greedy['identical']}/"
                 f"{greedy['requests']}"
                 + (f", seeded {seeded['identical']}/{seeded['requests']}" if seeded else ""))
        if cell.get("host"):
            self.say(f"  host: {cell['against']} {report.host_text(cell['host']['base'])} | "
                     f"{cell['policy']} {report.host_text(cell['host']['spec'])}")

    def checkpoint(self, shape: str, vocab: int, kind: str) -> tuple[str, str]:
        """Name and path of a written (and, for the copy kind, checked) checkpoint."""
        name = model_name(shape, vocab, kind)
        path = ensure_checkpoint(self.args.checkpoint_dir, shape, vocab, kind)
        entry = {"shape": shape, "vocab": vocab, "kind": kind, "path": path}
        if kind == "copy":
            with open(os.path.join(path, copying.CHECK_FILE)) as f:
                entry["copy_check"] = json.load(f)
        self.results["models"][name] = entry
        self.say(f"checkpoint {path} ready")
        return name, path

    def model(self, shape: str, vocab: int) -> None:
        """The sampling mixes, stock against plugin, on the peaked checkpoint;
        then n-gram speculation on the copy one (``speculation``). Every
        engine times its first greedy, top-k/top-p and seeded top-p requests
        (cold start)."""
        a = self.args
        plain = [m for m in a.mixes if m != "ngram"]
        max_model_len = a.prompt_len + a.output_len + max(a.ngram_k) + 16
        if self.trace_requests:
            max_model_len = max(traces.max_model_len(requests, max(a.ngram_k))
                                for requests in self.trace_requests.values())

        def spec_for(role: str, path: str, ngram_k: int = 0,
                     cold_start_first: str = "greedy",
                     speculation_policy: str | None = None,
                     plugin_verification: str | None = None,
                     draft_model: str | None = None,
                     adaptive_verification: bool = False) -> EngineSpec:
            return EngineSpec(role=role, model=path, max_num_seqs=max(a.max_num_seqs),
                              gpu_memory_utilization=a.gpu_memory_utilization,
                              max_model_len=max_model_len, ngram_k=ngram_k,
                              attention_backend=a.attention_backend,
                              max_cudagraph_capture_size=capture_size(a, ngram_k),
                              cudagraph_mode=a.cudagraph_mode,
                              cold_start_first=cold_start_first,
                              use_fp64_gumbel=fp64_kwarg(a, role),
                              speculation_policy=speculation_policy,
                              plugin_verification=plugin_verification,
                              draft_model=draft_model, ngram_method=a.ngram_method,
                              kv_cache_memory_bytes=kv_cache_bytes(a),
                              trace_replay=bool(self.trace_requests),
                              adaptive_verification=adaptive_verification)

        engines: dict[str, Engine] = {}
        try:
            if plain:
                name, path = self.checkpoint(shape, vocab, "peaked")
                # One after the other (vLLM's memory profiling must not see the
                # other engine's start-up allocations come and go), or at once
                # with --start-together, whose KV caches have a set size.
                roles = ["stock", self.second]
                engines.update(zip(roles, self.start_engines(
                    [spec_for(role, path) for role in roles], name)))
                self.peakedness(name, vocab, engines[self.second])
                self.plain_cells(name, vocab, engines, plain)
                self.breakdowns(name, vocab, engines,
                                [m for m in a.breakdown_mixes if m in plain])
                self.profiles(name, vocab, engines,
                              [m for m in a.profile_mixes if m in plain])
            if "ngram" in a.mixes and not self.out_of_time(f"{shape} ngram engines",
                                                            starts_engine=True):
                while engines:
                    engines.popitem()[1].close()
                self.speculation(shape, vocab, engines, spec_for)
        finally:
            for engine in engines.values():
                engine.close()

    def speculation(self, shape: str, vocab: int, engines: dict[str, Engine],
                    spec_for) -> None:
        """n-gram speculation on the copy checkpoint, for each k of
        ``--ngram-k``: the first policy of ``--spec-policies`` against no
        speculation, then against each other policy, and with
        ``--spec-against-stock`` against a stock engine speculating with the
        same k (with ``--spec-engines stock``: upstream's speculation against
        no speculation, every engine stock); last, with ``--control``, against
        its A/A twin, a second engine started with the same settings. Two
        engines at a time (three 8B engines do not fit one GPU with room for
        256 sequences each): each other engine takes the place of the
        previous baseline, and the engine without
        speculation is started again for the next k. With
        ``--control-alongside`` the twin starts right after the first policy
        and runs in each of its cells, three engines at a time. With
        ``--no-spec-against-none`` no engine without speculation starts: the
        first policy is measured against the others only. With
        ``--start-together`` the engines up before the first cell start at
        once, the first policy's first baseline among them (beside the engine
        without speculation, three engines: --kv-cache-gib sizes them to fit).

        Cold start: the engine without speculation sends top-k/top-p first,
        the others greedy, so a full run shows whether a first request's cost
        is the engine's or the sampling route's without an extra engine.
        """
        a = self.args
        # Trace replay emits the traces whatever the model computes: the
        # peaked checkpoint gives the step costs, and copying adds nothing.
        name, path = self.checkpoint(shape, vocab, "peaked" if self.trace_requests else "copy")
        # The draft shares the target's token cycles (they depend on the
        # vocabulary only), so it drafts what the target emits greedily.
        draft = self.checkpoint(a.spec_draft, vocab, "copy")[1] if a.spec_draft else None
        role = a.spec_engines
        policy, *others = spec_variants(a)
        twin = others.pop() if twin_beside(a, len(others)) else None

        def spec_of(k: int, variant: str) -> EngineSpec:
            chosen, owner = split_variant(variant)
            # Upstream's speculation (or its twin) runs in a stock engine,
            # whatever the role.
            engine_role = "stock" if is_upstream(variant) else role
            return spec_for(engine_role, path, k, speculation_policy=chosen,
                            plugin_verification=owner, draft_model=draft,
                            adaptive_verification=original_variant(variant) == UPSTREAM_ADAPTIVE)

        for k in a.ngram_k:
            if self.out_of_time(f"{name} k={k} engines", starts_engine=True):
                return
            # The engines up before the first cell: the one without
            # speculation (once), the first policy and its twin, and with
            # --start-together the policy's first baseline as well.
            first = ([("nospec", spec_for(role, path, cold_start_first="topk_topp"))]
                     if a.spec_against_none and "nospec" not in engines else [])
            first += [(v, spec_of(k, v)) for v in [policy] + ([twin] if twin else [])]
            if a.start_together and others:
                first.append((others[0], spec_of(k, others[0])))
            engines.update(zip([n for n, _ in first],
                               self.start_engines([spec for _, spec in first], name)))
            if first[0][0] == "nospec" or not a.spec_against_none:
                self.peakedness(name, vocab, engines[first[0][0]])
            baseline = None
            if a.spec_against_none:
                self.ngram_cells(name, vocab, engines, policy, "nospec", k, twin)
                baseline = "nospec"
            for other in others:
                if other not in engines:
                    if self.out_of_time(f"{name} k={k} {policy} vs {other}",
                                        starts_engine=True):
                        return
                    if baseline is not None:
                        engines.pop(baseline).close()
                    engines[other] = self.start_engine(spec_of(k, other), name)
                self.ngram_cells(name, vocab, engines, policy, other, k, twin)
                baseline = other
            for engine_name in [n for n in engines if n != "nospec"]:
                engines.pop(engine_name).close()

    def finish(self) -> None:
        self.save()
        pngs = [report.plot(self.results, os.path.join(self.args.out, "e2e.png"))]
        if self.trace_requests:
            pngs += report.plot_traces(self.results, self.args.out)
        print(report.render_markdown(self.results), flush=True)
        self.say(f"wrote {os.path.join(self.args.out, 'e2e.json')}"
                 + "".join(f" and {png}" for png in pngs if png))


def record(results: dict) -> None:
    """``--record``: the run's ratios into data/measurements.json, each
    written entry printed; a file of an unsupported vLLM line exits in one line."""
    try:
        written = report.record_ratios(results)
    except ValueError as exc:
        raise SystemExit(f"bench e2e --record: {exc}") from None
    line = report.results_line(results)
    if not written:
        print(f"bench e2e --record: no stock-vs-plugin cell of "
              f"{', '.join(report.PART_OF_MIX)}: nothing recorded for vLLM {line}")
    for part, entry in written.items():
        print(f"recorded for vLLM {line}: {part}: {entry['ratio']} ({entry['source']})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        print(report.render_markdown(args.render))
        return 0
    if args.ratios:
        for name, text in report.parts_ratios(args.ratios).items():
            print(f"{name}: {text}")
        if args.record:
            record(args.ratios)
        return 0
    # Before any checkpoint is written: an 8B one takes minutes and many GB.
    require_gpu("e2e")
    run = Run(args)
    try:
        for shape, vocab in args.models:
            run.model(shape, vocab)
    finally:
        run.finish()
    if args.record:
        record(run.results)
    return 0
