"""Latency of the n-gram proposer against vLLM 0.20's two n-gram proposers.

    python3 -m vllm_sampling_plugin.bench.ngram --out bench-results/ngram

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
Every case also checks the plugin's drafts against the CPU proposer's.
Writes ``ngram.json`` (and ``ngram.png`` when matplotlib is importable).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import numpy as np
import torch
import triton

from vllm_sampling_plugin.bench.common import (
    dump_tokens,
    median_us,
    pct_of_copy_bandwidth,
    plot_latency,
    record_timing,
    start_run,
    write_results,
)
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


def time_host(fn, max_reps: int = 20, budget_s: float = 2.0) -> float:
    """Median wall time of ``fn`` in microseconds."""
    fn()
    samples = []
    start = time.perf_counter()
    while len(samples) < max_reps and (
        len(samples) < 3 or time.perf_counter() - start < budget_s
    ):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


class CpuNumbaProposer:
    """vLLM 0.20's V1 ``ngram`` batch proposer, called as NgramProposer calls it."""

    def __init__(self):
        from vllm.v1.spec_decode import ngram_proposer

        self.module = ngram_proposer

    def __call__(
        self, tokens: np.ndarray, lens: np.ndarray, k: int, max_model_len: int
    ):
        num_rows = tokens.shape[0]
        drafts = np.zeros((num_rows, k), dtype=np.int32)
        num_drafts = np.zeros(num_rows, dtype=np.int32)
        self.module.batch_propose_numba(
            list(range(num_rows)),
            lens,
            tokens,
            MIN_N,
            MAX_N,
            max_model_len,
            k,
            drafts,
            num_drafts,
        )
        return drafts, num_drafts


def v1_gpu_search():
    """The search function of vLLM 0.20's V1 ``ngram_gpu`` method (no ``self`` use)."""
    from vllm.v1.spec_decode.ngram_proposer_gpu import NgramGPUKernel

    search = NgramGPUKernel._find_first_and_extract_all_n_parallel

    def run(token_ids, seq_lens, k):
        return search(None, token_ids, seq_lens, MIN_N, MAX_N, k)

    return run


def bench_case(data, num_rows, length, k, cpu, v1_eager, v1_compiled, bandwidth, tokens=None):
    tokens_np, lens_np = data[length]
    tokens_np, lens_np = tokens_np[:num_rows], lens_np[:num_rows]
    max_model_len = length + 1024
    history = torch.from_numpy(tokens_np).cuda()
    total_len = torch.from_numpy(lens_np).cuda()
    idx_mapping = torch.arange(num_rows, dtype=torch.int32, device="cuda")
    num_sampled = torch.ones(num_rows, dtype=torch.int32, device="cuda")
    fill = (
        history[torch.arange(num_rows, device="cuda"), total_len.long() - 1]
        .long()
        .unsqueeze(1)
    )
    drafts = torch.zeros(num_rows, k, dtype=torch.int64, device="cuda")
    num_drafts = torch.zeros(num_rows, dtype=torch.int32, device="cuda")
    scratch = ngram_scratch(num_rows, "cuda")

    def plugin():
        return ngram_propose_into(
            history,
            total_len,
            idx_mapping,
            drafts,
            num_drafts,
            scratch,
            min_n=MIN_N,
            max_n=MAX_N,
            max_model_len=max_model_len,
            num_sampled=num_sampled,
            fill_tokens=fill,
        )

    row = {"R": num_rows, "L": length, "k": k, "min_n": MIN_N, "max_n": MAX_N}
    # Unguarded, unlike the v1 columns: a failing plugin kernel should end the run.
    row["plugin_us"] = median_us(plugin)
    scanned_bytes = int(lens_np.astype(np.int64).sum()) * 4
    row["plugin_pct_copy_bw"] = pct_of_copy_bandwidth(scanned_bytes, row["plugin_us"], bandwidth)

    if cpu is not None:
        ref_drafts, ref_num = cpu(tokens_np, lens_np, k, max_model_len)
        row["cpu_numba_us"] = time_host(
            lambda: cpu(tokens_np, lens_np, k, max_model_len)
        )
        plugin()
        got_drafts, got_num = drafts.cpu().numpy(), num_drafts.cpu().numpy()
        row["matches_cpu"] = bool(
            np.array_equal(got_num, ref_num)
            and all(
                (got_drafts[r, :n] == ref_drafts[r, :n]).all()
                for r, n in enumerate(ref_num)
            )
        )
        row["rows_with_drafts"] = int((ref_num > 0).sum())
    if tokens is not None:
        plugin()
        tokens[f"R={num_rows},L={length},k={k}"] = {
            "plugin": (drafts.cpu(), num_drafts.cpu())
        }
        if cpu is not None:
            tokens[f"R={num_rows},L={length},k={k}"]["cpu_numba"] = (
                torch.from_numpy(ref_drafts),
                torch.from_numpy(ref_num),
            )
    for name, search in (("v1_gpu_eager", v1_eager), ("v1_gpu_compiled", v1_compiled)):
        if search is None:
            continue
        record_timing(
            row, name, functools.partial(search, history, total_len, k), error_chars=200
        )
    return row


