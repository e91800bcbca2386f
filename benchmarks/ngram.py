"""Latency of the n-gram proposer against vLLM 0.20's two n-gram proposers.

    python3 -m benchmarks.ngram --out bench-results/ngram

For R requests with L-token histories, k draft slots and n in [2, 5] it times:

* ``plugin``: ``ops.ngram_propose_into`` on runner-style buffers (GPU,
  ``triton.testing.do_bench`` median);
* ``cpu_numba``: vLLM 0.20's ``batch_propose_numba`` (the V1 ``ngram`` method)
  on the same data, on the host with ``time.perf_counter`` (median), one numba
  thread as the stock proposer configures it;
* ``v1_gpu_eager`` / ``v1_gpu_compiled``: the search of vLLM 0.20's V1
  ``ngram_gpu`` method (``NgramGPUKernel._find_first_and_extract_all_n_parallel``),
  eager and under ``torch.compile``.

The histories mix fresh random tokens with copies of earlier spans, so most
requests find a match, as in code editing or RAG. ``plugin_pct_copy_bw`` is the
history bytes scanned per second as a share of a measured device-to-device copy.
Every case also checks the plugin's drafts against the CPU proposer's
(``matches_cpu``). Writes ``ngram.json`` (and ``ngram.png`` when matplotlib is
importable).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import torch

from benchmarks.harness import Area, Candidate, TokenCheck
from benchmarks.report import Plot
from vllm_sampling_plugin.ops.ngram import ngram_propose_into, ngram_scratch

MIN_N, MAX_N = 2, 5
VOCAB = 32000


def make_histories(rng: np.random.Generator, num_rows: int, length: int) -> np.ndarray:
    """Rows built from fresh random segments and copies of earlier spans."""
    rows = np.empty((num_rows, length), dtype=np.int32)
    for row in rows:
        pos = 0
        while pos < length:
            seg = int(rng.integers(16, 257))
            if pos > 64 and rng.random() < 0.5:
                src = int(rng.integers(0, pos - 16))
                seg = min(seg, length - pos, pos - src)
                row[pos : pos + seg] = row[src : src + seg]
            else:
                seg = min(seg, length - pos)
                row[pos : pos + seg] = rng.integers(0, VOCAB, seg)
            pos += seg
    return rows


@dataclasses.dataclass
class Case:
    """R requests' histories on the host and in runner-style GPU buffers."""

    tokens: np.ndarray  # [R, L] int32
    lens: np.ndarray  # [R] int32
    num_drafts_per_request: int  # k
    max_model_len: int
    history: torch.Tensor  # [R, L] int32
    total_len: torch.Tensor  # [R] int32
    idx_mapping: torch.Tensor  # [R] int32
    num_sampled: torch.Tensor  # [R] int32
    fill_tokens: torch.Tensor  # [R, 1] int64: each row's last token
    drafts: torch.Tensor  # [R, k] int64, written by the plugin
    num_drafts: torch.Tensor  # [R] int32, written by the plugin
    scratch: torch.Tensor  # [R, NGRAM_MAX_SPLITS] int64


def make_case(tokens: np.ndarray, lens: np.ndarray, k: int) -> Case:
    num_rows, length = tokens.shape
    history = torch.from_numpy(tokens).cuda()
    total_len = torch.from_numpy(lens).cuda()
    last = history[torch.arange(num_rows, device="cuda"), total_len.long() - 1]
    return Case(
        tokens=tokens,
        lens=lens,
        num_drafts_per_request=k,
        max_model_len=length + 1024,
        history=history,
        total_len=total_len,
        idx_mapping=torch.arange(num_rows, dtype=torch.int32, device="cuda"),
        num_sampled=torch.ones(num_rows, dtype=torch.int32, device="cuda"),
        fill_tokens=last.long().unsqueeze(1),
        drafts=torch.zeros(num_rows, k, dtype=torch.int64, device="cuda"),
        num_drafts=torch.zeros(num_rows, dtype=torch.int32, device="cuda"),
        scratch=ngram_scratch(num_rows, "cuda"),
    )


