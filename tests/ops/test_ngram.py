"""ngram_propose / ngram_propose_into against vLLM 0.20's CPU n-gram proposer.

The reference is ``_find_longest_matched_ngram_and_propose_tokens`` from the
installed vLLM (numba). Every comparison is exact: the proposed tokens, their
number, and the fill token in the remaining slots.
"""

import itertools

import numpy as np
import pytest
import torch

from tests.conftest import missing_tool
from vllm_sampling_plugin.ops import ngram_propose, ngram_propose_into, ngram_scratch
from vllm_sampling_plugin.ops.ngram import NGRAM_MAX_SPLITS

try:
    from vllm.v1.spec_decode.ngram_proposer import (
        _find_longest_matched_ngram_and_propose_tokens as cpu_propose,
    )
except ImportError as error:  # numba, which vLLM's CPU proposer needs, is missing
    missing_tool(f"vLLM's CPU n-gram proposer does not import: {error}", module_level=True)

# A max_model_len that never caps anything (the CPU function needs one).
NO_CAP = 2**30


def random_histories(rng, num_rows, max_len, vocab_sizes=(1, 2, 3, 4, 50)):
    """Rows over tiny vocabularies (many repeats) with lengths covering 0..max_len."""
    vocab = rng.choice(vocab_sizes, size=num_rows)
    tokens = np.stack([rng.integers(0, v, max_len) for v in vocab]).astype(np.int32)
    lens = rng.integers(0, max_len + 1, num_rows).astype(np.int32)
    return tokens, lens


def assert_matches_cpu(
    tokens, lens, drafts, num_drafts, min_n, max_n, k, max_model_len
):
    """Equal to the CPU proposer; fill = the row's last token (0 if empty)."""
    drafts = drafts.cpu().numpy()
    num_drafts = num_drafts.cpu().numpy()
    assert drafts.shape == (len(lens), k) and num_drafts.shape == (len(lens),)
    for r, seq_len in enumerate(lens):
        expected = cpu_propose(tokens[r, :seq_len], min_n, max_n, max_model_len, k)
        n = num_drafts[r]
        history = tokens[r, :seq_len].tolist()
        ctx = f"row {r}: {history} (min_n={min_n} max_n={max_n} k={k})"
        assert n == len(expected), ctx
        assert drafts[r, :n].tolist() == expected.tolist(), ctx
        fill = tokens[r, seq_len - 1] if seq_len > 0 else 0
        assert (drafts[r, n:] == fill).all(), ctx


def run(tokens, lens, device, min_n, max_n, k, max_model_len=None):
    drafts, num_drafts = ngram_propose(
        torch.from_numpy(tokens).to(device),
        torch.from_numpy(lens).to(device),
        min_n=min_n,
        max_n=max_n,
        k=k,
        max_model_len=max_model_len,
    )
    assert drafts.dtype == torch.int64 and num_drafts.dtype == torch.int32
    return drafts, num_drafts


@pytest.mark.parametrize(
    "min_n, max_n, k, max_model_len",
    [
        (2, 5, 5, None),  # the benchmark setting
        (1, 1, 1, None),
        (1, 5, 8, 44),  # rows near 40 tokens get their draft capped
        (3, 4, 3, 30),  # rows of >= 30 tokens get nothing
        (5, 5, 8, None),
    ],
)
def test_matches_cpu_proposer_on_random_histories(
    device, min_n, max_n, k, max_model_len
):
    rng = np.random.default_rng(1000 * min_n + 100 * max_n + k)
    tokens, lens = random_histories(rng, num_rows=400, max_len=40)
    drafts, num_drafts = run(tokens, lens, device, min_n, max_n, k, max_model_len)
    cap = NO_CAP if max_model_len is None else max_model_len
    assert_matches_cpu(tokens, lens, drafts, num_drafts, min_n, max_n, k, cap)
    # The data must exercise both outcomes, or the comparison proves little.
    assert 0 < int((num_drafts > 0).sum()) < len(lens)


