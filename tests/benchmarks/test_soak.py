"""The soak run's request mix, validators, summary and loop, without vLLM,
and ``python3 -m benchmarks soak`` where it cannot start.

The loop runs against a small aiohttp server on 127.0.0.1 that answers the
way ``vllm serve`` does (a 400 body, or an error event inside a stream).
"""

import asyncio
import http.server
import json
import math
import socket
import subprocess
import sys
import threading

import pytest
from aiohttp import web

from benchmarks.soak.mix import (
    CHOICES,
    MALFORMED,
    PERSON_SCHEMA,
    SAMPLING_KINDS,
    make_request,
)
from benchmarks.soak.run import fold_stream_chunk, judge_answer, soak
from benchmarks.soak.summary import (
    MemorySample,
    SoakSummary,
    percentile,
    render,
    tokens_per_window,
    verdict,
)
from benchmarks.soak.validate import (
    is_refusal,
    length_unjudged,
    logprob_problems,
    structure_problems,
    token_id_problems,
)
from tests.commands import last_line
from tests.integration.helpers import REPO_ROOT

VOCAB = 2000


def _mix(n, **kwargs):
    return [make_request(i, model="m", vocab_size=VOCAB, **kwargs) for i in range(n)]


def test_mix_is_reproducible_and_covers_every_kind():
    first, again = _mix(3000), _mix(3000)
    assert [r.body for r in first] == [r.body for r in again]
    assert {r.kind for r in first} == set(SAMPLING_KINDS) | set(MALFORMED)
    assert _mix(50, seed=1)[0].body != first[0].body or _mix(50, seed=1)[1].body != first[1].body


def test_mix_fractions_and_expectations():
    requests = _mix(4000, abort_fraction=0.1, malformed_fraction=0.05)
    expected = {"rejected": 0.05, "aborted": 0.1}
    for expect, fraction in expected.items():
        count = sum(r.expect == expect for r in requests)
        sigma = math.sqrt(len(requests) * fraction * (1 - fraction))
        assert abs(count - len(requests) * fraction) < 4 * sigma, (expect, count)
    for request in requests:
        assert request.body["return_token_ids"] is True
        if request.expect == "aborted":
            assert request.body["stream"] and request.abort_after_chunks >= 1
            assert request.structure is None
        if request.expect == "rejected":
            assert request.kind in MALFORMED
        if request.kind == "logit_bias_out_of_vocab":
            assert all(int(k) >= VOCAB for k in request.body["logit_bias"])
        if request.kind == "logit_bias_over_v2_table":
            assert len(request.body["logit_bias"]) > 1024
        if request.kind in ("logit_bias", "allowed_token_ids"):
            ids = request.body.get("allowed_token_ids") or map(int, request.body["logit_bias"])
            assert all(0 <= i < VOCAB for i in ids)


def test_every_request_is_one_vllm_accepts_unless_marked_rejected():
    for request in _mix(3000):
        body = request.body
        if request.expect != "rejected":
            assert body.get("min_tokens", 0) <= body["max_tokens"], body


def test_small_vocabularies_leave_out_the_logit_bias_table_overflow():
    kinds = {r.kind for r in (make_request(i, model="m", vocab_size=1024,
                                           malformed_fraction=1.0) for i in range(400))}
    assert kinds == set(MALFORMED) - {"logit_bias_over_v2_table"}
    big = [make_request(i, model="m", vocab_size=1101, malformed_fraction=1.0)
           for i in range(400)]
    over = [r for r in big if r.kind == "logit_bias_over_v2_table"]
    assert over and all(len(r.body["logit_bias"]) == 1100 for r in over)
    assert all(int(k) < 1101 for r in over for k in r.body["logit_bias"])


def test_json_strings_may_hold_raw_control_characters_but_not_bad_structure():
    spec = {"type": "object", "properties": {"name": {"type": "string"}},
            "required": ["name"]}
    assert structure_problems('{"name": "a\x02b"}', ("json", spec)) == []
    assert structure_problems('{"name": "a\x02b"', ("json", spec))
    assert structure_problems('{"name": 3}', ("json", spec))


