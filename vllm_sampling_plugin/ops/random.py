"""Counter-based random numbers shared by every sampling kernel.

Every random value the plugin draws is a pure function of ``(seed, position,
token index)``: a request's result never depends on the batch it runs in, its
row in that batch, the block size of a kernel, or the other requests.

Streams
-------
``request_key(seed, pos, NOISE)``
    The key of one request at one position. For the Philox streams it is the
    Philox key vLLM 0.20 derives for its Gumbel seed (``tl.randint(seed,
    pos)``); for a murmur3 stream it is that stream's per-row hash state.

The kernels' ``NOISE`` constexpr names the precision and the stream
(``noise_code``): each precision has two streams, one code each, so a stream
is a compile variant of the same kernel, not a copy of it.

FP64 (``use_fp64=True``) has two streams, chosen by ``fp64_stream``, so that
``--use-fp64-gumbel`` gives the tokens of the vLLM release it runs on:

``"philox"`` (``FP64_PHILOX``, vLLM 0.20)
    ``uniform_fp64`` / ``gumbel_fp64`` are bit-for-bit vLLM 0.20's ``tl_rand64``
    followed by ``-log(-log(u))``: one Philox call per token, 64 random bits.
    The only change is that ``u`` is also kept below 1 (stock vLLM can round a
    draw to exactly 1.0, which makes the noise ``+inf``; that happens with
    probability about 2**-54 per token and is the only place the two differ).

``"murmur3"`` (``FP64_MURMUR3``, vLLM 0.31 on)
    The noise of those releases' ``sample/gumbel.py``: two MurmurHash3-32
    hashes of ``(seed, position, token)``, one with domain 0 and one with
    domain ``0x9E3779B9``, give 53 random bits; ``u`` is the midpoint of
    their cell, ``(r + 0.5) / 2**53``, kept below 1; the noise is
    ``-log(-log(u))``. The hash state after seed and position is the same
    for every token of a row, so ``request_key`` computes it once per row
    (both domains packed in one uint64) and each token costs two short
    hash tails instead of a 10-round Philox call.

FP32 has two streams, chosen by ``fp32_stream``:

``"murmur3"`` (``FP32_MURMUR3``, vLLM 0.31 on)
    Bit for bit those releases' FP32 noise (``murmur3_uniform32`` and the
    tail of ``gumbel_noised_argmax``): the domain-0 hash of the FP64
    stream's words gives ``r``; ``u = hi16(r) / 2**16 + (lo16(r) + 0.5) /
    2**32``, each half exact in float32 so one rounding; then
    ``-log(-log1p(-u))`` with ``log1p(-u)`` a degree-8 series below 0.25 and
    ``log(max(1 - u, 2**-24))`` above, both with the accurate ``tl.log``.
    The integration draws it on engines that speculate (0.31 on), where
    upstream's RejectionSampler draws the steps with drafts
    (integration/draw/noise.py says why only there, and what each vLLM
    release draws).

``"philox"`` (``FP32_PHILOX``, the default)
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

Only the Gumbel noise has murmur3 streams: ``uniform`` (the rejection
kernel's acceptance draws) is Philox only.

Every stream keeps the noise finite, so a row can never produce NaN from
the noise itself: the Philox and FP64 streams keep ``u`` in the open
interval (0, 1); the FP32 murmur3 uniform can round to 1.0, where
upstream's ``max(1 - u, 2**-24)`` keeps the log finite.
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
# The kernels' NOISE constexpr: the precision and the stream of the noise.
# The FP64 codes are the largest, so ``NOISE >= FP64_PHILOX`` is "FP64 noise"
# (a comparison both the compiler and the interpreter fold on constexprs).
FP32_PHILOX = tl.constexpr(0)
FP32_MURMUR3 = tl.constexpr(1)
FP64_PHILOX = tl.constexpr(2)
FP64_MURMUR3 = tl.constexpr(3)
# ``fp64_stream`` / ``fp32_stream`` names, in the launchers' API, of the streams.
FP64_STREAMS = {"philox": FP64_PHILOX.value, "murmur3": FP64_MURMUR3.value}
FP32_STREAMS = {"philox": FP32_PHILOX.value, "murmur3": FP32_MURMUR3.value}
_TWO_POW_M53 = tl.constexpr(1.1102230246251565e-16)
# 2**-16 and 2**-24, for the FP32 murmur3 stream.
_INV_2_16 = tl.constexpr(1.52587890625e-05)
_TWO_POW_M24 = tl.constexpr(5.960464477539063e-08)
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


def noise_code(use_fp64: bool, fp64_stream: str = "philox", fp32_stream: str = "philox") -> int:
    """The ``NOISE`` constexpr of a launch: the stream of the precision in use.

    Both stream names are checked whatever the precision, so a typo fails at
    once rather than on the first launch in the other precision.
    """
    if fp64_stream not in FP64_STREAMS:
        raise ValueError(
            f"fp64_stream must be one of {sorted(FP64_STREAMS)}, got {fp64_stream!r}"
        )
    if fp32_stream not in FP32_STREAMS:
        raise ValueError(
            f"fp32_stream must be one of {sorted(FP32_STREAMS)}, got {fp32_stream!r}"
        )
    return FP64_STREAMS[fp64_stream] if use_fp64 else FP32_STREAMS[fp32_stream]


@triton.jit
def request_key(seed, pos, NOISE: tl.constexpr):
    """Key of one request at one position: the Philox key (vLLM 0.20's Gumbel
    seed) or, for a murmur3 stream, its per-row hash state (uint64: both
    domains for FP64; uint32: domain 0 only for FP32)."""
    if NOISE == FP64_MURMUR3:
        return _murmur3_row_key(seed, pos)
    elif NOISE == FP32_MURMUR3:
        return _murmur3_prefix(seed.to(tl.int64), pos.to(tl.int64), 0)
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
def gumbel_fp64(key, token_ids, NOISE: tl.constexpr):
    """Float64 Gumbel(0, 1) noise for ``token_ids`` from the chosen stream."""
    if NOISE == FP64_MURMUR3:
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
def uniform_fp32_murmur3(key, token_ids):
    """vLLM 0.32's FP32 uniform for ``token_ids``: ``(r + 0.5) / 2**32`` of the
    domain-0 hash ``r``, correctly rounded to float32.

    ``r`` goes in as two 16-bit halves, each exact in float32, so the rounding
    happens once, in the final add (upstream's formula; a direct uint32 to
    float conversion would round ``r`` to 24 bits first). The smallest value
    is 2**-33; the largest rounds to 1.0, which ``_log1p_neg_murmur3``
    bounds (``max(1 - u, 2**-24)``), so the noise stays finite.
    """
    r = _murmur3_finish(_murmur3_mix(key, token_ids.to(tl.uint32)))
    high = (r >> 16).to(tl.int32).to(tl.float32)
    low = (r & 0xFFFF).to(tl.int32).to(tl.float32)
    return high * _INV_2_16 + (low + 0.5) * _INV_2_32


@triton.jit
def _log1p_neg_murmur3(u):
    """log(1 - u) as vLLM 0.32's FP32 noise computes it, bit for bit.

    Below 0.25 the degree-8 series ``-u * (1 + u/2 + ... + u**7/8)`` in
    Horner form, else ``log(max(1 - u, 2**-24))``; both branches are
    evaluated and one is selected. The Horner steps keep upstream's shape
    ``c + u * p`` (and ``tl.log``, not ``_log_fp32``) so that the GPU compiler
    fuses and rounds them exactly as it does upstream's.
    """
    p = 1.0 / 8.0
    p = 1.0 / 7.0 + u * p
    p = 1.0 / 6.0 + u * p
    p = 1.0 / 5.0 + u * p
    p = 1.0 / 4.0 + u * p
    p = 1.0 / 3.0 + u * p
    p = 1.0 / 2.0 + u * p
    p = 1.0 + u * p
    series = -u * p
    direct = tl.log(tl.maximum(1.0 - u, _TWO_POW_M24))
    return tl.where(u < 0.25, series, direct)


@triton.jit
def gumbel_fp32_murmur3(key, token_ids):
    """vLLM 0.32's FP32 Gumbel noise ``-log(-log(1 - u))`` for ``token_ids``."""
    return -tl.log(-_log1p_neg_murmur3(uniform_fp32_murmur3(key, token_ids)))


@triton.jit
def gumbel_block(key, start, BLOCK: tl.constexpr, NOISE: tl.constexpr):
    """Gumbel noise for one block of tokens in the chosen precision and stream."""
    if NOISE >= FP64_PHILOX:
        return gumbel_fp64(key, start + tl.arange(0, BLOCK), NOISE)
    elif NOISE == FP32_MURMUR3:
        return gumbel_fp32_murmur3(key, start + tl.arange(0, BLOCK))
    else:
        return gumbel_fp32_block(key, start, BLOCK)


@triton.jit
def uniform(key, offset, NOISE: tl.constexpr):
    """A uniform in (0, 1) in the chosen precision (Philox streams only)."""
    tl.static_assert(
        NOISE == FP32_PHILOX or NOISE == FP64_PHILOX, "uniform() draws from Philox only"
    )
    if NOISE >= FP64_PHILOX:
        return uniform_fp64(key, offset)
    else:
        return uniform_fp32(key, offset)
