"""Timing and logit probes installed inside a running engine's worker.

The functions here run in the worker process, sent there with
``LLM.collective_rpc(function)`` (which pickles them by reference and needs
``VLLM_ALLOW_INSECURE_SERIALIZATION=1``). They wrap the same attributes of
vLLM 0.20's V2 runner in stock and plugin engines alike:

- ``runner.execute_model`` and ``runner.sample_tokens``: a step runs from the
  start of the first to the end of the second. A CUDA event at each end gives
  the step's GPU time; host timers give the host time spent inside the two
  calls and the period from one step's start to the next.
- ``runner.sampler`` and ``runner.rejection_sampler``: a proxy that forwards
  every attribute and brackets the call with CUDA events, so the GPU time of
  the sampling step (Sampler, or RejectionSampler when drafts are verified)
  and the host time inside that call are measured without touching either
  class. The proxy can also record the
  top-2 raw logits of every row it sees (the near-tie check).

Events are only recorded during the run and read once in ``collect_timings``,
so the instrumented run adds no synchronisation. Throughput is never measured
with these hooks installed.
"""

from __future__ import annotations

import statistics
import time

import torch


class _StepLog:
    """The records of one instrumented pass."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self.sampling_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.sampling_host_s: list[float] = []  # host time inside each sampler call
        self.open_step: dict | None = None
        # How often each CUDA graph kind ran: "FULL/1" is a full graph of
        # one-token requests, "PIECEWISE/None" a mixed batch, "NONE/None" eager.
        self.graph_modes: dict[str, int] = {}
        self.top2: list[list[float]] = []
        self.record_top2 = False


def _event() -> torch.cuda.Event:
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


class _TimedSampler:
    """Forwards everything to ``inner``; times calls and may record top-2 logits."""

    def __init__(self, inner, log: _StepLog) -> None:
        self.__dict__["_inner"] = inner
        self.__dict__["_log"] = log

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)

    def __call__(self, logits: torch.Tensor, *args, **kwargs):
        if self._log.record_top2:
            self._log.top2.extend(torch.topk(logits.float(), 2, dim=-1).values.tolist())
        host_start = time.perf_counter()
        start = _event()
        output = self._inner(logits, *args, **kwargs)
        self._log.sampling_events.append((start, _event()))
        self._log.sampling_host_s.append(time.perf_counter() - host_start)
        return output


def sampler_class(worker) -> str:
    """Module and name of the runner's Sampler class (which engine this is)."""
    sampler_type = type(worker.model_runner.sampler)
    return f"{sampler_type.__module__}.{sampler_type.__name__}"


def install_timers(worker) -> bool:
    """Wrap the runner's step methods and samplers (see the module docstring)."""
    runner = worker.model_runner
    log = _StepLog()
    runner._e2e_log = log
    execute_model, sample_tokens = runner.execute_model, runner.sample_tokens

    def timed_execute_model(*args, **kwargs):
        host_start = time.perf_counter()
        start = _event()
        output = execute_model(*args, **kwargs)
        execute_host_s = time.perf_counter() - host_start
        log.open_step = {"start": start, "host_start": host_start,
                         "host_s": execute_host_s, "execute_host_s": execute_host_s,
                         "first_sampling": len(log.sampling_events)}
        return output

    def timed_sample_tokens(*args, **kwargs):
        host_start = time.perf_counter()
        output = sample_tokens(*args, **kwargs)
        step, log.open_step = log.open_step, None
        if step is not None:
            step["end"] = _event()
            step["host_s"] += time.perf_counter() - host_start
            step["last_sampling"] = len(log.sampling_events)
            log.steps.append(step)
        return output

    runner.execute_model = timed_execute_model
    runner.sample_tokens = timed_sample_tokens
    manager = runner.cudagraph_manager
    if manager is not None:
        dispatch = manager.dispatch

        def counted_dispatch(*args, **kwargs):
            desc = dispatch(*args, **kwargs)
            key = f"{desc.cg_mode.name}/{desc.uniform_token_count}"
            log.graph_modes[key] = log.graph_modes.get(key, 0) + 1
            return desc

        manager.dispatch = counted_dispatch
    runner.sampler = _TimedSampler(runner.sampler, log)
    if runner.rejection_sampler is not None:
        runner.rejection_sampler = _TimedSampler(runner.rejection_sampler, log)
    return True


def remove_timers(worker) -> bool:
    """Undo ``install_timers``."""
    runner = worker.model_runner
    del runner.execute_model, runner.sample_tokens
    if runner.cudagraph_manager is not None:
        del runner.cudagraph_manager.dispatch
    runner.sampler = runner.sampler._inner
    if runner.rejection_sampler is not None:
        runner.rejection_sampler = runner.rejection_sampler._inner
    del runner._e2e_log
    return True


