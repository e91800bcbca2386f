"""The e2e benchmark's results: statistics, the near-tie check, JSON, tables, plot.

JSON schema (``e2e.json``, ``"schema": 1``), written after every cell::

    {
      "schema": 1, "gpu": str, "vllm": str, "torch": str, "args": {...},
      "models": {name: {"shape", "vocab", "kind", "path", "top1_probability":
                        {"p10", "p50", "p90", "tokens"},
                        "copy_check": {...} (copy kind: copying.verify's result)}},
      "cells": [{"model", "mix", "max_num_seqs", "against": "plugin" or "control" (an A/A
                 run, ``--control``: the "plugin" numbers are a second stock engine's),
                 "orders": [[first, second], ...],
                 "stock_tok_s": [...], "plugin_tok_s": [...],
                 "stock": DIST, "plugin": DIST, "ratio": plugin median / stock median,
                 "pair_ratios": [plugin / stock of each pair], "paired": DIST of those,
                 "requests": requests per timed run (--num-requests, more with
                 --min-run-s; absent in files written before it),
                 "host": {"stock": [RUN], "plugin": [RUN]} (as in "speculation")}],
      "breakdown": [{"model", "mix", "max_num_seqs", "role", "steps", "step_gpu_ms",
                     "sampling_gpu_ms", "host_ms", "sampling_host_ms", "period_ms",
                     "sampling_share"}],
      "speculation": [{"model", "workload" (copying.SPEC_WORKLOADS), "max_num_seqs", "k",
                       "policy": the speculation policy measured, "against": "nospec",
                       another policy, or (an A/A cell, ``--control``) the policy's twin
                       "<policy>@control", a second engine of the same configuration,
                       "orders", "base_tok_s": [...], "spec_tok_s": [...]
                       (continuous batching: at most max_num_seqs requests in flight),
                       "base": DIST, "spec": DIST, "pair_ratios", "paired": DIST,
                       "acceptance": {...} (the policy engine's counters over its greedy
                       identity requests: "drafted" counts verified draft tokens),
                       "identity": {...} (greedy, policy vs against),
                       "seeded_identity": {...} or null (seeded, temperature 1, against nospec;
                       before 2026-11-27: seeded top-p 0.95; where requests differ or with
                       ``--seeded-rerun``, "rerun": ``seeded_rerun``'s result, files
                       from 2026-11-28 on),
                       "requests": as in "cells",
                       trace cells (``--trace-workloads``, ``trace_cell``) also:
                       "workload" a builder's workload, "method" (ngram or suffix),
                       "trace_replay": true, "acceptance" and "base_acceptance" the
                       policy's and the baseline's counters over their timed runs,
                       "identity" every timed request's tokens against its trace (a
                       mismatch stops the run, so "identical" is "requests"),
                       "host": {"base": [RUN], "spec": [RUN]}, each timed run's host CPU
                       in the order of ``base_tok_s`` / ``spec_tok_s``, RUN = {"seconds",
                       "tokens", "engine_core_cpu_s", "front_end_cpu_s", "steal_s": CPU
                       time the hypervisor took from the machine during the run, "probe_ms":
                       [before, after] (engine.host_speed_probe_ms: the host's speed
                       around the run)} (absent in files written before 2026-11-28; the
                       eighth 0.20 run's have no "steal_s" and "probe_ms")}],
      "ngram": [{"model", "max_num_seqs", "k", "nospec_tok_s": [...], "spec_tok_s": [...],
                 "nospec": DIST, "spec": DIST, "speedup",
                 "acceptance": {"drafts", "drafted", "accepted", "acceptance_rate",
                                "mean_acceptance_length"},
                 "identity": {"requests", "identical", "fraction", "all_differences_near_ties",
                              "differences": [{"request", "position", "nospec_top2",
                                               "spec_top2", "near_tie"}]}}]
               (files written before the speculation policies; the accepting workload
               against no speculation, the policy fixed),
      "profiles": [{"model", "mix", "max_num_seqs", "role", "steps",
                    "device": [[kernel or operator, calls, self GPU ms], ...],
                    "host": [[operator, calls, self host ms], ...]}],
      "engines": [{"model", "role", "sampler", "startup_s"}],
      "cold_start": [{"model", "role", "order": [mix, ...], "ttft_ms": [...],
                      "warm_ttft_ms", "ratio": first request's TTFT / warm,
                      "compiled_at_start": Triton kernel variants compiled while the
                      engine started, "compiled_by_request": [[name@hash, ...] per
                      first request, compiled during it]}]
      (the first H100 run's files have "cold_ttft_ms", a first top-k/top-p
      request, instead of "order" and "ttft_ms")
    }

``DIST`` is ``{"median", "min", "max", "spread"}`` with ``spread = (max -
min) / median``. ``paired`` is the statistic to read: the two runs of a pair
are back to back, so a drift of the machine between pairs (the lent hosts'
throughput wanders by tens of percent over minutes) cancels in their ratio,
where it widens each engine's own spread. Tokens per second count generated tokens only; step times
are medians over the steps of one instrumented pass, in milliseconds.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Sequence

from vllm_sampling_plugin.integration import parts

SCHEMA_VERSION = 1
# Ends the name of ``--control``'s A/A twin of the first speculating engine
# (``"fixed@control"``): the ``against`` of a speculation cell that measures
# an engine against a second one of the same configuration.
CONTROL_SUFFIX = "@control"


def distribution(values: Sequence[float]) -> dict:
    """Median, min, max and relative spread of repeated measurements.

    Example::

        >>> distribution([90.0, 100.0, 120.0])
        {'median': 100.0, 'min': 90.0, 'max': 120.0, 'spread': 0.3}
    """
    median = statistics.median(values)
    low, high = min(values), max(values)
    return {"median": median, "min": low, "max": high,
            "spread": (high - low) / median if median else math.inf}


def pair_cell(model: str, mix: str, max_num_seqs: int, orders: list,
              stock_tok_s: list[float], plugin_tok_s: list[float],
              against: str = "plugin") -> dict:
    """One stock-vs-plugin cell of the results (see the schema); with
    ``against="control"`` the "plugin" numbers are a second stock engine's."""
    stock, plugin = distribution(stock_tok_s), distribution(plugin_tok_s)
    pair_ratios = [p / s for s, p in zip(stock_tok_s, plugin_tok_s)]
    return {"model": model, "mix": mix, "max_num_seqs": max_num_seqs, "against": against,
            "orders": [list(o) for o in orders],
            "stock_tok_s": list(stock_tok_s), "plugin_tok_s": list(plugin_tok_s),
            "stock": stock, "plugin": plugin, "ratio": plugin["median"] / stock["median"],
            "pair_ratios": pair_ratios, "paired": distribution(pair_ratios)}


