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

PROG = "python3 -m benchmarks soak"
# Where a server answers at all, it answers its first /health within this.
PROBE_TIMEOUT_S = 5.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, usage="%(prog)s (--url URL | --launch MODEL) [OPTION ...] [-- SERVE_ARG ...]",
        description="A bounded mixed load against a vllm serve: every answer checked, memory "
                    "sampled; exits 1 on any unexpected answer or memory growth over the limits.")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="base URL of a running server; soak stops at once if "
                        "nothing answers there")
    target.add_argument("--launch", metavar="MODEL",
                        help="start vllm serve MODEL on 127.0.0.1 (needs a CUDA GPU); the "
                        "arguments after -- go to vllm serve")
    parser.add_argument("--port", type=int, default=8123, help="port for --launch (default 8123)")
    parser.add_argument("--server-pid", type=int,
                        help="PID whose RSS (with children) is sampled (default: the --launch "
                        "server; none with --url)")
    parser.add_argument("--vocab-size", type=int,
                        help="token ids must be below it (default: the model's config.json)")
    parser.add_argument("--requests", type=int, default=2000,
                        help="requests to send, warm-up included (default 2000)")
    parser.add_argument("--concurrency", type=int, default=64,
                        help="requests in flight at once (default 64)")
    parser.add_argument("--warmup", type=int, default=100,
                        help="requests before the start memory sample (default 100)")
    parser.add_argument("--max-tokens", type=int, default=48,
                        help="scale of the requests' max_tokens, drawn from 1 to this for most "
                        "kinds (default 48)")
    parser.add_argument("--abort-fraction", type=float, default=0.05,
                        help="share of requests the client drops mid-stream (default 0.05)")
    parser.add_argument("--malformed-fraction", type=float, default=0.03,
                        help="share of requests the server must refuse with a 400 (default 0.03)")
    parser.add_argument("--window-s", type=float, default=30.0,
                        help="width of the tokens-per-window rows of the summary (default 30)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the request mix: the same seed sends the same requests")
    parser.add_argument("--max-gpu-growth-mib", type=float, default=256.0,
                        help="fail if GPU memory grows more than this from warm-up to the end "
                        "(default 256)")
    parser.add_argument("--max-host-growth-mib", type=float, default=1024.0,
                        help="fail if the server's RSS grows more than this from warm-up to the "
                        "end (default 1024)")
    parser.add_argument("--startup-timeout-s", type=float, default=900.0,
                        help="how long to wait for a server that is still loading to answer "
                        "/health (default 900)")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    serve_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, serve_args = argv[:split], argv[split + 1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.vocab_size is None and not (args.launch and Path(args.launch, "config.json").is_file()):
        parser.error("--vocab-size is needed unless --launch names a local model directory")
    args.serve_args = serve_args
    return args


def vocab_size_of(model: str) -> int:
    config = json.loads((Path(model) / "config.json").read_text())
    return int(config.get("vocab_size") or config["text_config"]["vocab_size"])


def cuda_gpu_count() -> int:
    """The NVIDIA GPUs NVML sees: vLLM's own test for a CUDA platform
    (without one, ``vllm serve`` stops in "Failed to infer device type")."""
    try:
        import pynvml  # nvidia-ml-py, which vLLM's CUDA builds depend on
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()


def health_status(url: str) -> int | None:
    """The HTTP status ``url``/health answers, or None where nothing answers."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=PROBE_TIMEOUT_S) as response:
            return response.status
    except urllib.error.HTTPError as answered:
        return answered.code
    except (urllib.error.URLError, OSError):
        return None


def wait_until_healthy(url: str, server: subprocess.Popen | None, timeout_s: float) -> None:
    """Return once ``url``/health answers 200. A server given by --url must
    answer at once (vLLM listens only once its model has loaded); one this
    command started may take up to ``timeout_s`` to load."""
    status = health_status(url)
    if status == 200:
        return
    if server is None and status is None:
        raise SystemExit(f"{PROG}: nothing answers at {url}/health: start vllm serve there "
                         "first, or pass --launch MODEL")
    what = "vllm serve to load its model and" if server is not None else "the server to"
    print(f"{PROG}: waiting up to {timeout_s:.0f} s (--startup-timeout-s) for {what} answer "
          f"200 at {url}/health", file=sys.stderr, flush=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server is not None and server.poll() is not None:
            raise SystemExit(f"{PROG}: vllm serve exited with {server.returncode} before it was healthy")
        if health_status(url) == 200:
            return
        time.sleep(2)
    raise SystemExit(f"{PROG}: {url} not healthy after {timeout_s:.0f} s")


def served_model(url: str) -> str:
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as response:
        return json.load(response)["data"][0]["id"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    server = None
    url = args.url
    if args.launch:
        if cuda_gpu_count() == 0:
            raise SystemExit(f"{PROG} --launch starts vllm serve, which needs a CUDA GPU, and "
                             "none is visible: run it on a machine with an NVIDIA GPU, or point "
                             "--url at a running server")
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
