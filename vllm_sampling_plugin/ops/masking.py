"""Top-k / top-p masking in plain PyTorch: the simple, sort-based reference path.

The fused Triton path lives in ``ops/topk_topp``; both follow the
semantics documented on :func:`mask_top_k_top_p_`.
"""

import torch


def mask_top_k_top_p_(
    logits: torch.Tensor,
    top_k: torch.Tensor | None,
    top_p: torch.Tensor | None,
) -> torch.Tensor:
    r"""Set every logit outside its row's top-k / top-p set to ``-inf``, in place.

    Parameters
    ----------
    logits : torch.Tensor
        ``[batch_size, vocab_size]`` float32 logits with the temperature already
        applied (top-p depends on it). Modified in place.
    top_k : torch.Tensor, optional
        ``[batch_size]`` integer. Row ``i`` keeps a token iff its logit is
        ``>=`` the ``top_k[i]``-th largest logit of the row, so every token tied
        with the k-th largest is kept. ``top_k[i] <= 0`` or ``>= vocab_size``
        turns top-k off for the row. ``None``: off for every row.
    top_p : torch.Tensor, optional
        ``[batch_size]`` floating point, in ``(0, 1]``. Applied after top-k, on
        the distribution ``softmax(logits[i])`` renormalised over the tokens
        top-k kept. A token is kept iff the total probability of the tokens
        *strictly* more likely than it is ``< top_p[i]``: the smallest set of
        most likely tokens whose mass reaches ``top_p[i]``, plus every token
        tied with the least likely member. The row's maximum is always kept.
        ``top_p[i] >= 1`` turns top-p off for the row. The mass is summed in
        float32, so a token whose preceding mass is within rounding of
        ``top_p[i]`` may fall on either side. ``None``: off for every row.

    Returns
    -------
    torch.Tensor
        ``logits`` itself. NaN entries always come out as ``-inf`` (NaN is
        ranked below every number). A row containing ``+inf`` keeps exactly its
        ``+inf`` entries under top-p (they hold all the mass).

    Examples
    --------
    >>> logits = torch.tensor([[3.0, 1.0, 3.0, 0.0, 2.0]])
    >>> mask_top_k_top_p_(logits.clone(), torch.tensor([2]), None)
    tensor([[3., -inf, 3., -inf, -inf]])
    >>> mask_top_k_top_p_(logits.clone(), None, torch.tensor([0.9]))
    tensor([[3., -inf, 3., -inf, 2.]])
    """
    logits.masked_fill_(logits.isnan(), float("-inf"))
    if top_k is None and top_p is None:
        return logits
    vocab_size = logits.shape[-1]
    sorted_logits = logits.sort(dim=-1, descending=True).values

    if top_k is not None:
        k = top_k.to(device=logits.device, dtype=torch.int64)
        k = torch.where((k <= 0) | (k >= vocab_size), vocab_size, k)
        kth_largest = sorted_logits.gather(-1, (k - 1).unsqueeze(-1))
        sorted_logits.masked_fill_(sorted_logits < kth_largest, float("-inf"))
        logits.masked_fill_(logits < kth_largest, float("-inf"))

    if top_p is not None:
        p = top_p.to(device=logits.device, dtype=torch.float32).unsqueeze(-1)
        probs = sorted_logits.softmax(dim=-1)
        # Mass of the tokens sorted before each one. Within a run of ties it
        # grows, but only the run's first member (whose mass is that of the
        # strictly larger tokens) decides, and the count below finds it: the
        # kept positions are a prefix, ending where this mass reaches p.
        mass_before = torch.zeros_like(probs)
        mass_before[:, 1:] = probs[:, :-1].cumsum(dim=-1)
        num_kept = (mass_before < p).sum(dim=-1, keepdim=True).clamp_min(1)
        num_kept = torch.where(p >= 1.0, vocab_size, num_kept)
        threshold = sorted_logits.gather(-1, num_kept - 1)
        logits.masked_fill_(logits < threshold, float("-inf"))
    return logits
