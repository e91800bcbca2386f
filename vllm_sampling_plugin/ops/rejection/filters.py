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

Two kernels find it without writing anything of size ``[rows, V]``:

* ``_list_chunks_kernel``, one program per (row, chunk of ``CHUNK`` tokens),
  reads the row once: the chunk's max and, for top-k/top-p rows, the fused
  sampler's chunk list (``ops/topk_topp/chunk.py``: the two largest logits of
  every group of 128 tokens, and the *floor*, the largest logit left out;
  every token above the floor is listed), plus the chunk's mass for top-p
  alone;
* ``_threshold_kernel``, one program per row, decides the cuts on the row's
  short list with the sampler's pairwise ``decide`` (``ops/topk_topp/row.py``)
  whenever they lie above the list's floor: exact for every listed token, so
  the threshold is the one a whole-row select finds. Otherwise (three top
  tokens in one group, ties across groups, top_k beyond the short list, a
  wide top-p set) it takes a bound the cuts reach from the list and collects
  every token at or above it, reading again only the chunks whose floor
  reaches it, as the sampler's ``sample_wide`` does: pairwise on up to
  ``short_list`` tokens, bit-by-bit searches on up to ``wide_list``. Rows
  neither can hold (top_k in the thousands, top-p alone on a flat row, top-p
  alone under a min_p that cuts below the floor) take the exact whole-row
  selects of ``ops/topk_topp/exact.py`` (radix select of the k-th largest
  order key; the same select weighted by mass for top-p): about nine reads
  of the row by one program.

The threshold is stored as an order key (``ops/topk_topp/select.py``; 0 keeps
every token). The rejection kernel then reads the raw logits as ever and
masks the tokens whose key is below the row's threshold as it loads them
(``stats.load_logits``). Greedy rows get 0 and are not read: every filter
keeps the row's max, so their argmax is the same. A row thus costs one read
here where the whole-row selects cost about nine.

The paths agree on every kept set except where a top-p mass sum lands
within float rounding of ``top_p`` (the list sums in fp32, the exact path in
fixed point).

