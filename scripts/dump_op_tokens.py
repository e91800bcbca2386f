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


def dump(device: str, vocab: int, max_rows: int) -> dict[str, torch.Tensor]:
    from vllm_sampling_plugin import ops

    out: dict[str, torch.Tensor] = {}
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
            out[f"sample_{tag}"] = ops.sample(logits, **row, use_fp64=fp64)
            out[f"sample_topk_topp_{tag}"] = ops.sample(
                logits, **row, top_k=top_k, top_p=top_p, use_fp64=fp64
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
                tokens, emitted = ops.rejection_sample(
                    target, drafts, probs, **row, synthetic_rates=rates, use_fp64=fp64
                )
                out[f"rejection_{name}_{tag}"] = tokens
                out[f"rejection_{name}_emitted_{tag}"] = emitted
    for rows, length in sorted({(min(r, max_rows), n) for r, n in ((1, 1024), (64, 8192), (256, 1024))}):
        gen = torch.Generator(device=device).manual_seed(2000 + rows)
        # A small alphabet makes n-gram matches common.
        token_ids = torch.randint(0, 50, (rows, length), generator=gen, device=device)
        seq_lens = torch.randint(length // 2, length + 1, (rows,), generator=gen, device=device)
        for k in (3, 5):
            drafts, num = ops.ngram_propose(token_ids, seq_lens, min_n=2, max_n=4, k=k)
            out[f"ngram_R{rows}_L{length}_k{k}"] = drafts
            out[f"ngram_num_R{rows}_L{length}_k{k}"] = num
    return {name: {"tokens": t.cpu()} for name, t in out.items()}


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
