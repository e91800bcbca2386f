"""Builds every workload into one folder: a JSONL file per workload (one
request a line), the tokenizer they were tokenised with, and stats.json with
the lengths and what an ideal copier could take; the same seed and interpreter
always give the same files."""

import json
import random
from pathlib import Path

import tokenizers

from benchmarks.workloads import agentic, chat, code_edit, corpus, overlap, summarize, tokenizer
from benchmarks.workloads.request import Lengths, Request

WORKLOADS = {module.NAME: module.build for module in (code_edit, summarize, chat, agentic)}
DEFAULT_REQUESTS = 256  # per workload: enough to fill a 256-sequence batch


def _spread(values: list[int]) -> dict[str, float]:
    return {"min": min(values), "mean": round(sum(values) / len(values), 1), "max": max(values)}


def _stats(requests: list[Request]) -> dict:
    shares = overlap.copyable_shares([(r.prompt_token_ids, r.trace_token_ids) for r in requests])
    return {
        "requests": len(requests),
        "prompt_tokens": _spread([len(r.prompt_token_ids) for r in requests]),
        "trace_tokens": _spread([len(r.trace_token_ids) for r in requests]),
        "copyable": {source: {n: round(share, 4) for n, share in by_n.items()}
                     for source, by_n in shares.items()},
    }


def build(out: Path, seed: int, requests: int, lengths: Lengths, vocab_size: int,
          training_bytes: int | None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    text = corpus.load()
    bpe, tokenizer_path = tokenizer.load_or_train(out, text, vocab_size, training_bytes)
    stats = {
        "python": text.python,
        "corpus_sha256": text.sha256(),
        "tokenizers": tokenizers.__version__,
        "tokenizer": tokenizer_path.name,
        "vocab_size": bpe.get_vocab_size(),
        "training_bytes": training_bytes,
        "seed": seed,
        "lengths": {"prompt_max": lengths.prompt_max, "trace_min": lengths.trace_min,
                    "trace_max": lengths.trace_max},
        "workloads": {},
    }
    for name, build_workload in WORKLOADS.items():
        # One generator per workload, so that changing one workload leaves the others' requests.
        built = build_workload(text, bpe, random.Random(f"{seed}:{name}"), requests, lengths)
        with open(out / f"{name}.jsonl", "w") as lines:
            for request in built:
                lines.write(json.dumps(request.to_json()) + "\n")
        stats["workloads"][name] = _stats(built)
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def table(stats: dict) -> str:
    """The stats as a markdown table: the copyable shares in percent, for n = 1 / 2 / 3."""
    rows = ["| workload | requests | prompt tokens (mean) | trace tokens (mean) "
            "| same request, n=1/2/3 | earlier requests, n=1/2/3 | either, n=3 |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def percents(by_n: dict) -> str:
        return " / ".join(f"{100 * by_n[n]:.0f}" for n in sorted(by_n))

    for name, workload in stats["workloads"].items():
        copyable = workload["copyable"]
        rows.append(f"| {name} | {workload['requests']} | {workload['prompt_tokens']['mean']:.0f} "
                    f"| {workload['trace_tokens']['mean']:.0f} | {percents(copyable['same_request'])} "
                    f"| {percents(copyable['earlier_requests'])} | {100 * copyable['either']['3']:.0f} |")
    return "\n".join(rows)