def test_token_ids_must_be_in_the_vocabulary():
    assert token_id_problems([0, 1, VOCAB - 1], VOCAB) == []
    assert token_id_problems([0, VOCAB], VOCAB)
    assert token_id_problems([-1], VOCAB)
    assert token_id_problems(None, VOCAB)


def test_structures():
    person = {"name": "ann", "age": 30, "member": False}
    assert structure_problems(json.dumps(person), ("json", PERSON_SCHEMA)) == []
    assert structure_problems('{"name": "ann"}', ("json", PERSON_SCHEMA))
    assert structure_problems('{"name": "ann", "age": 3', ("json", PERSON_SCHEMA))
    assert structure_problems("123-ab", ("regex", r"[0-9]{3}-[a-z]{2}")) == []
    assert structure_problems("123-abc", ("regex", r"[0-9]{3}-[a-z]{2}"))
    assert structure_problems("red", ("choice", CHOICES)) == []
    assert structure_problems("pink", ("choice", CHOICES))


# Outputs of the H100 soak (tiny byte-level tokenizer, xgrammar): stock vLLM
# 0.20 gave the same kind, so only the length of such a string goes unjudged.
SPLIT_CHARACTER_NAME = '{"name": " 1559 1591\ufffd\ufffd\ufffd\ufffd\u0134", "age": 0, "member": false}'


def test_split_character_string_is_judged_on_all_but_its_length():
    structure = ("json", PERSON_SCHEMA)
    assert length_unjudged(SPLIT_CHARACTER_NAME, structure)
    assert structure_problems(SPLIT_CHARACTER_NAME, structure) == []
    # Every other constraint still holds it: an age out of range fails.
    too_old = SPLIT_CHARACTER_NAME.replace('"age": 0', '"age": 131')
    assert not length_unjudged(too_old, structure)
    assert structure_problems(too_old, structure)
    # Without U+FFFD the length is judged as written.
    long_name = json.dumps({"name": "x" * 13, "age": 1, "member": True})
    assert not length_unjudged(long_name, structure)
    assert structure_problems(long_name, structure)
    assert not length_unjudged(SPLIT_CHARACTER_NAME, ("regex", ".*"))


def test_split_character_strings_are_counted():
    request = next(r for r in _mix(400) if r.kind == "json_schema" and r.expect == "ok")
    body = {"choices": [{"text": SPLIT_CHARACTER_NAME, "token_ids": [1, 2], "finish_reason": "stop"}]}
    outcome = judge_answer(request, 200, body, VOCAB)
    assert outcome.result == "ok" and outcome.length_unjudged == 1


def test_logprobs():
    good = {"token_logprobs": [-0.1, -2.0], "top_logprobs": [{"a": -0.1}, {"b": -2.0}]}
    assert logprob_problems(good, 2, 1) == []
    assert logprob_problems(good, 3, 1)
    assert logprob_problems({"token_logprobs": [float("nan"), 0.5]}, 2, 1)
    assert logprob_problems(None, 2, 1)


def test_refusals():
    assert is_refusal(400, {"error": {"code": 400}})
    assert is_refusal(200, {"error": {"code": 400, "message": "bad"}})
    assert not is_refusal(200, {"choices": []})
    assert not is_refusal(500, {"error": {"code": 500}})


def test_structured_output_cut_by_max_tokens_is_counted_not_judged():
    request = next(r for r in _mix(400) if r.kind == "json_schema" and r.expect == "ok")
    cut = {"choices": [{"text": '{"name": "a', "token_ids": [1, 2], "finish_reason": "length"}]}
    outcome = judge_answer(request, 200, cut, VOCAB)
    assert outcome.result == "ok" and outcome.truncated_structured == 1
    broken = {"choices": [{"text": '{"name": "a"}', "token_ids": [1], "finish_reason": "stop"}]}
    assert judge_answer(request, 200, broken, VOCAB).result == "unexpected"


