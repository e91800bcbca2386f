"""Counter-based random numbers shared by every sampling kernel.

Every random value the plugin draws is a pure function of ``(seed, position,
token index)``: a request's result never depends on the batch it runs in, its
row in that batch, the block size of a kernel, or the other requests.

Streams
-------
``request_key(seed, pos)``
    The Philox key of one request at one position. It is derived exactly as
    vLLM 0.20 derives its Gumbel seed (``tl.randint(seed, pos)``), so the FP64
    path reproduces stock vLLM token for token.

FP64 (``use_fp64=True``)
    ``uniform_fp64`` / ``gumbel_fp64`` are bit-for-bit vLLM 0.20's ``tl_rand64``
    followed by ``-log(-log(u))``: one Philox call per token, 64 random bits.
    The only change is that ``u`` is also kept below 1 (stock vLLM can round a
    draw to exactly 1.0, which makes the noise ``+inf``; that happens with
    probability about 2**-54 per token and is the only place the two differ).

FP32 (default)
    ``gumbel_fp32_block`` spends one Philox call on four consecutive tokens
    (token ``t`` takes word ``t % 4`` of ``philox(key, t // 4)``), which cuts
    the integer work four-fold. The uniform is ``(x + 0.5) / 2**32`` for a
    32-bit word ``x``, so it resolves values down to ``2**-33`` instead of the
    ``2**-24`` grid near 1 that ``tl.rand`` has. These per-token words come from
    7-round Philox (``FP32_NOISE_ROUNDS``), the request key and the uniforms from
    10-round Philox. The noise is computed as
    ``-log(-log1p(-u))``: large noise comes from *small* ``u``, where the draw
    is finely resolved, so the tail reaches about 22.9 instead of capping near
    16.6 (with ``-log(-log(u))`` and ``u`` on a ``2**-24`` grid), and tokens
    far below the top are sampled at their true rate. On the GPU its logs use
    the hardware ``lg2.approx`` (see ``_log_fp32``).

Both precisions clamp ``u`` into the open interval (0, 1), so the noise is
always finite and a row can never produce NaN from the noise itself.
"""

import os

import triton
import triton.language as tl
from triton.language.extra import libdevice

# Module constants must be tl.constexpr for compiled (non-interpreted) kernels.
# 1 / 2**64 and 1 / 2**32.
_INV_2_64 = tl.constexpr(5.421010862427522170037e-20)
_INV_2_32 = tl.constexpr(2.3283064365386963e-10)
# Largest float64 / float32 strictly below 1.
_ONE_MINUS_EPS_FP64 = tl.constexpr(0.99999999999999988898)
_ONE_MINUS_EPS_FP32 = tl.constexpr(0.99999994039535522461)
_FP64_TINY = tl.constexpr(2.2250738585072014e-308)
# Below this, -log1p(-u) is evaluated as a short series (see _neg_log1p_neg).
_SERIES_CUTOFF = tl.constexpr(0.015625)
# Philox rounds for the FP32 per-token noise. Philox-4x32 with 7 rounds passes
# TestU01's BigCrush (Salmon et al., "Parallel random numbers: as easy as
# 1, 2, 3", SC 2011); 10 is the conservative default, kept for the request key,
# the uniforms and all FP64 draws (which must match stock vLLM). The noise is
# generated for every token of the vocabulary, so the rounds are its main cost.
FP32_NOISE_ROUNDS = tl.constexpr(7)
# Triton decides at decoration time whether kernels are interpreted; so do we.
_INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")


@triton.jit
def _log_fp32(x):
    """Natural log for the FP32 noise.

    On the GPU ``tl.log`` is libdevice's accurate ``logf`` (about 20
    instructions); the hardware ``lg2.approx`` (one MUFU op and a multiply,
    relative error about 2**-22, far below what sampling can resolve) roughly
    halves the instructions of the FP32 noise. The interpreter has no
    libdevice, so it uses ``tl.log``.
    """
    if _INTERPRETED:
        return tl.log(x)
    else:
        return libdevice.fast_logf(x)


@triton.jit
def request_key(seed, pos):
    """Philox key of one request at one position (vLLM 0.20's Gumbel seed)."""
    return tl.randint(seed, pos)