def acceptance(counters: dict) -> dict:
    """Acceptance from vLLM's spec-decode counters (``drafts`` verification
    steps, ``drafted`` draft tokens, ``accepted`` of them accepted).

    ``mean_acceptance_length`` counts the token every step samples itself, as
    vLLM's logger does: ``1 + accepted / drafts``.
    """
    drafts, drafted, accepted = counters["drafts"], counters["drafted"], counters["accepted"]
    return {**counters,
            "acceptance_rate": accepted / drafted if drafted else None,
            "mean_acceptance_length": 1 + accepted / drafts if drafts else None}


def speculation_cell(model: str, workload: str, max_num_seqs: int, k: int, policy: str,
                     against: str, orders: list, base_tok_s: list[float],
                     spec_tok_s: list[float], counters: dict, identity: dict,
                     seeded_identity: dict | None) -> dict:
    """One cell of ``speculation`` (see the schema): ``policy`` against
    ``against``, interleaved pairs, with acceptance and identity."""
    pair_ratios = [s / b for b, s in zip(base_tok_s, spec_tok_s)]
    return {"model": model, "workload": workload, "max_num_seqs": max_num_seqs, "k": k,
            "policy": policy, "against": against, "orders": [list(o) for o in orders],
            "base_tok_s": list(base_tok_s), "spec_tok_s": list(spec_tok_s),
            "base": distribution(base_tok_s), "spec": distribution(spec_tok_s),
            "pair_ratios": pair_ratios, "paired": distribution(pair_ratios),
            "acceptance": acceptance(counters), "identity": identity,
            "seeded_identity": seeded_identity}


def trace_cell(model: str, workload: str, method: str, max_num_seqs: int, k: int,
               policy: str, against: str, orders: list, base_tok_s: list[float],
               spec_tok_s: list[float], base_counters: dict, spec_counters: dict,
               requests: int) -> dict:
    """One trace-replay cell (``--trace-workloads``): a speculation cell
    whose acceptance is both engines' over their timed runs (a baseline
    without speculation counts none), and whose every request replayed its
    trace (``run`` raises before a cell is made otherwise)."""
    cell = speculation_cell(model, workload, max_num_seqs, k, policy, against, orders,
                            base_tok_s, spec_tok_s, _counters(spec_counters),
                            {"requests": requests, "identical": requests}, None)
    return {**cell, "method": method, "trace_replay": True, "requests": requests,
            "base_acceptance": acceptance(_counters(base_counters))}


def _counters(counters: dict) -> dict:
    """Spec-decode counters, zero where an engine reported none."""
    return {key: counters.get(key, 0) for key in ("drafts", "drafted", "accepted")}


