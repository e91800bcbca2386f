"""GPU time of the plugin's verification op at an engine's shapes, by logits
dtype, filtering and draft logits, without vLLM.

vLLM 0.33 hands the plugin's verification the runner's raw logits, in the
model's dtype (bfloat16), and a draft model's cached logits in its head
dtype; the op benchmarks (``bench rejection``) read float32. Peaked
bfloat16 rows carry many equal values, which the filters' threshold search
must rank. This check times ``rejection_sample_packed`` on the same peaked
logits in float32 and bfloat16, unfiltered and filtered (temperature 0.7,
top-k 50, top-p 0.9: the bench's ``topk_topp`` mix), with n-gram drafts and
with draft logits, and prints one JSON line per case (median of CUDA-event
timings, microseconds).

    python3 scripts/verification_dtype_check.py --out /tmp/verification-dtype.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def peaked_logits(rows: int, vocab: int, dtype, device, generator):
    """One dominant token a row (as a copy checkpoint's), the rest Gaussian."""
    import torch

    logits = torch.randn(rows, vocab, generator=generator, device=device) * 2.0
    top = torch.randint(0, vocab, (rows,), generator=generator, device=device)
    logits[torch.arange(rows, device=device), top] = 24.0
    return logits.to(dtype), top


def time_case(num_reqs, k, vocab, dtype, filtered, with_draft_logits, iters, device):
    import torch

    from vllm_sampling_plugin.ops.rejection import rejection_sample_packed

    generator = torch.Generator(device=device).manual_seed(0)
    num_logits = num_reqs * (k + 1)
    target, top = peaked_logits(num_logits, vocab, dtype, device, generator)
    # Every draft the target's top token: all accepted, as on the copy workload.
    draft_tokens = torch.roll(top, 1)
    cu_num_logits = torch.arange(0, num_logits + 1, k + 1, dtype=torch.int32, device=device)
    idx_mapping = torch.arange(num_reqs, dtype=torch.int32, device=device)
    pos = torch.arange(num_logits, dtype=torch.int64, device=device)
    temperature = torch.full((num_reqs,), 0.7, device=device)
    seeds = torch.arange(num_reqs, dtype=torch.int64, device=device)
    draft_logits = None
    if with_draft_logits:
        draft_logits, _ = peaked_logits(num_reqs * k, vocab, dtype, device, generator)
        draft_logits = draft_logits.view(num_reqs, k, vocab)
    filters = {}
    if filtered:
        filters = {
            "top_k": torch.full((num_reqs,), 50, dtype=torch.int32, device=device),
            "top_p": torch.full((num_reqs,), 0.9, device=device),
            "min_p": torch.zeros(num_reqs, device=device),
        }

    def launch():
        return rejection_sample_packed(
            target, draft_tokens, cu_num_logits, idx_mapping, pos, temperature, seeds, k,
            draft_logits, None, apply_temperature=True,
            scale_draft_logits=with_draft_logits, **filters,
        )

    sampled, num_sampled = launch()  # compiles
    times = []
    for _ in range(iters):
        if device.type != "cuda":  # TRITON_INTERPRET=1: checks the script, times nothing
            launch()
            times.append(0.0)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return {
        "rows": num_logits,
        "vocab": vocab,
        "k": k,
        "dtype": str(dtype).removeprefix("torch."),
        "filtered": filtered,
        "draft_logits": with_draft_logits,
        "median_us": round(statistics.median(times), 1),
        "min_us": round(min(times), 1),
        "mean_accepted": round(float(num_sampled.float().mean()) - 1.0, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-reqs", type=int, default=256)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import torch

    device = torch.device(args.device)
    lines = []
    for dtype, filtered, with_draft in itertools.product(
        (torch.float32, torch.bfloat16), (False, True), (False, True)
    ):
        line = time_case(args.num_reqs, args.k, args.vocab, dtype, filtered, with_draft,
                         args.iters, device)
        line["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        print(json.dumps(line), flush=True)
        lines.append(line)
    if args.out is not None:
        args.out.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
