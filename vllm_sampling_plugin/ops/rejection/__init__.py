"""Rejection sampling for speculative decoding: one kernel for every mode.

One step body, ``rejection_step`` (``step.py``), serves every mode: standard
(``strict`` / ``probabilistic`` in vLLM 0.20) and synthetic, with or without
draft logits, in FP32 or FP64. A request is walked in steps ``0 .. K`` over
its vocabulary blocks. Step ``step`` first judges draft ``step - 1`` from the
partial sums step ``step - 1`` left behind, and then does the one piece of
row work the request still needs:

* the block pass over target row ``step`` (max, argmax and summed exponentials
  per stats tile; the same for the draft row) while every draft so far is
  accepted;
* the residual resample of row ``step - 1`` when that draft was just rejected;
* the bonus sample of row ``step`` when it follows the last accepted draft.

A request therefore never reads a row beyond its first rejection: the memory
traffic follows the acceptance pattern, in standard and synthetic mode alike.

Two launch styles run that body (``plan_launch`` picks one per call):

* small batches: one launch, ``_rejection_kernel``. The blocks of a request
  meet at a per-request barrier between steps and the last one to finish
  writes the tokens. One launch instead of ``K + 2`` is what a small batch
  needs: its kernels take microseconds, the host's launches tens.
* large batches: one launch of ``_rejection_step_kernel`` per step, then
  ``_emit_kernel``. With several waves of programs, blocks that wait at a
  barrier would hold their SM slots idle; separate launches keep every slot
  streaming.

Launch plans and exact results
------------------------------
How many tokens a program covers (and its loop chunks and warps) is chosen
per call so that the grid has about ``programs_per_sm`` programs per SM
(``TUNING``, ``plan_launch``). No result depends on the plan:

* partial sums are kept per *stats tile*, a span of tokens that depends on
  the vocabulary size only; each tile sums ``exp(logit - tile max)`` as
  fixed-point integers, and the row's log-sum-exp adds the rescaled tile
  sums as integers too. Integer addition is exact, so the log-sum-exp has
  the same bits whatever the launch style, block, chunk or warp count (a float sum's
  rounding would follow the reduction order, which all of those change);
* maxima are exact and every argmax keeps the lowest token id among equal
  values, per lane, per program and across programs;
* the noise depends on (seed, position, token index) only.

Random streams (every key is ``request_key(seed, position of the logit)``)
--------------------------------------------------------------------------
* acceptance uniform of draft ``i``: counter ``_ACCEPT_COUNTER`` under the key
  of logit ``i`` (``uniform`` of ``ops/random.py``);
* residual resample at a rejected logit: the Gumbel noise of ``ops/random.py``
  for tokens shifted by ``_RESIDUAL_STREAM``, so it is independent of the
  acceptance uniform and of the plain Gumbel stream a drafter may have used to
  pick the draft at that position (reusing that noise would bias the resample
  towards the rejected draft);
* bonus token: the plain Gumbel stream of the sampler (counters ``[0, V)``),
  so with every draft accepted the bonus is what the sampler draws there.

Point-mass drafts can also be verified by matching (``matching.py``): the
target's own draw at every logit, drafts kept while it repeats them. Same
acceptance and output distribution; every emitted token is the sampler's
draw at its (seed, position), whatever the drafts. The runner integration
verifies n-gram drafts that way.
"""
from .functional import rejection_sample, unconditional_to_conditional_rates
from .launcher import TUNING, RejectionTuning, rejection_sample_packed
from .matching import accept_matching_drafts

__all__ = [
    "TUNING",
    "RejectionTuning",
    "accept_matching_drafts",
    "rejection_sample",
    "rejection_sample_packed",
    "unconditional_to_conditional_rates",
]
