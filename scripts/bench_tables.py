"""Render the benchmark JSON files written by `vllm-sampling-plugin bench AREA`
as Markdown tables (for docs/benchmarks.md).

    python3 scripts/bench_tables.py docs/bench-data/sampler-h100.json [...]
"""

import json
import sys

# Per benchmark: the key columns, then the timed candidates (microseconds).
LAYOUTS = {
    "rejection": (["B", "K"], ["plugin_fp32", "plugin_fp64", "plugin_synthetic",
                               "stock_probabilistic", "stock_synthetic"]),
    "topk_topp": (["B", "V"], ["fused_fp32", "fused_fp64", "fused_fp32_one_seed", "flashinfer",
                               "vllm_pytorch_gumbel", "masked_plugin_gumbel", "logits_copy"]),
    "ngram": (["R", "L", "k"], ["plugin", "v1_gpu_compiled", "v1_gpu_eager", "cpu_numba"]),
    "sampler": (["B", "V"], ["plugin_fp32", "plugin_fp64", "stock_gumbel", "fused_topk_topp",
                             "flashinfer_topk_topp", "vllm_topk_topp_pytorch", "vllm_topk_topp",
                             "logits_copy"]),
}


def render(path: str) -> str:
    data = json.load(open(path))
    first = data["results"][0]
    kind = next(
        name for name, (keys, cols) in LAYOUTS.items()
        if all(k in first for k in keys) and f"{cols[0]}_us" in first
    )
    keys, cols = LAYOUTS[kind]
    cols = [c for c in cols if f"{c}_us" in first]
    bw = data.get("copy_bandwidth_gbps") or data.get("copy_bandwidth_GBps")
    lines = [f"{data['gpu']}, measured copy bandwidth {bw:.0f} GB/s; "
             f"median us (% of copy bandwidth for the bytes the op must read)", ""]
    lines.append("| " + " | ".join(keys + cols) + " |")
    lines.append("|" + "---|" * (len(keys) + len(cols)))
    for row in data["results"]:
        cells = [str(row[k]) for k in keys]
        for c in cols:
            us, pct = row.get(f"{c}_us"), row.get(f"{c}_pct_copy_bw")
            cells.append("-" if us is None else f"{us:.1f}" + ("" if pct is None else f" ({pct:.0f}%)"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(f"<!-- {p} -->\n{render(p)}\n")
