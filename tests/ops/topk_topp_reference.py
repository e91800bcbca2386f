"""An independent NumPy model of top-k/top-p sampling, for exact comparisons.

The kept set follows the semantics documented on ``ops.sample``, computed here
in float64 from the temperature-divided float32 logits (divided as the kernel
divides, in float32): a token is kept by top-k iff its logit is ``>=`` the
k-th largest, then by top-p iff the mass of the kept tokens strictly more
likely than it is ``< top_p`` times the kept mass (the row's maximum always
stays). The token is then the Gumbel-max draw of ``gumbel_reference.py`` over
the kept tokens. Neither the plugin's mask nor its kernels are used.
"""

import dataclasses

import numpy as np

from tests.ops.gumbel_reference import reference_tokens


@dataclasses.dataclass
class KeptSet:
    keep: np.ndarray  # bool [V]
    # Smallest relative distance of any token's mass-above from the top-p cut:
    # below about 1e-6 the kernel's float32 sums could decide either way.
    top_p_margin: float


def kept_set(x: np.ndarray, top_k: int, top_p: float) -> KeptSet:
    """The tokens top-k then top-p keep on the (temperature-divided) row ``x``."""
    x = np.where(np.isnan(x), -np.inf, np.asarray(x, dtype=np.float64))
    vocab_size = x.shape[0]
    keep = np.ones(vocab_size, dtype=bool)
    if 0 < top_k < vocab_size:
        keep &= x >= np.sort(x)[::-1][top_k - 1]
    margin = np.inf
    if x.max() == np.inf:
        # +inf entries hold all the mass: top-p keeps exactly them.
        return KeptSet(keep & ((x == np.inf) | (top_p >= 1.0)), margin)
    if top_p < 1.0 and np.isfinite(x.max()):
        mass = np.where(keep, np.exp(x - x.max()), 0.0)
        ascending = np.argsort(x, kind="stable")
        cumulative = np.cumsum(mass[ascending])
        # Mass of the tokens strictly above each one: everything minus the
        # mass at or below its value.
        at_or_below = cumulative[np.searchsorted(x[ascending], x, side="right") - 1]
        mass_above = cumulative[-1] - at_or_below
        cut = top_p * cumulative[-1]
        candidates = keep & np.isfinite(x)
        margin = float(np.min(np.abs(mass_above[candidates] - cut)) / cumulative[-1])
        keep &= (mass_above < cut) | (x == x.max())
    return KeptSet(keep, margin)


def divided(logits: np.ndarray, temperature, apply_temperature: bool) -> np.ndarray:
    """Rows divided by their temperature in float32 (greedy rows left as they are)."""
    logits = np.asarray(logits, dtype=np.float32)
    if not apply_temperature:
        return logits.copy()
    divisor = np.asarray(temperature, dtype=np.float32)
    divisor = np.where(divisor == 0, np.float32(1.0), divisor)
    return logits / divisor[:, None]


def reference_top_k_top_p(
    logits, temperature, top_k, top_p, seeds, pos, *, use_fp64=False, fp64_stream="philox",
    fp32_stream="philox", apply_temperature=True,
) -> tuple[list[int], float]:
    """What ``top_k_top_p_sample`` must return with one request slot per row,
    and the smallest top-p margin over the rows (see ``KeptSet``)."""
    scaled = divided(np.asarray(logits.cpu() if hasattr(logits, "cpu") else logits),
                     temperature, apply_temperature)
    margin = np.inf
    for row in range(scaled.shape[0]):
        kept = kept_set(scaled[row], int(top_k[row]), float(top_p[row]))
        if float(temperature[row]) != 0:
            margin = min(margin, kept.top_p_margin)
        scaled[row] = np.where(kept.keep, scaled[row], -np.inf)
    tokens = reference_tokens(
        scaled,
        np.arange(scaled.shape[0]),
        np.asarray(temperature, dtype=np.float32),
        np.asarray(seeds, dtype=np.int64),
        np.asarray(pos, dtype=np.int64),
        apply_temperature=False,
        use_fp64=use_fp64,
        fp64_stream=fp64_stream,
        fp32_stream=fp32_stream,
    )
    return tokens, margin
