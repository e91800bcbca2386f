"""The Gumbel-max kernel (``ops/gumbel.py``) at its runner-facing signature."""

import math

import numpy as np
import pytest
import torch

from tests.ops.gumbel_reference import (
    gumbel_fp32,
    gumbel_fp32_murmur3,
    noise_uniform_fp32,
    reference_tokens,
    request_key,
    uniform_fp32_murmur3,
)
from tests.integration.helpers import run_python
from tests.ops.noises import NOISES
from tests.ops.stock_gumbel import (
    assert_murmur3_draw_is_upstreams,
    assert_fp32_murmur3_top_k_top_p_is_upstreams,
    assert_fp64_draw_is_stocks,
    assert_noise_bits_are_upstreams,
)
from tests.vllm_lines import needs_vllm_line
from vllm_sampling_plugin.ops import gumbel
from vllm_sampling_plugin.ops.gumbel import GumbelTuning, gumbel_sample

# Tiny tiles and chunks: a CPU-sized vocabulary then spans several tiles per
# program and several chunks per row, so the loop and stage 2 both run.
SMALL_CHUNKS = GumbelTuning(
    tile=64, max_tiles_per_chunk=2, num_warps=2, num_stages=1, programs_per_sm=1
)


@pytest.fixture(params=["default_tuning", "small_chunks"])
def tuning(request, monkeypatch):
    if request.param == "small_chunks":
        monkeypatch.setitem(gumbel.TUNING, False, SMALL_CHUNKS)
        monkeypatch.setitem(gumbel.TUNING, True, SMALL_CHUNKS)
    return request.param


def runner_batch(device, num_tokens=10, max_num_reqs=16, vocab_size=301, seed=0):
    """Rows mapped into larger per-request state tensors, as the runner has them."""
    gen = torch.Generator().manual_seed(seed)
    temperature = torch.rand(max_num_reqs, generator=gen) * 1.5 + 0.05
    temperature[::5] = 0.0
    temperature[1::5] = 1.0
    batch = dict(
        logits=torch.randn(num_tokens, vocab_size, generator=gen) * 3,
        idx_mapping=torch.randperm(max_num_reqs, generator=gen)[:num_tokens].to(torch.int32),
        temperature=temperature,
        seeds=torch.randint(-(2**63), 2**63 - 1, (max_num_reqs,), generator=gen),
        pos=torch.randint(0, 2**40, (num_tokens,), generator=gen),
    )
    return {name: t.to(device) for name, t in batch.items()}


def call(batch, **kwargs):
    return gumbel_sample(
        batch["logits"],
        batch["idx_mapping"],
        batch["temperature"],
        batch["seeds"],
        batch["pos"],
        **kwargs,
    )


@NOISES
@pytest.mark.parametrize("apply_temperature", [False, True])
def test_matches_independent_reference(device, tuning, noise, apply_temperature):
    """Every token equals the NumPy model of the documented noise and argmax.

    On the GPU the FP32 log is the hardware approximation (a few ulp from
    NumPy's); a flip would need two scores within ~1e-6 of each other, which
    these fixed inputs do not have.
    """
    batch = runner_batch(device)
    expected = reference_tokens(
        **{k: v.cpu() for k, v in batch.items()},
        apply_temperature=apply_temperature,
        **noise,
    )
    got = call(batch, apply_temperature=apply_temperature, **noise)
    assert got.dtype == torch.int64
    assert got.tolist() == expected


@NOISES
def test_row_token_independent_of_batch_and_split(device, noise, monkeypatch):
    """A row's token is the same alone, reordered, or with other chunk sizes."""
    batch = runner_batch(device, num_tokens=6)
    in_batch = call(batch, apply_temperature=True, **noise)

    reverse = torch.arange(5, -1, -1, device=device)
    reordered = {k: batch[k] for k in ("temperature", "seeds")}
    reordered.update({k: batch[k][reverse] for k in ("logits", "idx_mapping", "pos")})
    assert call(reordered, apply_temperature=True, **noise).tolist() == in_batch[reverse].tolist()

    monkeypatch.setitem(gumbel.TUNING, noise["use_fp64"], SMALL_CHUNKS)
    for row in (0, 3, 5):
        alone = {k: batch[k] for k in ("temperature", "seeds")}
        alone.update({k: batch[k][row : row + 1] for k in ("logits", "idx_mapping", "pos")})
        assert call(alone, apply_temperature=True, **noise).item() == in_batch[row].item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@NOISES
