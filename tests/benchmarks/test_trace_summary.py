"""benchmarks/e2e/trace_summary.py: real-text speculation cells gathered
from several bench e2e reports, one table per workload."""

import json

import pytest

from benchmarks.e2e import trace_summary
from benchmarks.e2e.report import CONTROL_SUFFIX
from tests.commands import run_lab
from tests.scripts_dir import load_script

POLICY = "adaptive+verify-plugin"


def cell(workload, method, seqs, against, median, low=None, high=None, identical=None,
         plugin_length=2.0, stock_length=None):
    requests = seqs
    return {
        "trace_replay": True, "model": "8b-v151936", "workload": workload, "method": method,
        "max_num_seqs": seqs, "k": 3, "policy": POLICY, "against": against,
        "paired": {"median": median, "min": low or median, "max": high or median},
        "acceptance": {"mean_acceptance_length": plugin_length},
        "base_acceptance": {"mean_acceptance_length": stock_length},
        "identity": {"requests": requests,
                     "identical": requests if identical is None else identical},
    }


def report(*cells, gpu="NVIDIA H100 80GB HBM3"):
    return {"gpu": gpu, "vllm": "0.34.0", "speculation": list(cells)}


def row(table, method, seqs):
    [line] = [r for r in table.splitlines() if r.startswith(f"| {method} | {seqs} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_a_cell_measured_in_two_reports_lists_both_in_report_order():
    first = report(cell("agentic", "ngram", 64, "upstream", 1.003, 0.987, 1.019))
    second = report(cell("agentic", "ngram", 64, "upstream", 0.981, 0.979, 0.984))
    table = trace_summary.workload_table(trace_summary.trace_cells([first, second]), "agentic")
    assert row(table, "ngram", 64)[3] == "1.003 [0.987, 1.019]; 0.981 [0.979, 0.984]"


def test_each_configuration_lands_in_its_column():
    cells = [cell("chat", "suffix", 16, "nospec", 1.1),
             cell("chat", "suffix", 16, "upstream", 1.2, stock_length=1.5),
             cell("chat", "suffix", 16, "upstream-adaptive", 1.3),
             cell("chat", "suffix", 16, POLICY + CONTROL_SUFFIX, 0.99)]
    table = trace_summary.workload_table(trace_summary.trace_cells([report(*cells)]), "chat")
    assert row(table, "suffix", 16) == [
        "suffix", "16", "1.100 [1.100, 1.100]", "1.200 [1.200, 1.200]",
        "1.300 [1.300, 1.300]", "0.990 [0.990, 0.990]", "2.00 / 1.50", "64/64"]


def test_missing_cells_say_not_run_and_ngram_has_no_adaptive_verification():
    table = trace_summary.workload_table(
        trace_summary.trace_cells([report(cell("chat", "ngram", 64, "nospec", 1.0))]), "chat")
    assert row(table, "ngram", 64)[3:6] == ["not run", "none for this method", "not run"]
    assert row(table, "suffix", 64)[2:6] == ["not run"] * 4
    assert row(table, "ngram", 256)[-2:] == ["-", "-"]


def test_requests_whose_tokens_differ_from_their_traces_show():
    table = trace_summary.workload_table(trace_summary.trace_cells(
        [report(cell("code-edit", "ngram", 16, "nospec", 2.0, identical=15))]), "code-edit")
    assert row(table, "ngram", 16)[-1] == "15/16"


def test_cells_without_trace_replay_are_left_out():
    synthetic = dict(cell("chat", "ngram", 64, "nospec", 9.0), trace_replay=False)
    assert trace_summary.trace_cells([report(synthetic)]) == []


def test_the_rule_in_place_reports_are_trace_reports_whose_tokens_equal_their_traces():
    reports = trace_summary.load(list(trace_summary.RULE_IN_PLACE))
    cells = trace_summary.trace_cells(reports)
    assert len(cells) == sum(len(r["speculation"]) for r in reports)
    assert all(c["identity"]["identical"] == c["identity"]["requests"] > 0 for c in cells)
    assert {c["workload"] for c in cells} <= set(trace_summary.WORKLOADS)


def test_benchmarks_doc_holds_the_rendered_summary():
    render = load_script("render_docs")
    doc = (trace_summary.ROOT / "docs" / "benchmarks.md").read_text()
    expected = trace_summary.summary_markdown(trace_summary.load(list(trace_summary.RULE_IN_PLACE)))
    assert render.between(doc, "trace summary") == expected


def test_the_command_prints_the_tables_of_the_reports_it_is_given(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(report(cell("summarize", "ngram", 1, "upstream", 0.998))))
    proc = run_lab("trace_summary", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "**summarize**" in proc.stdout
    assert "| ngram | 1 | not run | 0.998 [0.998, 0.998] |" in proc.stdout


def test_plots_one_png_per_workload(tmp_path):
    pytest.importorskip("matplotlib")
    reports = [report(cell("agentic", "ngram", 1, "nospec", 2.1),
                      cell("agentic", "ngram", 64, "nospec", 1.9),
                      cell("agentic", "ngram", 64, "upstream", 0.98))]
    paths = trace_summary.write_plots(reports, str(tmp_path))
    assert [p.rsplit("/", 1)[1] for p in paths] == ["e2e-trace-summary-agentic.png"]
    assert (tmp_path / "e2e-trace-summary-agentic.png").stat().st_size > 0
