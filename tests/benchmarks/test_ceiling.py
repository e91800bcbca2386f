"""benchmarks/workloads/ceiling.py: the prompt-lookup replay that says what
n-gram speculation can take from a workload before any engine runs. Its
proposer must follow the plugin's kernel (and so vLLM's CPU proposer) when
it drafts from the earliest occurrence, vLLM 0.34's V2 speculator's rule
when from the latest, and its counts must be exact on traces whose answer
is known."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.workloads import ceiling
from vllm_sampling_plugin.ops import ngram_propose

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("k", [1, 3])
def test_the_proposer_is_the_kernels_on_random_histories(k):
    rng = np.random.default_rng(0)
    rows, width = 48, 40
    vocab = rng.choice([2, 3, 5, 50], size=rows)
    tokens = np.stack([rng.integers(0, v, width) for v in vocab]).astype(np.int32)
    lens = rng.integers(0, width + 1, rows).astype(np.int32)
    drafts, num_drafts = ngram_propose(torch.from_numpy(tokens), torch.from_numpy(lens),
                                       min_n=ceiling.MIN_N, max_n=ceiling.MAX_N, k=k)
    for row, length in enumerate(lens):
        history = tokens[row, :length].tolist()
        expected = drafts[row, :num_drafts[row]].tolist()
        assert ceiling.PromptLookup(history, "earliest").propose(k) == expected, history


def test_the_latest_occurrence_is_vllm_0_34s_and_the_earliest_the_kernels():
    # "1 2" occurred twice before the end, followed by 3 and by 4; the
    # 3-gram "4 1 2" never occurred before, so n = 2 wins.
    history = [1, 2, 3, 1, 2, 4, 1, 2]
    assert ceiling.PromptLookup(history, "latest").propose(3) == [4, 1, 2]
    assert ceiling.PromptLookup(history, "earliest").propose(3) == [3, 1, 2]
    # The longest n wins over a later, shorter match ("1 2" before 6 7).
    history = [7, 1, 2, 5, 0, 1, 2, 6, 7, 1, 2]
    assert ceiling.PromptLookup(history, "latest").propose(2) == [5, 0]
    assert ceiling.PromptLookup(history[4:], "latest").propose(2) == [6, 7]
    with pytest.raises(ValueError, match="occurrence"):
        ceiling.PromptLookup(history, "first")


def test_a_trace_that_copies_its_prompt_is_accepted_k_tokens_a_step():
    prompt, trace = list(range(100)), list(range(10, 60))
    # Two steps without a match (the 2-grams (99, 10) and (10, 11) are new
    # when proposed for), then every step proposes 3, all accepted: 4 tokens.
    assert ceiling.replay(prompt, trace, k=3) == {
        "steps": 14, "drafting_steps": 12, "proposed": 36, "accepted": 36,
        "fixed_slots": 42, "tokens": 50}


def test_text_that_never_repeats_proposes_nothing():
    counts = ceiling.replay(list(range(100)), list(range(100, 164)), k=3)
    assert counts == {"steps": 64, "drafting_steps": 0, "proposed": 0, "accepted": 0,
                      "fixed_slots": 192, "tokens": 64}


def test_a_draft_is_accepted_up_to_the_first_token_that_differs():
    # The prompt says 5 6 7 8 after "1 2"; the trace copies 5 6, then turns.
    counts = ceiling.replay([1, 2, 5, 6, 7, 8, 3], [1, 2, 5, 6, 9, 4], k=3)
    # Step 1 emits 1 (the prompt's last 2-gram "8 3" is new), step 2 emits 2
    # ("3 1" is new), step 3 finds "1 2", proposes 5 6 7, keeps 5 6 and
    # emits 9 after them, step 4 emits 4 ("6 9" is new).
    assert counts == {"steps": 4, "drafting_steps": 1, "proposed": 3, "accepted": 2,
                      "fixed_slots": 12, "tokens": 6}


def test_fixed_k_pays_k_slots_a_step_and_the_adaptive_policy_what_was_proposed():
    copying = (list(range(100)), list(range(10, 60)))
    fresh = (list(range(100)), list(range(100, 164)))
    result = ceiling.workload_ceiling([copying, fresh], k=3)
    assert result["acceptance_length"] == round(114 / 78, 3)
    assert result["steps_with_drafts"] == round(12 / 78, 3)
    assert result["verified_per_accepted"] == {"fixed": round(234 / 36, 2), "adaptive": 1.0}
    assert result["occurrence"] == "latest"


def test_the_command_writes_each_workload_of_a_build(tmp_path):
    lines = {"code-edit": (list(range(100)), list(range(10, 60))),
             "chat": (list(range(100)), list(range(100, 164)))}
    for name, (prompt, trace) in lines.items():
        (tmp_path / f"{name}.jsonl").write_text(
            json.dumps({"prompt_token_ids": prompt, "trace_token_ids": trace}) + "\n")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.workloads", "ceiling", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = json.loads((tmp_path / "ceiling-latest-k3.json").read_text())
    assert list(written) == ["code-edit", "chat"]
    assert written["code-edit"]["acceptance_length"] == round(50 / 14, 3)
    assert written["chat"]["acceptance_length"] == 1.0
    assert "| code-edit | latest | 3 | 3.57 | 86% | 2.57 | 1.2 / 1.0 |" in proc.stdout


def test_the_command_refuses_a_folder_without_workloads(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.workloads", "ceiling", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "holds no workload file" in proc.stderr
