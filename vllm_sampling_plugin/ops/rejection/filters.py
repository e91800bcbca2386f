"""Sampling filters folded into verification: one threshold key per target row.

vLLM 0.32/0.33 verify drafts against *processed* target logits: their
``Sampler.apply_sampling_params`` (``v1/worker/gpu/sample/sampler.py``) copies
every row into a float32 canvas and applies, in this order, the temperature,
``min_p`` (``sample/min_p.py``: a logit below ``max + log(min_p)`` becomes
-inf) and top-k/top-p (``v1/sample/ops/topk_topp_triton.py``: top-k by
logit, then top-p on the renormalised top-k set). Each of these keeps exactly
the tokens whose (temperature-divided) logit is at or above a threshold, and
so does their composition, so a row's filters come down to one number:

* ``min_p``: ``t_m = max + log(min_p)`` in float32, as upstream computes it;
* top-k on the min_p-filtered row: its k-th largest logit ``t_k`` if at least
  k tokens survive min_p, else every survivor; either way ``max(t_m, t_k)``;
* top-p on what is left: the largest ``t_p`` whose tokens at or above it hold
  at least ``top_p`` of the mass of that set (the smallest top set reaching
  ``top_p``, tied tokens kept together);
* the row threshold ``max(t_m, t_k, t_p)``, capped at the row's max (the top
  token always stays).

``_filter_threshold_kernel`` finds it, one program per target row, with the
exact whole-row selects of ``ops/topk_topp/exact.py`` (radix select of the
k-th largest order key; the same select weighted by probability mass for
top-p, which takes the min_p/top-k threshold as its lower bound), and stores
it as an order key (``ops/topk_topp/select.py``; 0 keeps every token). The
rejection kernel then reads the raw logits as ever and masks the tokens whose
key is below the row's threshold as it loads them (``stats.load_logits``), so
nothing of size ``[rows, V]`` is written. Greedy rows get 0: every filter
keeps the row's max, so their argmax is the same.

Scratch per call, kept between calls (``filter_workspace``): the thresholds,
int32 ``[num_logits]``, and with top-p a 256-bin int64 mass histogram per row,
``[num_logits, 256]`` (2 KiB a row, whatever the vocabulary).
"""

import dataclasses

import torch
import triton
import triton.language as tl

from ..host_math import next_power_of_2
from ..topk_topp.exact import kth_largest_key_of_row, top_p_key_of_row
from ..topk_topp.plan import DEFAULT_TUNING
from ..topk_topp.select import load_logits_block, order_key

_RADIX_BINS = 256