def test_greedy_is_argmax_with_lowest_id_on_ties(device, tuning, dtype, noise):
    gen = torch.Generator().manual_seed(1)
    # Few distinct values: every row has ties at its maximum.
    values = torch.randint(-4, 4, (12, 300), generator=gen).to(dtype)
    # Exactly two maxima, placed in the same lane of one tile, of two tiles of
    # one chunk, and of two chunks (SMALL_CHUNKS: 64-token tiles, 2 per chunk).
    for row, (first, second) in enumerate([(3, 67), (3, 131), (10, 266), (0, 299), (64, 128), (5, 6)]):
        values[row].clamp_(max=2)
        values[row, [first, second]] = 3
    # Padded rows: the row stride is larger than the vocabulary.
    padded = torch.full((12, 320), 100.0, dtype=dtype)
    padded[:, :300] = values
    logits = padded[:, :300].to(device)
    rows = torch.arange(12, dtype=torch.int32, device=device)
    got = gumbel_sample(
        logits,
        rows,
        torch.zeros(12, device=device),
        torch.arange(12, device=device),
        torch.zeros(12, dtype=torch.int64, device=device),
        apply_temperature=True,
        **noise,
    )
    first_max = [int((row == row.max()).nonzero()[0]) for row in values.float()]
    assert first_max[:6] == [3, 3, 10, 0, 64, 5]
    assert got.tolist() == first_max
    assert got.tolist() == values.float().argmax(dim=-1).tolist()


@pytest.mark.parametrize("apply_temperature", [False, True])
def test_processed_logits_written_at_request_slot(device, apply_temperature):
    batch = runner_batch(device, num_tokens=5, max_num_reqs=8, vocab_size=70)
    batch["logits"][2, 7] = float("nan")
    out = torch.full((8, 70), 123.0, device=device)
    call(batch, apply_temperature=apply_temperature, processed_logits_out=out)

    mapping = batch["idx_mapping"].long()
    temp = batch["temperature"][mapping].unsqueeze(-1)
    expected = batch["logits"]
    if apply_temperature:
        expected = torch.where(temp == 0, expected, expected / temp)
    # Triton's fp32 division on the GPU is within 2 ulp of torch's.
    torch.testing.assert_close(out[mapping], expected, rtol=1e-6, atol=0, equal_nan=True)
    untouched = torch.ones(8, dtype=torch.bool, device=device)
    untouched[mapping] = False
    assert (out[untouched] == 123.0).all()


@NOISES
def test_nan_never_wins_and_inf_wins(device, noise):
    nan, inf = float("nan"), float("inf")
    logits = torch.zeros(4, 40)
    logits[0, :] = nan
    logits[1, :] = -inf
    logits[2, 5] = nan
    logits[2, 6] = 50.0  # wins whatever the noise (noise < 25)
    logits[3, 9] = inf
    logits[3, 30] = inf
    got = gumbel_sample(
        logits.to(device),
        torch.arange(4, dtype=torch.int32, device=device),
        torch.ones(4, device=device),
        torch.arange(4, device=device),
        torch.zeros(4, dtype=torch.int64, device=device),
        apply_temperature=True,
        **noise,
    )
    assert got.tolist() == [0, 0, 6, 9]


# (FP32 stream, seed, position, token) whose FP32 noise uniform lies below
# 2**-24, where float32 cannot hold 1 - u: found by a search with the NumPy
# model (the test re-checks it). The first of each stream is in
# [2**-25, 2**-24), where -log(1 - u) in float32 caps the noise near 16.6; the
# second is below 2**-25, where it gives +inf.
RARE_UNIFORMS = [
    ("philox", 2026, 9779, 2825),
    ("philox", 2026, 45848, 406),
    ("murmur3", 2026, 43080, 2140),
    ("murmur3", 2026, 11893, 2741),
]


