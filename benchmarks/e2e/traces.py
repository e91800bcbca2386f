"""Trace-replay speculation cells (``bench e2e --trace-workloads``, issue 63).

The requests come from ``python -m benchmarks.workloads build`` (one JSONL per
workload, docs/workloads.md). vLLM 0.34's trace replay
(``enable_trace_replay=True``, ``SamplingParams(trace_decode_token_ids=...)``)
runs the real forward and emits the trace's tokens, so the proposers see real
text while the step costs are the checkpoint's. Plain data, no vLLM import.
"""

from __future__ import annotations

import argparse
import os

from benchmarks.e2e.report import first_difference
from benchmarks.workloads.build import WORKLOADS
from benchmarks.workloads.request import read_requests

# The concurrencies of issue 63's cells.
CONCURRENCIES = (1, 16, 64, 256)
# The proposers whose cells replay traces.
METHODS = ("ngram", "suffix")
# Methods whose speculative_config accepts upstream's adaptive verification
# ("enable_adaptive_verification") on vLLM 0.34: suffix does; n-gram's config
# refuses it, so n-gram cells have no such configuration.
ADAPTIVE_VERIFICATION_METHODS = ("suffix",)


def parse_workloads(text: str) -> tuple[str, list[str]]:
    """``DIR[:NAME,...]`` (an argparse type): the builder's output folder and
    the workloads to run (default: every one whose file is there)."""
    directory, _, names_text = text.partition(":")
    names = names_text.split(",") if names_text else [
        n for n in WORKLOADS if os.path.exists(_path(directory, n))]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown workloads {unknown}; known: {list(WORKLOADS)}")
    if not names:
        raise argparse.ArgumentTypeError(f"{directory}: no workload file ({', '.join(WORKLOADS)}"
                                         f".jsonl)")
    for name in names:
        if not os.path.exists(_path(directory, name)):
            raise argparse.ArgumentTypeError(
                f"{_path(directory, name)}: no such file (build it with python -m "
                f"benchmarks.workloads build --out {directory})")
    return directory, names


def _path(directory: str, name: str) -> str:
    return os.path.join(directory, f"{name}.jsonl")


def load(directory: str, name: str) -> list[dict]:
    """A workload's requests in arrival order: ``prompt_token_ids`` and
    ``trace_token_ids`` of each line."""
    return [{key: row[key] for key in ("prompt_token_ids", "trace_token_ids")}
            for row in read_requests(_path(directory, name))]


class RequestSets:
    """Which of a workload file's ``size`` requests each request set of a
    run replays (a set: the warm-up or one rotation of a cell, numbered
    across the whole run).

    With ``fresh`` (a method that drafts from the engine's finished
    responses), each set takes the next ``count`` requests the first time it
    is asked for, so no set replays another's, whatever each set's size;
    asked again (its traces after its prompts, the warm-up's whole set after
    its first wave), it gives the same ones. Otherwise every set is the
    file's first ``count``.

    Example::

        >>> sets = RequestSets(9, fresh=True)
        >>> list(sets.indices(2, 0)), list(sets.indices(3, 1)), list(sets.indices(2, 0))
        ([0, 1], [2, 3, 4], [0, 1])
        >>> list(RequestSets(9, fresh=False).indices(3, 5))
        [0, 1, 2]
    """

    def __init__(self, size: int, fresh: bool) -> None:
        self.size, self.fresh = size, fresh
        self._starts: dict[int, tuple[int, int]] = {}  # set -> (first request, requests)
        self._next = 0

    def indices(self, count: int, set_index: int) -> range:
        if not self.fresh:
            return range(min(count, self.size))
        if set_index not in self._starts:
            if self._next + count > self.size:
                raise IndexError(f"request set {set_index} of {count} is past the file's "
                                 f"{self.size} requests ({self._next} replayed before it)")
            self._starts[set_index] = (self._next, count)
            self._next += count
        start, reserved = self._starts[set_index]
        if count > reserved:
            raise ValueError(f"request set {set_index} holds {reserved} requests, not {count}")
        return range(start, start + count)


def max_model_len(requests: list[dict], k: int) -> int:
    """The engines' context: the longest prompt plus trace, and the drafts a
    last step may verify past it."""
    return max(len(r["prompt_token_ids"]) + len(r["trace_token_ids"]) for r in requests) + k + 16


def sampling_kwargs(trace: list[int]) -> dict:
    """``SamplingParams`` keyword arguments that replay ``trace``: greedy,
    exactly its length. ``ignore_eos``: a trace's ids come from the workloads'
    own tokenizer, so one may be the checkpoint's end-of-sequence id, which
    would end the request before the trace does."""
    return {"temperature": 0.0, "max_tokens": len(trace), "ignore_eos": True,
            "trace_decode_token_ids": list(trace)}


def mismatches(emitted: list[list[int]], traces: list[list[int]]) -> list[dict]:
    """Requests whose emitted tokens are not their trace: the request's index
    and the first differing position."""
    found = []
    for index, (tokens, trace) in enumerate(zip(emitted, traces, strict=True)):
        position = first_difference(tokens, trace)
        if position is not None:
            found.append({"request": index, "position": position,
                          "emitted": len(tokens), "trace": len(trace)})
    return found


class TraceMismatch(RuntimeError):
    """An engine emitted other tokens than a request's trace."""


def check(engine: str, result: dict) -> None:
    """Raise :class:`TraceMismatch` where a run's ``trace_mismatches`` is not
    empty: trace replay that does not replay makes every number of the cell
    meaningless."""
    found = result["trace_mismatches"]
    if found:
        first = found[0]
        raise TraceMismatch(
            f"{engine}: {len(found)} requests did not replay their trace; the first, request "
            f"{first['request']}, differs at token {first['position']} (emitted "
            f"{first['emitted']}, trace {first['trace']} tokens)")