Scratch, kept between calls: the fused sampler's own workspace for the
vocabulary (``ops/topk_topp/workspace.py``; per row the chunk lists, about
19 KB at V = 151936, a ``wide_list`` scratch row, 32 KB, and a 256-bin int64
mass histogram for the exact path) and the thresholds; no call allocates
anything that grows with V.
"""

import torch
import triton
import triton.language as tl

from ..host_math import next_power_of_2
from ..topk_topp.chunk import list_chunk
from ..topk_topp.exact import kth_largest_key_of_row, top_p_key_of_row
from ..topk_topp.merge import PATH_COLLECTED, PATH_EXACT, PATH_NO_FILTER, PATH_SHORT_LIST
from ..topk_topp.plan import DEFAULT_TUNING, launch_shape
from ..topk_topp.row import append_taken, collect_at_least, decide, list_largest, load_list
from ..topk_topp.select import NEG_INF_KEY, largest_key_reaching, load_logits_block, order_key
from ..topk_topp.workspace import workspace_for


@triton.jit
def _target_row(
    batch,  # as the kernels take it
    requests,  # (temperature, top_k, top_p, min_p), each [max_num_reqs]
    req_idx,
    row,
    vocab_size,
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
):
    """Row ``row`` of request ``req_idx``: its logit index; whether the request
    has it, and it is to be filtered (temperature > 0, a filter on); its
    temperature; and per filter whether it is on and its value (tensors either
    way; a filter the call does not pass is off and never read)."""
    cu_num_logits_ptr = batch[2]
    idx_mapping_ptr = batch[3]
    temperature_ptr, top_k_ptr, top_p_ptr, min_p_ptr = requests
    start = tl.load(cu_num_logits_ptr + req_idx)
    logit_idx = (start + row).to(tl.int64)
    state_idx = tl.load(idx_mapping_ptr + req_idx).to(tl.int64)
    temperature = tl.load(temperature_ptr + state_idx).to(tl.float32)
    filter_k = tl.full((), 0, tl.int1)
    top_k = tl.full((), 0, tl.int32)
    if HAS_TOP_K:
        top_k_value = tl.load(top_k_ptr + state_idx)
        filter_k = (top_k_value > 0) & (top_k_value < vocab_size)
        top_k = top_k_value.to(tl.int32)
    filter_p = tl.full((), 0, tl.int1)
    top_p = tl.full((), 1.0, tl.float32)
    if HAS_TOP_P:
        top_p = tl.load(top_p_ptr + state_idx).to(tl.float32)
        filter_p = top_p < 1.0
    filter_min_p = tl.full((), 0, tl.int1)
    min_p = tl.full((), 0.0, tl.float32)
    if HAS_MIN_P:
        min_p = tl.load(min_p_ptr + state_idx).to(tl.float32)
        filter_min_p = min_p > 0.0
    present = row < tl.load(cu_num_logits_ptr + req_idx + 1) - start
    # Greedy rows are not filtered: every filter keeps the max.
    filtered = present & (temperature != 0.0) & (filter_k | filter_p | filter_min_p)
    return logit_idx, present, filtered, temperature, (filter_k, top_k, filter_p, top_p), min_p


@triton.jit
def _list_chunks_kernel(
    # As the sampler's chunk pass takes them (ops/topk_topp/chunk.py): 4 x
    # [num_logits, NUM_CHUNKS] (max here, its id unwritten, mass, floor) and
    # 2 x [num_logits, NUM_CHUNKS, LIST] (listed logits, ids)
    chunk_stats,
    chunk_lists,
    # (logits [num_logits, V], its row stride, cu_num_logits [num_reqs + 1],
    #  idx_mapping [num_reqs])
    batch,
    requests,  # (temperature, top_k, top_p, min_p), each [max_num_reqs]
    vocab_size,
    NUM_CHUNKS: tl.constexpr,
    CHUNK: tl.constexpr,
    GROUP: tl.constexpr,
    PER_GROUP: tl.constexpr,
    LIST: tl.constexpr,
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    logits_ptr = batch[0]
    logits_stride = batch[1]
    row = tl.program_id(1) // NUM_CHUNKS
    chunk = tl.program_id(1) % NUM_CHUNKS
    logit_idx, present, filtered, temperature, filters, min_p = _target_row(
        batch, requests, tl.program_id(0), row, vocab_size, HAS_TOP_K, HAS_TOP_P, HAS_MIN_P
    )
    filter_k = filters[0]
    filter_p = filters[2]
    # Greedy and unfiltered rows are never read.
    if filtered:
        row_logits = (logits_ptr + logit_idx * logits_stride, 1, temperature, vocab_size)
        # [groups, GROUP]: a group's tokens sit in neighbouring lanes.
        token_ids, in_vocab, x = load_logits_block(
            row_logits, chunk * CHUNK, CHUNK // GROUP, GROUP, APPLY_TEMPERATURE
        )
        out = logit_idx * NUM_CHUNKS + chunk
        if filter_k | filter_p:
            chunk_max, chunk_argmax = list_chunk(
                x, token_ids, in_vocab, vocab_size, out, chunk_stats, chunk_lists, filter_k,
                filter_p, LIST, PER_GROUP,
            )
        else:
            # min_p alone: the max is all it needs.
            chunk_max = tl.max(tl.max(x, axis=1), axis=0)
        tl.store(chunk_stats[0] + out, chunk_max)


@triton.jit
def _listed_threshold(
    x,  # [CHUNKS_BLOCK, LIST] fp32: the row's listed logits, -inf: no token
    ids,  # [CHUNKS_BLOCK, LIST] int32
    valid,  # [CHUNKS_BLOCK, LIST]: listed and kept by min_p
    floor,  # every valid token of the row above it is listed
    scratch,  # [LANES] each, this row's: (logits fp32, ids int32)
    row_max,
    capacity,
    filters,  # (filter_k, top_k, filter_p, top_p)
    total_mass,  # the row's mass relative to row_max (top-p alone)
    LANES: tl.constexpr,
):
    """Top-k then top-p decided on the row's short list, as the sampler's
    ``sample_short`` decides them: the ``capacity`` largest valid tokens.
    Returns ``_threshold_of_list``'s (threshold, decided, bound)."""
    chosen, cut = list_largest(x, valid, row_max, capacity)
    count = append_taken(x, ids, chosen, 0, scratch, LANES)
    tl.debug_barrier()
    return _threshold_of_list(
        scratch, count, tl.maximum(floor, cut), row_max, filters, total_mass, LANES
    )