def verification_batches(worker) -> dict | None:
    """How many verification batches the plugin's kernel and upstream's code
    took so far (``PluginVerifyingRejectionSampler.batches``, vLLM
    0.32/0.33 with ``--plugin-verification plugin``), or None where the
    runner's RejectionSampler does not count them."""
    batches = getattr(worker.model_runner.rejection_sampler, "batches", None)
    return dict(batches) if batches is not None else None


def start_top2(worker) -> bool:
    """From now on record the top-2 raw logits of every sampled row."""
    log = worker.model_runner._e2e_log
    log.top2, log.record_top2 = [], True
    return True


def take_top2(worker) -> list[list[float]]:
    """The rows recorded since ``start_top2``, in order; stops recording."""
    log = worker.model_runner._e2e_log
    rows, log.top2, log.record_top2 = log.top2, [], False
    return rows


def collect_timings(worker) -> dict:
    """Per-step milliseconds since ``install_timers`` (or the last collect).

    Returns ``{"step_gpu_ms", "sampling_gpu_ms", "host_ms", "execute_host_ms",
    "sampling_host_ms", "period_ms"}``, lists with one entry per step
    (``host_ms`` inside execute_model and sample_tokens together,
    ``execute_host_ms`` inside execute_model alone; ``period_ms`` one fewer),
    and ``graph_modes`` (``_StepLog.graph_modes``); clears the log.
    """
    log = worker.model_runner._e2e_log
    torch.cuda.synchronize()
    sampling = [start.elapsed_time(end) for start, end in log.sampling_events]
    steps = log.steps

    def per_step(values: list[float], step: dict) -> float:
        return sum(values[step["first_sampling"]:step["last_sampling"]])

    result = {
        "step_gpu_ms": [s["start"].elapsed_time(s["end"]) for s in steps],
        "sampling_gpu_ms": [per_step(sampling, s) for s in steps],
        "host_ms": [1e3 * s["host_s"] for s in steps],
        "execute_host_ms": [1e3 * s["execute_host_s"] for s in steps],
        "sampling_host_ms": [1e3 * per_step(log.sampling_host_s, s) for s in steps],
        "period_ms": [1e3 * (b["host_start"] - a["host_start"]) for a, b in zip(steps, steps[1:])],
        "graph_modes": log.graph_modes,
    }
    log.steps, log.sampling_events, log.sampling_host_s = [], [], []
    log.graph_modes = {}
    return result


def summarize_timings(timings: dict) -> dict:
    """Medians per step and the share of the GPU step time spent sampling."""
    steps = timings["step_gpu_ms"]
    if not steps:
        return {"steps": 0}
    total_step = sum(steps)
    return {
        "steps": len(steps),
        "step_gpu_ms": statistics.median(steps),
        "sampling_gpu_ms": statistics.median(timings["sampling_gpu_ms"]),
        "host_ms": statistics.median(timings["host_ms"]),
        "sampling_host_ms": statistics.median(timings["sampling_host_ms"]),
        "period_ms": statistics.median(timings["period_ms"]) if timings["period_ms"] else None,
        "sampling_share": sum(timings["sampling_gpu_ms"]) / total_step if total_step else None,
    }


PROFILE_ROWS = 15
# Host calls that start work on the GPU: a kernel (eager or Triton), a CUDA
# graph replay, an asynchronous copy.
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                "cudaGraphLaunch", "cudaMemcpyAsync")


def start_profile(worker) -> bool:
    """Start torch.profiler (CPU and CUDA activity) in the worker process."""
    from torch.profiler import ProfilerActivity, profile

    profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    profiler.__enter__()
    worker.model_runner._e2e_profiler = profiler
    return True


def stop_profile(worker) -> dict:
    """Stop the profiler of ``start_profile``; the operators and kernels that
    took the most GPU time, and those that took the most host time.

    Returns ``{"device": [[name, calls, self GPU ms], ...], "host": [[name,
    calls, self host ms], ...]}``, ``PROFILE_ROWS`` rows each, largest first,
    ``"launches"``: how often each of ``LAUNCH_CALLS`` was made, and
    ``"calls"``: ``{name: [calls, self host ms]}`` of every operator, kernel
    and runtime call (two passes of different lengths give per-step costs).
    """
    runner = worker.model_runner
    profiler = runner._e2e_profiler
    del runner._e2e_profiler
    torch.cuda.synchronize()
    profiler.__exit__(None, None, None)
    events = profiler.key_averages()

    def top(attribute: str) -> list[list]:
        rows = sorted(events, key=lambda e: getattr(e, attribute), reverse=True)
        return [[e.key, e.count, getattr(e, attribute) / 1e3] for e in rows[:PROFILE_ROWS]
                if getattr(e, attribute) > 0]

    return {"device": top("self_device_time_total"), "host": top("self_cpu_time_total"),
            "launches": {e.key: e.count for e in events if e.key in LAUNCH_CALLS},
            "calls": {e.key: [e.count, e.self_cpu_time_total / 1e3] for e in events}}
