"""One vLLM engine in its own process, driven by the benchmark over a pipe.

The parent keeps two of these alive side by side on one GPU (stock with
``VLLM_PLUGINS=none``, and plugin), so stock/plugin pairs can be interleaved
without paying engine start-up per pair. Each child sets its environment
before it imports vLLM (the process is spawned, so nothing of the parent's
state leaks in) and answers requests ``(command, kwargs)`` with a dict.

The first thing a fresh engine does after start-up is the cold-start probe:
one greedy, one top-k/top-p and one seeded top-p request in turn (the
spec's ``cold_start_first`` goes first), each timed to its first token,
then top-k/top-p again once warm (see ``_cold_start``).
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import statistics
import tempfile
import time
import traceback

from benchmarks.e2e import hooks, workload
from benchmarks.e2e import traces as trace_replay

ROLE_ENV = {
    # Stock vLLM 0.20: no general plugin is loaded at all.
    "stock": {"VLLM_PLUGINS": "none"},
    "plugin": {},
    # A second stock engine in the plugin's place (``--control``): an A/A run
    # shows what the method can resolve.
    "control": {"VLLM_PLUGINS": "none"},
}
COMMON_ENV = {
    "VLLM_USE_V2_MODEL_RUNNER": "1",
    # collective_rpc ships the timing hooks to the worker by pickle.
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
COLD_START_PROMPT_LEN = 64
# The first requests of a fresh engine, one of each: the first one pays
# whatever the engine does once (prefill shapes, detokenizer, ...), and a
# sampling route's own first-use cost shows on the first request that takes it.
COLD_START_MIXES = ("greedy", "topk_topp", "seeded_topp")
WARM_REPEATS = 5
PLUGIN_PACKAGE = "vllm_sampling_plugin."


def check_sampler(role: str, sampler: str) -> None:
    """Fail unless a plugin engine runs the plugin's Sampler and a stock
    engine vLLM's: vLLM only logs a plugin that fails to import, and the
    benchmark would then compare stock with stock."""
    is_plugin = sampler.startswith(PLUGIN_PACKAGE)
    if is_plugin != (role == "plugin"):
        raise RuntimeError(f"the {role} engine runs {sampler}: "
                           + ("the plugin did not load (see the engine's log)"
                              if role == "plugin" else "VLLM_PLUGINS=none did not apply"))


@dataclasses.dataclass(frozen=True)
class EngineSpec:
    """How to start one engine."""

    role: str  # "stock" or "plugin"
    model: str  # checkpoint directory
    max_num_seqs: int
    gpu_memory_utilization: float
    max_model_len: int
    ngram_k: int = 0  # > 0: n-gram speculation with this many drafts
    attention_backend: str | None = None  # None: vLLM's choice
    max_cudagraph_capture_size: int | None = None  # None: vLLM's choice
    cudagraph_mode: str | None = None  # e.g. "FULL"; None: vLLM's choice
    cold_start_first: str = "greedy"  # the mix of COLD_START_MIXES sent first
    use_fp64_gumbel: bool = False  # pass use_fp64_gumbel=True to LLM(...)
    # With ngram_k: the plugin's speculation_policy ("adaptive" or "fixed");
    # None leaves the engine's default.
    speculation_policy: str | None = None
    # With ngram_k: the plugin's plugin_verification ("plugin" or "upstream",
    # vLLM 0.32/0.33); None leaves the engine's default (upstream's).
    plugin_verification: str | None = None
    # With ngram_k: a draft checkpoint proposing the ngram_k tokens in place of
    # the n-gram proposer (vLLM's "draft_model" method: drafts with draft
    # probabilities); None: n-gram speculation.
    draft_model: str | None = None
    # With ngram_k and no draft model: the method's name. Both build the same
    # GPU proposer in the V2 runner; stock 0.32 schedules "ngram" synchronously
    # and "ngram_gpu" asynchronously, and the plugin schedules both as the latter.
    ngram_method: str = "ngram"
    # The KV cache's size, in place of vLLM's sizing from the GPU memory left
    # after profiling, which engines starting beside this one change; None:
    # vLLM's sizing (bench e2e --kv-cache-gib).
    kv_cache_memory_bytes: int | None = None
    # vLLM 0.34's trace replay (bench e2e --trace-workloads): requests may
    # carry trace_decode_token_ids, which the engine emits.
    trace_replay: bool = False
    # With ngram_k: upstream's adaptive verification in the speculative config
    # (vLLM 0.34; its suffix method accepts it, its n-gram method does not).
    adaptive_verification: bool = False

    def llm_kwargs(self) -> dict:
        kwargs = {
            "model": self.model,
            "max_num_seqs": self.max_num_seqs,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": max(8192, self.max_num_seqs * 64),
            "seed": 0,
            # The spec-decode counters come from the stats loggers.
            "disable_log_stats": False,
        }
        if self.use_fp64_gumbel:
            kwargs["use_fp64_gumbel"] = True
        if self.trace_replay:
            kwargs["enable_trace_replay"] = True
        if self.kv_cache_memory_bytes:
            kwargs["kv_cache_memory_bytes"] = self.kv_cache_memory_bytes
        if self.attention_backend:
            kwargs["attention_backend"] = self.attention_backend
        compilation_config = {}
        if self.max_cudagraph_capture_size:
            compilation_config["max_cudagraph_capture_size"] = self.max_cudagraph_capture_size
        if self.cudagraph_mode:
            compilation_config["cudagraph_mode"] = self.cudagraph_mode
        if compilation_config:
            kwargs["compilation_config"] = compilation_config
        if self.ngram_k and self.draft_model:
            # "probabilistic": the drafter samples its drafts and keeps their
            # logits for verification (vLLM's default, "greedy", drafts
            # argmax tokens without logits, as n-gram does).
            kwargs["speculative_config"] = {
                "method": "draft_model", "model": self.draft_model,
                "num_speculative_tokens": self.ngram_k,
                "draft_sample_method": "probabilistic",
            }
        elif self.ngram_k:
            kwargs["speculative_config"] = {
                "method": self.ngram_method, "num_speculative_tokens": self.ngram_k,
            }
            if self.ngram_method != "suffix":
                kwargs["speculative_config"].update(prompt_lookup_min=2, prompt_lookup_max=4)
            if self.adaptive_verification:
                kwargs["speculative_config"]["enable_adaptive_verification"] = True
            # The adaptive policy is n-gram's (run.py refuses it with a draft model).
            if self.speculation_policy:
                kwargs["speculation_policy"] = self.speculation_policy
        if self.ngram_k and self.plugin_verification:
            kwargs["plugin_verification"] = self.plugin_verification
        return kwargs

    @property
    def label(self) -> str:
        if not self.ngram_k:
            return self.role
        policy = f"-{self.speculation_policy}" if self.speculation_policy else ""
        verify = f"-verify-{self.plugin_verification}" if self.plugin_verification else ""
        method = "draft" if self.draft_model else self.ngram_method
        adaptive = "-adaptive-verification" if self.adaptive_verification else ""
        return f"{self.role}+{method}{self.ngram_k}{policy}{verify}{adaptive}"


def child_env(spec: EngineSpec, caches: str) -> dict[str, str]:
    """The variables a child sets before importing vLLM.

    Each engine compiles into its own empty caches under ``caches``, as a
    fresh container would. Triton's (:func:`triton_cache_dir`): a plugin engine
    started after a stock one does not find vLLM's kernels compiled, and the
    cold-start probe can list what each first request still had to compile.
    vLLM's (``VLLM_CACHE_ROOT``, its torch.compile artifacts): an engine
    started after another of the same model would otherwise load the first
    one's compiled model instead of compiling it, so the first engine of a
    comparison would be the only one to run what a fresh compile produces
    (on vLLM 0.33 the first-started 1B engine ran slower in every call that
    compared two, by 5-37% against a twin of its own configuration).
    """
    return {**COMMON_ENV, **ROLE_ENV[spec.role], "TRITON_CACHE_DIR": triton_cache_dir(caches),
            "VLLM_CACHE_ROOT": os.path.join(caches, "vllm")}


def triton_cache_dir(caches: str) -> str:
    """The Triton cache directory of an engine whose caches are ``caches``."""
    return os.path.join(caches, "triton")


def compiled_kernels(triton_cache: str) -> set[str]:
    """The kernel variants compiled into a Triton cache directory, as
    ``name@hash`` (Triton writes one ``<hash>/<name>.json`` metadata file per
    compiled variant, beside ``__grp__<name>.json`` group files)."""
    variants = set()
    for directory, _, files in os.walk(triton_cache):
        variants.update(f"{f[:-len('.json')]}@{os.path.basename(directory)[:8]}" for f in files
                        if f.endswith(".json") and not f.startswith("__grp__"))
    return variants


def host_cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system, every thread) used so far by this engine's
    front end (the calling process: request handling, detokenizing, stats)
    and by its engine core (the processes below it: scheduler and, with one
    GPU, the worker's launches).

    Read around a timed run, it tells, without a timer inside the engine,
    whether the host kept up: an engine core busy for nearly the whole run
    is host-bound, and then every host microsecond a configuration adds per
    step shows in tokens per second (async scheduling hides host time only
    behind GPU time).
    """
    import psutil

    def used(process) -> float:
        times = process.cpu_times()
        return times.user + times.system

    front_end = psutil.Process()
    engine_core = 0.0
    for child in front_end.children(recursive=True):
        try:
            engine_core += used(child)
        except psutil.Error:  # a helper process that exited meanwhile
            pass
    return {"front_end": used(front_end), "engine_core": engine_core}


