"""An independent NumPy model of the Gumbel-max sampler, for exact comparisons.

It re-derives, from the documented formulas of ``ops/random.py`` and
``ops/gumbel.py``, the token each row must get: Philox-4x32-10 on uint64
arrays, the request key ``philox(seed, pos)[0]``, the FP64 uniform from two
words, the FP32 uniform from one word of ``philox(key, t // 4)``, the murmur3
streams (MurmurHash3-32 of the words seed low, seed high, position low,
token: two hashes for FP64, the domain-0 one for FP32), the noise
transforms, and a first-index argmax in which NaN never wins.
"""

import numpy as np

_MASK32 = np.uint64(0xFFFFFFFF)
_ROUND_A = np.uint64(0xD2511F53)
_ROUND_B = np.uint64(0xCD9E8D57)
_KEY_A = np.uint64(0x9E3779B9)
_KEY_B = np.uint64(0xBB67AE85)


def philox4x32(
    counter: list[np.ndarray], key: tuple[int, int], rounds: int = 10
) -> list[np.ndarray]:
    """Philox-4x32; every array holds 32-bit values in uint64."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & _MASK32 for c in counter)
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for _ in range(rounds):
        prod0 = _ROUND_A * c0
        prod2 = _ROUND_B * c2
        c0, c1, c2, c3 = (
            (prod2 >> np.uint64(32)) ^ c1 ^ k0,
            prod2 & _MASK32,
            (prod0 >> np.uint64(32)) ^ c3 ^ k1,
            prod0 & _MASK32,
        )
        k0 = (k0 + _KEY_A) & _MASK32
        k1 = (k1 + _KEY_B) & _MASK32
    return [c0, c1, c2, c3]


def request_key(seed: int, pos: int) -> int:
    """``tl.randint(seed, pos)`` for an int64 seed and an int64 position."""
    seed_bits = seed & 0xFFFFFFFFFFFFFFFF
    pos_bits = pos & 0xFFFFFFFFFFFFFFFF
    counter = [np.uint64(pos_bits & 0xFFFFFFFF), np.uint64(pos_bits >> 32), 0, 0]
    return int(philox4x32(counter, (seed_bits & 0xFFFFFFFF, seed_bits >> 32))[0])


def uniform_fp64(key: int, counters) -> np.ndarray:
    """``uniform_fp64(key, counters)``: 64 bits of ``philox(key, counter)``, kept in (0, 1)."""
    lo, hi, _, _ = philox4x32([np.asarray(counters, dtype=np.uint64), 0, 0, 0], (key, 0))
    u = ((hi << np.uint64(32)) | lo).astype(np.float64) * 2.0**-64
    return np.clip(u, np.finfo(np.float64).tiny, np.nextafter(1.0, 0.0))


def uniform_fp32(key: int, counters) -> np.ndarray:
    """``uniform_fp32(key, counters)``: word 0 of 10-round ``philox(key, counter)``."""
    bits = philox4x32([np.asarray(counters, dtype=np.uint64), 0, 0, 0], (key, 0))[0]
    return _bits_to_uniform_fp32(bits)


def _bits_to_uniform_fp32(bits: np.ndarray) -> np.ndarray:
    u = bits.astype(np.float32) * np.float32(2.0**-32) + np.float32(2.0**-33)
    return np.minimum(u, np.nextafter(np.float32(1.0), np.float32(0.0)))


def gumbel_fp64_at(key: int, tokens) -> np.ndarray:
    """FP64 Philox noise of the counters ``tokens``."""
    return -np.log(-np.log(uniform_fp64(key, tokens)))


def gumbel_fp64(key: int, vocab_size: int) -> np.ndarray:
    return gumbel_fp64_at(key, np.arange(vocab_size))


def _rotl32(x: np.ndarray, shift: int) -> np.ndarray:
    return ((x << np.uint64(shift)) | (x >> np.uint64(32 - shift))) & _MASK32


def murmur3_32(words: list, seed: int) -> np.ndarray:
    """MurmurHash3 x86 32-bit of a sequence of 32-bit words (uint64 arrays)."""
    h = np.uint64(seed) & _MASK32
    for word in words:
        k = (np.asarray(word, dtype=np.uint64) & _MASK32) * np.uint64(0xCC9E2D51) & _MASK32
        k = _rotl32(k, 15) * np.uint64(0x1B873593) & _MASK32
        h = _rotl32(h ^ k, 13)
        h = (h * np.uint64(5) + np.uint64(0xE6546B64)) & _MASK32
    h = h ^ np.uint64(4 * len(words))
    h = (h ^ (h >> np.uint64(16))) * np.uint64(0x85EBCA6B) & _MASK32
    h = (h ^ (h >> np.uint64(13))) * np.uint64(0xC2B2AE35) & _MASK32
    return h ^ (h >> np.uint64(16))


def gumbel_fp64_murmur3(seed: int, pos: int, vocab_size: int) -> np.ndarray:
    """vLLM 0.32's FP64 noise: 53 bits from two hashes, domains 0 and 0x9E3779B9."""
    words = murmur3_words(seed, pos, np.arange(vocab_size))
    low = murmur3_32(words, 0)
    high = murmur3_32(words, 0x9E3779B9)
    random53 = ((high << np.uint64(32)) | low) >> np.uint64(11)
    u = (random53.astype(np.float64) + 0.5) * 2.0**-53
    u = np.where(u == 1.0, u - 2.0**-53, u)
    return -np.log(-np.log(u))


