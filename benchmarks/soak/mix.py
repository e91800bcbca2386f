"""The request mix of a soak run: one ``SoakRequest`` per index, reproducibly.

Each request is a ``/v1/completions`` body plus what its answer must satisfy:
``expect="ok"`` (answered, every token id in the vocabulary, structured
outputs parse and match), ``expect="rejected"`` (an HTTP 400, or in a stream
an error event with code 400) or ``expect="aborted"`` (streamed; the client
disconnects after ``abort_after_chunks`` chunks).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "member": {"type": "boolean"},
    },
    "required": ["name", "age", "member"],
    "additionalProperties": False,
}
CODE_REGEX = r"[0-9]{3}-[a-z]{2}"
CHOICES = ["red", "green", "blue"]

PROMPTS = [
    "The quick brown fox",
    "Write a short JSON object describing a person:",
    "Once upon a time in a small village,",
    "List three colours:",
    "def fibonacci(n):",
]


@dataclass
class SoakRequest:
    index: int
    kind: str  # which entry of SAMPLING_KINDS (or MALFORMED) made it
    body: dict[str, Any]
    expect: str = "ok"  # "ok" | "rejected" | "aborted"
    abort_after_chunks: int = 0
    # What the text must match: ("json", schema) | ("regex", pattern) | ("choice", options)
    structure: tuple[str, Any] | None = None


def _sampling(kind: str, rng: random.Random, vocab_size: int) -> tuple[dict, tuple | None]:
    """Body fields of one sampling kind, and the structure its text must have."""
    seeded = {"seed": rng.randrange(2**31)}
    table = {
        "greedy": ({"temperature": 0.0}, None),
        "temperature": ({"temperature": 0.8}, None),
        "top_k_top_p": ({"temperature": 1.0, "top_k": 20, "top_p": 0.9}, None),
        "min_p": ({"temperature": 1.0, "min_p": 0.1}, None),
        "seeded": ({"temperature": 0.9, "top_p": 0.95, **seeded}, None),
        "logprobs": ({"temperature": 0.7, "logprobs": 3}, None),
        "n_2": ({"temperature": 0.9, "n": 2}, None),
        "stop": ({"temperature": 0.8, "stop": ["\n", "."]}, None),
        "penalties": (
            {"temperature": 0.8, "presence_penalty": 0.5, "frequency_penalty": 0.3,
             "repetition_penalty": 1.1},
            None,
        ),
        "logit_bias": (
            {"temperature": 0.8, "logit_bias": {str(rng.randrange(vocab_size)): 5.0}},
            None,
        ),
        "allowed_token_ids": (
            {"temperature": 1.0,
             "allowed_token_ids": sorted(rng.sample(range(vocab_size), 16))},
            None,
        ),
        "min_tokens": ({"temperature": 0.8, "min_tokens": 8}, None),
        "json_schema": (
            {"temperature": 0.7, "top_p": 0.9,
             "response_format": {"type": "json_schema",
                                 "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}},
            ("json", PERSON_SCHEMA),
        ),
        "json_min_p_top_k": (
            {"temperature": 1.0, "top_k": 5, "min_p": 0.05,
             "structured_outputs": {"json": PERSON_SCHEMA}},
            ("json", PERSON_SCHEMA),
        ),
        "regex": (
            {"temperature": 0.9, "top_k": 3, "structured_outputs": {"regex": CODE_REGEX}},
            ("regex", CODE_REGEX),
        ),
        "choice": (
            {"temperature": 1.0, "structured_outputs": {"choice": CHOICES}},
            ("choice", CHOICES),
        ),
    }
    return table[kind]


SAMPLING_KINDS = [
    "greedy", "temperature", "top_k_top_p", "min_p", "seeded", "logprobs", "n_2", "stop",
    "penalties", "logit_bias", "allowed_token_ids", "min_tokens", "json_schema",
    "json_min_p_top_k", "regex", "choice",
]

# Requests that must get a 400. The last one passes vLLM 0.20's own checks
# and, without the plugin's front-end limit, stops the engine.
MALFORMED = {
    "negative_temperature": {"temperature": -1.0},
    "top_p_zero": {"top_p": 0.0},
    "n_zero": {"n": 0},
    "logit_bias_out_of_vocab": None,  # these two need the vocabulary size
    "logit_bias_over_v2_table": None,
    "too_many_logprobs": {"logprobs": 10_000},
}


# 1,100 distinct token ids need a vocabulary larger than the V2 table.
OVER_V2_TABLE = 1100


def malformed_kinds(vocab_size: int) -> list[str]:
    """The malformed kinds a vocabulary of ``vocab_size`` can express: on a
    vocabulary of at most ``OVER_V2_TABLE`` ids, logit-bias keys repeat and
    collapse into a valid request, so that kind is left out."""
    return [k for k in sorted(MALFORMED)
            if k != "logit_bias_over_v2_table" or vocab_size > OVER_V2_TABLE]


def _malformed_fields(kind: str, vocab_size: int) -> dict:
    if kind == "logit_bias_out_of_vocab":
        return {"logit_bias": {str(vocab_size + 7): 1.0}}
    if kind == "logit_bias_over_v2_table":
        return {"logit_bias": {str(i): 0.1 for i in range(OVER_V2_TABLE)}}
    return MALFORMED[kind]


def make_request(
    index: int,
    *,
    model: str,
    vocab_size: int,
    seed: int = 0,
    abort_fraction: float = 0.05,
    malformed_fraction: float = 0.03,
    stream_fraction: float = 0.3,
    max_tokens: int = 48,
) -> SoakRequest:
    """Request ``index`` of the run; the same arguments give the same request."""
    rng = random.Random(seed * 1_000_003 + index)
    base = {
        "model": model,
        "prompt": rng.choice(PROMPTS),
        "max_tokens": rng.randint(1, max_tokens),
        "return_token_ids": True,
    }
    draw = rng.random()
    if draw < malformed_fraction:
        kind = rng.choice(malformed_kinds(vocab_size))
        bad = _malformed_fields(kind, vocab_size)
        return SoakRequest(index, kind, {**base, "stream": rng.random() < 0.5, **bad},
                           expect="rejected")
    kind = SAMPLING_KINDS[rng.randrange(len(SAMPLING_KINDS))]
    fields, structure = _sampling(kind, rng, vocab_size)
    body = {**base, **fields}
    if structure is not None:
        # A structured answer needs room to finish.
        body["max_tokens"] = max_tokens * 2
    # vLLM refuses min_tokens above max_tokens: that is no request of this kind.
    body["max_tokens"] = max(body["max_tokens"], body.get("min_tokens", 0))
    if draw < malformed_fraction + abort_fraction:
        body.update(stream=True, max_tokens=max(body["max_tokens"], 16))
        return SoakRequest(index, kind, body, expect="aborted",
                           abort_after_chunks=rng.randint(1, 4))
    body["stream"] = rng.random() < stream_fraction
    # A structure check needs the whole text; a cut one cannot be judged.
    return SoakRequest(index, kind, body, structure=structure)
