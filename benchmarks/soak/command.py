"""``python3 -m benchmarks soak``: a bounded mixed load against a ``vllm serve``.

Against a running server:

    python3 -m benchmarks soak --url http://127.0.0.1:8000 --vocab-size 128256 \
        --server-pid $(pgrep -f 'vllm.entrypoints.cli.main serve' | head -1)

Or start one (the flags after ``--`` go to ``vllm serve``):

    python3 -m benchmarks soak --launch /models/Llama-3.2-1B-Instruct --requests 3000 -- \
        --speculative-config '{"method": "ngram", "num_speculative_tokens": 3, \
"prompt_lookup_max": 3}' --max-model-len 2048

Prints the summary (ok / rejected / aborted / unexpected, tokens, p50/p99
latency, GPU and host memory at start and end, tokens per window) and exits
1 on any unexpected result or memory growth beyond the limits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from benchmarks.soak.memory import sample_memory
from benchmarks.soak.mix import make_request
from benchmarks.soak.run import soak
from benchmarks.soak.summary import render, verdict


def parse_args(argv: list[str]) -> argparse.Namespace:
    serve_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, serve_args = argv[:split], argv[split + 1:]
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks soak",
                                     description=__doc__.split("\n\n")[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="base URL of a running server")
    target.add_argument("--launch", metavar="MODEL", help="start vllm serve MODEL on 127.0.0.1")
    parser.add_argument("--port", type=int, default=8123, help="port for --launch")
    parser.add_argument("--server-pid", type=int, help="PID whose RSS (with children) is sampled")
    parser.add_argument("--vocab-size", type=int,
                        help="token ids must be below it (default: the model's config.json)")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=100,
                        help="requests before the start memory sample")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--abort-fraction", type=float, default=0.05)
    parser.add_argument("--malformed-fraction", type=float, default=0.03)
    parser.add_argument("--window-s", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-gpu-growth-mib", type=float, default=256.0)
    parser.add_argument("--max-host-growth-mib", type=float, default=1024.0)
    parser.add_argument("--startup-timeout-s", type=float, default=900.0)
    args = parser.parse_args(argv)
    if args.vocab_size is None and not (args.launch and Path(args.launch, "config.json").is_file()):
        parser.error("--vocab-size is needed unless --launch names a local model directory")
    args.serve_args = serve_args
    return args


def vocab_size_of(model: str) -> int:
    config = json.loads((Path(model) / "config.json").read_text())
    return int(config.get("vocab_size") or config["text_config"]["vocab_size"])


def wait_until_healthy(url: str, server: subprocess.Popen | None, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server is not None and server.poll() is not None:
            raise SystemExit(f"vllm serve exited with {server.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(2)
    raise SystemExit(f"{url} not healthy after {timeout_s:.0f} s")


def served_model(url: str) -> str:
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as response:
        return json.load(response)["data"][0]["id"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    server = None
    url = args.url
    if args.launch:
        url = f"http://127.0.0.1:{args.port}"
        env = {**os.environ, "VLLM_USE_V2_MODEL_RUNNER": os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "1")}
        server = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", args.launch,
             "--host", "127.0.0.1", "--port", str(args.port), *args.serve_args],
            env=env,
        )
    try:
        wait_until_healthy(url, server, args.startup_timeout_s)
        vocab_size = args.vocab_size or vocab_size_of(args.launch)
        model = served_model(url)
        requests = [
            make_request(i, model=model, vocab_size=vocab_size, seed=args.seed,
                         abort_fraction=args.abort_fraction,
                         malformed_fraction=args.malformed_fraction, max_tokens=args.max_tokens)
            for i in range(args.requests)
        ]
        pid = args.server_pid or (server.pid if server is not None else None)
        summary = asyncio.run(soak(
            url, requests, vocab_size=vocab_size, concurrency=args.concurrency,
            warmup=args.warmup, window_s=args.window_s,
            sample_memory=lambda: sample_memory(pid),
        ))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=120)
    failures = verdict(summary, args.max_gpu_growth_mib, args.max_host_growth_mib)
    print(render(summary, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