def trace_speedups(results: dict) -> dict:
    """Each trace configuration's speed-up over no speculation, per model,
    workload and method, per concurrency: ``{(model, workload, method):
    {configuration: {max_num_seqs: speed-up}}}``.

    The policy's is its cell against ``nospec`` (median of pairs); another
    configuration's is that divided by the policy's against it, so it
    comes from two cells' windows, not from pairs of its own. A/A twins are
    left out.
    """
    cells = [c for c in results.get("speculation", []) if c.get("trace_replay")]
    paired = {(c["model"], c["workload"], c["method"], c["max_num_seqs"], c["policy"],
               c["against"]): c["paired"]["median"] for c in cells}
    lines: dict = {}
    for (model, workload, method, seqs, policy, against), ratio in paired.items():
        over_none = paired.get((model, workload, method, seqs, policy, "nospec"))
        if over_none is None or against.endswith(CONTROL_SUFFIX):
            continue
        configuration, speedup = ((policy, ratio) if against == "nospec"
                                  else (against, over_none / ratio))
        lines.setdefault((model, workload, method), {}).setdefault(
            configuration, {})[seqs] = speedup
    return lines


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where two token sequences differ (a length
    difference counts at the shorter length); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def bf16_ulp(x: float) -> float:
    """Spacing of bfloat16 numbers at ``x`` (8 significant bits).

    Example::

        >>> bf16_ulp(1.0), bf16_ulp(12.0)
        (0.0078125, 0.0625)
    """
    if x == 0:
        return 2.0**-133
    return 2.0 ** (math.floor(math.log2(abs(x))) - 7)


def is_near_tie(top2: Sequence[float]) -> bool:
    """True when the two largest logits are within bf16 rounding of each
    other: at most one bf16 spacing (at the larger magnitude) apart, so the
    order of the two tokens can flip with the rounding of either."""
    first, second = top2
    return abs(first - second) <= bf16_ulp(max(abs(first), abs(second)))


def identity_report(nospec: list[list[int]], spec: list[list[int]],
                    nospec_top2: list[list[float]] | None = None,
                    spec_top2: list[list[float]] | None = None) -> dict:
    """Compare greedy outputs with and without speculation.

    ``nospec_top2[j]`` / ``spec_top2[j]`` are the top-2 raw logits, measured in
    the engine without / with speculation, at the first differing position of
    the j-th differing request (the context up to there is the same in both
    runs). A difference is explained when either shows a near tie.
    """
    differing = [(i, first_difference(a, b)) for i, (a, b) in enumerate(zip(nospec, spec))]
    differing = [(i, pos) for i, pos in differing if pos is not None]
    differences = []
    for j, (request, position) in enumerate(differing):
        entry = {"request": request, "position": position,
                 "nospec_top2": nospec_top2[j] if nospec_top2 else None,
                 "spec_top2": spec_top2[j] if spec_top2 else None}
        entry["near_tie"] = any(t is not None and is_near_tie(t)
                                for t in (entry["nospec_top2"], entry["spec_top2"]))
        differences.append(entry)
    requests = len(nospec)
    return {"requests": requests, "identical": requests - len(differences),
            "fraction": (requests - len(differences)) / requests if requests else None,
            "all_differences_near_ties": all(d["near_tie"] for d in differences),
            "differences": differences}


def seeded_rerun(first: Sequence[list[list[int]]], again: Sequence[list[list[int]]],
                 logprobs: Sequence[list[list[float]]]) -> dict:
    """What a second seeded run of both engines says about a seeded difference.

    ``first`` / ``again``: [nospec, spec] token lists of the first and the
    second run, one list per prompt; ``logprobs``: [nospec, spec] raw logprob
    of every token of the second run. Returns how many requests each engine
    repeated exactly (``repeated``), the requests the engines still tell
    apart (``differences``), and, over the positions before each request's
    first difference, how many sampled tokens got the same logprob bit for
    bit in both engines (``equal_logprobs`` of ``compared_logprobs``), the
    largest gap (``max_logprob_gap``), the quantiles of the gaps that are not
    zero (``unequal_gaps``: a different reduction order moves a float32
    logprob by about 1e-6, a different bf16 rounding of a logit by 1e-2 or
    more) and the median over requests of the first position whose logprobs
    differ (``median_first_unequal``; None where none do). Where logits differ
    by a rounding, a draw whose two best perturbed logits lie that close can
    go either way.

    Example::

        >>> r = seeded_rerun([[[1, 2]], [[1, 3]]], [[[1, 2]], [[1, 3]]],
        ...                  [[[-0.5, -1.0]], [[-0.5, -1.5]]])
        >>> r["repeated"], r["equal_logprobs"], r["compared_logprobs"]
        ([1, 1], 1, 1)
    """
    repeated = [sum(a == b for a, b in zip(f, g)) for f, g in zip(first, again)]
    differences = identity_report(*again)["differences"]
    parted_at = {d["request"]: d["position"] for d in differences}
    equal = compared = 0
    first_unequal, gaps = [], []
    for request, (base_lp, spec_lp) in enumerate(zip(*logprobs)):
        shared = parted_at.get(request, len(base_lp))
        pairs = list(zip(base_lp[:shared], spec_lp[:shared]))
        unequal = [i for i, (x, y) in enumerate(pairs) if x != y]
        compared += len(pairs)
        equal += len(pairs) - len(unequal)
        gaps += [abs(pairs[i][0] - pairs[i][1]) for i in unequal]
        if unequal:
            first_unequal.append(unequal[0])
    return {"repeated": repeated, "requests": len(first[0]), "differences": differences,
            "equal_logprobs": equal, "compared_logprobs": compared,
            "max_logprob_gap": max(gaps, default=0.0), "unequal_gaps": quantiles(gaps),
            "median_first_unequal": statistics.median(first_unequal) if first_unequal else None}


