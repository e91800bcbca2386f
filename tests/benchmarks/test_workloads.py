"""The trace workloads' builder (benchmarks/workloads, issue 63), on a small
build: one seed gives the same files in two processes, the trained tokenizer
gives back the text it encodes, requests keep to their lengths, and the
workloads repeat text as designed (stats.json says so, and says it truly)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from benchmarks.workloads import corpus, overlap
from benchmarks.workloads.build import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 12
VOCAB_SIZE = 2_000
# A small tokenizer on a megabyte of the corpus trains in a second or two.
SMALL = ["--requests", str(REQUESTS), "--vocab-size", str(VOCAB_SIZE), "--training-bytes", "1000000"]


def _build(out: Path, seed: int) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.workloads", "build", "--out", str(out),
                           "--seed", str(seed), *SMALL], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> tuple[Path, Path]:
    """Two builds of seed 0, each in its own process (so its own hash seeds) and training its own tokenizer."""
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    _build(first, 0)
    _build(second, 0)
    return first, second


def _requests(out: Path, workload: str) -> list[dict]:
    return [json.loads(line) for line in (out / f"{workload}.jsonl").read_text().splitlines()]


def _tokenizer(out: Path) -> Tokenizer:
    (path,) = out.glob("tokenizer-*.json")
    return Tokenizer.from_file(str(path))


def test_same_seed_gives_identical_files(builds):
    first, second = builds
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert {f"{w}.jsonl" for w in WORKLOADS} | {"stats.json"} < set(names)
    assert [n for n in names if n.startswith("tokenizer-")] != []
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_another_seed_gives_other_requests_from_the_cached_tokenizer(builds, tmp_path):
    first, _ = builds
    (tokenizer_file,) = first.glob("tokenizer-*.json")
    shutil.copy(tokenizer_file, tmp_path)
    _build(tmp_path, 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in first.iterdir())
    for workload in WORKLOADS:
        assert _requests(tmp_path, workload) != _requests(first, workload), workload


def test_tokenizer_gives_back_the_text_it_encodes(builds):
    tokenizer = _tokenizer(builds[0])
    assert tokenizer.get_vocab_size() == VOCAB_SIZE
    text = corpus.load()
    samples = [
        text.sources[len(text.sources) // 2].text[:4000],
        text.topics[0].text,
        "naïve café — ✓ 日本語\tend  \r\n    indented\n\n\n",
        "<|user|>How does `with` work?\n<|assistant|>It calls __enter__().",
    ]
    for sample in samples:
        ids = tokenizer.encode(sample).ids
        assert tokenizer.decode(ids, skip_special_tokens=False) == sample
    assert len(tokenizer.encode("<|assistant|>").ids) == 1  # a turn marker is one token


def test_requests_keep_to_their_lengths(builds):
    stats = json.loads((builds[0] / "stats.json").read_text())
    lengths = stats["lengths"]
    for workload in WORKLOADS:
        requests = _requests(builds[0], workload)
        assert len(requests) == REQUESTS
        assert len({r["request_id"] for r in requests}) == REQUESTS
        for request in requests:
            assert request["workload"] == workload
            assert 0 < len(request["prompt_token_ids"]) <= lengths["prompt_max"]
            assert lengths["trace_min"] <= len(request["trace_token_ids"]) <= lengths["trace_max"]
            ids = request["prompt_token_ids"] + request["trace_token_ids"]
            assert 0 <= min(ids) and max(ids) < stats["vocab_size"]


def test_stats_are_the_files_and_repeat_as_designed(builds):
    stats = json.loads((builds[0] / "stats.json").read_text())
    copyable = {}
    for workload in WORKLOADS:
        pairs = [(r["prompt_token_ids"], r["trace_token_ids"]) for r in _requests(builds[0], workload)]
        shares = overlap.copyable_shares(pairs)
        copyable[workload] = stats["workloads"][workload]["copyable"]
        assert copyable[workload] == {source: {n: round(s, 4) for n, s in by_n.items()}
                                      for source, by_n in shares.items()}
    # Edits and agent turns copy from their prompts; chat replies are new text.
    for workload in ("code-edit", "agentic"):
        assert copyable[workload]["same_request"]["3"] > copyable["chat"]["same_request"]["3"] + 0.3
    assert copyable["summarize"]["same_request"]["3"] > copyable["chat"]["same_request"]["3"]
    # Sessions on one task repeat each other: the corpus of earlier outputs pays.
    assert copyable["agentic"]["earlier_requests"]["3"] > 0.3


def test_copier_counts_by_hand():
    # Each request: prompt 1 2 3, trace 1 2 4 1. With n = 1, the first request's own text
    # predicts only the 2 after a 1; the second's earlier corpus (1->2, 2->4, 4->1) predicts
    # all but its first token, its own text the 2 again.
    request = ([1, 2, 3], [1, 2, 4, 1])
    shares = overlap.copyable_shares([request, request])
    assert shares["same_request"]["1"] == 2 / 8
    assert shares["earlier_requests"]["1"] == 3 / 8
    assert shares["either"]["1"] == 4 / 8
    # With n = 3 only the second request's last token continues a 3-gram seen before (1 2 4).
    assert shares["earlier_requests"]["3"] == 1 / 8
    assert shares["same_request"]["3"] == 0