# Iterations of host_speed_probe_ms's loop: about 25 ms of one core.
PROBE_ITERATIONS = 300_000


def host_speed_probe_ms() -> float:
    """Milliseconds this process takes for a fixed pure-Python loop: the
    host CPU's speed at that moment, lower is faster.

    Timed right before and right after each run (outside its clock): where
    an engine's CPU time per token moves from run to run, the probe tells
    whether the machine's speed moved with it (the lent hosts' did by up to
    35% between runs minutes apart, docs/benchmarks.md).
    """
    start = time.perf_counter()
    total = 0
    for i in range(PROBE_ITERATIONS):
        total += i * i
    return 1e3 * (time.perf_counter() - start)


def steal_seconds() -> float:
    """CPU time the hypervisor has taken from this machine's CPUs so far
    (all CPUs together; 0 where the kernel does not count it)."""
    import psutil

    return getattr(psutil.cpu_times(), "steal", 0.0)


class Engine:
    """The parent's handle on an engine process."""

    def __init__(self, spec: EngineSpec) -> None:
        """Start the engine's process; :attr:`info` waits until it is up, so
        several engines can start at once (``bench e2e --start-together``)."""
        self.spec = spec
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        # Not a daemon: the engine starts its own engine-core process.
        self._process = context.Process(target=_serve, args=(child_conn, spec), daemon=False)
        self._process.start()
        self._info: dict | None = None

    @property
    def info(self) -> dict:
        """What the engine reported once up (:meth:`_EngineServer.ready_info`)."""
        if self._info is None:
            self._info = self._receive()
        return self._info

    @property
    def pid(self) -> int:
        """The engine process's pid (its engine core runs below it)."""
        return self._process.pid

    def call(self, command: str, **kwargs) -> dict:
        self.info  # the first message is the start's report
        self._conn.send((command, kwargs))
        return self._receive()

    def _receive(self) -> dict:
        message = self._conn.recv()
        if "error" in message:
            raise RuntimeError(f"{self.spec.label} engine: {message['error']}")
        return message

    def close(self) -> None:
        if self._process.is_alive():
            self._conn.send(("stop", {}))
            self._process.join(timeout=120)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()


