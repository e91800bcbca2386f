"""Write the tokens every public op returns for fixed, seeded inputs.

    python3 scripts/dump_op_tokens.py OUT.pt                 # one revision
    python3 scripts/bench_compare.py tokens OLD.pt NEW.pt    # two revisions

Only public entry points are called (``ops.sample``, ``ops.rejection_sample``,
``ops.ngram_propose``, then the runner-facing launchers: both launch styles of
``rejection_sample_packed``, matching, the fused top-k/top-p sampler with
small lists, each noise stream, ``gumbel_sample`` on processed logits,
``apply_logit_bias_``, ``ngram_propose_into``), so the same script runs
against any revision of the package (put that revision first on
``PYTHONPATH``). The FlashInfer path needs a GPU and is left out. Comparing the
dumps of two revisions (``scripts/bench_compare.py tokens``, the format of
the benchmarks' ``--dump-tokens``: case -> output -> tensor) shows whether a
refactor changed a single token.
Inputs are peaked like a trained model's logits (a few large logits over a
N(0, 1) floor) so that top-k/top-p rows keep short and long candidate lists.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    yield from _runner_cases(ops, device, vocab)


def _runner_cases(ops, device: str, vocab: int):
    """The runner-facing launchers, on the V2 runner's layout: request slots
    through ``idx_mapping``, requests with fewer drafts than K."""
    yield from _packed_rejection_cases(ops, device, vocab)
    yield from _filter_threshold_cases(ops, device)
    yield from _stream_cases(ops, device, vocab)
    yield from _logit_bias_cases(ops, device, vocab)
    yield from _ngram_into_cases(ops, device)


def _packed_layout(gen: torch.Generator, device: str, vocab: int, num_drafts: int):
    """Six requests in slots of eight, with 4, 2, 4, 1, 3 and 4 logits (K = 3)."""
    logits_per_req = torch.tensor([4, 2, 4, 1, 3, 4], device=device)
    num_logits = int(logits_per_req.sum())
    cu_num_logits = torch.zeros(len(logits_per_req) + 1, dtype=torch.int32, device=device)
    cu_num_logits[1:] = logits_per_req.cumsum(0)
    target = _peaked_logits(gen, num_logits, vocab=vocab, device=device)
    # Draft j of a request sits one entry past logit j; half are its argmax.
    drafts = torch.randint(0, vocab, (num_logits,), generator=gen, device=device)
    argmax = torch.roll(target.argmax(-1), 1)
    drafts = torch.where(torch.rand(num_logits, generator=gen, device=device) < 0.5, argmax, drafts)
    slots = 8
    row = _row_settings(gen, slots, device)
    return {
        "target_logits": target,
        "draft_tokens": drafts,
        "cu_num_logits": cu_num_logits,
        "idx_mapping": torch.tensor([5, 0, 7, 2, 3, 6], dtype=torch.int32, device=device),
        "pos": torch.randint(0, 4096, (num_logits,), generator=gen, device=device),
        "temperature": row["temperature"],
        "seeds": row["seeds"],
        "num_speculative_steps": num_drafts,
    }, _peaked_logits(gen, slots, num_drafts, vocab=vocab, device=device)


def _packed_rejection_cases(ops, device: str, vocab: int):
    num_drafts = 3
    gen = torch.Generator(device=device).manual_seed(3000)
    layout, draft_logits = _packed_layout(gen, device, vocab, num_drafts)
    slots = layout["temperature"].shape[0]
    filters = {
        "top_k": torch.randint(1, 200, (slots,), generator=gen, device=device).to(torch.int32),
        "top_p": torch.rand(slots, generator=gen, device=device) * 0.5 + 0.5,
        "min_p": torch.rand(slots, generator=gen, device=device) * 0.1,
    }
    filters["top_k"][::3] = vocab
    filters["top_p"][1::3] = 1.0
    filters["min_p"][::2] = 0.0
    rates = torch.tensor([0.9, 0.7, 0.5], device=device)
    modes = {
        "draft_logits": {"draft_logits": draft_logits},
        "no_draft_logits": {},
        "synthetic": {"synthetic_conditional_rates": rates},
        "processed_target": {"draft_logits": draft_logits, "apply_temperature": False},
        "scaled_drafts": {"draft_logits": draft_logits, "scale_draft_logits": True},
        "filtered": {"draft_logits": draft_logits, **filters},
        "filtered_no_draft_logits": filters,
    }
    for fp64 in (False, True):
        default = ops.rejection.TUNING[fp64]
        styles = {
            "one_launch": dataclasses.replace(default, single_launch_programs_per_sm=12),
            "per_step": dataclasses.replace(default, single_launch_programs_per_sm=0),
        }
        for style, tuning in styles.items():
            for mode, extra in modes.items():
                yield f"packed_{mode}_{style}_{'fp64' if fp64 else 'fp32'}", partial(
                    ops.rejection_sample_packed,
                    **{"apply_temperature": True, **layout, **extra},
                    use_fp64=fp64,
                    tuning=tuning,
                )
    target_tokens = torch.roll(layout["draft_tokens"], -1)
    target_tokens[::3] = 7
    yield "matching_K3", partial(
        ops.rejection.accept_matching_drafts,
        target_tokens, layout["draft_tokens"], layout["cu_num_logits"], num_drafts,
    )


def _filter_threshold_cases(ops, device: str):
    """The verification filters' row thresholds and the path that found each:
    a vocabulary above the default wide list (4096), so that top_k = 5000
    takes the exact whole-row selects."""
    vocab, num_drafts = 6000, 3
    gen = torch.Generator(device=device).manual_seed(3500)
    layout, _ = _packed_layout(gen, device, vocab, num_drafts)
    # Rows whose three top tokens share a group of 128: the walk from a bound.
    layout["target_logits"][1::3, 200:203] = torch.tensor([40.0, 39.0, 38.0], device=device)
    slots = layout["temperature"].shape[0]
    temperature = layout["temperature"].clone()
    temperature[temperature == 0] = 0.9
    top_k = torch.tensor([3, 5000, 0, 40, 2, 3000, 3, 0], dtype=torch.int32, device=device)
    top_p = torch.tensor([1.0, 0.9, 0.7, 1.0, 0.95, 1.0, 0.99, 1.0], device=device)
    min_p = torch.tensor([0.0, 0.0, 0.05, 0.0, 0.01, 0.0, 0.0, 0.2], device=device)
    assert slots == top_k.shape[0]
    yield "filter_thresholds_V6000", partial(
        _thresholds_with_paths, ops, layout["target_logits"], layout["cu_num_logits"],
        layout["idx_mapping"], temperature, top_k, top_p, min_p, num_drafts,
    )


def _thresholds_with_paths(ops, target_logits, *args):
    device = target_logits.device
    paths = torch.full((target_logits.shape[0],), -1, dtype=torch.int32, device=device)
    thresholds = ops.rejection.filters.filter_thresholds(
        target_logits, *args, apply_temperature=True, paths_out=paths
    )
    return thresholds.clone(), paths


# Small lists, so the chunk lists, the walk from a bound and the exact
# whole-row path each decide some rows; the split variant merges in a
# second kernel.
_SMALL_LISTS = {"chunk": 64, "group": 8, "short_list": 16, "wide_list": 64, "row_block": 64}
_NOISES = {
    "fp32_philox": {"use_fp64": False},
    "fp32_murmur3": {"use_fp64": False, "fp32_stream": "murmur3"},
    "fp64_philox": {"use_fp64": True},
    "fp64_murmur3": {"use_fp64": True, "fp64_stream": "murmur3"},
}


def _stream_cases(ops, device: str, vocab: int):
    """Every noise stream through the Gumbel-max and the fused top-k/top-p
    samplers, the latter with the lists that exercise each merge path."""
    rows = 24
    gen = torch.Generator(device=device).manual_seed(4000)
    logits = _peaked_logits(gen, rows, vocab=vocab, device=device)
    # Rows whose top tokens share a group of the small lists: the walk decides them.
    logits[1::4, 8:13] = torch.tensor([30.0, 29.5, 29.0, 28.5, 28.0], device=device)
    row = _row_settings(gen, rows, device)
    top_k = torch.randint(1, 40, (rows,), generator=gen, device=device)
    top_k[2::4] = 300  # beyond the small wide list: the exact path
    top_k[::5] = 0
    top_p = torch.rand(rows, generator=gen, device=device) * 0.5 + 0.5
    top_p[1::3] = 1.0
    slots = torch.arange(rows, dtype=torch.int32, device=device)
    temperature = row["temperature"].float()
    small = ops.topk_topp.TopKTopPTuning(**_SMALL_LISTS)
    tunings = {"small": small, "small_split": dataclasses.replace(small, fused_max_programs=0)}
    for noise_name, noise in _NOISES.items():
        yield f"sample_{noise_name}", partial(ops.sample, logits, **row, **noise)
        yield f"sample_topk_topp_{noise_name}", partial(
            ops.sample, logits, **row, top_k=top_k, top_p=top_p, **noise
        )
        for tuning_name, tuning in tunings.items():
            yield f"topk_topp_{tuning_name}_{noise_name}", partial(
                _top_k_top_p_with_paths, ops, logits, slots, temperature, row["seeds"],
                row["positions"], top_k, top_p, tuning=tuning, **noise,
            )
        yield f"gumbel_processed_{noise_name}", partial(
            _gumbel_with_processed_logits, ops, logits, slots, temperature, row["seeds"],
            row["positions"], **noise,
        )


def _top_k_top_p_with_paths(ops, logits, *args, **kwargs):
    """The tokens of ``top_k_top_p_sample`` on logits already divided by the
    temperature, and which merge path decided each row."""
    paths = torch.empty(logits.shape[0], dtype=torch.int32, device=logits.device)
    tokens = ops.topk_topp.top_k_top_p_sample(
        logits, *args, apply_temperature=False, paths_out=paths, **kwargs
    )
    return tokens, paths


def _gumbel_with_processed_logits(ops, logits, slots, *args, **kwargs):
    """The tokens of ``gumbel_sample`` and the processed logits it writes."""
    processed = torch.full_like(logits, -1.0)
    tokens = ops.gumbel.gumbel_sample(
        logits, slots, *args, apply_temperature=True, processed_logits_out=processed, **kwargs
    )
    return tokens, processed


def _logit_bias_cases(ops, device: str, vocab: int):
    rows, slots, capacity = 16, 6, 8
    gen = torch.Generator(device=device).manual_seed(5000)
    logits = _peaked_logits(gen, rows, vocab=vocab, device=device)

    def id_lists():
        ids = torch.randint(0, vocab, (slots, capacity), generator=gen, device=device)
        return ids.sort(-1).values.to(torch.int32)

    def counts():
        drawn = torch.randint(0, capacity + 1, (slots,), generator=gen, device=device)
        return drawn.to(torch.int32)

    bias_ids = torch.arange(capacity, device=device) * (vocab // capacity) + torch.randint(
        0, vocab // capacity, (slots, capacity), generator=gen, device=device
    )
    args = (
        torch.randint(0, slots, (rows,), generator=gen, device=device).to(torch.int32),
        torch.randint(0, 64, (rows,), generator=gen, device=device),
        counts(),
        id_lists(),
        counts(),
        bias_ids.to(torch.int32),
        torch.randn(slots, capacity, generator=gen, device=device) * 3,
        torch.randint(0, 64, (slots,), generator=gen, device=device).to(torch.int32),
        counts(),
        id_lists(),
    )
    yield "logit_bias", partial(_logit_bias_on_a_copy, ops, logits, *args)


def _logit_bias_on_a_copy(ops, logits, *args):
    """``apply_logit_bias_`` works in place: each call gets a fresh copy."""
    return ops.apply_logit_bias_(logits.clone(), *args)


def _ngram_into_cases(ops, device: str):
    slots, length, k = 8, 512, 4
    gen = torch.Generator(device=device).manual_seed(6000)
    history = torch.randint(0, 20, (slots, length), generator=gen, device=device)
    total_len = torch.randint(length // 2, length + 1, (slots,), generator=gen, device=device)
    idx_mapping = torch.tensor([3, 0, 6, 1, 7], dtype=torch.int32, device=device)
    num_sampled = torch.tensor([1, 0, 2, 1, 1], dtype=torch.int32, device=device)
    fill_tokens = torch.randint(0, 20, (slots, 2), generator=gen, device=device)
    for name, extra in (
        ("plain", {}),
        ("num_sampled_fill", {"num_sampled": num_sampled, "fill_tokens": fill_tokens}),
    ):
        yield f"ngram_into_{name}", partial(
            _ngram_into_fresh_buffers, ops, history, total_len.to(torch.int32), idx_mapping,
            k, min_n=2, max_n=4, max_model_len=length + 2, **extra,
        )


def _ngram_into_fresh_buffers(ops, history, total_len, idx_mapping, k, **kwargs):
    num_reqs = idx_mapping.shape[0]
    drafts = torch.full((num_reqs, k), -5, dtype=torch.int64, device=history.device)
    num_drafts = torch.full((num_reqs,), -5, dtype=torch.int32, device=history.device)
    scratch = ops.ngram_scratch(num_reqs, history.device)
    ops.ngram_propose_into(
        history, total_len, idx_mapping, drafts, num_drafts, scratch, **kwargs
    )
    return drafts, num_drafts


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