@pytest.mark.parametrize(
    "stream, seed, position, rare", RARE_UNIFORMS,
    ids=["philox_capped", "philox_infinite", "murmur3_capped", "murmur3_infinite"],
)
def test_fp32_noise_tail_beyond_the_float32_grid_near_one(device, stream, seed, position, rare):
    """The FP32 noise of a token whose uniform is below 2**-24 is
    ``-log(-log1p(-u))``, about ``-log(u)`` (the series branches of
    ``ops/random.py``, in both FP32 streams): placed 0.25 above (below) the
    best other score, the rare token must win (lose). Noise computed as
    ``-log(-log(1 - u))`` in float32 is 16.6 or +inf there, and one of the
    two rows comes out wrong."""
    vocab_size = 4096
    if stream == "murmur3":
        u = float(uniform_fp32_murmur3(seed, position, [rare])[0])
        noise = gumbel_fp32_murmur3(seed, position, vocab_size).astype(np.float64)
    else:
        key = request_key(seed, position)
        u = float(noise_uniform_fp32(key, [rare])[0])
        noise = gumbel_fp32(key, vocab_size).astype(np.float64)
    assert u < 2.0**-24
    best_other = np.delete(noise, rare).max()
    logits = torch.zeros(2, vocab_size)
    for row, offset in enumerate([0.25, -0.25]):
        logits[row, rare] = float(best_other - noise[rare] + offset)
    batch = dict(
        logits=logits,
        idx_mapping=torch.zeros(2, dtype=torch.int32),
        temperature=torch.ones(1),
        seeds=torch.tensor([seed]),
        pos=torch.tensor([position, position]),
    )
    expected = reference_tokens(
        **batch, apply_temperature=False, use_fp64=False, fp32_stream=stream
    )
    assert expected[0] == rare and expected[1] != rare
    got = call(
        {k: v.to(device) for k, v in batch.items()}, apply_temperature=False, fp32_stream=stream
    )
    assert got.tolist() == expected


def test_empty_batch(device):
    got = gumbel_sample(
        torch.empty(0, 10, device=device),
        torch.empty(0, dtype=torch.int32, device=device),
        torch.ones(4, device=device),
        torch.zeros(4, dtype=torch.int64, device=device),
        torch.empty(0, dtype=torch.int64, device=device),
        apply_temperature=True,
    )
    assert got.shape == (0,) and got.dtype == torch.int64


@pytest.mark.parametrize(
    "change, argument",
    [
        (dict(logits=torch.zeros(10)), "logits"),
        (dict(logits=torch.zeros(3, 10, dtype=torch.int32)), "logits"),
        (dict(idx_mapping=torch.zeros(2, dtype=torch.int32)), "idx_mapping"),
        (dict(idx_mapping=torch.zeros(3)), "idx_mapping"),
        (dict(pos=torch.zeros(3, dtype=torch.int32)), "pos"),
        (dict(seeds=torch.zeros(4, dtype=torch.int32)), "seeds"),
        (dict(temperature=torch.ones(4, dtype=torch.float64)), "temperature"),
        (dict(seeds=torch.zeros(4, dtype=torch.int64, device="meta")), "seeds"),
        (dict(processed_logits_out=torch.zeros(4, 9)), "processed_logits_out"),
    ],
)
def test_bad_input_raises_value_error(change, argument):
    args = dict(
        logits=torch.zeros(3, 10),
        idx_mapping=torch.zeros(3, dtype=torch.int32),
        temperature=torch.ones(4),
        seeds=torch.zeros(4, dtype=torch.int64),
        pos=torch.zeros(3, dtype=torch.int64),
        processed_logits_out=None,
    )
    args.update(change)
    out = args.pop("processed_logits_out")
    with pytest.raises(ValueError, match=argument):
        gumbel_sample(**args, apply_temperature=True, processed_logits_out=out)


