"""ops.ngram.count_packed_matches_: the count of real drafts in a block-packed scan."""

import pytest
import torch

from vllm_sampling_plugin.ops.ngram import count_packed_matches_


def _pack(n: int, pos: int, max_len: int) -> int:
    return n * (max_len + 1) + pos + 1


def _reference(scores, state_rows, total_len, max_len, k):
    best = scores[: len(state_rows)].amax(dim=1)
    packed = best - 1
    start = packed % (max_len + 1) + packed // (max_len + 1)
    avail = (total_len[state_rows].long() - start).clamp(0, k)
    return torch.where(best > 0, avail, 0).to(torch.int32)


def test_counts_follow_the_best_block_and_the_history_left(device):
    max_len, k = 100, 3
    scores = torch.zeros(5, 4, dtype=torch.int64)
    scores[0, 1] = _pack(2, 3, max_len)  # draft starts at 5 of 9: 3 (capped at k)
    scores[1, 0] = _pack(1, 2, max_len)  # starts at 3 of 5: 2 tokens left
    scores[1, 3] = _pack(3, 0, max_len)  # longer n wins: starts at 3 too
    scores[2, 2] = _pack(2, 6, max_len)  # starts at 8 of 8: nothing left
    # row 3: no match in any block; row 4 is past num_reqs
    scores[4, 0] = _pack(1, 0, max_len)
    total_len = torch.tensor([0, 9, 5, 8, 7], dtype=torch.int32)
    state_rows = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    counts = torch.full((5,), -7, dtype=torch.int32, device=device)
    out = count_packed_matches_(
        counts, scores.to(device), state_rows.to(device), total_len.to(device),
        max_len=max_len, k=k,
    )
    assert out.tolist() == [3, 2, 0, 0]
    assert counts[4].item() == -7  # entries past num_reqs untouched


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_counts_equal_the_torch_reduction_on_random_scans(device, index_dtype):
    gen = torch.Generator().manual_seed(3)
    max_len, k, num_reqs, num_blocks = 4096, 7, 37, 16
    total_len = torch.randint(1, max_len, (64,), generator=gen)
    n = torch.randint(1, 5, (num_reqs + 3, num_blocks), generator=gen)
    pos = torch.randint(0, max_len - 4, (num_reqs + 3, num_blocks), generator=gen)
    scores = n * (max_len + 1) + pos + 1
    scores[torch.rand(scores.shape, generator=gen) < 0.5] = 0
    scores[::5] = 0  # whole rows without a match
    state_rows = torch.randperm(64, generator=gen)[:num_reqs].to(index_dtype)
    counts = torch.empty(num_reqs + 3, dtype=torch.int32, device=device)
    out = count_packed_matches_(
        counts, scores.to(device), state_rows.to(device), total_len.to(device),
        max_len=max_len, k=k,
    )
    want = _reference(scores, state_rows, total_len, max_len, k)
    assert torch.equal(out.cpu(), want)
    assert {0, k} <= set(want.tolist())  # both ends of the range occur


def test_an_empty_batch_launches_nothing(device):
    counts = torch.empty(2, dtype=torch.int32, device=device)
    out = count_packed_matches_(
        counts, torch.zeros(2, 3, dtype=torch.int64, device=device),
        torch.zeros(0, dtype=torch.int32, device=device),
        torch.zeros(2, dtype=torch.int32, device=device), max_len=8, k=3,
    )
    assert out.shape == (0,)
