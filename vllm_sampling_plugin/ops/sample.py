"""The public sampling entry point: one token per row, without vLLM.

It runs the engine's own kernels: Gumbel-max when no top-k/top-p is given, the
fused top-k/top-p kernel otherwise.
"""

import torch

from .checks import check_fp64_choice, check_kernels_run_on, check_same_device
from .gumbel import gumbel_sample
from .topk_topp import top_k_top_p_sample


def _check_row_tensor(name: str, tensor, batch_size: int, device: torch.device) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dim() != 1 or tensor.shape[0] != batch_size:
        raise ValueError(
            f"{name} must have shape [{batch_size}] (one entry per logits row), "
            f"got {tuple(tensor.shape)}"
        )
    check_same_device(device, **{name: tensor})


def _check_inputs(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    top_k: torch.Tensor | None,
    top_p: torch.Tensor | None,
) -> None:
    if not isinstance(logits, torch.Tensor):
        raise ValueError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() != 2 or not logits.dtype.is_floating_point:
        raise ValueError(
            "logits must be a 2-D floating-point tensor [batch_size, vocab_size], "
            f"got {logits.dim()}-D {logits.dtype}"
        )
    if logits.shape[1] == 0:
        raise ValueError("logits must have a non-empty vocabulary (vocab_size >= 1)")
    batch_size = logits.shape[0]
    rows = {"temperature": temperature, "seeds": seeds, "positions": positions}
    if top_k is not None:
        rows["top_k"] = top_k
    if top_p is not None:
        rows["top_p"] = top_p
    for name, tensor in rows.items():
        _check_row_tensor(name, tensor, batch_size, logits.device)
    if not temperature.dtype.is_floating_point:
        raise ValueError(f"temperature must be floating point, got {temperature.dtype}")
    for name in ("seeds", "positions"):
        if rows[name].dtype != torch.int64:
            raise ValueError(f"{name} must be int64, got {rows[name].dtype}")
    if top_k is not None and (top_k.dtype.is_floating_point or top_k.dtype == torch.bool):
        raise ValueError(f"top_k must be an integer tensor, got {top_k.dtype}")
    if top_p is not None and not top_p.dtype.is_floating_point:
        raise ValueError(f"top_p must be floating point, got {top_p.dtype}")

    # One device-to-host copy for all value checks.
    no_value = torch.zeros((), dtype=torch.bool, device=logits.device)
    # Checked as the kernel will read it: float32.
    temperature = temperature.to(torch.float32)
    bad_temperature = ((temperature < 0) | ~temperature.isfinite()).any()
    bad_top_p = ((top_p <= 0) | top_p.isnan()).any() if top_p is not None else no_value
    bad_temperature, bad_top_p = torch.stack([bad_temperature, bad_top_p]).tolist()
    if bad_temperature:
        raise ValueError("temperature must be finite in float32 and >= 0 (0 means greedy)")
    if bad_top_p:
        raise ValueError("top_p must be in (0, 1] (values >= 1 turn top-p off)")
    check_kernels_run_on("logits", logits.device)


def sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    *,
    use_fp64: bool = False,
    fp64_stream: str = "philox",
    fp32_stream: str = "philox",
) -> torch.Tensor:
    r"""Sample one token per row from temperature-scaled, top-k/top-p-restricted logits.

    Row ``i`` is an exact draw from ``softmax(logits[i] / temperature[i])``
    restricted to the row's top-k / top-p set, made by Gumbel-max. All its
    randomness is a function of ``(seeds[i], positions[i])`` and the token
    ids: the same row gives the same token in any batch, at any row index,
    next to any other rows.

    With ``top_k`` or ``top_p`` given, the batch runs the engine's fused
    top-k/top-p kernel (``ops.topk_topp.top_k_top_p_sample``: no sort, the
    logits read once), else the Gumbel-max kernel (``ops.gumbel``). The fused
    kernel's token is the one Gumbel-max picks on the row masked by
    ``ops.masking.mask_top_k_top_p_`` (tested), so rows without a filter get
    the same token either way.

    Parameters
    ----------
    logits : torch.Tensor
        ``[batch_size, vocab_size]``, float32, bfloat16 or float16, on the GPU
        (or on the CPU under ``TRITON_INTERPRET=1``).
    temperature : torch.Tensor
        ``[batch_size]`` floating point, finite and ``>= 0``. ``0`` is greedy:
        ``argmax(logits[i])``, ties to the lowest id, no randomness.
    seeds : torch.Tensor
        ``[batch_size]`` int64, any value.
    positions : torch.Tensor
        ``[batch_size]`` int64: the position of the token being sampled. Use a
        new position (or seed) for every draw that should be independent.
    top_k : torch.Tensor, optional
        ``[batch_size]`` integer. Keep the tokens whose logit is ``>=`` the
        k-th largest (ties at the threshold are all kept). ``<= 0`` or
        ``>= vocab_size`` turns it off for the row.
    top_p : torch.Tensor, optional
        ``[batch_size]`` floating point in ``(0, 1]``, applied after top-k on the
        renormalised top-k distribution: keep a token iff the mass of the
        tokens strictly more likely than it is ``< top_p`` (ties all kept).
        ``1`` turns it off for the row.
    use_fp64 : bool
        Draw the Gumbel noise and add it in float64. The float32 default is
        faster and its noise tail reaches about 22.9, so rare tokens keep
        their true rate.
    fp64_stream : str
        The FP64 noise: ``"philox"`` reproduces vLLM 0.20's V2 sampler token
        for token, ``"murmur3"`` vLLM's from 0.31 on (``ops/random.py``).
        Ignored for float32 noise.
    fp32_stream : str
        The FP32 noise: ``"philox"``, the plugin's own (fastest), or
        ``"murmur3"``, vLLM's FP32 noise from 0.31 on, token for token.
        Ignored for float64 noise.

    Returns
    -------
    torch.Tensor
        ``[batch_size]`` int64 token ids, always in ``[0, vocab_size)``. NaN
        logits are treated as ``-inf``; a row with ``+inf`` logits returns the
        lowest id among them; a row that is entirely ``-inf`` / NaN returns 0.

    Raises
    ------
    ValueError
        Naming the argument, before any kernel runs: ``use_fp64`` not a bool,
        an unknown ``fp64_stream`` or ``fp32_stream``, logits not a 2-D floating tensor, a length
        that differs from ``batch_size``, a wrong dtype, a tensor on another
        device, CPU tensors without ``TRITON_INTERPRET=1`` set before import, a negative or non-finite temperature, a
        ``top_p`` that is NaN or ``<= 0``, top-k/top-p asked for on a
        vocabulary over 4,194,304 tokens (the fused kernel's limit). (Checking
        the values costs one device-to-host copy.)

    Examples
    --------
    >>> import torch
    >>> from vllm_sampling_plugin.ops import sample
    >>> logits = torch.randn(3, 32000, device="cuda")
    >>> temperature = torch.tensor([0.0, 0.8, 1.0], device="cuda")
    >>> seeds = torch.tensor([7, 7, 123], device="cuda")
    >>> positions = torch.tensor([0, 0, 5], device="cuda")
    >>> top_k = torch.tensor([0, 50, 0], device="cuda")
    >>> top_p = torch.tensor([1.0, 0.9, 0.95], device="cuda")
    >>> tokens = sample(logits, temperature, seeds, positions, top_k, top_p)
    >>> tokens.shape, tokens.dtype
    (torch.Size([3]), torch.int64)
    >>> bool(tokens[0] == logits[0].argmax())
    True
    """
    check_fp64_choice(use_fp64, fp64_stream, fp32_stream)
    _check_inputs(logits, temperature, seeds, positions, top_k, top_p)
    batch_size, vocab_size = logits.shape
    device = logits.device
    # The kernels read float32; the checks saw the very same values.
    temperature = temperature.to(torch.float32)
    rows = torch.arange(batch_size, dtype=torch.int32, device=device)
    if top_k is None and top_p is None:
        return gumbel_sample(
            logits, rows, temperature, seeds, positions,
            apply_temperature=True, use_fp64=use_fp64, fp64_stream=fp64_stream,
            fp32_stream=fp32_stream,
        )
    # The engine's top-k/top-p route: one fused kernel, no sort, no mask.
    # A missing filter is off for every row (top_k 0, top_p 1).
    if top_k is None:
        top_k = torch.zeros(batch_size, dtype=torch.int64, device=device)
    if top_p is None:
        top_p = torch.ones(batch_size, dtype=torch.float32, device=device)
    return top_k_top_p_sample(
        logits,
        rows,
        temperature,
        seeds,
        positions,
        top_k.to(torch.int64),
        top_p.to(torch.float32),
        apply_temperature=True,
        use_fp64=use_fp64,
        fp64_stream=fp64_stream,
        fp32_stream=fp32_stream,
    )