def cases(args):
    """Histories for the most requests at every length (one seeded stream,
    drawn before any case runs); a case takes the first R of them."""
    rng = np.random.default_rng(0)
    max_rows = max(args.requests)
    data = {}
    for length in args.lengths:
        tokens = make_histories(rng, max_rows, length)
        # Slightly different lengths per request; never below half the context.
        lens = (length - rng.integers(0, min(64, length // 2), max_rows)).astype(np.int32)
        data[length] = (tokens, lens)
    for length in args.lengths:
        for num_rows in args.requests:
            for k in args.ks:
                tokens, lens = data[length]
                keys = {"R": num_rows, "L": length, "k": k, "min_n": MIN_N, "max_n": MAX_N}
                yield keys, make_case(tokens[:num_rows], lens[:num_rows], k)


def plugin(case: Case):
    return lambda: ngram_propose_into(
        case.history,
        case.total_len,
        case.idx_mapping,
        case.drafts,
        case.num_drafts,
        case.scratch,
        min_n=MIN_N,
        max_n=MAX_N,
        max_model_len=case.max_model_len,
        num_sampled=case.num_sampled,
        fill_tokens=case.fill_tokens,
    )


@functools.cache
def numba_proposer_module():
    """vLLM 0.20's V1 ``ngram`` proposer module, numba on one thread as
    vLLM's NgramProposer runs it."""
    import numba
    from vllm.v1.spec_decode import ngram_proposer

    numba.set_num_threads(1)
    return ngram_proposer


def cpu_numba(case: Case):
    """``batch_propose_numba`` called as NgramProposer calls it; returns
    ``(drafts [R, k], num_drafts [R])`` int32 arrays."""
    module = numba_proposer_module()
    num_rows, k = case.tokens.shape[0], case.num_drafts_per_request

    def call():
        drafts = np.zeros((num_rows, k), dtype=np.int32)
        num_drafts = np.zeros(num_rows, dtype=np.int32)
        module.batch_propose_numba(
            list(range(num_rows)),
            case.lens,
            case.tokens,
            MIN_N,
            MAX_N,
            case.max_model_len,
            k,
            drafts,
            num_drafts,
        )
        return drafts, num_drafts

    return call


def v1_gpu_search():
    """The search function of vLLM 0.20's V1 ``ngram_gpu`` method (no ``self`` use)."""
    from vllm.v1.spec_decode.ngram_proposer_gpu import NgramGPUKernel

    search = NgramGPUKernel._find_first_and_extract_all_n_parallel

    def run(token_ids, seq_lens, k):
        return search(None, token_ids, seq_lens, MIN_N, MAX_N, k)

    return run


@functools.cache
def v1_gpu_compiled_search():
    # One dynamic-shape graph, as vLLM compiles it for the V1 runner.
    return torch.compile(v1_gpu_search(), dynamic=True)


def v1_gpu(search):
    def make(case: Case):
        return functools.partial(
            search(), case.history, case.total_len, case.num_drafts_per_request
        )

    return make


def drafts_agree(plugin_tokens, cpu_tokens) -> bool:
    """Same draft count per request and the same drafts within it (the slots
    past the count hold fill tokens on the plugin's side, zeros on the CPU's)."""
    (plugin_drafts, plugin_num), (cpu_drafts, cpu_num) = plugin_tokens, cpu_tokens
    return torch.equal(plugin_num, cpu_num) and all(
        torch.equal(plugin_drafts[r, :n], cpu_drafts[r, :n].long())
        for r, n in enumerate(cpu_num.tolist())
    )


def count_rows_with_drafts(case: Case, row: dict, tokens: dict) -> None:
    if "cpu_numba" in tokens:
        row["rows_with_drafts"] = int((tokens["cpu_numba"][1] > 0).sum())


def scanned_bytes(case: Case) -> int:
    return int(case.lens.astype(np.int64).sum()) * 4


def skipped(args) -> list[str]:
    return (
        (["cpu_numba"] if args.no_cpu else [])
        + (["v1_gpu_eager", "v1_gpu_compiled"] if args.no_v1_gpu else [])
        + (["v1_gpu_compiled"] if args.no_compile else [])
    )


def add_arguments(parser) -> None:
    parser.add_argument("--requests", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192, 32768])
    parser.add_argument("--ks", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU numba proposer")
    parser.add_argument("--no-v1-gpu", action="store_true", help="skip vLLM's V1 ngram_gpu search")
    parser.add_argument(
        "--no-compile", action="store_true", help="skip the torch.compile'd V1 search"
    )


AREA = Area(
    name="ngram",
    description=__doc__.split("\n")[0],
    keys=("R", "L", "k"),
    candidates={
        # A failing plugin kernel ends the run; the stock columns only get an error.
        "plugin": Candidate(
            plugin, tokens=lambda case, _: (case.drafts, case.num_drafts), required=True
        ),
        "cpu_numba": Candidate(
            cpu_numba,
            tokens=lambda case, out: tuple(map(torch.from_numpy, out)),
            host=True,
            counts_bytes=False,
        ),
        "v1_gpu_eager": Candidate(v1_gpu(v1_gpu_search), counts_bytes=False),
        "v1_gpu_compiled": Candidate(v1_gpu(v1_gpu_compiled_search), counts_bytes=False),
    },
    cases=cases,
    bytes_read=scanned_bytes,
    checks=(TokenCheck("matches_cpu", "plugin", "cpu_numba", equal=drafts_agree),),
    annotate=count_rows_with_drafts,
    plot=Plot(
        title=f"n-gram proposer latency, n in [{MIN_N}, {MAX_N}] ({{gpu}})",
        x="L",
        xlabel="context L",
        panel_title="R={R}, k={k}",
        columns="R",
        rows="k",
        panel_size=(4.5, 3.6),
    ),
    add_arguments=add_arguments,
    skipped=skipped,
    table_columns=("plugin", "v1_gpu_compiled", "v1_gpu_eager", "cpu_numba"),
    tune=None,
)
main = AREA.main

if __name__ == "__main__":
    raise SystemExit(main())
