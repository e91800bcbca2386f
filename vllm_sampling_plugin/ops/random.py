"""Counter-based random numbers shared by every sampling kernel.

Every random value the plugin draws is a pure function of ``(seed, position,
token index)``: a request's result never depends on the batch it runs in, its
row in that batch, the block size of a kernel, or the other requests.

Streams
-------
``request_key(seed, pos, FP64_NOISE)``
    The key of one request at one position. For FP32 noise and the Philox
    FP64 stream it is the Philox key vLLM 0.20 derives for its Gumbel seed
    (``tl.randint(seed, pos)``); for the murmur3 stream it is that stream's
    per-row hash state.

FP64 (``use_fp64=True``) has two streams, chosen by ``fp64_stream`` (the
kernels' ``FP64_NOISE`` constexpr), so that ``--use-fp64-gumbel`` gives the
tokens of the vLLM release it runs on:

``"philox"`` (``FP64_PHILOX``, vLLM 0.20)
    ``uniform_fp64`` / ``gumbel_fp64`` are bit-for-bit vLLM 0.20's ``tl_rand64``
    followed by ``-log(-log(u))``: one Philox call per token, 64 random bits.
    The only change is that ``u`` is also kept below 1 (stock vLLM can round a
    draw to exactly 1.0, which makes the noise ``+inf``; that happens with
    probability about 2**-54 per token and is the only place the two differ).

``"murmur3"`` (``FP64_MURMUR3``, vLLM 0.32 and 0.33)
    The noise of those releases' ``sample/gumbel.py``: two MurmurHash3-32
    hashes of ``(seed, position, token)``, one with domain 0 and one with
    domain ``0x9E3779B9``, give 53 random bits; ``u`` is the midpoint of
    their cell, ``(r + 0.5) / 2**53``, kept below 1; the noise is
    ``-log(-log(u))``. The hash state after seed and position is the same
    for every token of a row, so ``request_key`` computes it once per row
    (both domains packed in one uint64) and each token costs two short
    hash tails instead of a 10-round Philox call.

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

Only the Gumbel noise has a murmur3 stream: ``uniform`` (the rejection
kernel's acceptance draws) is Philox only.

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
# The kernels' FP64_NOISE constexpr: FP32 noise, or which FP64 stream.
FP64_OFF = tl.constexpr(0)
FP64_PHILOX = tl.constexpr(1)
FP64_MURMUR3 = tl.constexpr(2)
# ``fp64_stream`` names, in the launchers' API, of the two FP64 streams.
FP64_STREAMS = {"philox": FP64_PHILOX.value, "murmur3": FP64_MURMUR3.value}
_TWO_POW_M53 = tl.constexpr(1.1102230246251565e-16)
# MurmurHash3-32 constants; the hash input is four 32-bit words, 16 bytes.
_MURMUR3_C1 = tl.constexpr(0xCC9E2D51)
_MURMUR3_C2 = tl.constexpr(0x1B873593)
_MURMUR3_ADD = tl.constexpr(0xE6546B64)
_MURMUR3_F1 = tl.constexpr(0x85EBCA6B)
_MURMUR3_F2 = tl.constexpr(0xC2B2AE35)
_MURMUR3_INPUT_BYTES = tl.constexpr(16)
# Domain of the hash that gives the high 32 bits of the FP64 draw.
_MURMUR3_HIGH_DOMAIN = tl.constexpr(0x9E3779B9)
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


def fp64_noise_code(use_fp64: bool, fp64_stream: str) -> int:
    """The ``FP64_NOISE`` constexpr of a launch: 0 for FP32 noise, else the stream's."""
    if fp64_stream not in FP64_STREAMS:
        raise ValueError(
            f"fp64_stream must be one of {sorted(FP64_STREAMS)}, got {fp64_stream!r}"
        )
    return FP64_STREAMS[fp64_stream] if use_fp64 else 0