@triton.jit
def _filter_threshold_kernel(
    # [num_logits] int32: the row's threshold order key (uint32 bits); 0 keeps all
    thresholds_ptr,
    # [num_logits, 256] int64 scratch (top-p only)
    mass_hist_ptr,
    # [num_logits, V]
    logits_ptr,
    logits_stride,
    # [num_reqs + 1]
    cu_num_logits_ptr,
    # [num_reqs]
    idx_mapping_ptr,
    # [max_num_reqs] each
    temperature_ptr,
    top_k_ptr,
    top_p_ptr,
    min_p_ptr,
    vocab_size,
    BLOCK: tl.constexpr,
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    req_idx = tl.program_id(0)
    row = tl.program_id(1)
    start = tl.load(cu_num_logits_ptr + req_idx)
    if row < tl.load(cu_num_logits_ptr + req_idx + 1) - start:
        logit_idx = (start + row).to(tl.int64)
        state_idx = tl.load(idx_mapping_ptr + req_idx).to(tl.int64)
        temp = tl.load(temperature_ptr + state_idx).to(tl.float32)
        # Off unless the request's value turns it on (constexpr: never read).
        filter_k = False
        top_k = 0
        if HAS_TOP_K:
            top_k_value = tl.load(top_k_ptr + state_idx)
            filter_k = (top_k_value > 0) & (top_k_value < vocab_size)
            top_k = top_k_value.to(tl.int32)
        filter_p = False
        top_p = 1.0
        if HAS_TOP_P:
            top_p = tl.load(top_p_ptr + state_idx).to(tl.float32)
            filter_p = top_p < 1.0
        filter_min_p = False
        min_p = 0.0
        if HAS_MIN_P:
            min_p = tl.load(min_p_ptr + state_idx).to(tl.float32)
            filter_min_p = min_p > 0.0
        threshold = tl.full((), 0, tl.uint32)
        # Greedy rows keep every token: each filter keeps the max, so the
        # argmax is the same.
        if (temp != 0.0) & (filter_k | filter_p | filter_min_p):
            row_logits = (logits_ptr + logit_idx * logits_stride, 1, temp, vocab_size)
            row_max = tl.full((), float("-inf"), tl.float32)
            for block_start in range(0, vocab_size, BLOCK):
                _, _, x = load_logits_block(row_logits, block_start, 1, BLOCK, APPLY_TEMPERATURE)
                row_max = tl.maximum(row_max, tl.max(x, axis=0))
            # A row whose max is +-inf is left whole: the rejection kernel
            # gives its +inf tokens all the mass (or it has no finite logit).
            if (row_max != float("inf")) & (row_max != float("-inf")):
                if filter_min_p:
                    # sample/min_p.py: logits < max + log(min_p) become -inf.
                    threshold = order_key(row_max + tl.log(min_p))
                if filter_k:
                    threshold = tl.maximum(
                        threshold,
                        kth_largest_key_of_row(row_logits, top_k, BLOCK, APPLY_TEMPERATURE),
                    )
                if filter_p:
                    # Top-p over the tokens min_p and top-k kept.
                    threshold = tl.maximum(
                        threshold,
                        top_p_key_of_row(
                            row_logits,
                            row_max,
                            threshold,
                            top_p,
                            mass_hist_ptr + logit_idx * 256,
                            BLOCK,
                            APPLY_TEMPERATURE,
                        ),
                    )
                # The top token always stays.
                threshold = tl.minimum(threshold, order_key(row_max))
        tl.store(thresholds_ptr + logit_idx, threshold.to(tl.int32, bitcast=True))


@dataclasses.dataclass
class FilterWorkspace:
    capacity: int
    thresholds: torch.Tensor  # [capacity] int32
    mass_hist: torch.Tensor  # [capacity, 256] int64


# Kept per device, grown by doubling, never freed (a CUDA graph may hold an
# older one's address); calls on one device run in stream order.
_FILTER_WORKSPACES: dict[torch.device, list[FilterWorkspace]] = {}


def filter_workspace(device: torch.device, num_logits: int) -> FilterWorkspace:
    kept = _FILTER_WORKSPACES.setdefault(device, [])
    if not kept or kept[-1].capacity < num_logits:
        capacity = max(num_logits, 2 * kept[-1].capacity if kept else 64)
        kept.append(
            FilterWorkspace(
                capacity=capacity,
                thresholds=torch.empty(capacity, dtype=torch.int32, device=device),
                mass_hist=torch.empty(capacity, _RADIX_BINS, dtype=torch.int64, device=device),
            )
        )
    return kept[-1]


def filter_thresholds(
    target_logits: torch.Tensor,  # [num_logits, V], last dim contiguous
    cu_num_logits: torch.Tensor,  # [num_reqs + 1]
    idx_mapping: torch.Tensor,  # [num_reqs]
    temperature: torch.Tensor,  # [max_num_reqs]
    top_k: torch.Tensor | None,  # [max_num_reqs]
    top_p: torch.Tensor | None,  # [max_num_reqs]
    min_p: torch.Tensor | None,  # [max_num_reqs]
    num_speculative_steps: int,
    *,
    apply_temperature: bool,
) -> torch.Tensor:
    """The threshold order key of every target row (see the module doc), int32
    ``[num_logits]`` (a view of the kept workspace), no host sync."""
    num_logits, vocab_size = target_logits.shape
    num_reqs = cu_num_logits.shape[0] - 1
    work = filter_workspace(target_logits.device, num_logits)
    thresholds = work.thresholds[:num_logits]
    _filter_threshold_kernel[(num_reqs, num_speculative_steps + 1)](
        thresholds,
        work.mass_hist,
        target_logits,
        target_logits.stride(0),
        cu_num_logits,
        idx_mapping,
        temperature,
        top_k if top_k is not None else temperature,
        top_p if top_p is not None else temperature,
        min_p if min_p is not None else temperature,
        vocab_size,
        BLOCK=min(DEFAULT_TUNING.row_block, next_power_of_2(vocab_size)),
        HAS_TOP_K=top_k is not None,
        HAS_TOP_P=top_p is not None,
        HAS_MIN_P=min_p is not None,
        APPLY_TEMPERATURE=apply_temperature,
        num_warps=8 if vocab_size >= 8192 else 4,
    )
    return thresholds
