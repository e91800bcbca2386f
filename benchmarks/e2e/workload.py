"""What the engines are asked to do: sampling mixes, prompts and the run order.

Plain data, no vLLM import: the engine process turns a mix into
``SamplingParams`` with ``sampling_kwargs``.
"""

from __future__ import annotations

import random

# Sampling settings per mix. ``seeded_topp`` gets a per-request seed.
SINGLE_MIXES: dict[str, dict] = {
    "greedy": {"temperature": 0.0},
    "t1": {"temperature": 1.0},
    "topk_topp": {"temperature": 0.7, "top_k": 50, "top_p": 0.9},
    "seeded_topp": {"temperature": 1.0, "top_p": 0.95},
}
# ``mixed`` cycles through the single mixes request by request; ``ngram`` is
# greedy on copying prompts with and without n-gram speculation.
MIXES = (*SINGLE_MIXES, "mixed", "ngram")
# Mixes a run names (``--mixes``, ``--spec-mixes``), in no default and not in
# ``mixed``. ``penalties_topk`` is ``topk_topp`` with presence and frequency
# penalties: logits processors, so on vLLM 0.32/0.33 upstream's float32
# canvas carries them, and under the plugin's verification the batch's
# top-k/top-p fold into the plugin's kernel on that canvas
# (integration/verification/verify_step.py). The penalties are too small to move
# the copy checkpoint's 0.97 top-1 probability: drafts are accepted as in
# ``topk_topp``, and the cell measures what verifying costs.
OPT_IN_MIXES: dict[str, dict] = {
    "penalties_topk": {**SINGLE_MIXES["topk_topp"], "presence_penalty": 0.2,
                       "frequency_penalty": 0.2},
}
NAMED_MIXES = (*MIXES, *OPT_IN_MIXES)
# The seeded requests whose tokens the n-gram cells compare with and without
# speculation. The copy checkpoint's top-1 probability is 0.97-0.98, where
# top-p 0.95 keeps one token and any verification repeats the argmax; at
# temperature 1 without top-p a verification that only keeps the law draws
# other tokens than the request draws without speculation.
IDENTITY_SEEDED_MIX = "seeded_t1"
SEEDED_MIXES = ("seeded_topp", IDENTITY_SEEDED_MIX)
_IDENTITY_MIXES = {IDENTITY_SEEDED_MIX: {"temperature": 1.0}}
SEED_BASE = 1000
# Token ids below this are the tokenizer's specials (see checkpoint.py).
FIRST_WORD_ID = 3


def sampling_kwargs(mix: str, request_index: int, output_len: int) -> dict:
    """``SamplingParams`` keyword arguments of request ``request_index`` of a mix.

    Every request generates exactly ``output_len`` tokens (``ignore_eos``), so
    stock and plugin engines do the same number of steps whatever they sample.

    Example::

        >>> sampling_kwargs("mixed", 2, 8)["top_k"]
        50
    """
    if mix == "mixed":
        names = tuple(SINGLE_MIXES)
        mix = names[request_index % len(names)]
    if mix == "ngram":
        mix = "greedy"
    settings = {**SINGLE_MIXES, **OPT_IN_MIXES, **_IDENTITY_MIXES}[mix]
    kwargs = {**settings, "max_tokens": output_len, "ignore_eos": True}
    if mix in SEEDED_MIXES:
        kwargs["seed"] = SEED_BASE + request_index
    return kwargs


def random_prompts(count: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """``count`` prompts of ``length`` token ids drawn uniformly from the words."""
    rng = random.Random(seed)
    return [[rng.randrange(FIRST_WORD_ID, vocab) for _ in range(length)] for _ in range(count)]


def pair_orders(pairs: int, roles: tuple[str, ...] = ("stock", "plugin")) -> list[tuple[str, ...]]:
    """The order of the engines' runs in each pair (or, of three engines, each
    rotation): rotating which one goes first, so a drift over the run (clocks,
    temperature, fragmentation) hits every engine equally.

    Example::

        >>> pair_orders(3)
        [('stock', 'plugin'), ('plugin', 'stock'), ('stock', 'plugin')]
        >>> pair_orders(3, ("nospec", "adaptive", "adaptive@control"))[1]
        ('adaptive', 'adaptive@control', 'nospec')
    """
    return [roles[i % len(roles):] + roles[:i % len(roles)] for i in range(pairs)]


def waves(items: list, size: int) -> list[list]:
    """``items`` cut into consecutive groups of at most ``size``."""
    return [items[i:i + size] for i in range(0, len(items), size)]
