"""Engine-core host time per decode step that n-gram speculation adds, on CPU.

Drives vLLM 0.20's real AsyncScheduler (as the engine core does: one step in
flight, the output of step n arriving after step n + 1 is scheduled) for a
batch of decoding requests, once without speculation and once with n-gram
(k = 3) under the plugin's ``adaptive`` policy and under ``fixed``. Two
workloads: ``nonrepeating`` (nothing is ever proposed: under ``adaptive``
every step verifies zero drafts) and ``accepting`` (k tokens proposed for
every request every step, every draft accepted). Times ``schedule()`` and
``update_from_output()`` per step, and ``AdaptiveSpeculation.observe`` on
its own, and the share of steps after which the runner proposes (the
adaptive policy's plan). The runner's side of a step is in
``profile_host_path.py``.

    PYTHONPATH=. python3 scripts/profile_spec_scheduler.py --batch 64 256 \
        --workload accepting
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import vllm.platforms.interface as _platform  # noqa: E402

# Without a GPU vLLM infers no device type, which EngineArgs needs.
_platform.UnspecifiedPlatform.device_type = "cpu"

import torch  # noqa: E402
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.plugins import load_general_plugins  # noqa: E402

load_general_plugins()
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from tests.tiny_model import write_tiny_llama  # noqa: E402
from vllm_sampling_plugin.policy import PROPOSE_ATTR, PROPOSED_ATTR  # noqa: E402

K = 3
PROMPT_LEN = 64


def build(model: str, batch: int, policy: str | None) -> AsyncScheduler:
    kwargs = {}
    if policy is not None:
        kwargs = {
            "speculative_config": {"method": "ngram", "num_speculative_tokens": K,
                                   "prompt_lookup_min": 2, "prompt_lookup_max": 4},
            "speculation_policy": policy,
        }
    engine_args = EngineArgs(model=model, load_format="dummy", max_model_len=2048,
                             max_num_seqs=batch, max_num_batched_tokens=max(8192, batch * 64),
                             async_scheduling=True, enable_prefix_caching=False, **kwargs)
    vllm_config = engine_args.create_engine_config()
    blocks = batch * 2048 // 16 + 16
    vllm_config.cache_config.num_gpu_blocks = blocks
    kv_spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=16, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer.0"], kv_spec)])
    return AsyncScheduler(vllm_config, kv, StructuredOutputManager(vllm_config), block_size=16)


def output_for(scheduler_output, policy: str | None, accepting: bool,
               step: int) -> ModelRunnerOutput:
    req_ids = list(scheduler_output.num_scheduled_tokens)
    drafts = scheduler_output.scheduled_spec_decode_tokens
    # Accepting: every verified draft is accepted, so a request samples
    # its drafts and the bonus token.
    sampled = [[1000 + step] * (1 + (len(drafts.get(r, ())) if accepting else 0))
               for r in req_ids]
    out = ModelRunnerOutput(req_ids=req_ids,
                            req_id_to_index={r: i for i, r in enumerate(req_ids)},
                            sampled_token_ids=sampled)
    # A runner told not to propose after a step sends no report.
    if policy == "adaptive" and getattr(scheduler_output, PROPOSE_ATTR, True):
        setattr(out, PROPOSED_ATTR, [K if accepting else 0] * len(req_ids))
    return out


def run(model: str, batch: int, policy: str | None, accepting: bool,
        steps: int) -> dict[str, float]:
    scheduler = build(model, batch, policy)
    for i in range(batch):
        scheduler.add_request(Request(f"r{i}", prompt_token_ids=list(range(3, 3 + PROMPT_LEN)),
                                      sampling_params=SamplingParams(max_tokens=1900,
                                                                     ignore_eos=True),
                                      pooling_params=None))
    pending = []
    schedule_s, update_s, observe_s, planned = [], [], [], []
    speculation = getattr(scheduler, "adaptive_speculation", None)
    if speculation is not None:
        observe = speculation.observe

        def timed_observe(*args):
            start = time.perf_counter()
            observe(*args)
            observe_s.append(time.perf_counter() - start)

        speculation.observe = timed_observe
    for step in range(steps):
        start = time.perf_counter()
        so = scheduler.schedule()
        schedule_s.append(time.perf_counter() - start)
        pending.append((step, so))
        planned.append(so)
        if len(pending) < 2:
            continue
        done_step, done = pending.pop(0)
        out = output_for(done, policy, accepting, done_step)
        start = time.perf_counter()
        scheduler.update_from_output(done, out)
        update_s.append(time.perf_counter() - start)
        if step > 3 and policy == "adaptive" and not accepting:
            assert not so.scheduled_spec_decode_tokens, "a zero-draft step verified drafts"
        if step > 3 and accepting and policy is not None:
            assert len(so.scheduled_spec_decode_tokens) == batch, "a request verified no drafts"
    skip = 10  # prefill and the first decode steps
    result = {
        "schedule_us": statistics.median(schedule_s[skip:]) * 1e6,
        "update_from_output_us": statistics.median(update_s[skip:]) * 1e6,
    }
    if observe_s:
        result["observe_us"] = statistics.median(observe_s[skip:]) * 1e6
        proposing = [getattr(so, PROPOSE_ATTR, True) for so in planned[skip:]]
        result["proposing_steps_pct"] = 100.0 * sum(proposing) / max(len(proposing), 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workload", choices=["nonrepeating", "accepting"],
                        default="nonrepeating")
    args = parser.parse_args()
    accepting = args.workload == "accepting"
    with tempfile.TemporaryDirectory() as tmp:
        model = str(write_tiny_llama(tmp))
        for batch in args.batch:
            for policy in (None, "fixed", "adaptive"):
                result = run(model, batch, policy, accepting, args.steps)
                name = policy or "no speculation"
                print(f"B={batch} {args.workload}: {name} "
                      + ", ".join(f"{k} {v:.1f}" for k, v in result.items()))


if __name__ == "__main__":
    main()
