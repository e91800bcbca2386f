"""A checkpoint that continues any text by following fixed token cycles.

Why: n-gram speculation only pays on text that repeats, and a random model
never continues by repeating what it saw (the first 1B run accepted 79 of
97695 drafted tokens). This model's greedy successor of token ``t`` is
``successor[t]``, a fixed permutation of the words made of short cycles, so
a prompt that repeats one cycle is continued by the same cycle forever and
the n-gram proposer's drafts are right from the first step: acceptance close
to its ceiling, a best case for speculation. No training: the weights are
written in closed form.

The construction, for hidden size ``d``:

- Embeddings ``E[t]`` are N(0, 1) per entry (as in the peaked checkpoint).
- The layers are random as in the peaked checkpoint and do their full compute
  (a dense step costs the same whatever the values), but ``o_proj`` and
  ``down_proj`` are scaled by ``RESIDUAL_SCALE``: each of the 2 x layers
  residual additions then adds about ``RESIDUAL_SCALE`` of the stream's unit
  RMS, so after 16 layers the residual stream is ``E[t] + r`` with
  ``|r| / |E[t]|`` about ``sqrt(32) / 64 = 0.09``: the stream still carries
  the current token.
- The final RMSNorm (weight 1) maps ``E[t]`` to ``n_t = E[t] / rms(E[t])``,
  with ``|n_t|^2 = d``. ``lm_head`` row ``successor[t]`` is
  ``COPY_LOGIT / d * n_t`` (rows of the three special tokens are zero), so
  the successor's logit is ``COPY_LOGIT * cos(n_t, stream)``, about
  ``COPY_LOGIT * 0.996``, and every other word's logit is ``COPY_LOGIT *
  cos(n_s, n_t)``, which for independent Gaussian embeddings has standard
  deviation ``COPY_LOGIT / sqrt(d)``.
- At d = 2048 and vocab 128256 that is sigma = 0.35: the largest other logit
  is about ``4.85 sigma = 1.7`` and the gap about 14, i.e. about 110 bf16
  spacings at 16 (no near ties, so speculation must reproduce greedy exactly),
  while the softmax stays finite: top-1 probability
  ``1 / (1 + V exp(sigma^2 / 2 - 16 * 0.996))``, about 0.98.

``verify`` measures all of it with the real forward (transformers' Llama) on
prompts of the workload and records it next to the weights.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import torch

from benchmarks.e2e.workload import FIRST_WORD_ID

# Logit of the successor when the stream is exactly the current token's embedding.
COPY_LOGIT = 16.0
# Scale of o_proj and down_proj relative to the peaked checkpoint's.
RESIDUAL_SCALE = 1.0 / 64
# Cycle lengths, each over a share of the words (shares in quarters of the
# vocabulary). A prompt's last token picks the cycle greedy then walks:
# - 16: the walk repeats after 16 tokens, and prompts repeating one such
#   cycle let the n-gram proposer match from the first step (``accepting``);
# - 128: nothing repeats for the first 128 generated tokens, then everything
#   does (``switching``: half-way through the default 256 output tokens);
# - 1024: longer than prompt and output together, so nothing ever repeats
#   (``nonrepeating``).
CYCLE_LEN = 16
SWITCH_CYCLE_LEN = 128
LONG_CYCLE_LEN = 1024
CYCLE_SHARES = ((CYCLE_LEN, 2), (SWITCH_CYCLE_LEN, 1), (LONG_CYCLE_LEN, 1))
# The cycles depend on the vocabulary only, so the workload can rebuild them
# without reading the checkpoint.
PERMUTATION_SEED = 12
CHECK_FILE = "copy_check.json"
# The workloads of the speculation cells (``workload_prompts``).
SPEC_WORKLOADS = ("accepting", "nonrepeating", "mixed", "switching")


def _cut(words: list[int], length: int) -> list[list[int]]:
    """``words`` cut into cycles of ``length`` (the remainder joins the last)."""
    count = max(1, len(words) // length)
    result = [words[i * length:(i + 1) * length] for i in range(count)]
    result[-1] = words[(count - 1) * length:]
    return result


def cycles_by_length(vocab: int) -> dict[int, list[list[int]]]:
    """The word ids ``FIRST_WORD_ID .. vocab - 1`` in a fixed random order,
    shared out to the lengths of ``CYCLE_SHARES`` and cut into cycles.

    Example::

        >>> {n: [len(c) for c in cs] for n, cs in cycles_by_length(3 + 40).items()}
        {16: [20], 128: [10], 1024: [10]}
    """
    generator = torch.Generator().manual_seed(PERMUTATION_SEED)
    words = (torch.randperm(vocab - FIRST_WORD_ID, generator=generator)
             + FIRST_WORD_ID).tolist()
    total = sum(share for _, share in CYCLE_SHARES)
    result, start = {}, 0
    for i, (length, share) in enumerate(CYCLE_SHARES):
        end = len(words) if i == len(CYCLE_SHARES) - 1 else start + len(words) * share // total
        result[length] = _cut(words[start:end], length)
        start = end
    return result


def cycles(vocab: int) -> list[list[int]]:
    """Every cycle of the permutation, shortest lengths first."""
    return [c for group in cycles_by_length(vocab).values() for c in group]


def successors(vocab: int) -> torch.Tensor:
    """``successor[t]``: the token after word ``t`` in its cycle (specials: -1)."""
    successor = torch.full((vocab,), -1, dtype=torch.int64)
    for cycle in cycles(vocab):
        successor[torch.tensor(cycle)] = torch.tensor(cycle[1:] + cycle[:1])
    return successor


def lm_head(embedding: torch.Tensor) -> torch.Tensor:
    """The bf16 ``lm_head`` whose row ``successor[t]`` is ``COPY_LOGIT / d``
    times the RMS-normalised embedding of ``t`` (see the module docstring)."""
    vocab, hidden = embedding.shape
    successor = successors(vocab).to(embedding.device)
    words = successor >= 0
    rows = embedding[words].float()
    rows = rows * torch.rsqrt(rows.square().mean(-1, keepdim=True)) * (COPY_LOGIT / hidden)
    head = torch.zeros(vocab, hidden, dtype=torch.bfloat16, device=embedding.device)
    head[successor[words]] = rows.to(torch.bfloat16)
    return head


def prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """``count`` prompts of ``length`` tokens: a quarter random words, then one
    short cycle from a random offset, repeated to the end (so from the second
    pass on every suffix has a match earlier in the prompt)."""

    rng = random.Random(seed)
    all_cycles = cycles_by_length(vocab)[CYCLE_LEN]
    result = []
    for _ in range(count):
        prefix = [rng.randrange(FIRST_WORD_ID, vocab) for _ in range(length // 4)]
        cycle = rng.choice(all_cycles)
        offset = rng.randrange(len(cycle))
        body = [cycle[(offset + i) % len(cycle)] for i in range(length - len(prefix))]
        result.append(prefix + body)
    return result


def walking_prompts(count: int, length: int, vocab: int, cycle_len: int,
                    seed: int = 0) -> list[list[int]]:
    """``count`` prompts of ``length`` random words whose last word lies on a
    cycle of ``cycle_len``: greedy walks that cycle, so the output repeats
    nothing (and the n-gram proposer finds nothing) for ``cycle_len`` tokens.
    The longer last cycle (the remainder of the share) is left out where a
    cycle of exactly ``cycle_len`` exists."""
    rng = random.Random(seed)
    group = cycles_by_length(vocab)[cycle_len]
    exact = [c for c in group if len(c) == cycle_len] or group
    walk_words = [t for c in exact for t in c]
    return [[rng.randrange(FIRST_WORD_ID, vocab) for _ in range(length - 1)]
            + [rng.choice(walk_words)] for _ in range(count)]


def workload_prompts(workload: str, count: int, length: int, vocab: int,
                     seed: int = 0) -> list[list[int]]:
    """Prompts of a speculation workload (``SPEC_WORKLOADS``), all for greedy:

    - ``accepting``: repeated short cycles (``prompts``), drafts right from
      the first step;
    - ``nonrepeating``: random words, then a walk longer than the output;
    - ``mixed``: accepting and non-repeating requests alternating;
    - ``switching``: random words, then a walk that starts repeating after
      ``SWITCH_CYCLE_LEN`` generated tokens.

    Example::

        >>> len(workload_prompts("mixed", 4, 32, 4096))
        4
    """
    if workload == "accepting":
        return prompts(count, length, vocab, seed)
    if workload == "nonrepeating":
        return walking_prompts(count, length, vocab, LONG_CYCLE_LEN, seed)
    if workload == "switching":
        return walking_prompts(count, length, vocab, SWITCH_CYCLE_LEN, seed)
    if workload == "mixed":
        accepting = prompts(count, length, vocab, seed)
        other = walking_prompts(count, length, vocab, LONG_CYCLE_LEN, seed)
        return [accepting[i] if i % 2 == 0 else other[i] for i in range(count)]
    raise ValueError(f"unknown workload {workload!r}; known: {SPEC_WORKLOADS}")


def bf16_spacing(x: torch.Tensor) -> torch.Tensor:
    """Spacing of bfloat16 numbers at ``|x|`` (8 significant bits), elementwise."""
    return torch.exp2(torch.floor(torch.log2(x.abs())) - 7)


@torch.inference_mode()
def verify(directory: str | Path, device: str = "cpu", num_prompts: int = 8,
           length: int = 64) -> dict:
    """Run the written checkpoint (transformers' Llama, bf16) on ``prompts``
    and measure, over every position after the prefix, how often the argmax
    is the successor, the gap between the top two logits (also in bf16
    spacings at the top logit) and the top-1 probability. Writes the result
    to ``CHECK_FILE`` in ``directory`` and returns it."""
    from transformers import LlamaForCausalLM

    directory = Path(directory)
    model = LlamaForCausalLM.from_pretrained(str(directory), dtype=torch.bfloat16).to(device)
    vocab = model.config.vocab_size
    ids = torch.tensor(prompts(num_prompts, length, vocab, seed=1), device=device)
    logits = model(input_ids=ids).logits.float()[:, length // 4:]
    expected = successors(vocab).to(device)[ids[:, length // 4:]]
    top2 = logits.topk(2, dim=-1)
    gap = top2.values[..., 0] - top2.values[..., 1]
    top1_probability = logits.softmax(-1).amax(-1)
    result = {
        "positions": int(expected.numel()),
        "argmax_is_successor": float((top2.indices[..., 0] == expected).float().mean()),
        "top1_logit_median": float(top2.values[..., 0].median()),
        "gap_min": float(gap.min()),
        "gap_median": float(gap.median()),
        "gap_min_bf16_spacings": float((gap / bf16_spacing(top2.values[..., 0])).min()),
        "top1_probability_min": float(top1_probability.min()),
        "top1_probability_median": float(top1_probability.median()),
    }
    (directory / CHECK_FILE).write_text(json.dumps(result, indent=1))
    return result


def predicted_top1_probability(hidden: int, vocab: int, cosine: float = 1.0) -> float:
    """The docstring's estimate: other logits ~ N(0, (COPY_LOGIT / sqrt(hidden))^2),
    the successor's ``COPY_LOGIT * cosine``."""
    sigma = COPY_LOGIT / math.sqrt(hidden)
    others = (vocab - 1) * math.exp(sigma**2 / 2 - COPY_LOGIT * cosine)
    return 1 / (1 + others)