def seeded_rerun_text(rerun: dict) -> str:
    """One line for ``seeded_rerun``'s result."""
    base, spec = rerun["repeated"]
    n = rerun["requests"]
    return (f"each engine repeated {base}/{n} and {spec}/{n} of its own requests, "
            f"{len(rerun['differences'])} still differ; sampled tokens' logprobs equal "
            f"in {rerun['equal_logprobs']}/{rerun['compared_logprobs']} shared positions, "
            f"largest gap {rerun['max_logprob_gap']:.2e}"
            + (f", unequal gaps p10/p50/p90 {rerun['unequal_gaps']['p10']:.1e}/"
               f"{rerun['unequal_gaps']['p50']:.1e}/{rerun['unequal_gaps']['p90']:.1e}"
               if rerun.get("unequal_gaps", {}).get("tokens") else "")
            + (f", first unequal at position {rerun['median_first_unequal']:g} (median)"
               if rerun.get("median_first_unequal") is not None else ""))


def sampling_ceilings(breakdown: list[dict]) -> list[dict]:
    """What the step breakdown allows: for each model, mix and batch size with
    a stock and a plugin pass, the step speed-up if the plugin's sampling time
    replaced stock's (``expected``) and if sampling cost nothing (``ceiling``),
    both from median GPU step times.

    Example: stock step 10 ms of which sampling 2 ms, plugin sampling 0.5 ms:
    expected 10 / 8.5 = 1.18, ceiling 10 / 8 = 1.25.
    """
    by_key = {(b["model"], b["mix"], b["max_num_seqs"], b["role"]): b
              for b in breakdown if b.get("steps")}
    rows = []
    for (model, mix, wave, role), stock in by_key.items():
        plugin = by_key.get((model, mix, wave, "plugin"))
        if role != "stock" or plugin is None:
            continue
        rest = stock["step_gpu_ms"] - stock["sampling_gpu_ms"]
        rows.append({"model": model, "mix": mix, "max_num_seqs": wave,
                     "expected": stock["step_gpu_ms"] / (rest + plugin["sampling_gpu_ms"]),
                     "ceiling": stock["step_gpu_ms"] / rest})
    return rows


def quantiles(values: Sequence[float]) -> dict:
    """10th, 50th and 90th percentile of ``values`` and how many there were."""
    ordered = sorted(values)
    if not ordered:
        return {"tokens": 0}

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p10": at(0.1), "p50": at(0.5), "p90": at(0.9), "tokens": len(ordered)}


def new_results(args: dict) -> dict:
    return {"schema": SCHEMA_VERSION, "gpu": None, "vllm": None, "torch": None,
            "args": args, "models": {}, "engines": [], "cells": [], "breakdown": [],
            "speculation": [], "ngram": [], "cold_start": [], "profiles": []}