def _serve(conn, spec: EngineSpec) -> None:
    caches = tempfile.mkdtemp(prefix=f"caches-{spec.label}-")
    os.environ.update(child_env(spec, caches))
    try:
        server = _EngineServer(spec, triton_cache_dir(caches))
        conn.send(server.ready_info())
    except Exception:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send({"error": traceback.format_exc()})
        return
    while True:
        command, kwargs = conn.recv()
        if command == "stop":
            break
        try:
            conn.send(getattr(server, command)(**kwargs))
        except Exception:  # noqa: BLE001 - reported to the parent, which raises it
            conn.send({"error": traceback.format_exc()})
    server.shutdown()
    # Nothing is left to run here, and vLLM 0.33's threads kept this process
    # (and its engine core's GPU memory) alive for minutes after the engine
    # was dropped: leave at once.
    os._exit(0)


class _EngineServer:
    """Runs in the child: the LLM and the commands the parent can send."""

    def __init__(self, spec: EngineSpec, triton_cache: str) -> None:
        from vllm import LLM

        start = time.perf_counter()
        self.spec = spec
        self.triton_cache = triton_cache
        self.llm = LLM(**spec.llm_kwargs())
        # Ids of the requests ``_continuous`` adds itself.
        self.request_counter = 0
        self.startup_s = time.perf_counter() - start
        self.vocab = self.llm.llm_engine.model_config.get_vocab_size()
        self.sampler = self.llm.collective_rpc(hooks.sampler_class)[0]
        check_sampler(spec.role, self.sampler)
        self.cold_start_result = self._cold_start()

    def shutdown(self) -> None:
        """Stop the engine core and wait for it to exit, so that its GPU
        memory is free when the parent starts the next engine."""
        self.llm.llm_engine.engine_core.shutdown()

    def ready_info(self) -> dict:
        import torch
        import vllm

        return {"gpu": torch.cuda.get_device_name(), "vllm": vllm.__version__,
                "torch": torch.__version__, "startup_s": self.startup_s,
                "vocab": self.vocab, "sampler": self.sampler,
                "cold_start": self.cold_start_result}

    def _params(self, mix: str, count: int, output_len: int, **extra):
        from vllm import SamplingParams

        return [SamplingParams(**workload.sampling_kwargs(mix, i, output_len), **extra)
                for i in range(count)]

    def _generate(self, prompts, params):
        inputs = [{"prompt_token_ids": p} for p in prompts]
        return self.llm.generate(inputs, params, use_tqdm=False)

    def _cold_start(self) -> dict:
        """TTFT of the first request of each of ``COLD_START_MIXES`` on this
        fresh engine (``cold_start_first`` first, then the others in order),
        then of top-k/top-p once warm.

        One request at a time with ``max_tokens=1``: its latency is its time
        to first token (prefill and one sampling step). Every request has its
        own prompt, so none gains from the prefix cache.
        """
        first = self.spec.cold_start_first
        order = [first, *(m for m in COLD_START_MIXES if m != first)]
        mixes = order + ["topk_topp"] * WARM_REPEATS
        prompts = workload.random_prompts(len(mixes), COLD_START_PROMPT_LEN, self.vocab, seed=7)
        times, compiled = [], []
        known = compiled_kernels(self.triton_cache)
        at_start = len(known)
        for mix, prompt in zip(mixes, prompts):
            params = self._params(mix, 1, 1)
            start = time.perf_counter()
            self._generate([prompt], params)
            times.append(1e3 * (time.perf_counter() - start))
            now = compiled_kernels(self.triton_cache)
            compiled.append(sorted(now - known))
            known = now
        return {"order": order, "ttft_ms": times[:len(order)],
                "warm_ttft_ms": statistics.median(times[len(order):]),
                "compiled_at_start": at_start,
                "compiled_by_request": compiled[:len(order)]}

    def throughput(self, mix: str, prompts: list[list[int]], output_len: int,
                   wave: int, continuous: bool = False,
                   traces: list[list[int]] | None = None) -> dict:
        """Generate ``prompts`` with at most ``wave`` requests in flight; tokens per second.

        By default in waves of ``wave`` requests: every request generates
        ``output_len`` tokens, so a wave runs in lock step and behaves as an
        engine limited to ``wave`` sequences. With ``continuous``, a new
        request enters as soon as one finishes (continuous batching): where
        requests finish at different steps (speculation accepting for some
        and not others), a wave would wait for its slowest request.

        With ``traces`` (trace replay), request i replays ``traces[i]`` in
        place of ``mix`` and ``output_len``; the result then also holds the
        requests whose tokens are not their trace (``trace_mismatches``) and
        the spec-decode counters' change over the run (``spec``).
        """
        if traces is None:
            params = self._params(mix, len(prompts), output_len)
            emitted = None
        else:
            from vllm import SamplingParams

            params = [SamplingParams(**trace_replay.sampling_kwargs(t)) for t in traces]
            emitted = [[] for _ in prompts]
            spec_before = self._spec_counters()
        verified_before = self._verification_batches()
        compiled_before = compiled_kernels(self.triton_cache)
        probe_before = host_speed_probe_ms()
        steal_before = steal_seconds()
        cpu_before = host_cpu_seconds()
        start = time.perf_counter()
        if continuous:
            tokens = self._continuous(prompts, params, wave, emitted)
        else:
            tokens = 0
            for first, (wave_prompts, wave_params) in enumerate(
                    zip(workload.waves(prompts, wave), workload.waves(params, wave))):
                outputs = self._generate(wave_prompts, wave_params)
                tokens += sum(len(o.outputs[0].token_ids) for o in outputs)
                if emitted is not None:
                    emitted[first * wave:first * wave + len(outputs)] = [
                        list(o.outputs[0].token_ids) for o in outputs]
        seconds = time.perf_counter() - start
        cpu_after = host_cpu_seconds()
        host_cpu_s = {part: cpu_after[part] - cpu_before[part] for part in cpu_after}
        steal_s = steal_seconds() - steal_before
        probe_after = host_speed_probe_ms()
        verified = self._verification_batches()
        if verified is not None:
            verified = {owner: verified[owner] - verified_before[owner] for owner in verified}
        # A Triton compile inside a timed run is a stall of seconds, no rate.
        compiled = sorted(compiled_kernels(self.triton_cache) - compiled_before)
        result = {"tokens": tokens, "seconds": seconds, "tok_s": tokens / seconds,
                  "host_cpu_s": host_cpu_s, "steal_s": steal_s,
                  "probe_ms": [probe_before, probe_after], "verification_batches": verified,
                  "compiled_during_run": compiled}
        if emitted is not None:
            result["trace_mismatches"] = trace_replay.mismatches(emitted, traces)
            result["spec"] = self._spec_counters_since(spec_before)
        return result

    def _verification_batches(self) -> dict | None:
        """``hooks.verification_batches`` of the worker (outside timed spans)."""
        return self.llm.collective_rpc(hooks.verification_batches)[0]

    def _continuous(self, prompts: list[list[int]], params: list, in_flight: int,
                    emitted: list[list[int]] | None = None) -> int:
        """Run every request with ``in_flight`` of them in the engine at a
        time, as ``LLM.generate`` drives the engine; generated tokens. With
        ``emitted``, ``emitted[i]`` becomes request i's tokens."""
        engine = self.llm.llm_engine
        queue = list(enumerate(zip(prompts, params)))
        queue.reverse()
        index_of: dict[str, int] = {}
        running = tokens = 0

        def admit() -> None:
            nonlocal running
            index, (prompt, sampling) = queue.pop()
            self.request_counter += 1
            request_id = f"e2e-{self.request_counter}"
            index_of[request_id] = index
            engine.add_request(request_id, {"prompt_token_ids": prompt}, sampling)
            running += 1

        while queue and running < in_flight:
            admit()
        while running:
            for output in engine.step():
                if output.finished:
                    tokens += len(output.outputs[0].token_ids)
                    if emitted is not None:
                        emitted[index_of[output.request_id]] = list(output.outputs[0].token_ids)
                    running -= 1
                    if queue:
                        admit()
        return tokens

    def greedy_tokens(self, prompts: list[list[int]], output_len: int,
                      with_probabilities: bool = False, mix: str = "greedy") -> dict:
        """Greedy (or ``mix``'s) continuations and the speculative-decoding
        counters' change over the call; with ``with_probabilities`` also the
        raw logprob of every generated token (``token_logprobs``, one list per
        prompt) and their probabilities, flattened (``top1_probability``)."""
        before = self._spec_counters()
        extra = {"logprobs": 0} if with_probabilities else {}
        outputs = self._generate(prompts, self._params(mix, len(prompts), output_len,
                                                       **extra))
        spec = self._spec_counters_since(before)
        logprobs = [[position[token].logprob
                     for token, position in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)]
                    for o in outputs] if with_probabilities else []
        return {"tokens": [list(o.outputs[0].token_ids) for o in outputs],
                "token_logprobs": logprobs,
                "top1_probability": [math.exp(x) for row in logprobs for x in row],
                "spec": spec}

    def top2_logits(self, prompts: list[list[int]]) -> dict:
        """The top-2 raw logits of the next token after each prompt.

        One request at a time with ``max_tokens=1``: the first row the sampler
        sees after ``start_top2`` is that prompt's prefill (no drafts yet);
        None where the sampler saw no row.
        """
        rows = []
        self.llm.collective_rpc(hooks.install_timers)
        try:
            for prompt in prompts:
                self.llm.collective_rpc(hooks.start_top2)
                self._generate([prompt], self._params("greedy", 1, 1))
                seen = self.llm.collective_rpc(hooks.take_top2)[0]
                rows.append(seen[0] if seen else None)
        finally:
            self.llm.collective_rpc(hooks.remove_timers)
        return {"top2": rows}

    def breakdown(self, mix: str, prompts: list[list[int]], output_len: int,
                  wave: int, continuous: bool = False) -> dict:
        """One instrumented pass: per-step GPU, sampling and host times, the
        CUDA graph kinds the steps ran, the pass's tokens per second and its
        spec-decode counters."""
        timings = self.step_timings(mix, prompts, output_len, wave, continuous)
        return {**hooks.summarize_timings(timings), "graph_modes": timings["graph_modes"],
                "tok_s": timings["run"]["tok_s"], "spec": timings["spec"]}

    def step_timings(self, mix: str, prompts: list[list[int]], output_len: int, wave: int,
                     continuous: bool = False) -> dict:
        """One instrumented pass: ``hooks.collect_timings``, one entry per step,
        the pass's ``throughput`` (slowed by the timers) as ``"run"`` and the
        speculative-decoding counters' change over it as ``"spec"``."""
        self.llm.collective_rpc(hooks.install_timers)
        before = self._spec_counters()
        try:
            run = self.throughput(mix, prompts, output_len, wave, continuous)
            timings = self.llm.collective_rpc(hooks.collect_timings)[0]
        finally:
            self.llm.collective_rpc(hooks.remove_timers)
        return {**timings, "run": run, "spec": self._spec_counters_since(before)}

    def profile(self, mix: str, prompts: list[list[int]], output_len: int, wave: int,
                continuous: bool = False) -> dict:
        """One pass under torch.profiler: the top GPU kernels and host operators
        (``hooks.stop_profile``) and the pass's steps, to read them per step."""
        self.llm.collective_rpc(hooks.install_timers)
        self.llm.collective_rpc(hooks.start_profile)
        try:
            self.throughput(mix, prompts, output_len, wave, continuous)
        finally:
            top = self.llm.collective_rpc(hooks.stop_profile)[0]
            steps = len(self.llm.collective_rpc(hooks.collect_timings)[0]["step_gpu_ms"])
            self.llm.collective_rpc(hooks.remove_timers)
        return {"steps": steps, **top}

    def _spec_counters_since(self, before: dict) -> dict:
        """How much each of ``_spec_counters`` grew since ``before`` was read."""
        after = self._spec_counters()
        return {key: after[key] - before[key] for key in after}

    def _spec_counters(self) -> dict:
        names = {"drafts": "vllm:spec_decode_num_drafts",
                 "drafted": "vllm:spec_decode_num_draft_tokens",
                 "accepted": "vllm:spec_decode_num_accepted_tokens"}
        metrics = self.llm.get_metrics()
        return {key: sum(getattr(m, "value", 0) for m in metrics if m.name == name)
                for key, name in names.items()}