@pytest.mark.parametrize(
    "min_n, max_n", [(a, b) for a in range(1, 6) for b in range(a, 6)]
)
def test_every_size_combination(device, min_n, max_n):
    rng = np.random.default_rng(10 * min_n + max_n)
    tokens, lens = random_histories(rng, num_rows=16, max_len=24, vocab_sizes=(2, 3))
    # Edge lengths in every launch: empty, one token, around min_n, full.
    lens[:5] = [0, 1, max(min_n - 1, 0), min_n, 24]
    for k in range(1, 9):
        drafts, num_drafts = run(tokens, lens, device, min_n, max_n, k)
        assert_matches_cpu(tokens, lens, drafts, num_drafts, min_n, max_n, k, NO_CAP)


@pytest.mark.parametrize(
    "min_n, max_n, k", [(1, 1, 1), (2, 5, 5), (5, 5, 8), (1, 5, 3)]
)
def test_edge_lengths_against_max_model_len(device, min_n, max_n, k):
    max_len = 20
    max_model_len = max_len
    lens = np.array(
        [
            0,
            1,
            min_n - 1,
            min_n,
            min_n + 1,
            max_model_len - 2,
            max_model_len - 1,
            max_model_len,
        ],
        dtype=np.int32,
    ).clip(0, max_len)
    # A period-2 pattern matches every n, so only the caps decide the count.
    tokens = np.tile(np.array([7, 3], dtype=np.int32), (len(lens), max_len // 2))
    drafts, num_drafts = run(tokens, lens, device, min_n, max_n, k, max_model_len)
    assert_matches_cpu(tokens, lens, drafts, num_drafts, min_n, max_n, k, max_model_len)
    num_drafts = num_drafts.tolist()
    assert num_drafts[0] == 0 and num_drafts[-1] == 0
    assert num_drafts[-2] == 1  # one token left before max_model_len


def test_longest_ngram_wins_then_earliest_occurrence(device):
    rows = [
        # n=3 ("1 2 3" at 4) beats the earlier n=2 ("2 3" at 1).
        [9, 2, 3, 6, 1, 2, 3, 8, 1, 2, 3],
        # Two occurrences of "1 2": the earlier one (followed by 7) wins.
        [5, 1, 2, 7, 1, 2, 9, 1, 2, 0, 0],
        # The occurrence may overlap the suffix: "4 4 4" at 0 then "4".
        [4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0],
        # No n in [2, 3] matches.
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
    ]
    tokens = np.array(rows, dtype=np.int32)
    lens = np.array([11, 9, 4, 11], dtype=np.int32)
    drafts, num_drafts = run(tokens, lens, device, min_n=2, max_n=3, k=3)
    assert drafts.tolist() == [[8, 1, 2], [7, 1, 2], [4, 4, 4], [11, 11, 11]]
    assert num_drafts.tolist() == [3, 3, 1, 0]
    assert_matches_cpu(tokens, lens, drafts, num_drafts, 2, 3, 3, NO_CAP)


def test_long_rows_across_blocks_and_splits(device):
    """Winners planted in different 1024-token blocks and scan splits."""
    rng = np.random.default_rng(7)
    max_len = 5000
    # Distinct tokens (>= 1000) everywhere except the planted n-grams.
    tokens = np.stack(
        [rng.permutation(10**6)[:max_len] + 1000 for _ in range(3)]
    ).astype(np.int32)
    lens = np.array([4900, 4999, 3100], dtype=np.int32)

    def plant(r, start, gram):
        tokens[r, start : start + len(gram)] = gram

    # Row 0: n=3 late (block 4) beats n=2 early (block 0).
    plant(0, 4897, [11, 12, 13])
    plant(0, 10, [12, 13])
    plant(0, 4200, [11, 12, 13])
    # Row 1: equal n in blocks 3 and 1; the earlier (block 1) wins.
    plant(1, 4996, [21, 22, 23])
    plant(1, 3500, [21, 22, 23])
    plant(1, 1500, [21, 22, 23])
    # Row 2: "31 31 31" occurs once more, ending right before the last token,
    # so only one token can be proposed.
    plant(2, 3096, [31, 31, 31, 31])
    drafts, num_drafts = run(tokens, lens, device, min_n=2, max_n=4, k=4)
    assert_matches_cpu(tokens, lens, drafts, num_drafts, 2, 4, 4, NO_CAP)
    assert drafts[0].tolist() == tokens[0, 4203:4207].tolist()
    assert drafts[1].tolist() == tokens[1, 1503:1507].tolist()
    assert num_drafts.tolist() == [4, 4, 1]


def test_int64_inputs_and_row_stride(device):
    rng = np.random.default_rng(3)
    wide, lens = random_histories(rng, num_rows=32, max_len=48)
    lens = np.minimum(lens, 30)
    token_ids = torch.from_numpy(wide).to(device=device, dtype=torch.int64)[:, :30]
    assert token_ids.stride(0) == 48
    drafts, num_drafts = ngram_propose(
        token_ids,
        torch.from_numpy(lens).to(device=device, dtype=torch.int64),
        min_n=2,
        max_n=4,
        k=4,
    )
    assert_matches_cpu(wide[:, :30], lens, drafts, num_drafts, 2, 4, 4, NO_CAP)


def test_empty_batch(device):
    drafts, num_drafts = ngram_propose(
        torch.zeros(0, 8, dtype=torch.int32, device=device),
        torch.zeros(0, dtype=torch.int32, device=device),
        min_n=1,
        max_n=2,
        k=3,
    )
    assert drafts.shape == (0, 3) and num_drafts.shape == (0,)


def test_propose_into_runner_buffers(device):
    """Batch order, chunked-prefill entries, fill tokens, no stale reads."""
    rng = np.random.default_rng(11)
    max_num_reqs, max_model_len, k = 24, 40, 4
    tokens, lens = random_histories(rng, max_num_reqs, max_model_len)
    history = torch.from_numpy(tokens).to(device)
    total_len = torch.from_numpy(lens).to(device)
    last_sampled = torch.from_numpy(rng.integers(0, 1000, (max_num_reqs, 1))).to(device)
    idx_mapping_np = rng.permutation(max_num_reqs)[:17].astype(np.int32)
    num_sampled_np = rng.integers(0, 3, 17).astype(np.int32)
    idx_mapping = torch.from_numpy(idx_mapping_np).to(device)
    num_sampled = torch.from_numpy(num_sampled_np).to(device)

    # Stale contents must not leak into the result.
    drafts_out = torch.full((max_num_reqs, k), -5, dtype=torch.int64, device=device)
    num_drafts_out = torch.full((max_num_reqs,), -5, dtype=torch.int32, device=device)
    scratch = ngram_scratch(max_num_reqs, device).fill_(2**62)

    out = ngram_propose_into(
        history,
        total_len,
        idx_mapping,
        drafts_out,
        num_drafts_out,
        scratch,
        min_n=2,
        max_n=3,
        max_model_len=max_model_len,
        num_sampled=num_sampled,
        fill_tokens=last_sampled,
    )
    assert out.shape == (17, k) and out.data_ptr() == drafts_out.data_ptr()
    assert (drafts_out[17:] == -5).all() and (num_drafts_out[17:] == -5).all()

    out = out.cpu().numpy()
    num = num_drafts_out[:17].cpu().numpy()
    fill = last_sampled.cpu().numpy()[:, 0]
    for i, row in enumerate(idx_mapping_np):
        expected = cpu_propose(tokens[row, : lens[row]], 2, 3, max_model_len, k)
        if num_sampled_np[i] == 0:
            expected = expected[:0]  # chunked prefill: no proposal
        assert num[i] == len(expected), i
        assert out[i, : num[i]].tolist() == expected.tolist(), i
        assert (out[i, num[i] :] == fill[row]).all(), i
    assert (num > 0).any() and (num_sampled_np == 0).any()


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(min_n=0, max_n=2, k=3), "min_n"),
        (dict(min_n=3, max_n=2, k=3), "max_n"),
        (dict(min_n=1, max_n=257, k=3), "max_n"),
        (dict(min_n=1, max_n=2, k=0), "k"),
        (dict(min_n=1, max_n=2, k=3, max_model_len=0), "max_model_len"),
    ],
)
def test_bad_sizes(device, kwargs, name):
    tokens = torch.zeros(2, 8, dtype=torch.int32, device=device)
    lens = torch.full((2,), 8, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=name):
        ngram_propose(tokens, lens, **kwargs)