def write_json(results: dict, out_dir: str) -> str:
    """Write ``e2e.json`` atomically (a killed run leaves the last complete one)."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "e2e.json")
    with open(path + ".tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(path + ".tmp", path)
    return path


def _fmt(value, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}"


def first_requests(cold_start: dict) -> list[tuple[str, float]]:
    """``(mix, TTFT ms)`` of a fresh engine's first requests, in order, from a
    ``cold_start`` entry of either form (see the schema).

    Example::

        >>> first_requests({"cold_ttft_ms": 915.3, "warm_ttft_ms": 14.4})
        [('topk_topp', 915.3)]
    """
    if "order" not in cold_start:
        return [("topk_topp", cold_start["cold_ttft_ms"])]
    return list(zip(cold_start["order"], cold_start["ttft_ms"]))


def cell_label(cell: dict) -> str:
    """The mix column of a tokens/s row; an A/A cell says it compares stock with stock."""
    return cell["mix"] + (" (A/A: stock vs stock)" if cell.get("against") == "control" else "")


def host_use(run: dict) -> dict | None:
    """The host CPU one timed run used (``Engine.throughput``'s result), or
    None where the engine did not measure it."""
    cpu = run.get("host_cpu_s")
    if cpu is None:
        return None
    return {"seconds": run["seconds"], "tokens": run["tokens"],
            "engine_core_cpu_s": cpu["engine_core"], "front_end_cpu_s": cpu["front_end"],
            "steal_s": run.get("steal_s"), "probe_ms": run.get("probe_ms"),
            "verification_batches": run.get("verification_batches"),
            "compiled_during_run": run.get("compiled_during_run")}


def host_summary(runs: Sequence[dict | None]) -> dict | None:
    """Medians over runs of :func:`host_use`: how busy the engine core and
    the front end were (CPU seconds per second of the run, 1.0 = one core
    all the time), the engine core's CPU microseconds per generated token
    and, where measured, the speed probe's milliseconds around the runs.

    Example::

        >>> run = {"seconds": 2.0, "tokens": 1000, "engine_core_cpu_s": 1.9,
        ...        "front_end_cpu_s": 1.0}
        >>> host_summary([run])
        {'engine_core_busy': 0.95, 'front_end_busy': 0.5, 'engine_core_us_per_token': 1900.0}
    """
    measured = [r for r in runs if r and r["seconds"] > 0 and r["tokens"] > 0]
    if not measured:
        return None
    summary = {
        "engine_core_busy": statistics.median(r["engine_core_cpu_s"] / r["seconds"]
                                              for r in measured),
        "front_end_busy": statistics.median(r["front_end_cpu_s"] / r["seconds"]
                                            for r in measured),
        "engine_core_us_per_token": statistics.median(1e6 * r["engine_core_cpu_s"] / r["tokens"]
                                                      for r in measured),
    }
    probes = [statistics.fmean(r["probe_ms"]) for r in measured if r.get("probe_ms")]
    if probes:
        summary["probe_ms"] = statistics.median(probes)
    return summary


def host_text(runs: Sequence[dict | None]) -> str:
    """One engine's :func:`host_summary` in words, "-" where not measured."""
    summary = host_summary(runs)
    if summary is None:
        return "-"
    probe = f"; speed probe {summary['probe_ms']:.1f} ms" if "probe_ms" in summary else ""
    return (f"engine core {100 * summary['engine_core_busy']:.0f}% busy, "
            f"{summary['engine_core_us_per_token']:.1f} us/token; "
            f"front end {100 * summary['front_end_busy']:.0f}%{probe}"
            + verification_text(runs) + compiled_text(runs))


def compiled_text(runs: Sequence[dict | None]) -> str:
    """The Triton kernels the runs compiled while timed (their names, each
    once), where any did: such a run stalled for the compile.

    Example::

        >>> compiled_text([{"compiled_during_run": ["_rejection_kernel@ab12cd34"]},
        ...                {"compiled_during_run": []}])
        '; compiled in a timed run: _rejection_kernel'
    """
    names = sorted({variant.split("@")[0] for r in runs if r is not None
                    for variant in r.get("compiled_during_run") or ()})
    return f"; compiled in a timed run: {', '.join(names)}" if names else ""


def verification_text(runs: Sequence[dict | None]) -> str:
    """Who verified the runs' drafts, summed over the runs, where the engine
    counted it (the plugin's verification on vLLM 0.32/0.33): a cell whose
    plugin engine handed its batches to upstream's code measures upstream's
    verification in both engines.

    Example::

        >>> verification_text([{"verification_batches": {"plugin": 90, "upstream": 10}},
        ...                    {"verification_batches": {"plugin": 95, "upstream": 5}}])
        '; verified by the plugin in 185 of 200 batches'
    """
    counted = [r["verification_batches"] for r in runs
               if r is not None and r.get("verification_batches") is not None]
    if not counted:
        return ""
    plugin = sum(c["plugin"] for c in counted)
    total = plugin + sum(c["upstream"] for c in counted)
    return f"; verified by the plugin in {plugin} of {total} batches"


def speculation_label(cell: dict) -> str:
    """The "policy vs baseline" column of a speculation row; against its A/A
    twin (``CONTROL_SUFFIX``) the policy is named twice and marked A/A."""
    against = cell["against"]
    if against.endswith(CONTROL_SUFFIX):
        return f"{cell['policy']} vs {against.removesuffix(CONTROL_SUFFIX)} (A/A)"
    return f"{cell['policy']} vs {against}"


# Characters of a profiler name that the table shows: enough to tell apart
# two instantiations of one template (FlashAttention's forward and combine
# kernels are both ``cutlass::device_kernel<...>``).
KERNEL_NAME_CHARS = 72


def short_kernel_name(name: str) -> str:
    """A profiler name as a Markdown code span, cut to ``KERNEL_NAME_CHARS``.

    torch.profiler names a templated CUDA kernel by its whole C++ signature
    (over a thousand characters for FlashAttention's); the table keeps the
    start and marks the cut with an ellipsis, and ``e2e.json`` keeps the full
    names. The code span keeps ``<...>`` from being read as HTML.
    """
    if len(name) > KERNEL_NAME_CHARS:
        name = name[:KERNEL_NAME_CHARS] + "..."
    return f"`{name}`"


def render_markdown(results: dict) -> str:
    """The tables of docs/benchmarks.md's end-to-end section."""
    lines = [f"{results.get('gpu')}, vLLM {results.get('vllm')}, torch {results.get('torch')}", ""]
    if results["models"]:
        lines += ["| model | top-1 probability p10 / p50 / p90 (greedy tokens) |", "|---|---|"]
        for name, m in results["models"].items():
            t = m.get("top1_probability") or {}
            lines.append(f"| {name} | {_fmt(t.get('p10'), 2)} / {_fmt(t.get('p50'), 2)} / "
                         f"{_fmt(t.get('p90'), 2)} ({t.get('tokens', 0)}) |")
        lines.append("")
    if results["cells"]:
        lines += ["| model | mix | max_num_seqs | pairs | stock tok/s median (spread) | "
                  "plugin tok/s median (spread) | plugin/stock, median of pairs [min, max] |",
                  "|---|---|---|---|---|---|---|"]
        for c in results["cells"]:
            # Files written before paired ratios existed: the ratio of medians.
            paired = c.get("paired") or {"median": c["ratio"], "min": None, "max": None}
            mix = cell_label(c)
            lines.append(
                f"| {c['model']} | {mix} | {c['max_num_seqs']} | "
                f"{len(c['stock_tok_s'])} | "
                f"{c['stock']['median']:.0f} ({100 * c['stock']['spread']:.1f}%) | "
                f"{c['plugin']['median']:.0f} ({100 * c['plugin']['spread']:.1f}%) | "
                f"{paired['median']:.3f} [{_fmt(paired['min'], 3)}, {_fmt(paired['max'], 3)}] |")
        lines.append("")
        hosts = [c for c in results["cells"] if c.get("host")]
        if hosts:
            lines += ["| model | mix | max_num_seqs | stock host (median of runs) | "
                      "plugin host (median of runs) |", "|---|---|---|---|---|"]
            lines += [f"| {c['model']} | {cell_label(c)} | {c['max_num_seqs']} | "
                      f"{host_text(c['host']['stock'])} | {host_text(c['host']['plugin'])} |"
                      for c in hosts]
            lines.append("")
    if results["breakdown"]:
        lines += ["| model | mix | max_num_seqs | engine | steps | step GPU ms | "
                  "sampling GPU ms | sampling share | host ms in runner | host ms in sampler | "
                  "step period ms |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for b in results["breakdown"]:
            share = b.get("sampling_share")
            lines.append(
                f"| {b['model']} | {b['mix']} | {b['max_num_seqs']} | {b['role']} | "
                f"{b['steps']} | {_fmt(b.get('step_gpu_ms'), 3)} | "
                f"{_fmt(b.get('sampling_gpu_ms'), 3)} | "
                f"{'-' if share is None else f'{100 * share:.1f}%'} | "
                f"{_fmt(b.get('host_ms'), 3)} | {_fmt(b.get('sampling_host_ms'), 3)} | "
                f"{_fmt(b.get('period_ms'), 3)} |")
        lines.append("")
        ceilings = sampling_ceilings(results["breakdown"])
        if ceilings:
            lines += ["| model | mix | max_num_seqs | step speed-up from sampling time | "
                      "ceiling (sampling free) |", "|---|---|---|---|---|"]
            lines += [f"| {c['model']} | {c['mix']} | {c['max_num_seqs']} | "
                      f"{c['expected']:.3f} | {c['ceiling']:.3f} |" for c in ceilings]
            lines.append("")
    if results.get("speculation"):
        lines += ["| model | workload | max_num_seqs | k | policy vs baseline | baseline tok/s "
                  "(spread) | policy tok/s (spread) | policy/baseline, median of pairs "
                  "[min, max] | verified / accepted drafts | identical greedy (seeded) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for c in results["speculation"]:
            paired, acc, ident = c["paired"], c["acceptance"], c["identity"]
            seeded = c["seeded_identity"]
            seeded_text = f" ({seeded['identical']}/{seeded['requests']})" if seeded else ""
            lines.append(
                f"| {c['model']} | {c['workload']} | {c['max_num_seqs']} | {c['k']} | "
                f"{speculation_label(c)} | "
                f"{c['base']['median']:.0f} ({100 * c['base']['spread']:.1f}%) | "
                f"{c['spec']['median']:.0f} ({100 * c['spec']['spread']:.1f}%) | "
                f"{paired['median']:.3f} [{paired['min']:.3f}, {paired['max']:.3f}] | "
                f"{acc['drafted']} / {acc['accepted']} | "
                f"{ident['identical']}/{ident['requests']}{seeded_text} |")
        lines.append("")
        reruns = [f"{c['model']} {c['workload']} max_num_seqs={c['max_num_seqs']} "
                  f"{speculation_label(c)}, seeded rerun: "
                  f"{seeded_rerun_text(c['seeded_identity']['rerun'])}"
                  for c in results["speculation"]
                  if (c["seeded_identity"] or {}).get("rerun")]
        lines += reruns + ([""] if reruns else [])
        hosts = [c for c in results["speculation"] if c.get("host")]
        if hosts:
            lines += ["| model | workload | max_num_seqs | policy vs baseline | baseline host "
                      "(median of runs) | policy host (median of runs) |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {c['model']} | {c['workload']} | {c['max_num_seqs']} | "
                      f"{speculation_label(c)} | {host_text(c['host']['base'])} | "
                      f"{host_text(c['host']['spec'])} |" for c in hosts]
            lines.append("")
    trace_cells = [c for c in results.get("speculation", []) if c.get("trace_replay")]
    if trace_cells:
        lines += ["| model | workload | method | max_num_seqs | k | policy vs baseline | "
                  "policy/baseline, median of pairs | acceptance length policy / baseline | "
                  "policy drafts / verified / accepted tokens | requests = trace |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for c in trace_cells:
            acc, base = c["acceptance"], c["base_acceptance"]
            lines.append(
                f"| {c['model']} | {c['workload']} | {c['method']} | {c['max_num_seqs']} | "
                f"{c['k']} | {speculation_label(c)} | {c['paired']['median']:.3f} | "
                f"{_fmt(acc['mean_acceptance_length'], 2)} / "
                f"{_fmt(base['mean_acceptance_length'], 2)} | "
                f"{acc['drafts']} / {acc['drafted']} / {acc['accepted']} | "
                f"{c['identity']['identical']}/{c['identity']['requests']} |")
        lines.append("")
    if results["ngram"]:
        lines += ["| model | max_num_seqs | k | tok/s without (spread) | tok/s with n-gram "
                  "(spread) | speedup | mean acceptance length | identical greedy | "
                  "differences all near ties |", "|---|---|---|---|---|---|---|---|---|"]
        for n in results["ngram"]:
            ident = n["identity"]
            lines.append(
                f"| {n['model']} | {n['max_num_seqs']} | {n['k']} | "
                f"{n['nospec']['median']:.0f} ({100 * n['nospec']['spread']:.1f}%) | "
                f"{n['spec']['median']:.0f} ({100 * n['spec']['spread']:.1f}%) | "
                f"{n['speedup']:.2f} | "
                f"{_fmt(n['acceptance'].get('mean_acceptance_length'), 3)} | "
                f"{ident['identical']}/{ident['requests']} | "
                f"{'yes' if ident['all_differences_near_ties'] else 'no'} |")
        lines.append("")
    for p in results.get("profiles", []):
        steps = max(p["steps"], 1)
        lines += [f"{p['model']} {p['mix']} max_num_seqs={p['max_num_seqs']} {p['role']}, "
                  f"{p['steps']} steps under torch.profiler:", "",
                  "| GPU kernel or operator | calls | self GPU ms per step |", "|---|---|---|"]
        lines += [f"| {short_kernel_name(name)} | {calls} | {ms / steps:.3f} |"
                  for name, calls, ms in p["device"]]
        lines.append("")
    if results["cold_start"]:
        lines += ["| model | engine | first requests of the fresh engine, in order: TTFT ms | "
                  "warm top-k/top-p TTFT ms | first/warm | Triton kernels compiled at start; "
                  "by each first request |", "|---|---|---|---|---|---|"]
        for c in results["cold_start"]:
            firsts = ", ".join(f"{mix} {ms:.1f}" for mix, ms in first_requests(c))
            by_request = c.get("compiled_by_request")
            compiled = "-" if by_request is None else (
                f"{c['compiled_at_start']}; " + ", ".join(
                    " ".join(sorted({v.split("@")[0] for v in names})) or "none"
                    for names in by_request))
            lines.append(f"| {c['model']} | {c['role']} | {firsts} | "
                         f"{c['warm_ttft_ms']:.1f} | {c['ratio']:.2f} | {compiled} |")
        lines.append("")
    return "\n".join(lines)


# integration/parts.py's part of each sampling mix whose stock-vs-plugin
# cells ``--record`` writes (``mixed`` spans several parts: not recorded).
PART_OF_MIX = {
    "topk_topp": parts.TOP_K_TOP_P_FLASHINFER,
    "seeded_topp": parts.TOP_K_TOP_P_SEEDED,
    "greedy": parts.GUMBEL,
    "t1": parts.GUMBEL,
}


def model_label(results: dict, model: str) -> str:
    """``"8B"`` for the cells' ``"8b-v151936"``: the checkpoint's shape."""
    shape = (results.get("models") or {}).get(model, {}).get("shape") or model.split("-v")[0]
    return shape.upper()


def parts_ratios(results: dict) -> dict[str, str]:
    """``{integration/parts.py part name: ratio string}`` from an e2e.json:
    per part, every stock-vs-plugin cell of its mixes (``PART_OF_MIX``; A/A
    cells and other mixes are left out), the median of the pair ratios at
    each batch size, e.g. ``"8B engine tok/s plugin/stock 1.022 at B=64,
    1.037 at B=256 (median of 5 pairs)"``. Models are joined by "; "; a part
    measured with two mixes (greedy and t1) names each; ``--use-fp64-gumbel``
    runs say "FP64 engines". Parts without a cell are left out."""
    by_part: dict[str, dict[str, dict[str, list[dict]]]] = {}
    for cell in results.get("cells", []):
        part = PART_OF_MIX.get(cell["mix"])
        if part is None or cell.get("against", "plugin") != "plugin":
            continue
        models = by_part.setdefault(part, {})
        models.setdefault(cell["model"], {}).setdefault(cell["mix"], []).append(cell)
    fp64 = bool((results.get("args") or {}).get("use_fp64_gumbel"))
    out = {}
    for part in [p for p in parts.PARTS if p in by_part]:
        models = by_part[part]
        texts, pairs = [], set()
        for model, mixes in models.items():
            groups = []
            for mix, cells in mixes.items():
                at = []
                for cell in sorted(cells, key=lambda c: c["max_num_seqs"]):
                    # Files written before paired ratios: the ratio of medians.
                    paired = cell.get("paired")
                    at.append(f"{(paired or {'median': cell['ratio']})['median']:.3f} "
                              f"at B={cell['max_num_seqs']}")
                    pairs.add(len(cell["stock_tok_s"]) if paired else None)
                groups.append((f"{mix} " if len(mixes) > 1 else "") + ", ".join(at))
            texts.append(f"{model_label(results, model)} engine tok/s plugin/stock "
                         + "; ".join(groups))
        counts = sorted(n for n in pairs if n is not None)
        how = []
        if counts:
            span = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}"
            how.append(f"median of {span} pairs")
        if None in pairs:
            how.append("ratio of medians")
        if fp64:
            how.append("FP64 engines")
        out[part] = "; ".join(texts) + f" ({', '.join(how)})"
    return out


def results_line(results: dict) -> str:
    """The vLLM release line an e2e.json's engines ran (``"0.26"`` for
    ``"0.26.0"``); a ValueError names what the file holds otherwise."""
    from vllm_sampling_plugin.integration.version import release_line

    found = results.get("vllm")
    try:
        line = release_line(str(found).removeprefix("vLLM ").strip()) if found else None
    except ValueError:  # not a version at all
        line = None
    if line is None:
        raise ValueError(f"the report's vLLM version {found!r} is not a supported release "
                         "line: nothing recorded")
    return line


def record_ratios(results: dict, path=None) -> dict[str, dict[str, str]]:
    """Write an e2e.json's ratios (:func:`parts_ratios`) into
    data/measurements.json under its vLLM line, where ``vllm-sampling-plugin
    info`` and docs/compatibility.md read them; each replaces its part's
    entry. Returns ``{part: {"ratio", "source"}}`` as written."""
    from benchmarks import measurements

    line = results_line(results)
    source = f"bench e2e, {results.get('gpu') or 'GPU not recorded'}, docs/benchmarks.md"
    written = {}
    for part, text in parts_ratios(results).items():
        measurements.record(line, part, text, source, path or measurements.PATH)
        written[part] = {"ratio": text, "source": source}
    return written


def plot(results: dict, path: str) -> str | None:
    """Plugin/stock tokens-per-second ratio per cell, the median of the pairs'
    ratios with their min-max range; returns None (and says so) without
    matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no PNG", flush=True)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = results["cells"]
    if not cells:
        return None
    labels = [f"{c['model']}\n{c['mix']}\nB={c['max_num_seqs']}" for c in cells]
    paired = [c["paired"] for c in cells]
    ratios = [p["median"] for p in paired]
    low = [p["median"] - p["min"] for p in paired]
    high = [p["max"] - p["median"] for p in paired]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(cells)), 4.5))
    ax.bar(range(len(cells)), ratios, yerr=[low, high], capsize=3, color="tab:blue")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(cells)), labels, fontsize=7)
    ax.set_ylabel("plugin / stock tokens/s (median of pairs)")
    ax.set_title(f"vLLM e2e throughput, {results.get('gpu')}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_traces(results: dict, out_dir: str) -> list[str]:
    """One PNG per trace workload (``e2e-trace-<workload>.png``): each
    configuration's speed-up over no speculation (``trace_speedups``)
    against the concurrency, one line per method and configuration; the
    paths written (none without matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no trace PNGs", flush=True)
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_workload: dict = {}
    for (model, workload, method), configurations in trace_speedups(results).items():
        by_workload.setdefault(workload, []).append((model, method, configurations))
    paths = []
    for workload, groups in by_workload.items():
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for model, method, configurations in groups:
            for configuration, points in configurations.items():
                seqs = sorted(points)
                ax.plot(seqs, [points[s] for s in seqs], marker="o",
                        label=f"{model} {method} {configuration}")
        ax.axhline(1.0, color="black", linewidth=0.8, label="no speculation")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (max_num_seqs)")
        ax.set_ylabel("tokens/s over no speculation")
        ax.set_title(f"{workload}: trace replay, {results.get('gpu')}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out_dir, f"e2e-trace-{workload}.png")
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths
