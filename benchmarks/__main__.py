"""``python3 -m benchmarks COMMAND [ARGS]``: the lab's commands, run from a checkout.

The wheel ships the product; these measure it (docs/benchmarks.md has the
results) and only ever run from the repository.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Command -> (module whose main(argv) runs it, one line of help).
COMMANDS = {
    "sampler": ("benchmarks.sampler", "one sampling step: Gumbel-max against stock vLLM 0.20"),
    "topk_topp": ("benchmarks.topk_topp", "top-k/top-p: the fused kernel against FlashInfer and vLLM"),
    "rejection": ("benchmarks.rejection", "one rejection-sampling step against stock vLLM 0.20"),
    "ngram": ("benchmarks.ngram", "the n-gram proposer against vLLM 0.20's two"),
    "upstream": ("benchmarks.upstream", "the plugin's ops against vLLM 0.32's or 0.33's own"),
    "e2e": ("benchmarks.e2e", "real vLLM engines, stock against the plugin"),
    "trace_summary": ("benchmarks.e2e.trace_summary",
                      "real-text speculation, a table per workload, from e2e trace reports"),
    "soak": ("benchmarks.soak.command", "a bounded mixed load against a vllm serve"),
}

DESCRIPTION = """\
The plugin's lab. Every command but soak and trace_summary needs a CUDA GPU
and says so in one line without one; soak needs a running vllm serve, or a
CUDA GPU to start one; trace_summary reads reports bench e2e wrote.
A command's options: python3 -m benchmarks COMMAND --help.
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python3 -m benchmarks", usage="%(prog)s COMMAND [ARGS...]", description=DESCRIPTION,
        epilog="commands:\n" + "\n".join(f"  {name:<14} {help}" for name, (_, help) in COMMANDS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=COMMANDS, metavar="COMMAND", help="one of the commands below")
    # Only the first word is the lab's: the rest, "--" included, is the command's own.
    command = parser.parse_args(argv[:1]).command
    module = importlib.import_module(COMMANDS[command][0])
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
