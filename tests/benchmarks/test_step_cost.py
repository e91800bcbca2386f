"""benchmarks/workloads/step_cost.py: a step's cost fitted to engine cells.
A cost that made the measurements must be the one the fit returns; the
replay's per-step tokens must add up to its totals; the policy a cell is
priced with must be warm, as an engine's is after bench e2e's warm-up."""

import json
import math
import random

import pytest

from benchmarks.workloads import policy_replay, step_cost
from benchmarks.workloads.__main__ import main

K = 3


def copying(n, seed):
    """A request whose trace copies stretches of its prompt."""
    rng = random.Random(seed)
    prompt = [rng.randrange(5000) for _ in range(300)]
    trace = []
    while len(trace) < 200:
        start = rng.randrange(250)
        trace += prompt[start:start + rng.randint(5, 30)] + [rng.randrange(5000, 6000)]
    return prompt, trace[:200 + n]


def test_per_step_tokens_add_up_to_the_replays_totals():
    requests = [copying(i, i) for i in range(8)]
    for verification in (policy_replay.FIXED, policy_replay.ADAPTIVE):
        steps = []
        counts = policy_replay.replay_batch(requests, K, verification, steps)
        assert len(steps) == counts["steps"]
        assert sum(steps) == counts["request_steps"] + counts["slots"]


def test_steps_without_speculation_count_the_live_requests():
    assert step_cost.none_steps([[0] * 3, [0], [0] * 2]) == [3, 2, 1]


@pytest.mark.parametrize("cost", [step_cost.StepCost(500), step_cost.StepCost(800, 128, 0.5)])
def test_a_runs_cost_is_the_sum_of_its_steps_costs(cost):
    tokens = [random.Random(i).randrange(1, 1200) for i in range(300)]
    assert cost.total(step_cost.Steps(tokens)) == pytest.approx(sum(map(cost, tokens)))


def test_the_policy_is_priced_warm_at_one_sequence():
    """A warm batch under the slot bar verifies k for every request, as fixed
    k does, step for step; a fresh scheduler's policy misses the drafts of
    its first copy (it probes one step in eight until it finds one) and
    takes a step more."""
    request = [copying(0, 7)]
    steps = step_cost.batch_steps(request, K)
    fixed, adaptive = steps[policy_replay.FIXED], steps[policy_replay.ADAPTIVE]
    assert adaptive.step_tokens == fixed.step_tokens
    cold = []
    policy_replay.replay_batch(request, K, policy_replay.ADAPTIVE, cold)
    assert len(cold) > fixed.count


def synthetic_cells(truth):
    cells = []
    for seed, batch in enumerate((1, 8, 32)):
        steps = step_cost.batch_steps([copying(i, 10 * seed + i) for i in range(batch)], K)
        for against in step_cost.BASELINES:
            cell = step_cost.Cell(f"copy {batch}", K, against, 1.0, steps)
            cells.append(step_cost.Cell(cell.name, K, against, cell.modelled(truth), steps))
    return cells


def test_the_fit_returns_the_cost_that_made_the_measurements():
    truth = step_cost.StepCost(700, 128, 0.5)
    cells = synthetic_cells(truth)
    anchor = (256, step_cost.anchor_ratio(truth, 256, K))
    err, linear = step_cost.fit(cells, [anchor], K)
    assert err > 1e-6 and linear.above == 0.0
    err, found = step_cost.fit(cells, [anchor], K, step_cost.KNEES, step_cost.ABOVES)
    assert err == pytest.approx(0.0, abs=1e-12)
    assert found == truth


def write_build(folder, workload, requests):
    folder.mkdir()
    with open(folder / f"{workload}.jsonl", "w") as out:
        for prompt, trace in requests:
            out.write(json.dumps({"prompt_token_ids": prompt, "trace_token_ids": trace}) + "\n")


def report(cells, requests_per_seq=1):
    return {"args": {"requests_per_seq": requests_per_seq}, "speculation": cells}


def trace_cell(seqs, against, ratio, method="ngram"):
    return {"trace_replay": True, "workload": "code-edit", "method": method, "k": K,
            "max_num_seqs": seqs, "against": against, "paired": {"median": ratio}}


def test_engine_cells_replay_each_cells_own_requests(tmp_path):
    requests = [copying(i, i) for i in range(8)]
    write_build(tmp_path / "build", "code-edit", requests)
    reports = [report([trace_cell(4, "nospec", 2.0), trace_cell(4, "upstream", 1.0),
                       trace_cell(4, "adaptive+verify-plugin@control", 1.0),
                       trace_cell(4, "nospec", 2.0, method="suffix")]),
               report([trace_cell(8, "nospec", 2.0)], requests_per_seq=4)]
    cells = step_cost.engine_cells(tmp_path / "build", reports)
    assert [(c.name, c.against) for c in cells] == [("code-edit 4 k=3", "nospec"),
                                                    ("code-edit 4 k=3", "upstream")]
    assert cells[0].steps is cells[1].steps
    assert cells[0].steps[step_cost.NONE].count == max(len(t) for _, t in requests[:4])


def test_fit_command_prints_both_models_and_every_cell(tmp_path, capsys):
    write_build(tmp_path / "build", "code-edit", [copying(i, i) for i in range(4)])
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report([trace_cell(4, "nospec", 2.2),
                                       trace_cell(4, "upstream", 0.99)])))
    main(["fit", str(tmp_path / "build"), str(path), "--anchor", "256:0.49"])
    out = capsys.readouterr().out
    assert out.startswith("linear: ")
    assert "\nknee: " in out
    assert "| code-edit 4 k=3 | nospec | 2.200 |" in out
    assert "| code-edit 4 k=3 | upstream | 0.990 |" in out


def test_fit_command_without_cells_says_why(tmp_path):
    write_build(tmp_path / "build", "code-edit", [copying(0, 0)])
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report([trace_cell(1, "nospec", 2.0)], requests_per_seq=2)))
    with pytest.raises(SystemExit, match="no n-gram trace cell"):
        main(["fit", str(tmp_path / "build"), str(path)])


def test_rms_percent():
    assert step_cost.rms_percent(4 * math.log(1.02) ** 2, 4) == pytest.approx(100 * math.log(1.02))


def test_fit_command_refuses_cells_of_several_k(tmp_path):
    write_build(tmp_path / "build", "code-edit", [copying(i, i) for i in range(4)])
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report([trace_cell(4, "nospec", 2.2),
                                       dict(trace_cell(4, "upstream", 0.99), k=7)])))
    with pytest.raises(SystemExit, match="several k"):
        main(["fit", str(tmp_path / "build"), str(path)])