def test_stream_chunks_fold_into_a_body():
    folded = {}
    for chunk in (
        {"choices": [{"index": 1, "text": "b", "token_ids": [7]}]},
        {"choices": [{"index": 0, "text": "a", "token_ids": [3],
                      "logprobs": {"token_logprobs": [-1.0], "top_logprobs": [{"a": -1.0}]}}]},
        {"choices": [{"index": 0, "text": "c", "token_ids": [4], "finish_reason": "stop"}]},
    ):
        fold_stream_chunk(folded, chunk)
    assert folded["choices"][0]["text"] == "ac" and folded["choices"][0]["token_ids"] == [3, 4]
    assert folded["choices"][0]["finish_reason"] == "stop"
    assert folded["choices"][1]["token_ids"] == [7]
    fold_stream_chunk(folded, {"error": {"code": 400}})
    assert is_refusal(200, folded)


def test_percentiles_windows_and_verdict():
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile(list(map(float, range(1, 101))), 99) == 99.0
    assert tokens_per_window([(0.5, 3), (1.5, 4), (1.9, 1), (4.2, 2)], 1.0) == [
        (0.0, 3), (1.0, 5), (2.0, 0), (3.0, 0), (4.0, 2)]
    flat = SoakSummary(ok=5, memory_start=MemorySample(1000.0, 2000.0),
                       memory_end=MemorySample(1100.0, 2100.0))
    assert verdict(flat, 256, 1024) == []
    grown = SoakSummary(ok=5, memory_start=MemorySample(1000.0, None),
                        memory_end=MemorySample(1400.0, None))
    assert verdict(grown, 256, 1024) == ["gpu_mib grew 400 MiB (limit 256)"]
    failed = SoakSummary(ok=5, unexpected=[(3, "greedy", "token ids outside")])
    assert verdict(failed, 256, 1024) == ["1 unexpected results"]
    text = render(failed, verdict(failed, 256, 1024))
    assert "unexpected 1" in text and text.endswith("FAIL: 1 unexpected results")


def _fake_text(body):
    structured = body.get("structured_outputs") or {}
    if "response_format" in body or "json" in structured:
        return json.dumps({"name": "ann", "age": 30, "member": True})
    if "regex" in structured:
        return "123-ab"
    if "choice" in structured:
        return "green"
    return "hello"


def _fake_refuses(body):
    return (body.get("temperature", 1.0) < 0 or body.get("top_p", 1.0) == 0
            or body.get("n", 1) == 0 or (body.get("logprobs") or 0) > 20
            or any(int(k) >= VOCAB for k in body.get("logit_bias") or {})
            or len(body.get("logit_bias") or {}) > 1024)


def _fake_server(bad_token_id):
    """Answers like vllm serve; ``bad_token_id`` is every 5th token id."""
    async def completions(request):
        body = await request.json()
        num_tokens = min(body["max_tokens"], 6)
        ids = [bad_token_id if (i + 1) % 5 == 0 else 10 + i for i in range(num_tokens)]
        text = _fake_text(body)
        error = {"error": {"message": "bad request", "type": "BadRequestError", "code": 400}}
        choices = [{"index": c, "text": text, "token_ids": ids, "finish_reason": "stop"}
                   for c in range(body.get("n", 1))]
        if body.get("logprobs"):
            for choice in choices:
                choice["logprobs"] = {"token_logprobs": [-0.5] * num_tokens,
                                      "top_logprobs": [{"x": -0.5}] * num_tokens}
        if not body.get("stream"):
            if _fake_refuses(body):
                return web.json_response(error, status=400)
            return web.json_response({"choices": choices})
        response = web.StreamResponse()
        await response.prepare(request)
        events = [error] if _fake_refuses(body) else [
            {"choices": [{**choice, "text": text if i == 0 else "", "token_ids": [token],
                          "finish_reason": "stop" if i == num_tokens - 1 else None,
                          **({"logprobs": {"token_logprobs": [-0.5], "top_logprobs": [{"x": -0.5}]}}
                             if body.get("logprobs") else {})}
                         for choice in choices]}
            for i, token in enumerate(ids)]
        try:
            for event in events:
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
        except ConnectionResetError:
            pass
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    return app


async def _soak_against_fake(bad_token_id, requests):
    runner = web.AppRunner(_fake_server(bad_token_id))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    samples = iter([MemorySample(100.0, 200.0), MemorySample(100.0, 210.0)])
    try:
        return await soak(f"http://127.0.0.1:{port}", requests, vocab_size=VOCAB,
                          concurrency=8, warmup=10, window_s=3600.0,
                          sample_memory=lambda: next(samples))
    finally:
        await runner.cleanup()


