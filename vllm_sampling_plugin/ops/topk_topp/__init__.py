"""Fused top-k/top-p sampling: mask and Gumbel-max draw without sorting.

Row ``i`` is drawn from ``softmax(logits[i] / T)`` restricted first to its
top-k tokens and then to the top-p set of that renormalised distribution, by
Gumbel-max with the noise of ``ops/random.py``: the token equals what the
plain Gumbel kernel (``ops/gumbel``) picks on the masked row. Every
threshold is an exact search on order keys (``select.py``), so ties
at a threshold are kept or dropped together. ``docs/ops-topk-topp.md`` has
the algorithm and its cost.

No host synchronisation. ``_top_k_top_p_kernel`` (``launcher.py``) runs one program per
(row, chunk of ``CHUNK`` tokens); the work has two phases:

1. ``chunk_pass`` (``chunk.py``) reads the chunk's logits once. It lists the
   ``PER_GROUP`` largest logits of every group of ``GROUP`` tokens with
   their ids, and the chunk's *floor*: the largest logit it left out.
   Greedy rows only need the chunk's max and argmax; rows without
   top-k/top-p draw their chunk's Gumbel winner instead.
2. ``merge_row`` (``merge.py``) merges a row's lists: in a launch of one wave, the
   row's last chunk to finish runs it (a per-row arrival counter: one
   launch); larger launches run it in ``_merge_kernel``, one program per
   row, since the merge's registers would slow the streaming. Above the
   highest floor the lists hold every token of the row, so a cut found on
   them that lies above it is the row's. The steps (``row.py``):
   a pairwise decision on the short list (the common case), else
   collecting every token from a proven bound up (from the lists, reading
   again only the chunks whose floor reaches the bound), else the exact
   whole-row path (``exact.py``).

``flashinfer.py`` holds FlashInfer's top-k/top-p sampler behind a support probe:
the engine's other top-k/top-p route.
"""
from .launcher import DEFAULT_TUNING, TopKTopPTuning, top_k_top_p_sample

__all__ = ["DEFAULT_TUNING", "TopKTopPTuning", "top_k_top_p_sample"]