def gpu_stock_batch(num_tokens, max_num_reqs, vocab_size, dtype):
    """A runner batch on the GPU for the comparisons with vLLM's own kernels:
    logits, idx_mapping (int64), temperature (every 7th greedy, every 7th
    + 1 at 1.0), full-range seeds, positions."""
    gen = torch.Generator(device="cuda").manual_seed(vocab_size + num_tokens)
    logits = (torch.randn(num_tokens, vocab_size, generator=gen, device="cuda") * 4).to(dtype)
    idx_mapping = torch.randperm(max_num_reqs, generator=gen, device="cuda")[:num_tokens]
    temperature = torch.rand(max_num_reqs, generator=gen, device="cuda") * 1.5 + 0.01
    temperature[::7] = 0.0
    temperature[1::7] = 1.0
    seeds = torch.randint(
        -(2**63), 2**63 - 1, (max_num_reqs,), generator=gen, device="cuda", dtype=torch.int64
    )
    pos = torch.randint(0, 1 << 20, (num_tokens,), generator=gen, device="cuda", dtype=torch.int64)
    return logits, idx_mapping, temperature, seeds, pos


@pytest.mark.gpu
@needs_vllm_line("0.20", why="the reference is 0.20's FP64 Gumbel kernel; 0.32 and 0.33 "
                 "draw their noise with another generator (same law, other tokens)")
@pytest.mark.parametrize("num_tokens, max_num_reqs", [(1, 4), (96, 128), (1024, 1024)])
@pytest.mark.parametrize("vocab_size", [32000, 151936])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("apply_temperature", [False, True])
def test_fp64_equals_stock_vllm(num_tokens, max_num_reqs, vocab_size, dtype, apply_temperature):
    """use_fp64=True gives vLLM 0.20's own tokens and processed logits."""
    logits, idx_mapping, temperature, seeds, pos = gpu_stock_batch(
        num_tokens, max_num_reqs, vocab_size, dtype
    )
    assert_fp64_draw_is_stocks(logits, idx_mapping.to(torch.int32), temperature, seeds, pos,
                               apply_temperature)


# Without CUDA, vLLM replaces Triton with a placeholder unless no device is
# visible at all; with CUDA_VISIBLE_DEVICES="" its kernels run under the
# interpreter like the plugin's. A fresh interpreter, so that this process's
# vLLM is left as it is.
STOCK_ON_CPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}


@needs_vllm_line("0.20", why="the reference is 0.20's FP64 Gumbel kernel")
def test_fp64_equals_stock_vllm_on_cpu():
    """use_fp64=True gives vLLM 0.20's own tokens and processed logits, on CPU:
    batches mapped into larger request state, greedy rows, float32 and
    bfloat16 logits, several tiles and chunks per row."""
    run_python(
        """
        import torch
        from tests.ops.stock_gumbel import assert_fp64_draw_is_stocks

        for num_tokens, max_num_reqs, vocab_size in [(1, 4, 301), (12, 16, 3000)]:
            for dtype in (torch.float32, torch.bfloat16):
                for apply_temperature in (False, True):
                    gen = torch.Generator().manual_seed(vocab_size + num_tokens)
                    logits = (torch.randn(num_tokens, vocab_size, generator=gen) * 4).to(dtype)
                    idx_mapping = torch.randperm(max_num_reqs, generator=gen)[:num_tokens]
                    idx_mapping = idx_mapping.to(torch.int32)
                    temperature = torch.rand(max_num_reqs, generator=gen) * 1.5 + 0.01
                    temperature[::7] = 0.0
                    seeds = torch.randint(-(2**63), 2**63 - 1, (max_num_reqs,), generator=gen)
                    pos = torch.randint(0, 1 << 20, (num_tokens,), generator=gen)
                    assert_fp64_draw_is_stocks(
                        logits, idx_mapping, temperature, seeds, pos, apply_temperature,
                        case=(num_tokens, vocab_size, dtype, apply_temperature),
                    )
        """,
        env=STOCK_ON_CPU_ENV,
    )