def murmur3_words(seed: int, pos: int, tokens) -> list:
    seed_bits = seed & 0xFFFFFFFFFFFFFFFF
    return [seed_bits & 0xFFFFFFFF, seed_bits >> 32, pos & 0xFFFFFFFF, np.asarray(tokens)]


def uniform_fp32_murmur3(seed: int, pos: int, tokens) -> np.ndarray:
    """vLLM 0.32's FP32 uniform: ``(r + 0.5) / 2**32`` rounded once to float32,
    ``r`` the domain-0 hash, split in two exact 16-bit halves."""
    r = murmur3_32(murmur3_words(seed, pos, tokens), 0)
    high = (r >> np.uint64(16)).astype(np.float32)
    low = (r & np.uint64(0xFFFF)).astype(np.float32)
    return high * np.float32(2.0**-16) + (low + np.float32(0.5)) * np.float32(2.0**-32)


def gumbel_fp32_murmur3_from_uniform(u: np.ndarray) -> np.ndarray:
    """``-log(-log(1 - u))`` in float32 as vLLM 0.32 evaluates it: below 0.25 the
    degree-8 series of ``log(1 - u)``, else ``log(max(1 - u, 2**-24))``."""
    u = np.asarray(u, dtype=np.float32)
    p = np.float32(1 / 8)
    for c in (1 / 7, 1 / 6, 1 / 5, 1 / 4, 1 / 3, 1 / 2, 1.0):
        p = np.float32(c) + u * p
    series = -u * p
    direct = np.log(np.maximum(np.float32(1.0) - u, np.float32(2.0**-24)))
    return (-np.log(-np.where(u < np.float32(0.25), series, direct))).astype(np.float32)


def gumbel_fp32_murmur3(seed: int, pos: int, vocab_size: int) -> np.ndarray:
    """vLLM 0.32's (and 0.33's) FP32 noise."""
    return gumbel_fp32_murmur3_from_uniform(uniform_fp32_murmur3(seed, pos, np.arange(vocab_size)))


def noise_uniform_fp32(key: int, tokens) -> np.ndarray:
    """The uniform behind the FP32 noise of counters ``tokens``: word ``t % 4``
    of 7-round ``philox(key, t // 4)`` (ops/random.py: FP32_NOISE_ROUNDS)."""
    tokens = np.asarray(tokens, dtype=np.uint64)
    words = philox4x32([tokens // np.uint64(4), 0, 0, 0], (key, 0), rounds=7)
    return _bits_to_uniform_fp32(np.choose((tokens % np.uint64(4)).astype(np.int64), words))


def gumbel_fp32_from_uniform(u: np.ndarray) -> np.ndarray:
    """``-log(-log1p(-u))`` as the kernel computes it: a series below 2**-6."""
    series = u * (1 + u * (np.float32(0.5) + u * (np.float32(1 / 3) + u * (np.float32(0.25) + u * np.float32(0.2)))))
    with np.errstate(divide="ignore"):
        neg_log1p_neg = np.where(u < np.float32(2.0**-6), series, -np.log(np.float32(1.0) - u))
    return (-np.log(neg_log1p_neg)).astype(np.float32)


def gumbel_fp32_at(key: int, tokens) -> np.ndarray:
    """FP32 noise of the counters ``tokens``."""
    return gumbel_fp32_from_uniform(noise_uniform_fp32(key, tokens))


def gumbel_fp32(key: int, vocab_size: int) -> np.ndarray:
    return gumbel_fp32_at(key, np.arange(vocab_size))


def first_argmax(scores: np.ndarray) -> int:
    """Lowest index of the maximum, NaN ranked below everything; 0 if no number."""
    scores = np.where(np.isnan(scores), -np.inf, scores)
    return int(np.argmax(scores))


def reference_tokens(
    logits,
    idx_mapping,
    temperature,
    seeds,
    pos,
    *,
    apply_temperature: bool,
    use_fp64: bool,
    fp64_stream: str = "philox",
    fp32_stream: str = "philox",
) -> list[int]:
    """What ``ops.gumbel.gumbel_sample`` must return (CPU tensors or arrays)."""
    logits = np.asarray(logits.float().cpu()) if hasattr(logits, "cpu") else logits
    tokens = []
    for row in range(logits.shape[0]):
        req = int(idx_mapping[row])
        temp = np.float32(temperature[req])
        scaled = logits[row].astype(np.float32)
        if temp == 0:
            tokens.append(first_argmax(scaled))
            continue
        if apply_temperature:
            scaled = scaled / temp
        key = request_key(int(seeds[req]), int(pos[row]))
        if use_fp64 and fp64_stream == "murmur3":
            noise = gumbel_fp64_murmur3(int(seeds[req]), int(pos[row]), scaled.shape[0])
            scores = scaled.astype(np.float64) + noise
        elif use_fp64:
            scores = scaled.astype(np.float64) + gumbel_fp64(key, scaled.shape[0])
        elif fp32_stream == "murmur3":
            scores = scaled + gumbel_fp32_murmur3(int(seeds[req]), int(pos[row]), scaled.shape[0])
        else:
            scores = scaled + gumbel_fp32(key, scaled.shape[0])
        tokens.append(first_argmax(scores))
    return tokens
