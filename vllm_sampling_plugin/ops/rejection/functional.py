"""Rejection sampling for speculative decoding: the public functional API.

The kernel and the runner-facing launcher on vLLM's packed layout live in
``launcher.py``; this module validates plain batched tensors, brings
them to that layout and converts synthetic acceptance rates.
"""

import itertools
from collections.abc import Sequence

import torch

from ..checks import check_fp64_choice, check_kernels_run_on
from .draws import MAX_VOCAB_SIZE
from .launcher import rejection_sample_packed

def unconditional_to_conditional_rates(rates: Sequence[float]) -> list[float]:
    """Per-position unconditional acceptance rates to conditional ones.

    ``rates[i]`` is the probability that drafts ``0..i`` are all accepted. The
    kernel stops at the first rejection, so position ``i`` must be accepted
    with ``rates[i] / rates[i - 1]`` (``rates[-1] = 1``), and never once a
    previous rate is 0. Same result as vLLM 0.20's helper of the same name.

    Example:
        >>> unconditional_to_conditional_rates([0.8, 0.6, 0.3])
        [0.8, 0.75, 0.5]
    """
    conditional = []
    previous = 1.0
    for rate in rates:
        conditional.append(rate / previous if previous > 0.0 else 0.0)
        previous = rate
    return conditional


def _check_synthetic_rates(synthetic_rates, num_drafts: int) -> list[float]:
    if isinstance(synthetic_rates, torch.Tensor):
        if synthetic_rates.dim() != 1:
            raise ValueError(
                f"synthetic_rates must be 1-D, got shape {tuple(synthetic_rates.shape)}"
            )
        rates = [float(r) for r in synthetic_rates.tolist()]
    else:
        rates = [float(r) for r in synthetic_rates]
    if len(rates) != num_drafts:
        raise ValueError(f"synthetic_rates must have K = {num_drafts} entries, got {len(rates)}")
    if not all(0.0 <= r <= 1.0 for r in rates):
        raise ValueError(f"synthetic_rates entries must be in [0, 1], got {rates}")
    if any(later > earlier for earlier, later in itertools.pairwise(rates)):
        raise ValueError(f"synthetic_rates must be non-increasing, got {rates}")
    return rates


def _check_1d(name: str, tensor, batch_size: int, dtype: torch.dtype | None, device) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a tensor, got {type(tensor).__name__}")
    if tensor.shape != (batch_size,):
        raise ValueError(f"{name} must have shape ({batch_size},), got {tuple(tensor.shape)}")
    if dtype is not None and tensor.dtype != dtype:
        raise ValueError(f"{name} must be {dtype}, got {tensor.dtype}")
    if tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device}, target_logits on {device}")


