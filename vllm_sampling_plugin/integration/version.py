"""The vLLM releases the plugin has been checked against, and which one is installed.

Inside a listed release line the seams (integration/seams/) decide, from
what the installed vLLM offers, which parts the plugin takes; outside them
the plugin patches nothing. Supporting a new release whose seams keep their
shapes is one more line in ``SUPPORTED_LINES``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from packaging.version import Version

from vllm_sampling_plugin.integration.common import shapes



def _seams(settings=None, draw=None, rejection=None, speculator=None) -> dict[str, str | None]:
    """One release line's row: the shape each seam's adapter finds (None: upstream's)."""
    return {
        shapes.SETTINGS: settings,
        shapes.DRAW: draw,
        shapes.REJECTION: rejection,
        shapes.SPECULATOR: speculator,
        shapes.WARM_UP: shapes.AFTER_DUMMY_SAMPLER_RUN if draw else None,
    }


# Minor releases (0.20 covers 0.20.0, 0.20.1, ...) whose V2 runner the seams
# were checked against, and what each adapter finds there (the survey in
# docs/compatibility.md; tests/integration/test_seams.py checks the
# installed line's row). A release that keeps every shape of an earlier one
# is supported by adding its row.
LINE_SEAMS: dict[str, dict[str, str | None]] = {
    "0.20": _seams(
        shapes.ENGINE_ARGS_WRAPPED,
        shapes.SAMPLE,
        shapes.STRICT_PROBABILISTIC_SYNTHETIC,
        shapes.NGRAM_BEFORE_REQUEST_STATE,
    ),
    "0.21": _seams(shapes.ENGINE_ARGS_WRAPPED, shapes.SAMPLE),
    "0.22": _seams(draw=shapes.SAMPLE),
    "0.23": _seams(draw=shapes.SAMPLE_SKIPPING_TOP_K_TOP_P),
    "0.24": _seams(draw=shapes.SAMPLE_SKIPPING_TOP_K_TOP_P),
    "0.25": _seams(draw=shapes.SAMPLE_SKIPPING_TOP_K_TOP_P),
    "0.26": _seams(draw=shapes.SAMPLE_SKIPPING_TOP_K_TOP_P),
    "0.27": _seams(draw=shapes.SAMPLE_SKIPPING_TOP_K_TOP_P),
    "0.28": _seams(draw=shapes.SAMPLE_SKIPPING_TOP_K_TOP_P),
    "0.29": _seams(draw=shapes.SAMPLE_SKIPPING_TOP_K_TOP_P),
    "0.30": _seams(draw=shapes.SAMPLE_RANDOM),
    "0.31": _seams(draw=shapes.SAMPLE_RANDOM),
    "0.32": _seams(
        draw=shapes.SAMPLE_RANDOM,
        rejection=shapes.VERIFY_STEP_OVER_UPSTREAM,
        speculator=shapes.POLICY_OVER_UPSTREAM_NGRAM,
    ),
    "0.33": _seams(
        draw=shapes.SAMPLE_RANDOM,
        rejection=shapes.VERIFY_STEP_OVER_UPSTREAM,
        speculator=shapes.POLICY_OVER_UPSTREAM_NGRAM,
    ),
}
SUPPORTED_LINES = tuple(LINE_SEAMS)
# The lines whose parts were measured on a GPU (data/measurements.json).
LINE_0_20, LINE_0_32, LINE_0_33 = "0.20", "0.32", "0.33"
SUPPORTED_RANGE = f">={SUPPORTED_LINES[0]}.0,<0.{int(SUPPORTED_LINES[-1].split('.')[1]) + 1}"


def installed_vllm_version() -> str | None:
    try:
        return version("vllm")
    except PackageNotFoundError:
        return None


def release_line(found: str | None) -> str | None:
    """The supported line ``found`` belongs to, or None (unsupported or absent)."""
    if found is None:
        return None
    release = Version(Version(found).base_version)
    line = f"{release.major}.{release.minor}"
    return line if line in SUPPORTED_LINES else None


def vllm_version_supported(found: str | None = None) -> bool:
    found = installed_vllm_version() if found is None else found
    return release_line(found) is not None
