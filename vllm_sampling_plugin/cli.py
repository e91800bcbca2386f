"""``vllm-sampling-plugin``: inspect the installation, run benchmarks, try the ops.

    vllm-sampling-plugin info                 versions, registration, settings, parts
    vllm-sampling-plugin info --markdown      the release x part table of docs/compatibility.md
    vllm-sampling-plugin demo                 sample a few tokens with the functional API
                                              (no GPU needed)
    vllm-sampling-plugin bench AREA [ARGS]    a CUDA GPU benchmark; AREA: sampler, topk_topp,
                                              rejection, ngram, e2e, upstream (the plugin's
                                              ops against vLLM 0.32's or 0.33's)
    vllm-sampling-plugin soak [ARGS]          a bounded mixed load against a `vllm serve`
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, entry_points, version

from vllm_sampling_plugin import __version__, config

BENCH_AREAS = ("sampler", "topk_topp", "rejection", "ngram", "e2e", "upstream")
ENTRY_POINT_NAME = "vllm_sampling_plugin"


def _version_of(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def _entry_point_registered() -> bool:
    group = entry_points(group="vllm.general_plugins")
    return any(ep.name == ENTRY_POINT_NAME for ep in group)


def _plugin_status(found: dict | None) -> str:
    """``found``: what the seams' adapters found (None: not a supported release)."""
    from vllm_sampling_plugin.integration.version import SUPPORTED_RANGE

    if not _entry_point_registered():
        return "not registered (reinstall the package: the entry point is missing)"
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and ENTRY_POINT_NAME not in allowed.split(","):
        return f"registered but filtered out by VLLM_PLUGINS={allowed!r}"
    if found is None:
        return (
            f"registered but inactive: vLLM {_version_of('vllm')} is outside "
            f"{SUPPORTED_RANGE}"
        )
    taken = [f"{seam.seam} ({seam.shape})" for seam in found.values() if seam.is_taken]
    if not taken:
        return "registered but inactive: no seam of this vLLM has a shape the plugin knows"
    return f"registered and active (vLLM loads it in every process); seams: {', '.join(taken)}"


def info() -> int:
    from vllm_sampling_plugin.integration.common import shapes
    from vllm_sampling_plugin.integration.seams import detect_seams
    from vllm_sampling_plugin.integration.version import release_line

    line = release_line(_version_of("vllm"))
    # What register() would find and take in this vLLM (nothing is patched).
    found = detect_seams() if line is not None else None

    rows = [
        ("vllm-sampling-plugin", __version__),
        ("vllm", _version_of("vllm")),
        ("torch", _version_of("torch")),
        ("triton", _version_of("triton")),
        ("flashinfer-python", _version_of("flashinfer-python")),
        ("plugin", _plugin_status(found)),
        (
            "use_fp64_gumbel",
            "off by default: FP32 Gumbel noise "
            "(--use-fp64-gumbel / LLM(use_fp64_gumbel=True) selects FP64)",
        ),
    ]
    status = 0
    try:
        setting = config.parse_flashinfer_env()
    except ValueError as e:
        rows.append((config.FLASHINFER_ENV, f"INVALID: {e}"))
        status = 1
    else:
        shown = {None: "unset (on where supported)", True: "1", False: "0"}[setting]
        rows.append((config.FLASHINFER_ENV, shown))
        if found is not None and found[shapes.SETTINGS].is_taken:
            status = _flashinfer_decision(setting, rows)
        elif line is not None:
            rows.append((
                "FlashInfer sampler",
                f"decided by vLLM {line} at start-up; the plugin draws only the "
                "batches vLLM does not send to FlashInfer",
            ))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    if found is not None:
        _print_parts(found, line)
    return status