def test_loop_counts_ok_rejected_and_aborted_against_a_fake_server():
    requests = _mix(120, abort_fraction=0.2, malformed_fraction=0.15, max_tokens=6)
    summary = asyncio.run(_soak_against_fake(11, requests))
    assert summary.unexpected == []
    assert summary.rejected == sum(r.expect == "rejected" for r in requests)
    # A stream shorter than its abort point ends normally and counts as ok.
    planned_aborts = [r for r in requests if r.expect == "aborted"]
    cut = sum(r.abort_after_chunks < min(r.body["max_tokens"], 6) for r in planned_aborts)
    assert summary.aborted == cut > 0
    assert summary.ok == len(requests) - summary.rejected - summary.aborted
    assert summary.memory_start.host_rss_mib == 200.0 and summary.memory_end.host_rss_mib == 210.0
    assert summary.windows[0][1] == summary.tokens
    assert len(summary.latencies_s) == summary.ok


def test_loop_reports_out_of_vocabulary_tokens():
    requests = [r for r in _mix(80, abort_fraction=0.0, malformed_fraction=0.0, max_tokens=12)
                if r.body["max_tokens"] >= 5]
    summary = asyncio.run(_soak_against_fake(VOCAB + 1, requests))
    assert len({index for index, _, _ in summary.unexpected}) == len(requests)
    assert all("outside" in problem for _, _, problem in summary.unexpected)


@pytest.mark.parametrize("argv", [["--url", "http://127.0.0.1:1"], []])
def test_command_needs_a_target_and_a_vocabulary(argv):
    from benchmarks.soak.command import parse_args

    with pytest.raises(SystemExit) as info:
        parse_args(argv)
    assert info.value.code == 2


# The command as a user runs it, from the checkout, in a process of its own.
# A soak that cannot start must say why within this; it used to wait 900 s.
FAILS_WITHIN_S = 10


def _soak_command(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks", "soak", *argv],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=FAILS_WITHIN_S)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_soak_without_a_server_at_the_url_fails_at_once():
    url = f"http://127.0.0.1:{_closed_port()}"
    proc = _soak_command("--url", url, "--vocab-size", "50272")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert last_line(proc.stderr) == (
        f"python3 -m benchmarks soak: nothing answers at {url}/health: start vllm serve there "
        "first, or pass --launch MODEL")


class _LoadingServer(http.server.BaseHTTPRequestHandler):
    """Answers every request 503, as a server still loading its model may."""

    def do_GET(self):
        self.send_response(503)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_soak_says_what_it_waits_for_while_a_server_loads():
    server = http.server.HTTPServer(("127.0.0.1", 0), _LoadingServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        proc = _soak_command("--url", url, "--vocab-size", "50272", "--startup-timeout-s", "1")
    finally:
        server.shutdown()
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [
        "python3 -m benchmarks soak: waiting up to 1 s (--startup-timeout-s) for the server to "
        f"answer 200 at {url}/health",
        f"python3 -m benchmarks soak: {url} not healthy after 1 s",
    ]


def test_soak_launch_without_a_gpu_says_it_needs_one():
    from benchmarks.soak.command import cuda_gpu_count

    if cuda_gpu_count():
        pytest.skip("a GPU is visible here: --launch would start vllm serve")
    proc = _soak_command("--launch", "facebook/opt-125m", "--vocab-size", "50272")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert last_line(proc.stderr) == (
        "python3 -m benchmarks soak --launch starts vllm serve, which needs a CUDA GPU, and "
        "none is visible: run it on a machine with an NVIDIA GPU, or point --url at a running "
        "server")


def test_every_soak_option_has_help_text():
    from benchmarks.soak.command import build_parser

    undocumented = [action.option_strings for action in build_parser()._actions if not action.help]
    assert undocumented == []


def test_soak_help_names_the_command_without_markup():
    proc = _soak_command("--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: python3 -m benchmarks soak ")
    assert "`" not in proc.stdout
