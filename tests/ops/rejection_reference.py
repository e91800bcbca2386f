"""An independent NumPy model of the rejection sampler's draws, for exact comparisons.

It re-derives, from the law documented on ``ops.rejection_sample`` and the
streams of ``ops/rejection/__init__.py``, the tokens each request must get,
using the Philox model of ``gumbel_reference.py``:

* every key is ``request_key(seed, position of the logit)``;
* draft ``j`` (temperature > 0) is accepted iff
  ``log p_j(x) > log u + log q_j(x)``, ``u`` the uniform of counter
  ``2**31 - 1`` under logit ``j``'s key (FP32: word 0 of one 10-round Philox
  call; FP64: two words); a point-mass draft has ``log q = 0``;
  greedy rows accept while the draft is the first argmax;
* the first rejection emits the Gumbel-max winner of the residual
  ``log max(p - q, 0)`` (point mass: ``p`` without the draft; a draft id
  outside the vocabulary: ``p``) with the noise of counters ``2**30 + t``,
  its own stream; ``p`` with that noise should the residual have no mass;
* all drafts accepted: the bonus is the sampler's draw at logit ``K``
  (noise of counters ``t``).

Floating point: the kernel works in float32 (its log-sum-exp from fixed-point
sums), the model in float64. ``margins`` collects, for every decision, how far
it was from going the other way, so a test can show that its inputs leave the
two no room to disagree.
"""

import dataclasses

import numpy as np

from tests.ops.gumbel_reference import (
    first_argmax,
    gumbel_fp32_at,
    gumbel_fp64_at,
    request_key,
    uniform_fp32,
    uniform_fp64,
)

ACCEPT_COUNTER = (1 << 31) - 1
RESIDUAL_STREAM = 1 << 30


@dataclasses.dataclass
class Draws:
    tokens: list[list[int]]  # per request: accepted drafts, then the emitted token
    # Smallest distance of any decision from its boundary: an acceptance
    # test's |log p - log u - log q|, a Gumbel-max's gap between its best two.
    margin: float = np.inf


def _log_softmax(x: np.ndarray) -> np.ndarray:
    finite = x[np.isfinite(x)]
    top = finite.max()
    return x - (top + np.log(np.exp(finite - top).sum()))


def _gumbel_winner(scores: np.ndarray, draws: Draws) -> int:
    winner = first_argmax(scores)
    finite = np.sort(scores[np.isfinite(scores)])
    if finite.size > 1:
        draws.margin = min(draws.margin, finite[-1] - finite[-2])
    return winner


def reference_rejection(
    target_logits,  # [B, K + 1, V], raw (the temperature is applied here)
    draft_token_ids,  # [B, K]
    draft_probs,  # None or [B, K, V]
    temperature,  # [B]
    seeds,  # [B]
    positions,  # [B]: position of logit 0
    *,
    use_fp64: bool,
) -> Draws:
    """What ``ops.rejection_sample`` must emit for finite target logits."""
    target_logits = np.asarray(target_logits, dtype=np.float32)
    draft_token_ids = np.asarray(draft_token_ids)
    batch_size, num_logits, vocab_size = target_logits.shape
    tokens = np.arange(vocab_size)
    noise = gumbel_fp64_at if use_fp64 else gumbel_fp32_at
    uniform = uniform_fp64 if use_fp64 else uniform_fp32
    draws = Draws(tokens=[])
    for b in range(batch_size):
        temp = np.float32(temperature[b])
        emitted = []
        for j in range(num_logits):
            key = request_key(int(seeds[b]), int(positions[b]) + j)
            row = target_logits[b, j]
            if temp == 0:
                argmax = first_argmax(row)
                if j < num_logits - 1 and int(draft_token_ids[b, j]) == argmax:
                    emitted.append(argmax)
                    continue
                emitted.append(argmax)
                break
            scaled = (row / temp).astype(np.float64)  # the kernel's fp32 division
            log_p = _log_softmax(scaled)
            if j == num_logits - 1:
                emitted.append(_gumbel_winner(scaled + noise(key, tokens), draws))
                break
            draft = int(draft_token_ids[b, j])
            in_vocab = 0 <= draft < vocab_size
            if draft_probs is None:
                log_q = np.where(tokens == draft, 0.0, -np.inf)
            else:
                with np.errstate(divide="ignore"):
                    log_q = _log_softmax(np.log(np.asarray(draft_probs[b, j], dtype=np.float64)))
            if in_vocab:
                log_u = float(np.log(uniform(key, [ACCEPT_COUNTER])[0]))
                test = log_p[draft] - (log_u + log_q[draft])
                draws.margin = min(draws.margin, abs(test))
                if test > 0:
                    emitted.append(draft)
                    continue
            if not in_vocab:
                residual = scaled
            else:
                with np.errstate(divide="ignore", invalid="ignore"):
                    residual = np.where(
                        log_q < log_p, log_p + np.log1p(-np.exp(log_q - log_p)), -np.inf
                    )
            residual_noise = noise(key, tokens + RESIDUAL_STREAM)
            if np.isfinite(residual).any():
                emitted.append(_gumbel_winner(residual + residual_noise, draws))
            else:
                emitted.append(_gumbel_winner(scaled + residual_noise, draws))
            break
        draws.tokens.append(emitted)
    return draws