# The CPU twin's batches: (num_tokens, max_num_reqs, vocab_size, logits
# scale). Small logit scales leave the noise to decide, so a wrong noise bit
# pattern shows as another token; 1025 and 3000 split rows over several of
# upstream's 1024-token blocks and the plugin's tiles.
MURMUR3_CPU_BATCHES = [(1, 4, 301, 4.0), (16, 24, 1025, 0.5), (12, 16, 3000, 2.0), (64, 64, 257, 0.1)]


@needs_vllm_line("0.32", "0.33", why="the reference is their FP32 Gumbel kernel, murmur3 noise")
def test_fp32_murmur3_equals_upstream_vllm_on_cpu():
    """fp32_stream="murmur3" is vLLM 0.32/0.33's own FP32 draw, on CPU: the
    noise bit for bit (seeds over the whole int64 range, positions past
    2**32), then Gumbel-max tokens over many seeds, positions, temperatures
    (greedy rows, 1.0, 0.01..1.5), vocabulary sizes, float32 and bfloat16
    logits, with and without in-kernel temperature, and the fused
    top-k/top-p kernel against upstream's mask then FP32 Gumbel-max."""
    run_python(
        f"""
        import torch
        from tests.ops.stock_gumbel import (
            assert_murmur3_draw_is_upstreams,
            assert_fp32_murmur3_top_k_top_p_is_upstreams,
            assert_noise_bits_are_upstreams,
        )

        gen = torch.Generator().manual_seed(0)
        seeds = torch.randint(-(2**63), 2**63 - 1, (6,), generator=gen)
        seeds[:3] = torch.tensor([0, -1, 2**63 - 1])
        pos = torch.tensor([0, 1, 2**32 + 5, 2**40 + 3, 123456, 7])
        assert_noise_bits_are_upstreams(seeds, pos, 5000)

        for num_tokens, max_num_reqs, vocab_size, scale in {MURMUR3_CPU_BATCHES!r}:
            for dtype in (torch.float32, torch.bfloat16):
                for apply_temperature in (False, True):
                    gen = torch.Generator().manual_seed(vocab_size + num_tokens)
                    logits = (torch.randn(num_tokens, vocab_size, generator=gen) * scale).to(dtype)
                    idx_mapping = torch.randperm(max_num_reqs, generator=gen)[:num_tokens]
                    temperature = torch.rand(max_num_reqs, generator=gen) * 1.5 + 0.01
                    temperature[::7] = 0.0
                    temperature[1::7] = 1.0
                    seeds = torch.randint(-(2**63), 2**63 - 1, (max_num_reqs,), generator=gen)
                    pos = torch.randint(0, 1 << 40, (num_tokens,), generator=gen)
                    case = (num_tokens, vocab_size, dtype, apply_temperature)
                    assert_murmur3_draw_is_upstreams(
                        logits, idx_mapping, temperature, seeds, pos, apply_temperature,
                        use_fp64=False, case=case,
                    )
                top_k = torch.randint(1, 40, (max_num_reqs,), generator=gen).to(torch.int32)
                top_k[::3] = vocab_size
                top_p = torch.rand(max_num_reqs, generator=gen) * 0.8 + 0.15
                top_p[1::3] = 1.0
                assert_fp32_murmur3_top_k_top_p_is_upstreams(
                    logits, idx_mapping, temperature, seeds, pos, top_k, top_p, case
                )
        """,
        env=STOCK_ON_CPU_ENV,
        timeout=900,
    )


