"""Host time per call of the plugin's draw ops and of their parts, on a GPU.

``bench upstream`` times whole calls (``do_bench``), which at small batches is
the host's launch time, not the kernel's. This probe separates the two: the
GPU is kept busy with ``torch.cuda._sleep`` while N calls are enqueued, so the
wall time of the loop is host time alone (enqueue, allocations, Triton's
launcher); then ``do_bench`` gives the call as ``bench upstream`` sees it.
Cases: an empty Triton kernel with 1 and with 16 arguments (Triton's own
launch cost), ``torch.empty``, the plugin's Gumbel-max and fused top-k/top-p
draws at B=64 (runner settings: ``check_inputs=False``), and vLLM's own
``gumbel_sample`` where vLLM 0.32/0.33 is importable. Run it under each
Triton to compare (the lent machine's own Triton 3.6 without PYTHONPATH, the
staged 0.33 stack with it):

    python3 scripts/launch_overhead.py --out /tmp/launch.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import triton
import triton.language as tl

from vllm_sampling_plugin.ops.gumbel import gumbel_sample
from vllm_sampling_plugin.ops.topk_topp import top_k_top_p_sample


@triton.jit
def _empty_kernel_1(a_ptr):
    pass


@triton.jit
def _empty_kernel_16(a, b, c, d, e, f, g, h, i, j, k, m, n, o, p, q, BLOCK: tl.constexpr):
    pass


def host_us_per_call(call, calls: int = 200, repeats: int = 7) -> float:
    """Median over ``repeats`` of the host time of ``calls`` enqueued calls
    while the GPU sleeps, so none waits for the device."""
    call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time ahead of the calls
        start = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def bench_us(call) -> float:
    return triton.testing.do_bench(call, warmup=25, rep=100) * 1e3


def cases(batch: int, vocab: int):
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(batch, vocab, device=device, generator=gen)
    slots = torch.arange(batch, dtype=torch.int32, device=device)
    slots64 = slots.long()
    temperature = torch.ones(batch, device=device)
    seeds = torch.randint(0, 1 << 62, (batch,), device=device, generator=gen)
    pos = torch.zeros(batch, dtype=torch.int64, device=device)
    top_k = torch.full((batch,), 50, dtype=torch.int32, device=device)
    top_p = torch.full((batch,), 0.9, device=device)
    ptrs = [torch.empty(1, device=device) for _ in range(16)]
    yield "triton empty kernel, 1 arg", lambda: _empty_kernel_1[(1,)](ptrs[0])
    yield "triton empty kernel, 16 args", lambda: _empty_kernel_16[(1,)](*ptrs, BLOCK=16)
    yield "torch.empty [B, 16] fp32", lambda: torch.empty(batch, 16, device=device)
    for fp64 in (False, True):
        name = "fp64" if fp64 else "fp32"
        yield f"plugin gumbel_sample {name}", lambda fp64=fp64: gumbel_sample(
            logits, slots, temperature, seeds, pos, apply_temperature=False,
            use_fp64=fp64, fp64_stream="murmur3", check_inputs=False,
        )
        yield f"plugin top_k_top_p_sample {name}", lambda fp64=fp64: top_k_top_p_sample(
            logits, slots, temperature, seeds, pos, top_k, top_p, apply_temperature=False,
            use_fp64=fp64, fp64_stream="murmur3",
        )
    try:
        from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample as upstream_gumbel
    except ImportError:
        return
    for fp64 in (False, True):
        name = "fp64" if fp64 else "fp32"
        yield f"upstream gumbel_sample {name}", lambda fp64=fp64: upstream_gumbel(
            logits, slots64, temperature, seeds, pos, False, is_drafting=False, use_fp64=fp64,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    header = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
              f"{triton.__version__}; B={args.batch} V={args.vocab}")
    print(header)
    print("| case | host us/call | do_bench us |\n|---|---|---|")
    for name, call in cases(args.batch, args.vocab):
        row = {"case": name, "host_us": host_us_per_call(call), "bench_us": bench_us(call)}
        rows.append(row)
        print(f"| {name} | {row['host_us']:.1f} | {row['bench_us']:.1f} |", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"setup": header, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
