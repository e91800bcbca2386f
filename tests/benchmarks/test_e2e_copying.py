"""The copy checkpoint (n-gram cell's model), on CPU through transformers' Llama."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.e2e import checkpoint, copying

VOCAB = 4096


def test_cycles_are_a_permutation_of_the_words_in_cycles_of_three_lengths():
    all_cycles = copying.cycles(VOCAB)
    words = sorted(t for c in all_cycles for t in c)
    assert words == list(range(copying.FIRST_WORD_ID, VOCAB))
    by_length = copying.cycles_by_length(VOCAB)
    assert list(by_length) == [16, 128, 1024]
    for length, group in by_length.items():
        assert all(length <= len(c) < 2 * length for c in group)
    # Half the words in short cycles, a quarter in each longer length.
    assert sum(map(len, by_length[16])) == (VOCAB - copying.FIRST_WORD_ID) // 2
    successor = copying.successors(VOCAB)
    assert successor[: copying.FIRST_WORD_ID].tolist() == [-1] * copying.FIRST_WORD_ID
    cycle = all_cycles[5]
    assert [int(successor[t]) for t in cycle] == cycle[1:] + cycle[:1]
    assert all_cycles == copying.cycles(VOCAB)  # the workload rebuilds the same ones


def test_prompts_repeat_one_cycle_after_a_random_prefix():
    successor = copying.successors(VOCAB)
    for prompt in copying.prompts(4, 64, VOCAB, seed=2):
        assert len(prompt) == 64
        body = prompt[16:]
        assert all(int(successor[a]) == b for a, b in zip(body, body[1:]))


def _greedy_walk(prompt: list[int], successor: torch.Tensor, steps: int) -> list[int]:
    text = list(prompt)
    for _ in range(steps):
        text.append(int(successor[text[-1]]))
    return text


def _first_repeat(text: list[int], prompt_len: int) -> int | None:
    """The first generated position whose preceding bigram occurred before:
    where an n-gram proposer (n >= 2) first finds a match."""
    for i in range(prompt_len + 2, len(text)):
        bigram = (text[i - 2], text[i - 1])
        if any((text[j], text[j + 1]) == bigram for j in range(i - 2)):
            return i - prompt_len
    return None


@pytest.mark.parametrize("name, first_repeat", [
    ("accepting", 2), ("nonrepeating", None), ("switching", copying.SWITCH_CYCLE_LEN + 1)])
def test_workloads_repeat_where_their_names_say(name, first_repeat):
    """Greedy walks of 256 tokens: an accepting prompt matches at once, a
    non-repeating one never, a switching one only after its cycle's length."""
    successor = copying.successors(VOCAB)
    for prompt in copying.workload_prompts(name, 4, 64, VOCAB, seed=3):
        assert _first_repeat(_greedy_walk(prompt, successor, 256), 64) == first_repeat


def test_mixed_workload_alternates_accepting_and_nonrepeating_requests():
    successor = copying.successors(VOCAB)
    repeats = [_first_repeat(_greedy_walk(p, successor, 256), 64)
               for p in copying.workload_prompts("mixed", 6, 64, VOCAB, seed=3)]
    assert repeats == [2, None] * 3
    with pytest.raises(ValueError, match="unknown workload"):
        copying.workload_prompts("repeating", 1, 8, VOCAB)


def test_lm_head_rows_point_from_each_word_to_its_successor():
    embedding = torch.randn(VOCAB, 64, generator=torch.Generator().manual_seed(0)).bfloat16()
    head = copying.lm_head(embedding).float()
    normed = embedding.float() * torch.rsqrt(embedding.float().square().mean(-1, keepdim=True))
    logits = normed[copying.FIRST_WORD_ID:] @ head.T
    successor = copying.successors(VOCAB)[copying.FIRST_WORD_ID:]
    assert torch.equal(logits.argmax(-1), successor)
    assert logits.amax(-1) == pytest.approx(copying.COPY_LOGIT, rel=0.01)
    assert not head[: copying.FIRST_WORD_ID].any()


@pytest.fixture(scope="module")
def deep_copy_checkpoint(tmp_path_factory):
    """Tiny widths but the 1B cell's 16 layers, so the residual noise of every
    layer is in the stream the check measures."""
    shapes = {**checkpoint.SHAPES,
              "tiny16": checkpoint.Shape(hidden=128, intermediate=256, layers=16, heads=4,
                                         kv_heads=2, head_dim=32)}
    out = tmp_path_factory.mktemp("copy") / "tiny16"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint, "SHAPES", shapes)
        checkpoint.write_checkpoint(out, "tiny16", VOCAB, seed=4, device="cpu", kind="copy")
        assert checkpoint.is_written(out, "tiny16", VOCAB, "copy")
        assert not checkpoint.is_written(out, "tiny16", VOCAB, "peaked")
    return out


def test_greedy_follows_the_cycles_with_a_clear_gap_through_the_real_forward(
        deep_copy_checkpoint):
    check = copying.verify(deep_copy_checkpoint, num_prompts=4)
    assert json.loads((deep_copy_checkpoint / copying.CHECK_FILE).read_text()) == check
    assert check["positions"] == 4 * 48
    assert check["argmax_is_successor"] == 1.0
    # Far from a near tie (one bf16 spacing) yet a finite softmax.
    assert check["gap_min_bf16_spacings"] > 16
    assert 0.9 < check["top1_probability_min"] < 1.0
    predicted = copying.predicted_top1_probability(128, VOCAB)
    assert check["top1_probability_median"] == pytest.approx(predicted, abs=0.02)


def test_copy_checkpoint_scales_only_the_residual_outputs(deep_copy_checkpoint):
    from safetensors import safe_open

    index = json.loads((deep_copy_checkpoint / "model.safetensors.index.json").read_text())

    def std(name):
        with safe_open(str(deep_copy_checkpoint / index["weight_map"][name]), "pt") as f:
            return float(f.get_tensor(name).float().std())

    scaled = checkpoint.PROJECTION_STD * copying.RESIDUAL_SCALE
    assert std("model.layers.3.mlp.down_proj.weight") == pytest.approx(scaled, rel=0.05)
    assert std("model.layers.3.self_attn.o_proj.weight") == pytest.approx(scaled, rel=0.05)
    assert std("model.layers.3.self_attn.q_proj.weight") == pytest.approx(
        checkpoint.PROJECTION_STD, rel=0.05)


def test_cli_writes_and_checks_a_copy_checkpoint_and_rechecks_a_missing_check(
        tmp_path, capsys):
    out = tmp_path / "copy"
    assert checkpoint.main(["--shape", "tiny", "--vocab", "512", "--kind", "copy",
                            "--out", str(out)]) == 0
    assert "argmax is the successor at 100.0%" in capsys.readouterr().out
    (out / copying.CHECK_FILE).unlink()
    assert checkpoint.main(["--shape", "tiny", "--vocab", "512", "--kind", "copy",
                            "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "already written" in printed and "copy check" in printed
    assert json.loads((out / copying.CHECK_FILE).read_text())["argmax_is_successor"] == 1.0
