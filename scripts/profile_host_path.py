"""Host (Python) time per sampling step of the plugin's runner paths, next to stock vLLM's.

Every Triton kernel is replaced by a no-op and the launch plans are an H100's
(132 SMs), so what is timed is exactly the per-step host work the plugin adds
around its launches: argument checks, launch plans, allocations, the draw
dispatch. A real Triton launch adds its own binding cost on top (the same for
stock's kernel). Runs on CPU: ``python3 scripts/profile_host_path.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import triton
from kernel_stubs import stub_ops
from stub_runner import fake_ngram_speculator, fake_rejection_sampler, fake_sampler

from vllm_sampling_plugin.integration.draw.sample import Route

K = 3


class NoOpKernel:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def step_cases(sampler, rejection, speculator, stock_gumbel, n: int, vocab: int):
    """(name, call) of every host path at batch size ``n``."""
    logits = torch.empty(n, vocab, dtype=torch.float32)
    slots = torch.arange(n, dtype=torch.int32)
    pos = torch.zeros(n, dtype=torch.int64)
    batch_np = np.arange(n)
    states = sampler.sampling_states
    return [
        ("route()", lambda: sampler.route(batch_np)),
        ("draw gumbel", lambda: sampler.draw(Route.GUMBEL, logits, slots, pos)),
        (
            # What every Gumbel step after the first costs (PluginSampler.sample).
            "draw gumbel, checked once",
            lambda: sampler.draw(Route.GUMBEL, logits, slots, pos, check_inputs=False),
        ),
        (
            "draw fused top-k/top-p",
            lambda: sampler.draw(Route.FUSED_TOP_K_TOP_P, logits, slots, pos),
        ),
        (
            "stock gumbel_sample",
            lambda: stock_gumbel.gumbel_sample(
                logits, slots, states.temperature.gpu, states.seeds.gpu, pos,
                apply_temperature=False,
            ),
        ),
        (
            "rejection draw",
            lambda: rejection.draw(
                logits, torch.zeros(n, dtype=torch.int32),
                torch.arange(n + 1, dtype=torch.int32), slots, pos, None,
            ),
        ),
        (
            "n-gram draft",
            lambda: speculator.draft(
                slots, torch.ones(n, dtype=torch.int32), speculator.req_states.last_sampled_tokens
            ),
        ),
        (
            # What every step after the first costs (NgramProposerGPU.propose).
            "n-gram draft, checked once",
            lambda: speculator.draft(
                slots,
                torch.ones(n, dtype=torch.int32),
                speculator.req_states.last_sampled_tokens,
                check_inputs=False,
            ),
        ),
    ]


def per_call_us(fn, repeats: int) -> float:
    for _ in range(repeats // 10):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()

    stub_ops(lambda name, kernel: NoOpKernel())
    from vllm.v1.worker.gpu.sample import gumbel as stock_gumbel

    stock_gumbel._gumbel_sample_kernel = NoOpKernel()
    # Without a GPU driver vLLM swaps Triton for a placeholder; on a GPU its
    # launcher calls the real triton.cdiv.
    stock_gumbel.triton = triton
    max_num_reqs = max(args.batch)
    sampler = fake_sampler(max_num_reqs, args.vocab)
    rejection = fake_rejection_sampler(sampler, K, "probabilistic")
    speculator = fake_ngram_speculator(max_num_reqs, K, max_model_len=4096)
    # Only shapes and dtypes matter to the host path: a narrow logits tensor
    # stands in for [n, vocab] (plans read the vocabulary from the states).
    print(f"{'path':<28}" + "".join(f"{f'B={n}':>10}" for n in args.batch) + "   (us per call)")
    rows: dict[str, list[float]] = {}
    for n in args.batch:
        for name, fn in step_cases(sampler, rejection, speculator, stock_gumbel, n, args.vocab):
            rows.setdefault(name, []).append(per_call_us(fn, args.repeats))
    for name, values in rows.items():
        print(f"{name:<28}" + "".join(f"{v:>10.1f}" for v in values))


if __name__ == "__main__":
    main()