def rejection_sample(
    target_logits: torch.Tensor,
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    *,
    synthetic_rates: Sequence[float] | torch.Tensor | None = None,
    use_fp64: bool = False,
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Verify ``K`` draft tokens per request against the target model.

    Fused speculative-decoding verification from raw target logits: the
    temperature and the sampling filters (top-k, top-p, min_p) are applied
    inside the kernels, so no ``[B * (K + 1), V]`` probability canvas is
    built. Row ``b`` holds ``K`` drafts and ``K + 1`` target logit vectors:
    logit ``j`` predicts the token after draft ``j - 1``, at position
    ``positions[b] + j``; logit ``K`` is the bonus position.

    The target distribution of logit ``j`` is that of vLLM 0.33's sampler
    (``Sampler.apply_sampling_params``), in its order:

    1. temperature: :math:`z = \text{target\_logits}[b, j] / T_b` (float32 division);
    2. ``min_p``: tokens with :math:`z < \max z + \log(\text{min\_p}_b)` are removed;
    3. ``top_k``: tokens below the ``top_k[b]``-th largest remaining logit are removed;
    4. ``top_p``: of what is left, renormalised, the smallest set of most
       likely tokens whose probability reaches ``top_p[b]`` is kept (a token
       is kept iff the mass of the tokens strictly more likely than it is
       ``< top_p[b]``);

    and :math:`p_j` is the softmax of :math:`z` over the kept tokens. Tokens
    tied at a cut are kept or removed together, and the largest logit is
    always kept. The drafts are then walked in order:

    * ``temperature[b] == 0`` (greedy): draft ``j`` is accepted while it equals
      :math:`\arg\max_x z(x)` (lowest id on ties); the first mismatch emits that
      argmax instead. Greedy rows are not filtered: every filter keeps the max.
    * ``temperature[b] > 0``: draft :math:`x_j` is accepted with probability
      :math:`\min(1, p_j(x_j) / q_j(x_j))`, tested as
      :math:`\log p_j(x_j) > \log u + \log q_j(x_j)`; a draft the filters
      removed has :math:`p_j(x_j) = 0` and is never accepted. The first
      rejection emits a sample of the residual :math:`\max(0, p_j - q_j)`
      normalised. Without ``draft_probs`` the draft is a point mass (n-gram
      drafts): :math:`\log q_j(x_j) = 0`, and the residual is :math:`p_j`
      without :math:`x_j`.
    * When every draft is accepted, a bonus token is sampled from :math:`p_K`.

    Whatever :math:`q` is, each emitted token is distributed as the filtered
    target :math:`p` given the tokens before it (greedy: exactly the argmax).
    :math:`q` itself is used as given (not filtered), as upstream does.

    Synthetic mode (``synthetic_rates`` given) accepts draft ``j`` with the
    conditional rate derived from the unconditional ``synthetic_rates``
    (``rates[j]`` = probability that drafts ``0..j`` are all accepted), at any
    temperature and whatever the tokens; accepted drafts are emitted as they
    are and a rejection emits the same corrected token as standard mode
    (greedy: the argmax; otherwise a residual sample, or a sample of
    :math:`p_j` should the residual have no mass). It reads and reduces the
    same rows as standard mode, so it costs what a real run with that
    acceptance costs.

    Randomness depends only on ``(seeds[b], position)``: a row's result is
    the same in any batch. Logits that are NaN never win (a row without any
    finite logit emits token 0) and ``+inf`` counts as the largest finite
    float, so every emitted id is in ``[0, V)``.

    Parameters
    ----------
    target_logits : torch.Tensor
        Float ``[B, K + 1, V]`` (float32, bfloat16 or float16; read as
        float32), raw: the temperature and the filters are applied here.
    draft_token_ids : torch.Tensor
        int64 ``[B, K]``, ``K >= 1``. Ids outside ``[0, V)`` are never accepted.
    draft_probs : torch.Tensor or None
        None for point-mass (n-gram) drafts, or float ``[B, K, V]``: the
        distribution each draft was drawn from (normalised here; zeros allowed).
    temperature : torch.Tensor
        float ``[B]``, ``>= 0``; 0 is greedy.
    seeds : torch.Tensor
        int64 ``[B]``.
    positions : torch.Tensor
        int64 ``[B]``: position of logit 0 of each row.
    synthetic_rates : Sequence[float] or torch.Tensor, optional
        None (standard mode), or ``K`` non-increasing unconditional
        acceptance rates in ``[0, 1]`` (synthetic mode).
    use_fp64 : bool
        Draw the acceptance uniforms and the resampling noise in FP64 instead
        of FP32.
    top_k : torch.Tensor, optional
        int32 or int64 ``[B]``; ``<= 0`` or ``>= V`` is off for the row.
    top_p : torch.Tensor, optional
        float32 ``[B]`` in ``(0, 1]``; ``1`` is off for the row.
    min_p : torch.Tensor, optional
        float32 ``[B]`` in ``[0, 1]``; ``0`` is off for the row. With any of
        the three, one pass over the logits finds each row's threshold
        (``ops/rejection/filters.py``; scratch: int32 ``[B * (K + 1)]`` and,
        with top-p, 2 KiB a row, kept between calls) and the kernels mask the
        tokens below it as they read the logits. Without them the filter code
        is compiled out.

    Returns
    -------
    output_token_ids : torch.Tensor
        int64 ``[B, K + 1]`` whose row ``b`` starts with the ``num_emitted[b]``
        tokens to append (accepted drafts, then one corrected or bonus token)
        and is padded with ``-1``.
    num_emitted : torch.Tensor
        int32 ``[B]`` with ``1 <= num_emitted[b] <= K + 1``.

    Raises
    ------
    ValueError
        Naming the argument, before any kernel launch, for wrong shapes,
        dtypes or devices, CPU tensors without ``TRITON_INTERPRET=1`` set
        before import, ``K = 0``, a negative or NaN temperature,
        ``draft_probs`` with a negative, NaN or infinite entry, ``top_p``
        outside ``(0, 1]``, ``min_p`` outside ``[0, 1]``, a ``use_fp64`` that
        is not a bool, or synthetic rates outside ``[0, 1]`` or increasing.
        (The value checks cost one device-to-host copy.)

    Examples
    --------
    >>> import torch
    >>> from vllm_sampling_plugin.ops import rejection_sample
    >>> B, K, V = 2, 3, 32
    >>> target_logits = torch.randn(B, K + 1, V, device="cuda")
    >>> draft_probs = torch.softmax(torch.randn(B, K, V, device="cuda"), dim=-1)
    >>> draft_token_ids = torch.multinomial(draft_probs.view(-1, V), 1).view(B, K)
    >>> tokens, num_emitted = rejection_sample(
    ...     target_logits,
    ...     draft_token_ids,
    ...     draft_probs,
    ...     temperature=torch.tensor([0.0, 0.8], device="cuda"),
    ...     seeds=torch.tensor([1, 2], device="cuda"),
    ...     positions=torch.tensor([17, 230], device="cuda"),
    ...     top_k=torch.tensor([0, 20], dtype=torch.int32, device="cuda"),
    ...     top_p=torch.tensor([1.0, 0.9], device="cuda"),
    ...     min_p=torch.tensor([0.0, 0.05], device="cuda"),
    ... )
    >>> tokens.shape, num_emitted.dtype
    (torch.Size([2, 4]), torch.int32)
    >>> new_tokens_of_row_0 = tokens[0, : num_emitted[0]]

    Note
    ----
    vLLM 0.33's Triton top-k/top-p kernel keeps exactly ``k`` tokens when
    several tie at the k-th logit (the lowest ids); here every tied token
    stays, as in the plugin's sampler. The laws differ only on exact ties.
    """
    num_drafts = _check_logits_and_drafts(target_logits, draft_token_ids, draft_probs)
    batch_size, _, vocab_size = target_logits.shape
    device = target_logits.device
    _check_row_settings(temperature, seeds, positions, top_k, top_p, min_p, batch_size, device)
    check_fp64_choice(use_fp64)
    rates = None if synthetic_rates is None else _check_synthetic_rates(synthetic_rates, num_drafts)
    _check_values(temperature, draft_probs, top_p, min_p, device)
    check_kernels_run_on("target_logits", device)

    conditional_rates = None
    if rates is not None:
        conditional_rates = torch.tensor(
            unconditional_to_conditional_rates(rates), dtype=torch.float32, device=device
        )
    # To the runner's packed layout: logit j of row b is packed row b * (K + 1) + j,
    # and draft j of row b sits one past its verifying logit.
    packed_drafts = torch.zeros(batch_size, num_drafts + 1, dtype=torch.int64, device=device)
    packed_drafts[:, 1:] = draft_token_ids
    offsets = torch.arange(num_drafts + 1, dtype=torch.int64, device=device)
    packed_pos = (positions[:, None] + offsets).reshape(-1)
    cu_num_logits = torch.arange(batch_size + 1, dtype=torch.int32, device=device) * (
        num_drafts + 1
    )
    # log(0) = -inf is a valid draft logit: the token has no draft mass.
    draft_logits = None if draft_probs is None else torch.log(draft_probs.float())
    return rejection_sample_packed(
        target_logits.reshape(batch_size * (num_drafts + 1), vocab_size),
        packed_drafts.reshape(-1),
        cu_num_logits,
        torch.arange(batch_size, dtype=torch.int32, device=device),
        packed_pos,
        temperature.float(),
        seeds,
        num_drafts,
        draft_logits,
        conditional_rates,
        use_fp64=use_fp64,
        apply_temperature=True,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
    )


def _check_logits_and_drafts(target_logits, draft_token_ids, draft_probs) -> int:
    """Shapes, dtypes and devices of the logits and the drafts; returns K."""
    if not isinstance(target_logits, torch.Tensor):
        raise ValueError(f"target_logits must be a tensor, got {type(target_logits).__name__}")
    if target_logits.dim() != 3 or not target_logits.is_floating_point():
        raise ValueError(
            "target_logits must be a float [B, K + 1, V] tensor, got "
            f"{tuple(target_logits.shape)} {target_logits.dtype}"
        )
    batch_size, num_logits_per_row, vocab_size = target_logits.shape
    device = target_logits.device
    if vocab_size == 0 or vocab_size > MAX_VOCAB_SIZE:
        raise ValueError(
            f"target_logits: vocabulary size must be in [1, {MAX_VOCAB_SIZE}], got {vocab_size}"
        )
    if not isinstance(draft_token_ids, torch.Tensor) or draft_token_ids.dim() != 2:
        raise ValueError("draft_token_ids must be a 2-D [B, K] tensor")
    num_drafts = draft_token_ids.shape[1]
    if num_drafts == 0:
        raise ValueError("draft_token_ids: K must be at least 1, got K = 0")
    if draft_token_ids.shape[0] != batch_size or num_logits_per_row != num_drafts + 1:
        raise ValueError(
            f"draft_token_ids has shape {tuple(draft_token_ids.shape)}; target_logits "
            f"{tuple(target_logits.shape)} needs [B, K] = [{batch_size}, {num_logits_per_row - 1}]"
        )
    if draft_token_ids.dtype != torch.int64:
        raise ValueError(f"draft_token_ids must be torch.int64, got {draft_token_ids.dtype}")
    if draft_token_ids.device != device:
        raise ValueError(
            f"draft_token_ids is on {draft_token_ids.device}, target_logits on {device}"
        )
    if draft_probs is not None:
        if not isinstance(draft_probs, torch.Tensor) or not draft_probs.is_floating_point():
            raise ValueError("draft_probs must be None or a float tensor")
        if draft_probs.shape != (batch_size, num_drafts, vocab_size):
            raise ValueError(
                f"draft_probs must have shape ({batch_size}, {num_drafts}, {vocab_size}), "
                f"got {tuple(draft_probs.shape)}"
            )
        if draft_probs.device != device:
            raise ValueError(f"draft_probs is on {draft_probs.device}, target_logits on {device}")
    return num_drafts


def _check_row_settings(temperature, seeds, positions, top_k, top_p, min_p, batch_size, device):
    """Shapes, dtypes and devices of the per-row tensors."""
    _check_1d("temperature", temperature, batch_size, None, device)
    if not temperature.is_floating_point():
        raise ValueError(f"temperature must be a float tensor, got {temperature.dtype}")
    _check_1d("seeds", seeds, batch_size, torch.int64, device)
    _check_1d("positions", positions, batch_size, torch.int64, device)
    if top_k is not None:
        _check_1d("top_k", top_k, batch_size, None, device)
        if top_k.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"top_k must be torch.int32 or torch.int64, got {top_k.dtype}")
    if top_p is not None:
        _check_1d("top_p", top_p, batch_size, torch.float32, device)
    if min_p is not None:
        _check_1d("min_p", min_p, batch_size, torch.float32, device)


def _check_values(temperature, draft_probs, top_p, min_p, device) -> None:
    """The value checks, with one device-to-host copy for all of them, here in
    the public API only: the engine calls rejection_sample_packed, which makes none."""
    bad_temperature = ((temperature < 0) | temperature.isnan()).any()
    bad_draft_probs = (
        torch.zeros((), dtype=torch.bool, device=device)
        if draft_probs is None
        else ((draft_probs < 0) | ~draft_probs.isfinite()).any()
    )
    no = torch.zeros((), dtype=torch.bool, device=device)
    # top_p in (0, 1] and min_p in [0, 1], as vLLM's SamplingParams requires.
    bad_top_p = no if top_p is None else ~((top_p > 0) & (top_p <= 1)).all()
    bad_min_p = no if min_p is None else ~((min_p >= 0) & (min_p <= 1)).all()
    bad_temperature, bad_draft_probs, bad_top_p, bad_min_p = torch.stack(
        [bad_temperature, bad_draft_probs, bad_top_p, bad_min_p]
    ).tolist()
    if bad_top_p:
        raise ValueError("top_p must be in (0, 1] (1 = off)")
    if bad_min_p:
        raise ValueError("min_p must be in [0, 1] (0 = off)")
    if bad_temperature:
        raise ValueError("temperature must be >= 0 (0 = greedy) and not NaN")
    if bad_draft_probs:
        raise ValueError(
            "draft_probs must be finite and >= 0 (each row is a distribution, "
            "normalised here; zeros allowed)"
        )
