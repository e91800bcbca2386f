"""The vllm-sampling-plugin command: what the plugin does with the installed
vLLM (``info``), and its ops on a few tokens (``demo``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
from importlib.metadata import PackageNotFoundError, entry_points, version

from vllm_sampling_plugin import __version__, config

PROG = "vllm-sampling-plugin"
DESCRIPTION = """\
What vllm-sampling-plugin does with the installed vLLM, and its ops on a few tokens.

  vllm-sampling-plugin info              versions, active or not and why, one line per part
  vllm-sampling-plugin info --verbose    also the seams, the settings and why each part is whose
  vllm-sampling-plugin info --markdown   the release x part table of docs/compatibility.md
  vllm-sampling-plugin demo              sample a few tokens with the functional API (no GPU needed)
"""

ENTRY_POINT_NAME = "vllm_sampling_plugin"
# The width `info --verbose` wraps its explanations to.
WRAP = 100


def _version_of(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def _entry_point_registered() -> bool:
    group = entry_points(group="vllm.general_plugins")
    return any(ep.name == ENTRY_POINT_NAME for ep in group)


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _plugin_status(found: dict | None) -> str:
    """Active or not, and why. ``found``: what the seams' adapters found
    (None: no supported release installed)."""
    from vllm_sampling_plugin.integration.version import SUPPORTED_RANGE

    if _version_of("vllm") == "not installed":
        return "inactive: vLLM is not installed"
    if not _entry_point_registered():
        return "inactive: not registered (reinstall the package: the entry point is missing)"
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and ENTRY_POINT_NAME not in allowed.split(","):
        return f"inactive: registered but filtered out by VLLM_PLUGINS={allowed!r}"
    if found is None:
        return f"inactive: vLLM {_version_of('vllm')} is outside {SUPPORTED_RANGE}"
    taken = [seam.seam for seam in found.values() if seam.is_taken]
    if not taken:
        return "inactive: no seam of this vLLM has a shape the plugin knows"
    return f"active (vLLM loads it in every process); seams taken: {', '.join(taken)}"


def _route_vllm_logs_to_stderr() -> None:
    """vLLM's logger writes to stdout unless told otherwise, and it reads this
    when first imported: set before anything here imports vLLM, so that
    stdout holds only the report (`info | head -1` is the plugin's line)."""
    os.environ["VLLM_LOGGING_STREAM"] = "ext://sys.stderr"


def info(verbose: bool) -> int:
    try:
        setting = config.parse_flashinfer_env()
    except ValueError as e:
        # Checked before vLLM is imported: the mistake is reported at once.
        _error(str(e))
        return 2
    _route_vllm_logs_to_stderr()
    from vllm_sampling_plugin.integration.seams import detect_seams
    from vllm_sampling_plugin.integration.version import installed_vllm_version, release_line

    line = release_line(installed_vllm_version())
    # What register() would find and take in this vLLM (nothing is patched).
    found = detect_seams() if line is not None else None

    print(f"{PROG} {__version__}, vLLM {_version_of('vllm')}: {_plugin_status(found)}")
    print(", ".join(f"{dist} {_version_of(dist)}"
                    for dist in ("torch", "triton", "flashinfer-python")))
    print("use_fp64_gumbel: off unless an engine sets it (FP32 noise; "
          "--use-fp64-gumbel / LLM(use_fp64_gumbel=True) selects FP64)")
    meaning = config.FLASHINFER_DRAWS if setting else config.PLUGIN_DRAWS
    shown = {None: "unset", True: "1", False: "0"}[setting]
    print(f"{config.FLASHINFER_ENV}={shown}: {meaning}")
    status = 0
    if found is not None:
        status = _flashinfer_decision(setting, found, line, verbose)
        _print_parts(found, line, verbose)
    return status


def _flashinfer_decision(setting: bool | None, found: dict, line: str, verbose: bool) -> int:
    """Where the settings seam is the plugin's, the plugin's own FlashInfer
    decision on this machine; 1 if an engine's start-up would fail."""
    from vllm_sampling_plugin.integration.common import shapes

    if not found[shapes.SETTINGS].is_taken:
        if verbose:
            _print_wrapped(f"FlashInfer sampler: decided by vLLM {line} at start-up; the "
                           "plugin draws the batches described above")
        return 0
    from vllm_sampling_plugin.ops.topk_topp.flashinfer import probe_flashinfer
    from vllm_sampling_plugin.selection import decide_flashinfer

    decision = decide_flashinfer(setting, probe_flashinfer)
    if decision.level == logging.ERROR:
        print("FlashInfer sampler: an engine would fail at start-up here (stderr says why)")
        _error(decision.message)
        return 1
    print(f"FlashInfer sampler: {'used' if decision.use else 'not used'} on this machine")
    if verbose:
        _print_wrapped(decision.message, indent="  ")
    return 0


def _print_wrapped(text: str, indent: str = "") -> None:
    # Whole words only: flags and paths stay searchable in the output.
    print(textwrap.fill(text, WRAP, initial_indent=indent, subsequent_indent=indent + "  ",
                        break_on_hyphens=False, break_long_words=False))


def _print_parts(found: dict, line: str, verbose: bool) -> None:
    from vllm_sampling_plugin import measurements
    from vllm_sampling_plugin.integration.parts import END_TO_END, SHORT_NAMES, parts_rows

    print(f"measured on vLLM {line}: {measurements.ratio_text(line, END_TO_END)}")
    if verbose:
        for seam in found.values():
            _print_wrapped(f"seam {seam.seam}: "
                           + (f"taken ({seam.shape})" if seam.is_taken else seam.reason))
    print(f"parts on vLLM {line} (part, owner, measured gain):")
    width = max(len(name) for name in SHORT_NAMES.values())
    rows = parts_rows(found, line)
    owner_width = max(len(owner) for _, owner, _, _ in rows)
    for part, owner, why, ratio in rows:
        print(f"  {SHORT_NAMES[part]:<{width}}  {owner:<{owner_width}}  {ratio}")
        if verbose:
            _print_wrapped(why, indent="      ")


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


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and each command's, by name (an unknown option
    is reported with the usage of the command it was given to)."""
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Not required=True: argparse would then report a missing command before
    # an unknown option (`vllm-sampling-plugin --frob`); _run reports both.
    sub = parser.add_subparsers(dest="command", metavar="{info,demo}")
    info_parser = sub.add_parser("info", help="versions, active or not and why, the parts")
    info_parser.add_argument("--verbose", action="store_true",
                             help="also the seams, the settings and why each part is whose")
    info_parser.add_argument("--markdown", action="store_true",
                             help="print the release x part table of docs/compatibility.md instead")
    demo_parser = sub.add_parser("demo", help="sample a few tokens with the functional API "
                                 "(no GPU needed)")
    return parser, {"info": info_parser, "demo": demo_parser}


def _run(argv: list[str] | None) -> int:
    parser, commands = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        (commands[args.command] if args.command else parser).error(
            f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.error("name a command: info or demo")
    if args.command == "info":
        return markdown() if args.markdown else info(args.verbose)
    return demo()


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