@pytest.mark.parametrize(
    "tokens, lens, name",
    [
        (
            torch.zeros(8, dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32),
            "token_ids",
        ),
        (torch.zeros(2, 8), torch.zeros(2, dtype=torch.int32), "token_ids"),
        (
            torch.zeros(2, 8, dtype=torch.int32),
            torch.zeros(3, dtype=torch.int32),
            "seq_lens",
        ),
        (
            torch.zeros(2, 8, dtype=torch.int32),
            torch.zeros(2, 1, dtype=torch.int32),
            "seq_lens",
        ),
        (
            torch.zeros(2, 8, dtype=torch.int32),
            torch.zeros(2, dtype=torch.float32),
            "seq_lens",
        ),
        (
            torch.zeros(2, 8, dtype=torch.int32),
            torch.tensor([3, 9], dtype=torch.int32),
            "seq_lens",
        ),
        (
            torch.zeros(2, 8, dtype=torch.int32),
            torch.tensor([-1, 2], dtype=torch.int32),
            "seq_lens",
        ),
        (
            torch.zeros(8, 2, dtype=torch.int32).t(),
            torch.zeros(2, dtype=torch.int32),
            "token_ids",
        ),
    ],
)
def test_bad_tensors(tokens, lens, name):
    with pytest.raises(ValueError, match=name):
        ngram_propose(tokens, lens, min_n=1, max_n=2, k=2)