@triton.jit
def request_key(seed, pos, FP64_NOISE: tl.constexpr):
    """Key of one request at one position: the Philox key (vLLM 0.20's Gumbel
    seed) or, for the murmur3 stream, its per-row hash state."""
    if FP64_NOISE == FP64_MURMUR3:
        return _murmur3_row_key(seed, pos)
    else:
        return tl.randint(seed, pos)


@triton.jit
def _rotl32(x, SHIFT: tl.constexpr):
    return (x << SHIFT) | (x >> (32 - SHIFT))


@triton.jit
def _murmur3_mix(h, word):
    """One 32-bit input word into the MurmurHash3-32 state ``h`` (both uint32)."""
    word = _rotl32(word * _MURMUR3_C1, 15) * _MURMUR3_C2
    return _rotl32(h ^ word, 13) * 5 + _MURMUR3_ADD


@triton.jit
def _murmur3_finish(h):
    """Length and avalanche of a 16-byte MurmurHash3-32 input."""
    h = h ^ _MURMUR3_INPUT_BYTES
    h = (h ^ (h >> 16)) * _MURMUR3_F1
    h = (h ^ (h >> 13)) * _MURMUR3_F2
    return h ^ (h >> 16)


@triton.jit
def _murmur3_prefix(seed, pos, DOMAIN: tl.constexpr):
    """Hash state after the words seed (low, high) and position (low)."""
    h = _murmur3_mix(tl.full((), DOMAIN, tl.uint32), (seed & 0xFFFFFFFF).to(tl.uint32))
    h = _murmur3_mix(h, ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32))
    return _murmur3_mix(h, (pos & 0xFFFFFFFF).to(tl.uint32))


@triton.jit
def _murmur3_row_key(seed, pos):
    """Both domains' states for one row, packed: high domain in the high half."""
    seed = seed.to(tl.int64)
    pos = pos.to(tl.int64)
    low = _murmur3_prefix(seed, pos, 0).to(tl.uint64)
    high = _murmur3_prefix(seed, pos, _MURMUR3_HIGH_DOMAIN).to(tl.uint64)
    return (high << 32) | low


@triton.jit
def uniform_fp64_murmur3(key, token_ids):
    """vLLM 0.32's FP64 uniform ``(r + 0.5) / 2**53`` in (0, 1) for ``token_ids``."""
    words = token_ids.to(tl.uint32)
    low = _murmur3_finish(_murmur3_mix((key & 0xFFFFFFFF).to(tl.uint32), words))
    high = _murmur3_finish(_murmur3_mix((key >> 32).to(tl.uint32), words))
    random53 = ((high.to(tl.uint64) << 32) | low.to(tl.uint64)) >> 11
    u = (random53.to(tl.float64) + 0.5) * _TWO_POW_M53
    # The top cell's midpoint rounds to 1.0: step it down by one cell.
    return tl.where(u == 1.0, u - _TWO_POW_M53, u)


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
def gumbel_fp64(key, token_ids, FP64_NOISE: tl.constexpr):
    """Float64 Gumbel(0, 1) noise for ``token_ids`` from the chosen stream."""
    if FP64_NOISE == FP64_MURMUR3:
        u = uniform_fp64_murmur3(key, token_ids)
    else:
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
def gumbel_block(key, start, BLOCK: tl.constexpr, FP64_NOISE: tl.constexpr):
    """Gumbel noise for one block of tokens in the chosen precision and stream."""
    if FP64_NOISE:
        return gumbel_fp64(key, start + tl.arange(0, BLOCK), FP64_NOISE)
    else:
        return gumbel_fp32_block(key, start, BLOCK)


@triton.jit
def uniform(key, offset, FP64_NOISE: tl.constexpr):
    """A uniform in (0, 1) in the chosen precision (Philox streams only)."""
    tl.static_assert(FP64_NOISE != FP64_MURMUR3, "uniform() draws from Philox only")
    if FP64_NOISE:
        return uniform_fp64(key, offset)
    else:
        return uniform_fp32(key, offset)
