"""What an engine that names none of the plugin's speculation settings gets,
per release line, and the GPU runs behind each default.

A setting's default is the plugin's choice only on a line where an engine
run measured that choice at least at upstream's (docs/benchmarks.md); on
every other line it is upstream's behaviour, and the flag opts in. One
table per setting; a line joins a table with the run that justifies it.
Imports nothing from vLLM, so ``info`` and the front end read the same
answer.
"""

from __future__ import annotations

from vllm_sampling_plugin import config as cfg
from vllm_sampling_plugin.integration.version import (
    LINE_0_20,
    LINE_0_32,
    LINE_0_33,
    installed_vllm_version,
    release_line,
)

# ``speculation_policy``: adaptive where it never lost to fixed k.
# 0.20 (H100, issue 24): the plugin's proposer; non-repeating text 0.99-1.07x
# of no speculation against fixed k's 0.36-0.80x.
# 0.33 (upstream's proposer): at 8B (H100) 0.990x / 0.999x of no speculation
# on non-repeating text (fixed k 0.42-0.84x), 0.999x of fixed k on accepting
# text, 1.113x on half-repeating text; at 1B accepting text (H200,
# 2026-11-29) 0.953x of fixed k, inside the 0.934x of its own A/A twin, and
# on non-repeating text every pair >= 0.981x of no speculation at 256
# sequences, the median 1.017x at 64.
# 0.32 (H200, 2026-12-01, 8B, k = 3, "ngram" scheduled asynchronously as the
# plugin schedules it there, vllm_config.py): non-repeating text 0.976x /
# 0.987x of no speculation (64 / 256 sequences); accepting text at k = 7,
# greedy, fixed k 0.975x / 1.016x of adaptive. Its one earlier run, with
# "ngram" scheduled synchronously, gave 0.58-0.62x.
ADAPTIVE_BY_DEFAULT_LINES = (LINE_0_20, LINE_0_32, LINE_0_33)

# ``plugin_verification``: the plugin's fused verification where no mix's
# median fell below 0.99x of upstream's (issue 25's bar). 0.33 (H200,
# 2026-11-29, 8B, k = 3, both engines fixed k): 1.012x / 1.056x top-k/top-p,
# 0.995x / 1.015x greedy, 1.038x / 1.037x seeded top-p of upstream's
# verification (64 / 256 sequences); the op 3.3-4.9x upstream's (H100). As the
# default, against stock vLLM speculating with the same k = 3 (8B, H200,
# 2026-11-29): 1.036x / 1.046x top-k/top-p, 1.002x / 0.992x greedy; k = 7:
# 1.025x / 1.055x top-k/top-p, 1.033x / 1.012x seeded top-p, 1.010x / 0.999x
# greedy; batches with penalties and top-k/top-p (upstream's canvas, the
# plugin's kernel), k = 3: 1.072x / 1.015x, the op 1.79-1.87x upstream's. 0.32
# (H200, 2026-11-29, 8B, k = 3, with the adaptive policy, which on accepting
# text verifies what fixed k does, against stock speculating with the same k):
# top-k/top-p 0.992x / 1.014x (the 64-sequence pairs 0.981x and 1.004x, both
# engines' runs spread 10-12%), seeded top-p 1.058x / 1.034x, greedy 1.012x /
# 1.023x; its engine test of the verification's routes passed there. At k = 7
# (sixth run): top-k/top-p 0.980x / 1.034x, seeded top-p 1.063x / 1.025x,
# greedy 0.936x / 0.990x, both engines scheduling "ngram" synchronously. With
# both scheduling asynchronously ("ngram_gpu", H200, 2026-12-01): top-k/top-p
# 1.020x / 1.060x, seeded top-p 1.001x at 256 sequences (the 64-sequence cell
# compiled stock's kernels in a timed run), greedy 0.959x / 0.984x: below the
# bar at k = 7 in greedy, where the plugin's engine core spent 26.1 against
# stock's 22.7 us of CPU a token at 64 sequences; the default stays on the
# k = 3 cells, and greedy at k = 7 is docs/benchmarks.md's open item. 0.20 has
# no such setting (the plugin's RejectionSampler verifies every draft).
PLUGIN_VERIFICATION_BY_DEFAULT_LINES = (LINE_0_32, LINE_0_33)


def _line(line: str | None) -> str | None:
    return release_line(installed_vllm_version()) if line is None else line


def default_speculation_policy(line: str | None = None) -> str:
    """The ``speculation_policy`` of an engine that names none, on ``line``
    (default: the installed vLLM's)."""
    return cfg.ADAPTIVE if _line(line) in ADAPTIVE_BY_DEFAULT_LINES else cfg.FIXED


def default_verification(line: str | None = None) -> str:
    """The ``plugin_verification`` of an engine that names none, on ``line``
    (default: the installed vLLM's)."""
    return cfg.PLUGIN if _line(line) in PLUGIN_VERIFICATION_BY_DEFAULT_LINES else cfg.UPSTREAM


def defaults(line: str | None = None) -> dict[str, str]:
    """Both speculation settings' defaults on ``line``, by ModelConfig attribute."""
    line = _line(line)  # the installed vLLM's read once, not once per setting
    return {
        cfg.SPECULATION_POLICY_ATTR: default_speculation_policy(line),
        cfg.VERIFICATION_ATTR: default_verification(line),
    }