def test_propose_into_bad_buffers():
    history = torch.zeros(4, 16, dtype=torch.int32)
    total_len = torch.zeros(4, dtype=torch.int32)
    idx = torch.arange(3, dtype=torch.int32)
    drafts = torch.zeros(4, 2, dtype=torch.int64)
    num = torch.zeros(4, dtype=torch.int32)
    scratch = ngram_scratch(4, "cpu")
    good = dict(
        history=history,
        total_len=total_len,
        idx_mapping=idx,
        drafts_out=drafts,
        num_drafts_out=num,
        scratch=scratch,
    )
    bad = [
        ("idx_mapping", idx.long()),
        ("drafts_out", drafts.int()),
        ("drafts_out", torch.zeros(2, 2, dtype=torch.int64)),
        ("num_drafts_out", torch.zeros(2, dtype=torch.int32)),
        ("scratch", torch.zeros(4, NGRAM_MAX_SPLITS - 1, dtype=torch.int64)),
        ("total_len", torch.zeros(5, dtype=torch.int32)),
    ]
    for name, value in bad:
        args = dict(good, **{name: value})
        with pytest.raises(ValueError, match=name):
            ngram_propose_into(**args, min_n=1, max_n=2, max_model_len=16)
    with pytest.raises(ValueError, match="max_n"):
        ngram_propose_into(**good, min_n=2, max_n=1, max_model_len=16)


@pytest.mark.gpu
@pytest.mark.parametrize("max_len", [1024, 8192])
def test_matches_cpu_proposer_long_contexts_gpu(max_len):
    rng = np.random.default_rng(max_len)
    tokens, lens = random_histories(rng, 64, max_len, vocab_sizes=(20, 200, 5000))
    lens[:4] = [max_len, max_len - 1, 1, 0]
    for min_n, max_n, k in itertools.product([1, 2], [3, 5], [3, 5]):
        drafts, num_drafts = run(
            tokens, lens, "cuda", min_n, max_n, k, max_model_len=max_len + 2
        )
        assert_matches_cpu(
            tokens, lens, drafts, num_drafts, min_n, max_n, k, max_len + 2
        )


@pytest.mark.gpu
def test_propose_into_makes_no_host_sync_gpu():
    max_num_reqs, max_model_len, k = 64, 4096, 5
    history = torch.randint(
        0, 50, (max_num_reqs, max_model_len), dtype=torch.int32, device="cuda"
    )
    total_len = torch.randint(
        0, max_model_len, (max_num_reqs,), dtype=torch.int32, device="cuda"
    )
    idx_mapping = torch.randperm(max_num_reqs, device="cuda")[:40].int()
    num_sampled = torch.ones(40, dtype=torch.int32, device="cuda")
    last_sampled = torch.zeros(max_num_reqs, 1, dtype=torch.int64, device="cuda")
    drafts = torch.zeros(max_num_reqs, k, dtype=torch.int64, device="cuda")
    num = torch.zeros(max_num_reqs, dtype=torch.int32, device="cuda")
    scratch = ngram_scratch(max_num_reqs, "cuda")
    args = (history, total_len, idx_mapping, drafts, num, scratch)
    kwargs = dict(
        min_n=2,
        max_n=5,
        max_model_len=max_model_len,
        num_sampled=num_sampled,
        fill_tokens=last_sampled,
    )
    ngram_propose_into(*args, **kwargs)  # compile outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        ngram_propose_into(*args, **kwargs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
