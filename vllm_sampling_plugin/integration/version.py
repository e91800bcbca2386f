"""The vLLM releases the plugin was measured on, on a GPU, and which one is
installed: the one place in the plugin that names a release.

The seams (one folder each in integration/) decide, from what the installed
vLLM offers, which parts the plugin takes; everything else keys on the shapes
they find. A release newer than every measured one gets the seams whose
shapes their adapters recognise, with one warning (register.py); one older
than the first stays untouched. Supporting a measured release whose seams
keep known shapes is one more row in ``LINE_SEAMS``.
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


# Minor releases (0.20 covers 0.20.0, 0.20.1, ...) measured on a GPU, and
# what each seam's adapter finds there (the survey in docs/compatibility.md;
# tests/integration/test_seams.py checks the installed line's row).
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
    "0.34": _seams(
        draw=shapes.SAMPLE_RANDOM,
        rejection=shapes.VERIFY_STEP_OVER_DRAFT_LOGITS_CACHE,
        speculator=shapes.POLICY_OVER_UPSTREAM_NGRAM_AND_SUFFIX,
    ),
}
SUPPORTED_LINES = tuple(LINE_SEAMS)
SUPPORTED_RANGE = f">={SUPPORTED_LINES[0]}.0"
MEASURED_RANGE = f"{SUPPORTED_LINES[0]}-{SUPPORTED_LINES[-1]}"


def installed_vllm_version() -> str | None:
    try:
        return version("vllm")
    except PackageNotFoundError:
        return None


def release_line(found: str | None) -> str | None:
    """The minor line (``"0.33"``) of release ``found`` where the plugin acts
    on it: a measured line or a newer one; None for an older release or none."""
    if found is None:
        return None
    release = Version(Version(found).base_version)
    if release < Version(SUPPORTED_RANGE.removeprefix(">=")):
        return None
    return f"{release.major}.{release.minor}"


def is_measured(line: str | None) -> bool:
    """Whether ``line`` has a row in ``LINE_SEAMS`` (else: newer than all)."""
    return line in LINE_SEAMS