@pytest.mark.gpu
@needs_vllm_line("0.32", "0.33", why="the reference is their FP32 Gumbel kernel, murmur3 noise")
def test_fp32_murmur3_noise_bits_equal_upstream_vllm():
    """Compiled for the GPU (where fused multiply-adds and libdevice's logf
    decide the last bits), the FP32 murmur3 noise is still upstream's, bit
    for bit."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    seeds = torch.randint(-(2**63), 2**63 - 1, (64,), generator=gen, device="cuda")
    pos = torch.randint(0, 1 << 40, (64,), generator=gen, device="cuda")
    assert_noise_bits_are_upstreams(seeds, pos, 151936)


@pytest.mark.gpu
@needs_vllm_line("0.32", "0.33", why="the reference is their Gumbel kernel, murmur3 noise")
@pytest.mark.parametrize("num_tokens, max_num_reqs", [(1, 4), (96, 128), (1024, 1024)])
@pytest.mark.parametrize("vocab_size", [32000, 151936])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("apply_temperature", [False, True])
@pytest.mark.parametrize("use_fp64", [False, True], ids=["fp32", "fp64"])
def test_murmur3_equals_upstream_vllm(
    num_tokens, max_num_reqs, vocab_size, dtype, apply_temperature, use_fp64
):
    """fp32_stream="murmur3" and fp64_stream="murmur3" give vLLM 0.32's and
    0.33's own FP32 and FP64 tokens."""
    logits, idx_mapping, temperature, seeds, pos = gpu_stock_batch(
        num_tokens, max_num_reqs, vocab_size, dtype
    )
    assert_murmur3_draw_is_upstreams(
        logits, idx_mapping, temperature, seeds, pos, apply_temperature, use_fp64
    )


@pytest.mark.gpu
@needs_vllm_line("0.32", "0.33", why="the reference is their top-k/top-p mask and FP32 Gumbel kernel")
@pytest.mark.parametrize("num_tokens", [4, 256])
def test_fp32_murmur3_top_k_top_p_equals_upstream_vllm(num_tokens):
    """The fused kernel with fp32_stream="murmur3" gives upstream's masked FP32 draw."""
    vocab_size = 151936
    logits, idx_mapping, temperature, seeds, pos = gpu_stock_batch(
        num_tokens, num_tokens, vocab_size, torch.float32
    )
    gen = torch.Generator(device="cuda").manual_seed(num_tokens)
    top_k = torch.randint(1, 100, (num_tokens,), generator=gen, device="cuda").to(torch.int32)
    top_k[::3] = vocab_size
    top_p = torch.rand(num_tokens, generator=gen, device="cuda") * 0.8 + 0.15
    top_p[1::3] = 1.0
    assert_fp32_murmur3_top_k_top_p_is_upstreams(
        logits, idx_mapping, temperature, seeds, pos, top_k, top_p
    )


def test_unknown_fp64_stream_is_refused():
    with pytest.raises(ValueError, match="fp64_stream must be one of"):
        gumbel_sample(
            torch.zeros(1, 8), torch.zeros(1, dtype=torch.int32), torch.ones(1),
            torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64),
            apply_temperature=True, use_fp64=True, fp64_stream="mt19937",
        )


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("use_fp64", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("gap", [12.0, 14.0, 16.0])
def test_noise_tail_samples_rare_token_at_true_rate(gap, use_fp64):
    """V=2, logits [0, -gap], 2**30 draws: the rare token's count is within
    5 sigma of N / (1 + e**gap). Noise capped near 16.6 (naive fp32
    ``-log(-log(u))``) undercounts it by far more at gap 14 and 16."""
    rows, launches = 1 << 22, 1 << 8
    logits = torch.tensor([0.0, -gap], device="cuda").expand(rows, 2)
    idx_mapping = torch.arange(rows, dtype=torch.int32, device="cuda")
    temperature = torch.ones(rows, device="cuda")
    seeds = torch.arange(rows, dtype=torch.int64, device="cuda")
    rare = torch.zeros((), dtype=torch.int64, device="cuda")
    for launch in range(launches):
        pos = torch.full((rows,), launch, dtype=torch.int64, device="cuda")
        tokens = gumbel_sample(
            logits, idx_mapping, temperature, seeds, pos,
            apply_temperature=False, use_fp64=use_fp64,
        )
        rare += tokens.sum()
    draws = rows * launches
    p = 1.0 / (1.0 + math.exp(gap))
    mean, sigma = draws * p, math.sqrt(draws * p * (1 - p))
    assert abs(rare.item() - mean) <= 5 * sigma, (rare.item(), mean, sigma)
