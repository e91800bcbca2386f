#!/usr/bin/env python3
"""Plant named bugs in a copy of the plugin and show that the CPU tests catch each one.

Every mutant is one precise source edit: a text that must occur exactly once
in its file, and its replacement. If a refactor moves or rewrites the text,
the check fails before running anything (it never silently tests an
unmutated copy). For each mutant the check copies the package, the tests and
``pyproject.toml`` into a temporary directory, applies the edit, and runs the
tests that should catch it (``pytest -x``) with that directory as the working
directory and ``PYTHONPATH``, so the copy is what the tests import (checked
first). A mutant is caught when pytest reports failing tests (exit status 1);
any other status (collection error, missing test, crash) fails the check. The
unmutated copy must pass the union of those tests.

Usage: python3 scripts/mutation_check.py [--jobs N] [--only NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "vllm_sampling_plugin"
COPIED = (PACKAGE, "tests", "pyproject.toml")

REJECTION_REFERENCE = "tests/ops/test_rejection.py::test_matches_independent_reference"
GUMBEL_REFERENCE = "tests/ops/test_gumbel.py::test_matches_independent_reference"
TOP_K_TOP_P_REFERENCE = "tests/ops/test_topk_topp.py::test_matches_independent_reference"
TOP_K_TOP_P_CUTS = "tests/ops/test_topk_topp.py::test_cut_tokens_are_drawn_as_the_model_draws_them"
FILTERED_REFERENCE = (
    "tests/ops/test_rejection_filters.py::test_tokens_equal_the_model_on_filtered_logits[draft_probs]"
)
FILTER_THRESHOLDS = (
    "tests/ops/test_rejection_filters.py::test_thresholds_from_the_chunk_lists_equal_the_whole_row_law"
)

PLAN_IN_SCHEDULER = (
    "tests/integration/speculator/test_speculation_policy.py::"
    "test_a_batch_without_proposals_proposes_one_step_in_probe_interval"
)
MIXED_DECODE_GRAPHS = (
    "tests/integration/speculator/test_mixed_decode_graphs.py::"
    "test_mixed_length_decode_steps_replay_full_graphs"
)
PLAN_ON_ITS_OWN = (
    "tests/test_policy.py::"
    "test_plan_probes_a_cold_batch_and_the_stats_line_says_how_often"
)
POLICY_RULE = "tests/test_policy.py::test_decisions_equal_the_rule_on_every_step"
HOLD_RULE = "tests/test_policy.py::test_a_proposal_is_held_while_the_rate_pays_for_it"


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # pytest node ids that must fail


MUTANTS = [
    Mutant(
        "residual_replaced_by_p",
        f"{PACKAGE}/ops/rejection/draws.py",
        "residual = tl.where(draft_in_vocab, residual, logits)",
        "residual = logits",
        (REJECTION_REFERENCE,),
    ),
    Mutant(
        "resample_shares_the_samplers_noise",
        f"{PACKAGE}/ops/rejection/draws.py",
        "noise = gumbel_block(key, chunk_start + _RESIDUAL_STREAM, SAMPLE_CHUNK, NOISE)",
        "noise = gumbel_block(key, chunk_start, SAMPLE_CHUNK, NOISE)",
        (REJECTION_REFERENCE,),
    ),
    Mutant(
        "fp32_noise_tail_dropped",
        f"{PACKAGE}/ops/random.py",
        "return tl.where(u < _SERIES_CUTOFF, series, -_log_fp32(1.0 - u))",
        "return -_log_fp32(1.0 - u)",
        ("tests/ops/test_gumbel.py::test_fp32_noise_tail_beyond_the_float32_grid_near_one",),
    ),
    Mutant(
        "temperature_ignored_on_the_top_k_top_p_route",
        f"{PACKAGE}/ops/topk_topp/select.py",
        "x = x / tl.where(temperature == 0.0, 1.0, temperature)",
        "x = x",
        (TOP_K_TOP_P_REFERENCE,),
    ),
    Mutant(
        "top_k_off_by_one",
        f"{PACKAGE}/ops/topk_topp/row.py",
        "keep = listed & (num_above < top_k)",
        "keep = listed & (num_above <= top_k)",
        (TOP_K_TOP_P_CUTS, TOP_K_TOP_P_REFERENCE),
    ),
    Mutant(
        "top_p_keeps_one_token_too_few",
        f"{PACKAGE}/ops/topk_topp/row.py",
        "keep = keep & (mass_above < top_p_mass)",
        "keep = keep & (mass_above + mass < top_p_mass)",
        (TOP_K_TOP_P_CUTS, TOP_K_TOP_P_REFERENCE),
    ),
    # The plugin has no min-p comparison of its own: vLLM's Sampler applies
    # min-p before the plugin's kernels draw. The plugin's min-p code is the
    # lift of vLLM's "min_p is not supported with speculative decoding" refusal
    # on the V2 runner, whose rejection sampler applies it; inverting which
    # runner gets the lift refuses min-p where the plugin supports it.
    Mutant(
        "min_p_lift_inverted",
        f"{PACKAGE}/integration/verification/spec_sampling_fields_0_20.py",
        "if speculative_config is None or not plugin_verifies_drafts():",
        "if speculative_config is None or plugin_verifies_drafts():",
        ("tests/integration/verification/test_spec_sampling_fields_0_20.py",),
    ),
    Mutant(
        "fp64_stream_swapped_for_fp32",
        f"{PACKAGE}/ops/random.py",
        "return gumbel_fp64(key, start + tl.arange(0, BLOCK), NOISE)",
        "return gumbel_fp32_block(key, start, BLOCK).to(tl.float64)",
        (GUMBEL_REFERENCE,),
    ),
    Mutant(
        # The top-k/top-p short lists draw noise at arbitrary ids (gumbel_at):
        # there the FP32 murmur3 stream must be the one gumbel_block draws.
        "fp32_murmur3_at_ids_unhashed",
        f"{PACKAGE}/ops/topk_topp/select.py",
        "        return gumbel_fp32_murmur3(key, token_ids)\n",
        "        return gumbel_fp32_from_uniform(_bits_to_uniform_fp32(key ^ token_ids))\n",
        (TOP_K_TOP_P_REFERENCE,),
    ),
    Mutant(
        "seed_ignored_for_one_row",
        f"{PACKAGE}/ops/gumbel/launcher.py",
        "key = request_key(tl.load(seeds_ptr + req), tl.load(pos_ptr + token), NOISE)",
        "key = request_key(tl.where(token == 1, 0, tl.load(seeds_ptr + req)), "
        "tl.load(pos_ptr + token), NOISE)",
        (GUMBEL_REFERENCE,),
    ),
    # Sampling filters folded into verification (ops/rejection/filters.py).
    Mutant(
        "filters_ignored_by_the_acceptance_test",
        f"{PACKAGE}/ops/rejection/draws.py",
        "target_row_ptr, draft, in_vocab, temp, threshold, APPLY_TEMPERATURE, FILTERED",
        "target_row_ptr, draft, in_vocab, temp, threshold, APPLY_TEMPERATURE, False",
        (
            "tests/ops/test_rejection_filters.py::"
            "test_drafts_outside_the_filtered_support_are_never_accepted[point_drafts]",
        ),
    ),
    Mutant(
        "draft_logits_not_divided_in_the_acceptance_test",
        f"{PACKAGE}/ops/rejection/draws.py",
        "load_logits(draft_row_ptr, draft, in_vocab, temp, 0, SCALE_DRAFT, False)",
        "load_logits(draft_row_ptr, draft, in_vocab, temp, 0, False, False)",
        (
            "tests/ops/test_rejection.py::"
            "test_draft_logits_before_the_temperature_are_divided_by_it",
        ),
    ),
    Mutant(
        "bonus_drawn_from_the_unfiltered_target",
        f"{PACKAGE}/ops/rejection/draws.py",
        """            target_row_ptr, offsets, offsets < vocab_size, temp, threshold, APPLY_TEMPERATURE,
            FILTERED,""",
        """            target_row_ptr, offsets, offsets < vocab_size, temp, threshold, APPLY_TEMPERATURE,
            False,""",
        (FILTERED_REFERENCE,),
    ),
    Mutant(
        "top_p_before_min_p_on_the_list",
        f"{PACKAGE}/ops/rejection/filters.py",
        "    valid = listed_tokens & (keys >= min_p_key)\n",
        "    valid = listed_tokens\n",
        (FILTER_THRESHOLDS,),
    ),
    Mutant(
        "top_p_before_min_p_on_the_whole_row",
        f"{PACKAGE}/ops/rejection/filters.py",
        "row_logits, row_max, threshold, top_p, mass_hist_ptr, BLOCK, APPLY_TEMPERATURE",
        "row_logits, row_max, 0, top_p, mass_hist_ptr, BLOCK, APPLY_TEMPERATURE",
        (FILTER_THRESHOLDS,),
    ),
    Mutant(
        "step_without_proposal_keeps_k_placeholders",
        f"{PACKAGE}/integration/speculator/speculation_policy.py",
        "self._spec_token_placeholders = policy.placeholders[0]",
        "self._spec_token_placeholders = placeholders",
        (PLAN_IN_SCHEDULER,),
    ),
    Mutant(
        "cold_batch_proposes_every_step",
        f"{PACKAGE}/policy.py",
        "proposes = self.warm or self.steps_since_proposal >= PROBE_INTERVAL - 1",
        "proposes = True",
        (PLAN_IN_SCHEDULER, PLAN_ON_ITS_OWN),
    ),
    Mutant(
        "batch_cools_after_probe_interval",
        f"{PACKAGE}/policy.py",
        "return self.reports - self.found_report < WARM_REPORTS",
        "return self.reports - self.found_report < PROBE_INTERVAL",
        ("tests/test_policy.py::test_a_batch_proposes_every_step_until_warm_reports_outputs_found_nothing",),
    ),
    Mutant(
        "proposal_not_held_through_async_lag",
        f"{PACKAGE}/policy.py",
        "elif report - getattr(request, FOUND_AT_ATTR) <= HOLD_REPORTS and rate >= hold_bar:",
        "elif False:",
        (HOLD_RULE, POLICY_RULE),
    ),
    Mutant(
        "small_batch_verifies_k_blind_drafts",
        f"{PACKAGE}/policy.py",
        "length = k if num_found else max(blind, drafts_worth_verifying(rate, bar, k))",
        "length = k",
        ("tests/test_policy.py::test_a_small_warm_batch_verifies_few_blind_drafts_at_large_k",),
    ),
    Mutant(
        "slot_bar_ignores_the_batch_size",
        f"{PACKAGE}/policy.py",
        "return batch / (batch + RIDGE_TOKENS)",
        "return 1 / (1 + RIDGE_TOKENS)",
        (HOLD_RULE,),
    ),
    Mutant(
        "prefill_steps_replay_mixed_decode_graphs",
        f"{PACKAGE}/integration/speculator/decode_graphs.py",
        "max(query_lens, default=0) <= manager.decode_query_len",
        "True",
        (MIXED_DECODE_GRAPHS,),
    ),
]


def check_targets(mutants: list[Mutant]) -> None:
    """Every mutant's text occurs exactly once, or the check stops here."""
    problems = []
    for mutant in mutants:
        count = (REPO / mutant.path).read_text().count(mutant.old)
        if count != 1:
            problems.append(f"{mutant.name}: {mutant.path} holds its target {count} times: {mutant.old!r}")
    if problems:
        sys.exit("mutation check: targets not found (update the mutants):\n  " + "\n  ".join(problems))


def make_copy(parent: Path) -> Path:
    root = Path(tempfile.mkdtemp(prefix="mutant-", dir=parent))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=ignore)
        else:
            shutil.copy2(source, root / name)
    return root


def child_env(root: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")


def assert_copy_is_imported(root: Path) -> None:
    imported = subprocess.run(
        [sys.executable, "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
        cwd=root, env=child_env(root), capture_output=True, text=True, check=True,
    ).stdout.strip()
    if not Path(imported).resolve().is_relative_to(root.resolve()):
        sys.exit(f"mutation check: the tests would import {imported}, not the copy in {root}")


def run_tests(root: Path, tests: tuple[str, ...]) -> tuple[int, str, float]:
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
        cwd=root, env=child_env(root), capture_output=True, text=True,
    )
    return result.returncode, result.stdout + result.stderr, time.monotonic() - start


def try_mutant(mutant: Mutant, parent: Path) -> tuple[Mutant, str, float, str]:
    root = make_copy(parent)
    target = root / mutant.path
    source = target.read_text()
    target.write_text(source.replace(mutant.old, mutant.new))
    status, output, seconds = run_tests(root, mutant.tests)
    shutil.rmtree(root)
    verdict = {0: "SURVIVED", 1: "caught"}.get(status, f"BROKEN (pytest exit {status})")
    return mutant, verdict, seconds, output


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--only", nargs="*", help="run only these mutants")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args()
    mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.only and len(mutants) != len(args.only):
        sys.exit(f"mutation check: unknown mutant in {args.only}")
    if args.list:
        for mutant in mutants:
            print(f"{mutant.name}: {mutant.path}: {' '.join(mutant.tests)}")
        return 0
    check_targets(mutants)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutation-check-") as parent:
        parent = Path(parent)
        baseline = make_copy(parent)
        assert_copy_is_imported(baseline)
        all_tests = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
        status, output, seconds = run_tests(baseline, all_tests)
        print(f"unmutated copy: {'passes' if status == 0 else 'FAILS'} ({seconds:.0f} s)", flush=True)
        if status != 0:
            print(output[-6000:])
            return 1
        shutil.rmtree(baseline)
        failures = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for mutant, verdict, seconds, output in pool.map(
                lambda m: try_mutant(m, parent), mutants
            ):
                print(f"{mutant.name:48s} {verdict:10s} ({seconds:.0f} s)", flush=True)
                if verdict != "caught":
                    failures += 1
                    print(output[-6000:])
    total = time.monotonic() - start
    caught = len(mutants) - failures
    print(f"mutation check: {caught} of {len(mutants)} mutants caught in {total:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