def _flashinfer_decision(setting: bool | None, rows: list[tuple[str, str]]) -> int:
    """The plugin's own FlashInfer decision (where it owns the setting); 1 if
    start-up would fail."""
    from vllm_sampling_plugin.ops.topk_topp.flashinfer import probe_flashinfer
    from vllm_sampling_plugin.selection import decide_flashinfer

    decision = decide_flashinfer(setting, probe_flashinfer)
    rows.append(("FlashInfer sampler", "used" if decision.use else "not used"))
    rows.append(("  because", decision.message))
    return 1 if decision.level == logging.ERROR else 0


def _print_parts(found: dict, line: str) -> None:
    from vllm_sampling_plugin.integration.parts import parts_rows

    print(f"\nparts on vLLM {line}.x (part: owner; why; plugin vs upstream):")
    for part, owner, why, ratio in parts_rows(found, line):
        print(f"  {part}: {owner}; {why}; {ratio}")


def markdown() -> int:
    from vllm_sampling_plugin.integration.parts import compatibility_markdown

    print(compatibility_markdown())
    return 0


def demo() -> int:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        # Kernels must be defined after this is set to run in the interpreter.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from vllm_sampling_plugin import ops

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 64, generator=gen).to(device)
    temperature = torch.tensor([0.0, 0.7, 1.0, 1.0], device=device)
    seeds = torch.tensor([1, 2, 3, 3], device=device)
    positions = torch.tensor([10, 10, 10, 11], device=device)
    top_k = torch.tensor([0, 0, 8, 8], device=device)
    tokens = ops.sample(logits, temperature, seeds, positions, top_k=top_k)
    print(f"device {device}; greedy, T=0.7, top-k 8 at two positions:")
    print(tokens.tolist())
    return 0


BENCH_DESCRIPTION = """\
Time the plugin's kernels against stock vLLM's. Every area needs a CUDA GPU and
says so in one line without one (`bench upstream --device cpu --small` is the
exception: it checks its plumbing through Triton's interpreter). Options of an
area: vllm-sampling-plugin bench AREA --help. Results and what each area
measures: docs/benchmarks.md.
"""


def _run(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-sampling-plugin", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    info_parser = sub.add_parser("info", help="versions, registration, settings, parts")
    info_parser.add_argument(
        "--markdown", action="store_true",
        help="print the release x part table of docs/compatibility.md instead",
    )
    bench = sub.add_parser("bench", help="run a benchmark (needs a CUDA GPU)",
                           description=BENCH_DESCRIPTION,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("area", choices=BENCH_AREAS)
    bench.add_argument("args", nargs=argparse.REMAINDER,
                       help="the area's options (bench AREA --help lists them)")
    sub.add_parser("demo", help="sample a few tokens with the functional API (no GPU needed)")
    # Its own parser reads every argument, --help included.
    sub.add_parser("soak", help="a bounded mixed load against a vllm serve (soak --help)",
                   add_help=False)
    args, soak_args = parser.parse_known_args(argv)
    if args.command == "soak":
        from vllm_sampling_plugin.soak.command import main as soak_main

        return soak_main(soak_args)
    if soak_args:
        parser.error(f"unrecognized arguments: {' '.join(soak_args)}")
    if args.command == "info":
        return markdown() if args.markdown else info()
    if args.command == "demo":
        return demo()
    module = importlib.import_module(f"vllm_sampling_plugin.bench.{args.area}")
    return module.main(args.args) or 0


# What a shell reports for a command that SIGPIPE ended (`yes | head -1`).
EXIT_BROKEN_PIPE = 128 + 13


def main(argv: list[str] | None = None) -> int:
    """The console script. When the reader of stdout goes away (`info | head -1`)
    it stops quietly with status 141, as Unix tools do, instead of a traceback."""
    try:
        status = _run(argv)
        # Flushed here, inside the try: a closed pipe would otherwise surface
        # in the interpreter's own flush at exit, as "Exception ignored".
        sys.stdout.flush()
    except BrokenPipeError:
        # Nothing more can be written there, and the interpreter flushes stdout
        # once more on exit: point it at /dev/null so that flush succeeds.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return status


if __name__ == "__main__":
    sys.exit(main())
