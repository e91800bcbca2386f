"""Write the tokens every public op returns for fixed, seeded inputs.

    python3 scripts/dump_op_tokens.py OUT.pt                 # one revision
    python3 scripts/bench_compare.py tokens OLD.pt NEW.pt    # two revisions

Only the public API (``ops.sample``, ``ops.rejection_sample``,
``ops.ngram_propose``) is called, so the same script runs against any revision
of the package (put that revision first on ``PYTHONPATH``). Comparing the
dumps of two revisions (``scripts/bench_compare.py tokens``, the format of
the benchmarks' ``--dump-tokens``: case -> output -> tensor) shows whether a
refactor changed a single token.
Inputs are peaked like a trained model's logits (a few large logits over a
N(0, 1) floor) so that top-k/top-p rows keep short and long candidate lists.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import torch


def _peaked_logits(gen: torch.Generator, *shape: int, vocab: int, device: str) -> torch.Tensor:
    logits = torch.randn(*shape, vocab, generator=gen, device=device)
    heads = torch.randint(0, vocab, (*shape, 8), generator=gen, device=device)
    boost = torch.rand(*shape, 8, generator=gen, device=device) * 12.0
    return logits.scatter_add_(-1, heads, boost)


def _row_settings(gen: torch.Generator, rows: int, device: str) -> dict[str, torch.Tensor]:
    temperature = torch.rand(rows, generator=gen, device=device) + 0.3
    temperature[::7] = 0.0  # greedy rows in every batch
    return {
        "temperature": temperature,
        "seeds": torch.randint(0, 2**62, (rows,), generator=gen, device=device),
        "positions": torch.randint(0, 4096, (rows,), generator=gen, device=device),
    }


def op_cases(ops, device: str, vocab: int, max_rows: int):
    """Yield ``(name, call)`` for every public-op case; ``call()`` runs the op
    of the given ``ops`` module on fixed, seeded inputs and returns its output
    (a tensor or a tuple of tensors). The inputs are built once per case, so a
    caller may time ``call`` or run it against two revisions' ``ops``."""
    for rows in sorted({min(r, max_rows) for r in (1, 64, 256, 1024)}):
        gen = torch.Generator(device=device).manual_seed(rows)
        logits = _peaked_logits(gen, rows, vocab=vocab, device=device)
        row = _row_settings(gen, rows, device)
        top_k = torch.randint(1, 200, (rows,), generator=gen, device=device).to(torch.int32)
        top_p = torch.rand(rows, generator=gen, device=device) * 0.5 + 0.5
        top_k[::3] = vocab
        top_p[1::3] = 1.0
        for fp64 in (False, True):
            tag = f"B{rows}_{'fp64' if fp64 else 'fp32'}"
            yield f"sample_{tag}", partial(ops.sample, logits, **row, use_fp64=fp64)
            yield f"sample_topk_topp_{tag}", partial(
                ops.sample, logits, **row, top_k=top_k, top_p=top_p, use_fp64=fp64
            )
    for rows, k in sorted({(min(r, max_rows), k) for r, k in ((1, 3), (64, 3), (256, 3), (64, 5))}):
        gen = torch.Generator(device=device).manual_seed(1000 + rows * 10 + k)
        target = _peaked_logits(gen, rows, k + 1, vocab=vocab, device=device)
        drafts = torch.randint(0, vocab, (rows, k), generator=gen, device=device)
        # Half the drafts are the target's argmax, so both acceptance and rejection occur.
        argmax = target[:, :k].argmax(-1)
        drafts = torch.where(torch.rand(rows, k, generator=gen, device=device) < 0.5, argmax, drafts)
        draft_probs = torch.softmax(_peaked_logits(gen, rows, k, vocab=vocab, device=device), -1)
        row = _row_settings(gen, rows, device)
        for fp64 in (False, True):
            tag = f"B{rows}_K{k}_{'fp64' if fp64 else 'fp32'}"
            for name, probs, rates in (
                ("draft_probs", draft_probs, None),
                ("no_draft_probs", None, None),
                ("synthetic", None, [0.8, 0.6, 0.4, 0.3, 0.2][:k]),
            ):
                yield f"rejection_{name}_{tag}", partial(
                    ops.rejection_sample,
                    target, drafts, probs, **row, synthetic_rates=rates, use_fp64=fp64,
                )
        # The filters folded into verification (vLLM 0.33's order: min_p, top-k,
        # top-p), one setting per request, some off.
        filters = {
            "top_k": torch.randint(1, 200, (rows,), generator=gen, device=device).to(torch.int32),
            "top_p": torch.rand(rows, generator=gen, device=device) * 0.5 + 0.5,
            "min_p": torch.rand(rows, generator=gen, device=device) * 0.1,
        }
        filters["top_k"][::3] = vocab
        filters["top_p"][1::3] = 1.0
        filters["min_p"][::2] = 0.0
        for name, probs in (("draft_probs", draft_probs), ("no_draft_probs", None)):
            yield f"rejection_filtered_{name}_B{rows}_K{k}_fp32", partial(
                ops.rejection_sample, target, drafts, probs, **row, **filters
            )
    for rows, length in sorted({(min(r, max_rows), n) for r, n in ((1, 1024), (64, 8192), (256, 1024))}):
        gen = torch.Generator(device=device).manual_seed(2000 + rows)
        # A small alphabet makes n-gram matches common.
        token_ids = torch.randint(0, 50, (rows, length), generator=gen, device=device)
        seq_lens = torch.randint(length // 2, length + 1, (rows,), generator=gen, device=device)
        for k in (3, 5):
            yield f"ngram_R{rows}_L{length}_k{k}", partial(
                ops.ngram_propose, token_ids, seq_lens, min_n=2, max_n=4, k=k
            )


def dump(device: str, vocab: int, max_rows: int) -> dict[str, dict[str, torch.Tensor]]:
    """case -> output name -> tensor on the CPU (the ``--dump-tokens`` format)."""
    from vllm_sampling_plugin import ops

    out: dict[str, dict[str, torch.Tensor]] = {}
    for name, call in op_cases(ops, device, vocab, max_rows):
        result = call()
        if isinstance(result, tuple):
            out[name] = {f"output{i}": t.cpu() for i, t in enumerate(result)}
        else:
            out[name] = {"tokens": result.cpu()}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="where to write the dump (.pt)")
    parser.add_argument("--device", default="cuda", help="cpu needs TRITON_INTERPRET=1 (smoke test)")
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--max-rows", type=int, default=1024, help="cap every batch size")
    args = parser.parse_args()
    torch.save(dump(args.device, args.vocab, args.max_rows), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
