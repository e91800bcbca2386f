"""Drive a soak run: send the mix with bounded concurrency, judge every answer.

One request's outcome is ``Outcome``; ``soak`` runs a warm-up batch, samples
memory, runs the rest, samples memory again and fills a ``SoakSummary``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from benchmarks.soak.mix import SoakRequest
from benchmarks.soak.summary import (
    MemorySample,
    SoakSummary,
    tokens_per_window,
)
from benchmarks.soak.validate import choice_problems, is_refusal, length_unjudged


@dataclass
class Outcome:
    result: str  # "ok" | "rejected" | "aborted" | "unexpected"
    tokens: int = 0
    truncated_structured: int = 0
    length_unjudged: int = 0
    problems: list[str] = field(default_factory=list)


def judge_answer(request: SoakRequest, status: int, payload, vocab_size: int) -> Outcome:
    """Outcome of a complete answer (a JSON body, or a stream folded into one)."""
    if request.expect == "rejected":
        if is_refusal(status, payload):
            return Outcome("rejected")
        return Outcome("unexpected", problems=[f"expected a 400, got {status}: {str(payload)[:200]}"])
    if status != 200 or not isinstance(payload, dict) or "error" in payload:
        return Outcome("unexpected", problems=[f"HTTP {status}: {str(payload)[:200]}"])
    choices = payload.get("choices") or []
    wanted = request.body.get("n", 1)
    problems = [] if len(choices) == wanted else [f"{len(choices)} choices, asked for {wanted}"]
    tokens = truncated = unjudged = 0
    for choice in choices:
        problems += choice_problems(request, choice, vocab_size)
        tokens += len(choice.get("token_ids") or [])
        truncated += request.structure is not None and choice.get("finish_reason") == "length"
        unjudged += (choice.get("finish_reason") == "stop"
                     and length_unjudged(choice.get("text", ""), request.structure))
    return Outcome("unexpected" if problems else "ok", tokens, truncated, unjudged, problems)


def fold_stream_chunk(folded: dict, chunk: dict) -> None:
    """Add one streamed completion chunk to ``folded`` (a non-streamed body's shape)."""
    if "error" in chunk:
        folded["error"] = chunk["error"]
        return
    choices = folded.setdefault("choices", [])
    for part in chunk.get("choices", []):
        while len(choices) <= part["index"]:
            choices.append({"text": "", "token_ids": [], "finish_reason": None})
        choice = choices[part["index"]]
        choice["text"] += part.get("text") or ""
        choice["token_ids"] += part.get("token_ids") or []
        if part.get("finish_reason") is not None:
            choice["finish_reason"] = part["finish_reason"]
        if part.get("logprobs") is not None:
            logprobs = choice.setdefault("logprobs", {"token_logprobs": [], "top_logprobs": []})
            logprobs["token_logprobs"] += part["logprobs"].get("token_logprobs") or []
            logprobs["top_logprobs"] += part["logprobs"].get("top_logprobs") or []


async def send(session: aiohttp.ClientSession, url: str, request: SoakRequest,
               vocab_size: int) -> Outcome:
    # A request the server refuses goes on a connection of its own: vLLM
    # 0.20 raises some refusals out of the ASGI app (a 400 is still sent) and
    # the server then drops the connection, which would reset whichever
    # valid request the client pool sends on it next.
    headers = {"Connection": "close"} if request.expect == "rejected" else None
    async with session.post(url, json=request.body, headers=headers) as response:
        if not request.body.get("stream") or response.status != 200:
            try:
                payload = await response.json(content_type=None)
            except (json.JSONDecodeError, aiohttp.ContentTypeError):
                payload = await response.text()
            return judge_answer(request, response.status, payload, vocab_size)
        folded: dict = {}
        chunks = 0
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            fold_stream_chunk(folded, json.loads(line[len("data:"):]))
            chunks += 1
            if request.expect == "aborted" and chunks >= request.abort_after_chunks:
                # Leaving the block drops the connection mid-stream: the
                # server must abort the request and free its slot.
                response.close()
                return Outcome("aborted")
        return judge_answer(request, response.status, folded, vocab_size)


async def _run_batch(session, url, requests, vocab_size, concurrency, started, summary, finishes):
    gate = asyncio.Semaphore(concurrency)

    async def one(request: SoakRequest) -> None:
        async with gate:
            begin = time.monotonic()
            try:
                outcome = await send(session, url, request, vocab_size)
            except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError) as exc:
                outcome = Outcome("unexpected", problems=[f"{type(exc).__name__}: {exc}"])
            end = time.monotonic()
        record(summary, request, outcome)
        if outcome.result == "ok":
            summary.latencies_s.append(end - begin)
            finishes.append((end - started, outcome.tokens))

    await asyncio.gather(*(one(request) for request in requests))


def record(summary: SoakSummary, request: SoakRequest, outcome: Outcome) -> None:
    if outcome.result == "ok":
        summary.ok += 1
    elif outcome.result == "rejected":
        summary.rejected += 1
    elif outcome.result == "aborted":
        summary.aborted += 1
    else:
        summary.unexpected += [(request.index, request.kind, p) for p in outcome.problems]
    summary.tokens += outcome.tokens
    summary.truncated_structured += outcome.truncated_structured
    summary.length_unjudged += outcome.length_unjudged


async def soak(
    base_url: str,
    requests: list[SoakRequest],
    *,
    vocab_size: int,
    concurrency: int,
    warmup: int,
    window_s: float,
    sample_memory: Callable[[], MemorySample],
    request_timeout_s: float = 600.0,
) -> SoakSummary:
    """Run ``requests[:warmup]``, sample memory, run the rest, sample again."""
    summary = SoakSummary()
    finishes: list[tuple[float, int]] = []
    url = base_url.rstrip("/") + "/v1/completions"
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        started = time.monotonic()
        await _run_batch(session, url, requests[:warmup], vocab_size, concurrency, started,
                         summary, finishes)
        summary.memory_start = sample_memory()
        await _run_batch(session, url, requests[warmup:], vocab_size, concurrency, started,
                         summary, finishes)
    summary.memory_end = sample_memory()
    summary.windows = tokens_per_window(finishes, window_s)
    return summary
