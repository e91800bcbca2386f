"""What every workload produces: requests of prompt and trace token ids within
the configured lengths, and the helpers that cut real text to those lengths."""

import json
import random
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer


@dataclass(frozen=True)
class Lengths:
    """Sized for an 8B engine benchmark: prompts up to prompt_max tokens, traces of
    trace_min..trace_max tokens (each request draws its trace length in between)."""

    prompt_max: int = 2048
    trace_min: int = 128
    trace_max: int = 512

    def draw_trace_length(self, rng: random.Random) -> int:
        return rng.randint(self.trace_min, self.trace_max)


@dataclass(frozen=True)
class Request:
    request_id: str
    workload: str
    prompt_token_ids: list[int]
    trace_token_ids: list[int]

    def to_json(self) -> dict:
        return {"request_id": self.request_id, "workload": self.workload,
                "prompt_token_ids": self.prompt_token_ids,
                "trace_token_ids": self.trace_token_ids}


def read_requests(path: str | Path) -> list[dict]:
    """A workload file's requests in arrival order: one JSON object a line,
    as :meth:`Request.to_json` writes them."""
    with open(path) as lines:
        return [row for row in map(json.loads, lines) if row]


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text).ids)


# No token of the trained tokenizer is longer than this many characters in practice;
# clip_to_tokens encodes only budget * this much of a text (a whole 200 kB file took
# most of a build's time), and all of it when that window turns out too short.
CHARS_PER_TOKEN_BOUND = 16


def clip_to_tokens(tokenizer: Tokenizer, text: str, budget: int, at_line: bool = True) -> str:
    """The longest prefix of text within budget tokens, ending at a line break when
    at_line and one exists (a cut file or document still ends on a whole line)."""
    window = text[: (budget + 1) * CHARS_PER_TOKEN_BOUND]
    encoding = tokenizer.encode(window)
    if len(encoding.ids) <= budget + 1 and len(window) < len(text):
        encoding = tokenizer.encode(text)
    if len(encoding.ids) <= budget:
        return text
    end = encoding.offsets[budget][0] if budget > 0 else 0
    if at_line and (line_end := text.rfind("\n", 0, end)) > 0:
        return text[: line_end + 1]
    return text[:end]


def make_request(tokenizer: Tokenizer, workload: str, index: int, prompt: str,
                 trace_ids: list[int], trace_length: int, lengths: Lengths) -> Request:
    """The request, its trace cut to trace_length; the workload must have written enough."""
    if not lengths.trace_min <= trace_length <= lengths.trace_max:
        raise ValueError(f"{workload} #{index}: trace length {trace_length} outside "
                         f"{lengths.trace_min}..{lengths.trace_max}")
    prompt_ids = tokenizer.encode(prompt).ids
    if len(prompt_ids) > lengths.prompt_max:
        raise ValueError(f"{workload} #{index}: prompt of {len(prompt_ids)} tokens > {lengths.prompt_max}")
    if len(trace_ids) < trace_length:
        raise ValueError(f"{workload} #{index}: trace of {len(trace_ids)} tokens < {trace_length}")
    return Request(f"{workload}-{index:04d}", workload, prompt_ids, trace_ids[:trace_length])
