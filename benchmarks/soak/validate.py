"""Checks on one soak answer; each returns the problems found (empty: fine).

A completion choice is judged on its token ids (``return_token_ids``), its
logprobs when asked for, its finish reason and, for structured requests that
finished on their own (not cut by ``max_tokens``), its text.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import jsonschema

from benchmarks.soak.mix import SoakRequest

FINISH_REASONS = {"stop", "length"}


def token_id_problems(token_ids: list[Any] | None, vocab_size: int) -> list[str]:
    if token_ids is None:
        return ["no token_ids in the answer (return_token_ids ignored?)"]
    bad = [t for t in token_ids if not isinstance(t, int) or not 0 <= t < vocab_size]
    return [f"token ids outside [0, {vocab_size}): {bad[:5]}"] if bad else []


def logprob_problems(logprobs: dict | None, num_tokens: int, wanted: int) -> list[str]:
    if logprobs is None:
        return ["logprobs requested but missing"]
    values = logprobs.get("token_logprobs") or []
    problems = []
    if len(values) != num_tokens:
        problems.append(f"{len(values)} logprobs for {num_tokens} tokens")
    if any(v is None or math.isnan(v) or v > 0.0 for v in values):
        problems.append("a token logprob is NaN or positive")
    tops = logprobs.get("top_logprobs") or []
    if any(len(top) < min(wanted, 1) for top in tops if top is not None):
        problems.append("empty top_logprobs entry")
    return problems


def _schema_errors(text: str, schema: dict) -> list[jsonschema.ValidationError] | None:
    """The schema's errors for ``text``, or None where ``text`` is not JSON."""
    try:
        # strict=False admits raw control characters inside strings: a
        # grammar backend that reads a byte-level vocabulary as plain text
        # (the soak's tiny tokenizer) allows tokens that decode to them.
        # Structure and schema are still checked in full.
        document = json.loads(text, strict=False)
    except json.JSONDecodeError:
        return None
    return list(jsonschema.Draft202012Validator(schema).iter_errors(document))


def length_unjudged(text: str, structure: tuple[str, Any] | None) -> bool:
    """Whether the only schema errors are ``maxLength`` on strings holding U+FFFD.

    The grammar backend counts a string's length over the bytes the tokens
    carry; where byte-level tokens split a UTF-8 character, the detokenizer
    writes U+FFFD for each stray byte, so the text's length is not the length
    the grammar enforced. Stock vLLM 0.20 produces the same outputs (soak
    control, docs/troubleshooting.md): such a string's length is not judged,
    the rest of the document is.
    """
    if structure is None or structure[0] != "json":
        return False
    errors = _schema_errors(text, structure[1])
    return bool(errors) and all(
        e.validator == "maxLength" and "\ufffd" in e.instance for e in errors)


def structure_problems(text: str, structure: tuple[str, Any]) -> list[str]:
    kind, spec = structure
    if kind == "json":
        errors = _schema_errors(text, spec)
        if errors is None:
            return [f"JSON output invalid (JSONDecodeError): {text[:80]!r}"]
        if errors and not length_unjudged(text, structure):
            return [f"JSON output invalid ({errors[0].message[:60]}): {text[:80]!r}"]
        return []
    if kind == "regex":
        return [] if re.fullmatch(spec, text) else [f"text {text[:80]!r} does not match {spec}"]
    if kind == "choice":
        return [] if text in spec else [f"text {text[:80]!r} is not one of {spec}"]
    raise ValueError(f"unknown structure kind {kind!r}")


def choice_problems(request: SoakRequest, choice: dict, vocab_size: int) -> list[str]:
    """Everything wrong with one finished choice of an ``expect="ok"`` request."""
    token_ids = choice.get("token_ids")
    problems = token_id_problems(token_ids, vocab_size)
    finish = choice.get("finish_reason")
    if finish not in FINISH_REASONS:
        problems.append(f"finish_reason {finish!r}")
    wanted = request.body.get("logprobs")
    if wanted is not None and token_ids is not None:
        problems += logprob_problems(choice.get("logprobs"), len(token_ids), wanted)
    if request.structure is not None and finish == "stop":
        problems += structure_problems(choice.get("text", ""), request.structure)
    return problems


def is_refusal(status: int, payload: Any) -> bool:
    """An HTTP 400, or (streams answer 200 first) an error event with code 400."""
    if status == 400:
        return True
    error = payload.get("error") if isinstance(payload, dict) else None
    return isinstance(error, dict) and error.get("code") == 400