@triton.jit
def _short_list_threshold(
    x, ids, valid, floor, scratch, row_max, filters, total_mass, SHORT: tl.constexpr
):
    """``_listed_threshold`` on as many lanes as the filters need. As the
    sampler's merge: room above the k-th token for the histogram's
    coarseness; top-p alone takes the whole list; a list that fits in half
    the lanes is decided on half."""
    filter_k, top_k, _, _ = filters
    capacity = tl.where(
        filter_k, tl.minimum(tl.maximum(top_k + top_k // 4 + 2, SHORT // 4), SHORT), SHORT
    )
    if capacity <= SHORT // 2:
        threshold, decided, bound = _listed_threshold(
            x, ids, valid, floor, scratch, row_max, capacity, filters, total_mass, SHORT // 2
        )
    else:
        threshold, decided, bound = _listed_threshold(
            x, ids, valid, floor, scratch, row_max, capacity, filters, total_mass, SHORT
        )
    return threshold, decided, bound


@triton.jit
def _threshold_of_list(
    scratch,  # [LANES] each: (logits fp32, ids int32) of the tokens
    count,
    floor,
    row_max,
    filters,  # (filter_k, top_k, filter_p, top_p)
    total_mass,
    LANES: tl.constexpr,
):
    """``decide`` on the ``count <= LANES`` tokens of a scratch list (every
    token of the row above ``floor``): the least kept key (the kept tokens
    are a top set), whether that is the row's, and ``decide``'s bound."""
    x, ids, keys, listed = load_list(scratch, count, LANES)
    keep, decided, bound = decide(x, keys, listed, floor, row_max, filters, total_mass)
    return order_key(tl.min(tl.where(keep, x, float("inf")), axis=0)), decided, bound


@triton.jit
def _list_bound(x, keys, valid, row_max, filters, total_mass):
    """A key the row's cuts reach, searched on the whole list when the short
    list cannot tell (top_k beyond it, a wide top-p set): the k-th largest
    valid listed key, or (top-p alone) the key where the listed mass reaches
    ``top_p``; 0 if the list holds fewer (the row then needs the exact path)."""
    filter_k, top_k, filter_p, top_p = filters
    lanes: tl.constexpr = x.shape[0] * x.shape[1]
    flat_keys = tl.reshape(tl.where(valid, keys, 0), [lanes])
    if filter_k:
        bound = largest_key_reaching(flat_keys, tl.reshape(valid.to(tl.int32), [lanes]), top_k)
    else:
        mass = tl.where(valid, tl.exp(x - row_max), 0.0)
        bound = largest_key_reaching(flat_keys, tl.reshape(mass, [lanes]), top_p * total_mass)
    return bound


@triton.jit
def _wide_threshold(
    scratch,  # [WIDE] each: (logits fp32, ids int32), every token at or above the cuts
    count,
    min_p_key,  # 0: min_p off
    row_max,
    filters,  # (filter_k, top_k, filter_p, top_p)
    total_mass,  # the row's mass relative to row_max (top-p alone)
    WIDE: tl.constexpr,
):
    """The cuts among ``count <= WIDE`` collected tokens, by bit-by-bit
    searches instead of pairwise comparisons (too many lanes for those)."""
    filter_k, top_k, filter_p, top_p = filters
    x, ids, keys, collected = load_list(scratch, count, WIDE)
    threshold = min_p_key
    if filter_k:
        threshold = tl.maximum(
            threshold, largest_key_reaching(keys, collected.to(tl.int32), top_k)
        )
    mass = tl.where(collected & (keys >= threshold), tl.exp(x - row_max), 0.0)
    if filter_k:
        total_mass = tl.sum(mass, axis=0)
    if filter_p:
        threshold = tl.maximum(threshold, largest_key_reaching(keys, mass, top_p * total_mass))
    return threshold


@triton.jit
def _exact_threshold(
    row_logits,  # ([vocab] logits of one row, column stride, temperature, vocab_size)
    row_max,
    min_p_key,  # 0: min_p off
    filters,  # (filter_k, top_k, filter_p, top_p)
    mass_hist_ptr,  # [256] int64 scratch of this row
    BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """The threshold by whole-row selects: top-k over the min_p-filtered row
    (``max(t_m, t_k)``, see the module doc), then top-p over what is left."""
    filter_k, top_k, filter_p, top_p = filters
    threshold = min_p_key
    if filter_k:
        threshold = tl.maximum(
            threshold, kth_largest_key_of_row(row_logits, top_k, BLOCK, APPLY_TEMPERATURE)
        )
    if filter_p:
        threshold = tl.maximum(
            threshold,
            top_p_key_of_row(
                row_logits, row_max, threshold, top_p, mass_hist_ptr, BLOCK, APPLY_TEMPERATURE
            ),
        )
    return threshold


@triton.jit
def _top_k_top_p_threshold(
    logit_idx,
    chunk_max,  # [CHUNKS_BLOCK] fp32: the row's chunk maxima, -inf past the last
    row_max,
    min_p_key,  # 0: min_p off
    filters,  # (filter_k, top_k, filter_p, top_p)
    chunk_stats,  # as _list_chunks_kernel writes them
    chunk_lists,  # as _list_chunks_kernel writes them
    scratch,  # ([num_logits, WIDE] fp32, int32): the short lists, then the collected tokens
    row_logits,  # ([vocab] logits of this row, column stride, temperature, vocab_size)
    mass_hist_ptr,  # [256] int64 scratch of this row
    NUM_CHUNKS: tl.constexpr,
    CHUNKS_BLOCK: tl.constexpr,
    CHUNK: tl.constexpr,
    LIST: tl.constexpr,
    SHORT: tl.constexpr,
    WIDE: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """The row's threshold under top-k/top-p (and min_p below them): from its
    short list, from the tokens collected at or above a bound, else by
    whole-row selects. Returns the threshold and which path found it."""
    chunk_mass_ptr = chunk_stats[2]
    chunk_floor_ptr = chunk_stats[3]
    listed_logits_ptr, listed_ids_ptr = chunk_lists
    scratch_logits_ptr, scratch_ids_ptr = scratch
    filter_k, _, filter_p, _ = filters
    chunks = tl.arange(0, CHUNKS_BLOCK)
    chunk_ok = chunks < NUM_CHUNKS
    stats = logit_idx * NUM_CHUNKS + chunks
    # [CHUNKS_BLOCK, LIST]: a chunk's list is a row.
    listed = stats[:, None] * LIST + tl.arange(0, LIST)[None, :]
    x = tl.load(listed_logits_ptr + listed, mask=chunk_ok[:, None], other=float("-inf"))
    ids = tl.load(listed_ids_ptr + listed, mask=chunk_ok[:, None], other=0)
    floors = tl.load(chunk_floor_ptr + stats, mask=chunk_ok, other=0).to(tl.uint32, bitcast=True)
    total_mass = 0.0
    if filter_p & ~filter_k:
        chunk_mass = tl.load(chunk_mass_ptr + stats, mask=chunk_ok, other=0.0)
        total_mass = tl.sum(chunk_mass * tl.exp(chunk_max - row_max), axis=0)
    floor = tl.max(floors, axis=0)
    listed_tokens = x > float("-inf")
    keys = tl.where(listed_tokens, order_key(x), 0)
    valid = listed_tokens & (keys >= min_p_key)
    # min_p cutting above every chunk's floor: the list holds the whole
    # min_p-filtered row, so the tokens it drops simply do not exist.
    whole = min_p_key > floor
    if whole:
        total_mass = tl.sum(tl.sum(tl.where(valid, tl.exp(x - row_max), 0.0), axis=1), axis=0)
    floor = tl.where(whole, tl.full((), NEG_INF_KEY, tl.uint32), floor)
    # Otherwise top-p alone under min_p needs the mass of the min_p-filtered
    # row: the chunks' sums are the whole row's.
    decidable = whole | (min_p_key == 0) | filter_k
    row_scratch = (scratch_logits_ptr + logit_idx * WIDE, scratch_ids_ptr + logit_idx * WIDE)
    threshold, decided, bound = _short_list_threshold(
        x, ids, valid, floor, row_scratch, row_max, filters, total_mass, SHORT
    )
    decided = decided & decidable
    path = PATH_SHORT_LIST
    if decidable & ~decided:
        path = PATH_COLLECTED
        threshold, decided = _collected_threshold(
            x, keys, ids, valid, floors, row_logits, row_scratch, row_max, min_p_key, bound,
            filters, total_mass, CHUNK, LIST, SHORT, WIDE, APPLY_TEMPERATURE,
        )
    if decided:
        threshold = tl.maximum(threshold, min_p_key)
    else:
        path = PATH_EXACT
        threshold = _exact_threshold(
            row_logits, row_max, min_p_key, filters, mass_hist_ptr, ROW_BLOCK, APPLY_TEMPERATURE
        )
    return threshold, path


@triton.jit
def _collected_threshold(
    x,  # [CHUNKS_BLOCK, LIST]: the row's listed logits
    keys,  # their order keys, 0 where no token is listed
    ids,  # their token ids
    valid,  # listed and kept by min_p
    floors,  # [CHUNKS_BLOCK] uint32: each chunk's floor
    row_logits,  # as _top_k_top_p_threshold
    row_scratch,  # as _top_k_top_p_threshold
    row_max,
    min_p_key,
    bound,  # the short list's bound on the cuts, or 0: none found
    filters,  # (filter_k, top_k, filter_p, top_p)
    total_mass,
    CHUNK: tl.constexpr,
    LIST: tl.constexpr,
    SHORT: tl.constexpr,
    WIDE: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    """As the sampler's ``sample_wide``: the cuts lie at or above a bound
    (the short list's, or one searched on the whole list), so the tokens
    there decide them: from the lists, and by reading again only the
    chunks whose floor reaches the bound (three top tokens in one
    group, say). Returns the threshold and whether it was found."""
    threshold = tl.full((), 0, tl.uint32)
    decided = tl.full((), 0, tl.int1)
    if bound == 0:
        bound = _list_bound(x, keys, valid, row_max, filters, total_mass)
    # The top token always stays (top_p <= 0 would put the bound above it).
    bound = tl.minimum(bound, order_key(row_max))
    if bound > 0:
        tl.debug_barrier()
        count = collect_at_least(
            x, keys, ids, floors, row_logits, bound, row_scratch, CHUNK, LIST, WIDE,
            APPLY_TEMPERATURE,
        )
        decided = count <= WIDE
        if count <= SHORT:
            threshold, _, _ = _threshold_of_list(
                row_scratch, count, bound, row_max, filters, total_mass, SHORT
            )
        elif decided:
            threshold = _wide_threshold(
                row_scratch, count, min_p_key, row_max, filters, total_mass, WIDE
            )
    return threshold, decided


@triton.jit
def _threshold_kernel(
    # [num_logits] int32: the row's threshold order key (uint32 bits); 0 keeps all
    thresholds_ptr,
    # [num_logits] int32 or None: which path found each threshold (merge.PATH_*)
    paths_ptr,
    # As _list_chunks_kernel writes them
    chunk_stats,
    chunk_lists,
    # ([num_logits, WIDE] fp32 logits and int32 ids: the short list, then the
    #  collected tokens)
    scratch,
    # [num_logits, 256] int64: the exact path's mass histogram
    mass_hist_ptr,
    # As _list_chunks_kernel takes it
    batch,
    requests,  # (temperature, top_k, top_p, min_p), each [max_num_reqs]
    vocab_size,
    NUM_CHUNKS: tl.constexpr,
    CHUNKS_BLOCK: tl.constexpr,
    CHUNK: tl.constexpr,
    LIST: tl.constexpr,
    SHORT: tl.constexpr,
    WIDE: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
    HAS_TOP_K: tl.constexpr,
    HAS_TOP_P: tl.constexpr,
    HAS_MIN_P: tl.constexpr,
    APPLY_TEMPERATURE: tl.constexpr,
):
    logits_ptr = batch[0]
    logits_stride = batch[1]
    logit_idx, present, filtered, temperature, filters, min_p = _target_row(
        batch, requests, tl.program_id(0), tl.program_id(1), vocab_size, HAS_TOP_K, HAS_TOP_P,
        HAS_MIN_P,
    )
    filter_k = filters[0]
    filter_p = filters[2]
    threshold = tl.full((), 0, tl.uint32)
    path = PATH_NO_FILTER
    if filtered:
        chunks = tl.arange(0, CHUNKS_BLOCK)
        chunk_max = tl.load(
            chunk_stats[0] + logit_idx * NUM_CHUNKS + chunks, mask=chunks < NUM_CHUNKS,
            other=float("-inf"),
        )
        row_max = tl.max(chunk_max, axis=0)
        # A row whose max is +-inf is left whole: the rejection kernel gives
        # its +inf tokens all the mass (or it has no finite logit).
        if (row_max != float("inf")) & (row_max != float("-inf")):
            if min_p > 0.0:
                # sample/min_p.py: logits < max + log(min_p) become -inf.
                threshold = order_key(row_max + tl.log(min_p))
            if filter_k | filter_p:
                threshold, path = _top_k_top_p_threshold(
                    logit_idx, chunk_max, row_max, threshold, filters, chunk_stats,
                    chunk_lists, scratch,
                    (logits_ptr + logit_idx * logits_stride, 1, temperature, vocab_size),
                    mass_hist_ptr + logit_idx * 256, NUM_CHUNKS, CHUNKS_BLOCK, CHUNK, LIST,
                    SHORT, WIDE, ROW_BLOCK, APPLY_TEMPERATURE,
                )
            # The top token always stays.
            threshold = tl.minimum(threshold, order_key(row_max))
    tl.store(thresholds_ptr + logit_idx, threshold.to(tl.int32, bitcast=True), mask=present)
    if paths_ptr is not None:
        tl.store(paths_ptr + logit_idx, path, mask=present)


# Kept per device, grown by doubling, never freed (a CUDA graph may hold an
# older one's address); calls on one device run in stream order.
_THRESHOLDS: dict[torch.device, torch.Tensor] = {}


def _thresholds_buffer(device: torch.device, num_logits: int) -> torch.Tensor:
    kept = _THRESHOLDS.get(device)
    if kept is None or kept.shape[0] < num_logits:
        capacity = max(num_logits, 2 * kept.shape[0] if kept is not None else 64)
        kept = _THRESHOLDS[device] = torch.empty(capacity, dtype=torch.int32, device=device)
    return kept[:num_logits]


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
    paths_out: torch.Tensor | None = None,  # [num_logits] int32
) -> torch.Tensor:
    """The threshold order key of every target row (see the module doc), int32
    ``[num_logits]`` (a view of a kept buffer), no host sync.

    ``paths_out``, for diagnostics, receives which path found each row's
    threshold: ``PATH_NO_FILTER`` (0: greedy, unfiltered, min_p alone or an
    infinite max), ``PATH_SHORT_LIST`` (1: the chunk lists), ``PATH_COLLECTED``
    (2: the tokens at or above a bound) or ``PATH_EXACT`` (3: the whole-row
    selects), as ``ops/topk_topp/merge.py`` numbers them."""
    num_logits, vocab_size = target_logits.shape
    num_reqs = cu_num_logits.shape[0] - 1
    shape = launch_shape(vocab_size, DEFAULT_TUNING)
    # The fused sampler's own workspace for the vocabulary: calls run in
    # stream order, so the two share it (its ``arrivals`` are never touched
    # here).
    work = workspace_for(
        target_logits.device, num_logits, shape.num_chunks, shape.list_len,
        DEFAULT_TUNING.wide_list, False,
    )
    thresholds = _thresholds_buffer(target_logits.device, num_logits)
    rows = num_speculative_steps + 1
    requests = (
        temperature,
        top_k if top_k is not None else temperature,
        top_p if top_p is not None else temperature,
        min_p if min_p is not None else temperature,
    )
    switches = dict(
        HAS_TOP_K=top_k is not None,
        HAS_TOP_P=top_p is not None,
        HAS_MIN_P=min_p is not None,
        APPLY_TEMPERATURE=apply_temperature,
    )
    batch = (target_logits, target_logits.stride(0), cu_num_logits, idx_mapping)
    _list_chunks_kernel[(num_reqs, rows * shape.num_chunks)](
        work.chunk_stats,
        work.chunk_lists,
        batch,
        requests,
        vocab_size,
        NUM_CHUNKS=shape.num_chunks,
        CHUNK=shape.chunk,
        GROUP=shape.group,
        PER_GROUP=shape.per_group,
        LIST=shape.list_len,
        **switches,
        num_warps=DEFAULT_TUNING.num_warps,
    )
    _threshold_kernel[(num_reqs, rows)](
        thresholds,
        paths_out,
        work.chunk_stats,
        work.chunk_lists,
        (work.scratch_logits, work.scratch_ids),
        work.mass_hist,
        batch,
        requests,
        vocab_size,
        NUM_CHUNKS=shape.num_chunks,
        CHUNKS_BLOCK=next_power_of_2(shape.num_chunks),
        CHUNK=shape.chunk,
        LIST=shape.list_len,
        SHORT=DEFAULT_TUNING.short_list,
        WIDE=DEFAULT_TUNING.wide_list,
        ROW_BLOCK=min(DEFAULT_TUNING.row_block, next_power_of_2(vocab_size)),
        **switches,
        num_warps=DEFAULT_TUNING.merge_warps if vocab_size >= 8192 else 4,
    )
    return thresholds