def cell(row, key, width):
    return f"{row[key]:{width}.1f}" if key in row else f"{'-':>{width}}"


def plot(results, gpu, path):
    """A grid of panels, k down and R across, latency against context length."""
    return plot_latency(
        results,
        ("plugin", "v1_gpu_eager", "v1_gpu_compiled", "cpu_numba"),
        path,
        title=f"n-gram proposer latency, n in [{MIN_N}, {MAX_N}] ({gpu})",
        x="L",
        xlabel="context L",
        panel_title="R={R}, k={k}",
        columns="R",
        rows="k",
        panel_size=(4.5, 3.6),
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="bench-results/ngram", help="output directory")
    parser.add_argument("--requests", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 8192, 32768])
    parser.add_argument("--ks", type=int, nargs="+", default=[3, 5])
    parser.add_argument(
        "--no-cpu", action="store_true", help="skip the CPU numba proposer"
    )
    parser.add_argument(
        "--no-v1-gpu", action="store_true", help="skip vLLM's V1 ngram_gpu search"
    )
    parser.add_argument(
        "--no-compile", action="store_true", help="skip the torch.compile'd V1 search"
    )
    parser.add_argument(
        "--dump-tokens",
        metavar="FILE",
        help="also save the plugin's drafts per case (torch.save)",
    )
    args = parser.parse_args(argv)
    gpu, bandwidth = start_run("n-gram", args.out)

    cpu = v1_eager = v1_compiled = None
    notes = {}
    if not args.no_cpu:
        try:
            import numba

            cpu = CpuNumbaProposer()
            # vLLM 0.20's NgramProposer runs numba on at most one thread.
            numba.set_num_threads(1)
        except Exception as exc:
            notes["cpu_numba"] = f"unavailable: {exc}"
    if not args.no_v1_gpu:
        try:
            v1_eager = v1_gpu_search()
            if not args.no_compile:
                # One dynamic-shape graph, as vLLM compiles it for the V1 runner.
                v1_compiled = torch.compile(v1_gpu_search(), dynamic=True)
        except Exception as exc:
            notes["v1_gpu"] = f"unavailable: {exc}"

    rng = np.random.default_rng(0)
    max_rows = max(args.requests)
    data = {}
    for length in args.lengths:
        tokens = make_histories(rng, max_rows, length)
        # Slightly different lengths per request; never below half the context.
        lens = (length - rng.integers(0, min(64, length // 2), max_rows)).astype(
            np.int32
        )
        data[length] = (tokens, lens)

    results = []
    tokens: dict | None = {} if args.dump_tokens else None
    header = (
        f"{'R':>4} {'L':>6} {'k':>2} {'plugin us':>10} {'%copy bw':>8} "
        f"{'v1 eager':>10} {'v1 comp':>10} {'cpu numba':>11}  ok"
    )
    print(f"GPU: {gpu}; copy bandwidth {bandwidth:.0f} GB/s; n in [{MIN_N}, {MAX_N}]")
    print(header)
    for length in args.lengths:
        for num_rows in args.requests:
            for k in args.ks:
                row = bench_case(
                    data, num_rows, length, k, cpu, v1_eager, v1_compiled, bandwidth, tokens
                )
                results.append(row)
                print(
                    f"{num_rows:>4} {length:>6} {k:>2} "
                    f"{cell(row, 'plugin_us', 10)} "
                    f"{cell(row, 'plugin_pct_copy_bw', 8)} "
                    f"{cell(row, 'v1_gpu_eager_us', 10)} "
                    f"{cell(row, 'v1_gpu_compiled_us', 10)} "
                    f"{cell(row, 'cpu_numba_us', 11)}  "
                    f"{row.get('matches_cpu', '-')}"
                )

    if tokens is not None:
        dump_tokens(args.dump_tokens, tokens)
    report = {
        "benchmark": "ngram",
        "gpu": gpu,
        "copy_bandwidth_GBps": bandwidth,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "notes": notes,
        "results": results,
    }
    write_results(args.out, "ngram", report, lambda path: plot(results, gpu, path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