@triton.jit
def uniform_fp64(key, offset):
    """A float64 uniform in (0, 1) from 64 random bits; vLLM 0.20's ``tl_rand64``."""
    lo, hi, _, _ = tl.randint4x(key, offset)
    lo = lo.to(tl.uint32, bitcast=True).to(tl.uint64)
    hi = hi.to(tl.uint32, bitcast=True).to(tl.uint64)
    u = ((hi << 32) | lo).to(tl.float64) * _INV_2_64
    # tl.minimum would round a bare float constant to float32 (1.0): build the
    # bound as a float64 tensor.
    below_one = tl.full(u.shape, _ONE_MINUS_EPS_FP64, tl.float64)
    return tl.minimum(tl.maximum(u, _FP64_TINY), below_one)


@triton.jit
def uniform_fp32(key, offset):
    """A float32 uniform in (0, 1) resolving values down to 2**-33."""
    bits, _, _, _ = tl.randint4x(key, offset)
    return _bits_to_uniform_fp32(bits)


@triton.jit
def _bits_to_uniform_fp32(bits):
    u = bits.to(tl.uint32, bitcast=True).to(tl.float32) * _INV_2_32 + 0.5 * _INV_2_32
    return tl.minimum(u, _ONE_MINUS_EPS_FP32)


@triton.jit
def _neg_log1p_neg(u):
    """-log(1 - u) for u in (0, 1), accurate relative to the result for small u.

    Triton's interpreter has no ``log1p``, and ``1 - u`` rounds to 1 in float32
    for the small ``u`` that decide the Gumbel tail, so small ``u`` use the
    series u + u^2/2 + ... + u^5/5 (truncation error below 2e-10 relative).
    """
    series = u * (1.0 + u * (0.5 + u * (0.3333333333333333 + u * (0.25 + u * 0.2))))
    return tl.where(u < _SERIES_CUTOFF, series, -_log_fp32(1.0 - u))


@triton.jit
def gumbel_fp64(key, token_ids):
    """Float64 Gumbel(0, 1) noise for ``token_ids`` (stock vLLM 0.20's noise)."""
    u = uniform_fp64(key, token_ids)
    return -tl.log(-tl.log(u))


@triton.jit
def gumbel_fp32_from_uniform(u):
    """Float32 Gumbel(0, 1) noise from a uniform in (0, 1), tail-resolved."""
    return -_log_fp32(_neg_log1p_neg(u))


@triton.jit
def noise_words_fp32(key, quad):
    """The four 32-bit words behind the FP32 noise of tokens ``4 * quad .. 4 * quad + 3``."""
    return tl.randint4x(key, quad, n_rounds=FP32_NOISE_ROUNDS)


@triton.jit
def gumbel_fp32_block(key, start, BLOCK: tl.constexpr):
    """Float32 Gumbel noise for tokens ``start .. start + BLOCK - 1``.

    ``start`` and ``BLOCK`` must be multiples of 4. One Philox call yields the
    noise of four consecutive tokens: token ``t`` uses word ``t % 4`` of
    ``philox(key, t // 4)``, so the value of a token does not depend on
    ``start`` or ``BLOCK``.
    """
    quad = start // 4 + tl.arange(0, BLOCK // 4)
    w0, w1, w2, w3 = noise_words_fp32(key, quad)
    # join(join(w0, w2), join(w1, w3)) flattened is w0, w1, w2, w3 per quad.
    bits = tl.reshape(tl.join(tl.join(w0, w2), tl.join(w1, w3)), [BLOCK])
    return gumbel_fp32_from_uniform(_bits_to_uniform_fp32(bits))


@triton.jit
def gumbel_block(key, start, BLOCK: tl.constexpr, USE_FP64: tl.constexpr):
    """Gumbel noise for one block of tokens in the chosen precision."""
    if USE_FP64:
        return gumbel_fp64(key, start + tl.arange(0, BLOCK))
    else:
        return gumbel_fp32_block(key, start, BLOCK)


@triton.jit
def uniform(key, offset, USE_FP64: tl.constexpr):
    """A uniform in (0, 1) in the chosen precision."""
    if USE_FP64:
        return uniform_fp64(key, offset)
    else:
        return uniform_fp32(key, offset)
