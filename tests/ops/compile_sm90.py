"""Compile every launched Triton kernel of ``vllm_sampling_plugin.ops`` for an
H100 (sm_90) on a machine without a GPU.

The CPU tests run the kernels through Triton's interpreter, which accepts
code the GPU compiler rejects: a module global that is not a
``tl.constexpr``, type errors it does not check, GPU-only branches (such as
``libdevice`` calls) that it never takes. This module is the body of a subprocess
started by ``tests/ops/test_compile_sm90.py`` *without* ``TRITON_INTERPRET``:

    python -m tests.ops.compile_sm90 RESULT.json [CASE ...]

Each case calls a public launcher (``gumbel_sample``, ``top_k_top_p_sample``,
``rejection_sample_packed``, ``accept_matching_drafts``,
``ngram_propose[_into]``, ``apply_logit_bias_``) on small CPU tensors.
A stand-in driver names an sm_90 target, and ``kernel[grid](...)`` goes
through Triton's own warm-up path: the launcher's real arguments pass through
Triton's binder (signature, constexprs, the specialisation of integers equal
to 1 and of 16-byte aligned pointers, ``num_warps``, ``num_stages``) and are
compiled with Triton's bundled ptxas down to a cubin, but nothing is launched.
So the constexpr values and signatures compiled here are the launchers' own
and follow them when they change.

RESULT.json holds ``{"skip": reason}`` when this Triton cannot compile for
sm_90 here, else ``{"launched": [...], "cases": {case: {"error": str | None,
"launched": [...], "compiled": [...], "seconds": float}}}``; the top-level
``launched`` lists every kernel some launcher in ``ops/`` starts
(``kernel[grid](...)`` in its source), a case's ``launched`` the kernels it
started.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import pkgutil
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Self

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction

from tests.ops.covering import pairwise_cover
import vllm_sampling_plugin.ops as ops_package
from vllm_sampling_plugin.ops import checks
from vllm_sampling_plugin.ops.topk_topp import DEFAULT_TUNING

H100 = GPUTarget("cuda", 90, 32)
# A production vocabulary (Qwen2/3): it selects the launch shapes a real run
# compiles (full tiles, several chunks and blocks, the stage-2 reductions).
VOCAB = 151936
# The largest vocabulary of the one-chunk top-k/top-p shape, whose code differs.
SMALL_VOCAB = DEFAULT_TUNING.short_list
NUM_SPEC_STEPS = 3
# Rows of VOCAB whose launch exceeds DEFAULT_TUNING.fused_max_programs: the
# top-k/top-p rows are merged by the second kernel.
TOPK_SPLIT_ROWS = 8
H100_NUM_SMS = 132
# Batches that select the two rejection launch styles (single launch, step by step).
REJECTION_BATCHES = (2, 256)
# The case that must fail to compile (see _plain_global_kernel).
SELF_CHECK = "self_check:plain_global"

# Read by _plain_global_kernel: a plain float, not a tl.constexpr. The
# interpreter reads it; the compiler must refuse it (the self-check case).
_PLAIN_GLOBAL = 0.5


@triton.jit
def _plain_global_kernel(out_ptr):
    tl.store(out_ptr, _PLAIN_GLOBAL)


class _Sm90Driver:
    """Just enough of a driver for Triton to compile (not load) for sm_90."""

    def get_current_target(self) -> GPUTarget:
        return H100

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


class _CompileOnly:
    """Makes ``kernel[grid](*args, **kwargs)`` compile instead of launch,
    and records what it compiled."""

    def __init__(self) -> None:
        # Every kernel launched, including one whose compilation fails.
        self.launched: list[str] = []
        self.compiled: list[dict] = []

    def __enter__(self) -> Self:
        self._getitem = JITFunction.__getitem__

        def compile_only(kernel: JITFunction, grid):
            def launch(*args, **kwargs):
                self.launched.append(_kernel_name(kernel))
                compiled = kernel.run(*args, grid=grid, warmup=True, **kwargs)
                self.compiled.append(_describe(kernel, kwargs, compiled))
                return compiled

            return launch

        JITFunction.__getitem__ = compile_only
        return self

    def __exit__(self, *exc) -> None:
        JITFunction.__getitem__ = self._getitem


def _kernel_name(kernel: JITFunction) -> str:
    return f"{kernel.fn.__module__}.{kernel.fn.__name__}"


def _describe(kernel: JITFunction, kwargs: dict, compiled) -> dict:
    params = {p.name for p in kernel.params}
    return {
        "kernel": _kernel_name(kernel),
        # The constexprs the launcher names; those Triton derives from
        # positional arguments (None pointers, strides of 1) show in the
        # signature as "constexpr".
        "constexprs": {k: v for k, v in kwargs.items() if k in params},
        "signature": dict(compiled.src.signature),
        "num_warps": compiled.metadata.num_warps,
        "num_stages": compiled.metadata.num_stages,
        "shared": compiled.metadata.shared,
        "target": f"{compiled.metadata.target.backend}:{compiled.metadata.target.arch}",
        "cubin_bytes": len(compiled.asm.get("cubin", b"")),
    }


def launched_kernels() -> list[str]:
    """Every ``@triton.jit`` kernel that a module of ``ops/`` (or of its subpackages) launches."""
    names = set()
    prefix = f"{ops_package.__name__}."
    for info in pkgutil.walk_packages(ops_package.__path__, prefix):
        module = importlib.import_module(info.name)
        source = inspect.getsource(module)
        for launched in re.findall(r"\b(\w+)\[[^\[\]]*\]\(", source):
            kernel = getattr(module, launched, None)
            if isinstance(kernel, JITFunction):
                names.add(_kernel_name(kernel))
    return sorted(names)


# ---------------------------------------------------------------------------
# Cases: one launcher call each, over a pairwise cover of the constexpr switches it exposes.
# ---------------------------------------------------------------------------


def _request_state(num_tokens: int, num_slots: int):
    idx_mapping = torch.arange(num_tokens, dtype=torch.int32)
    temperature = torch.full((num_slots,), 0.7)
    seeds = torch.arange(num_slots, dtype=torch.int64)
    pos = torch.arange(num_tokens, dtype=torch.int64)
    return idx_mapping, temperature, seeds, pos


def _noise(noise: str) -> dict:
    """``use_fp64``, ``fp64_stream`` and ``fp32_stream`` of a launch:
    ``noise`` is "<precision>_<stream>", as in ``NOISE_CODES``."""
    precision, stream = noise.split("_")
    if precision == "fp64":
        return dict(use_fp64=True, fp64_stream=stream)
    return dict(use_fp64=False, fp32_stream=stream)


# Every value of the kernels' NOISE constexpr (ops/random.py).
NOISE_CODES = ("fp32_philox", "fp32_murmur3", "fp64_philox", "fp64_murmur3")


def _gumbel(*, apply_temperature: bool, noise: str, processed_logits_out: bool) -> None:
    from vllm_sampling_plugin.ops.gumbel import gumbel_sample

    logits = torch.randn(2, VOCAB)
    gumbel_sample(
        logits,
        *_request_state(2, 4),
        apply_temperature=apply_temperature,
        **_noise(noise),
        processed_logits_out=torch.empty(4, VOCAB) if processed_logits_out else None,
    )


def _top_k_top_p(*, vocab: int, rows: int, apply_temperature: bool, noise: str) -> None:
    from vllm_sampling_plugin.ops.topk_topp import top_k_top_p_sample

    idx_mapping, temperature, seeds, pos = _request_state(rows, rows)
    top_k = torch.full((rows,), 50, dtype=torch.int32)
    top_p = torch.full((rows,), 0.9)
    top_k_top_p_sample(
        torch.randn(rows, vocab),
        idx_mapping,
        temperature,
        seeds,
        pos,
        top_k,
        top_p,
        apply_temperature=apply_temperature,
        **_noise(noise),
    )


def _rejection(
    *,
    num_reqs: int,
    synthetic: bool,
    draft_logits: bool,
    use_fp64: bool,
    apply_temperature: bool,
    filters: str = "",
) -> None:
    from unittest import mock

    from vllm_sampling_plugin.ops.rejection import launcher as rejection_kernel

    # Requests with NUM_SPEC_STEPS drafts and a bonus position each, laid out
    # as the V2 runner packs them. The launch plan follows the batch and the
    # SM count as on an H100: 2 requests take the single launch
    # (_rejection_kernel), 256 the step-by-step launches and _emit_kernel.
    # Nothing runs, so the logits stay uninitialised.
    max_num_reqs = num_reqs + 2
    num_logits = num_reqs * (NUM_SPEC_STEPS + 1)
    idx_mapping, temperature, seeds, _ = _request_state(num_reqs, max_num_reqs)
    # The folded top-k/top-p/min_p: one threshold launch per set of filters on.
    filter_values = {
        "top_k": torch.full((max_num_reqs,), 50, dtype=torch.int32),
        "top_p": torch.full((max_num_reqs,), 0.9),
        "min_p": torch.full((max_num_reqs,), 0.05),
    }
    with mock.patch.object(rejection_kernel, "num_sms", lambda device: H100_NUM_SMS):
        rejection_kernel.rejection_sample_packed(
            torch.empty(num_logits, VOCAB),
            torch.randint(0, VOCAB, (num_logits,)),
            torch.arange(0, num_logits + 1, NUM_SPEC_STEPS + 1, dtype=torch.int32),
            idx_mapping,
            torch.arange(num_logits, dtype=torch.int64),
            temperature,
            seeds,
            NUM_SPEC_STEPS,
            torch.empty(max_num_reqs, NUM_SPEC_STEPS, VOCAB) if draft_logits else None,
            torch.full((NUM_SPEC_STEPS,), 0.8) if synthetic else None,
            use_fp64=use_fp64,
            apply_temperature=apply_temperature,
            **{name: filter_values[name] for name in filters.split("+") if name},
        )


def _matching(*, num_reqs: int) -> None:
    from vllm_sampling_plugin.ops.rejection import accept_matching_drafts

    # The sampler's int64 draws against the runner's int32 input_ids.
    num_logits = num_reqs * (NUM_SPEC_STEPS + 1)
    accept_matching_drafts(
        torch.randint(0, VOCAB, (num_logits,)),
        torch.randint(0, VOCAB, (num_logits,), dtype=torch.int32),
        torch.arange(0, num_logits + 1, NUM_SPEC_STEPS + 1, dtype=torch.int32),
        NUM_SPEC_STEPS,
    )


def _ngram_propose(*, min_n: int, max_n: int) -> None:
    from vllm_sampling_plugin.ops.ngram import ngram_propose

    token_ids = torch.randint(0, 50, (2, 300))
    ngram_propose(token_ids, torch.tensor([300, 120]), min_n=min_n, max_n=max_n, k=3)


def _ngram_propose_into(*, num_sampled: bool, fill_tokens: bool) -> None:
    from vllm_sampling_plugin.ops.ngram import ngram_propose_into, ngram_scratch

    # The runner's persistent buffers: int32 history and lengths, and vLLM's
    # default prompt_lookup_min = prompt_lookup_max = 5.
    max_num_reqs, num_reqs, k = 4, 2, 3
    ngram_propose_into(
        torch.randint(0, 50, (max_num_reqs, 2048), dtype=torch.int32),
        torch.full((max_num_reqs,), 1500, dtype=torch.int32),
        torch.arange(num_reqs, dtype=torch.int32),
        torch.empty(max_num_reqs, k, dtype=torch.int64),
        torch.empty(max_num_reqs, dtype=torch.int32),
        ngram_scratch(max_num_reqs, "cpu"),
        min_n=5,
        max_n=5,
        max_model_len=4096,
        num_sampled=torch.ones(num_reqs, dtype=torch.int32) if num_sampled else None,
        fill_tokens=torch.zeros(max_num_reqs, 1, dtype=torch.int64) if fill_tokens else None,
    )


def _count_packed_matches(*, index_dtype: torch.dtype) -> None:
    from vllm_sampling_plugin.ops.ngram import count_packed_matches_

    # Upstream's proposer at max_model_len 4096: 16 blocks of 256; vLLM's
    # idx_mapping is int64 on 0.33, int32 on 0.20; total_len int32.
    max_num_reqs, num_reqs = 4, 2
    count_packed_matches_(
        torch.empty(max_num_reqs, dtype=torch.int32),
        torch.zeros(max_num_reqs, 16, dtype=torch.int64),
        torch.arange(num_reqs, dtype=index_dtype),
        torch.full((max_num_reqs,), 100, dtype=torch.int32),
        max_len=4096,
        k=3,
    )


def _logit_bias() -> None:
    from vllm_sampling_plugin.ops.logit_bias import apply_logit_bias_

    # vLLM 0.20's per-request tables: 1024 allowed ids, 1024 biases, 128 stop
    # ids; positions are the runner's int64.
    max_num_reqs, num_tokens = 4, 6

    def table(capacity, dtype=torch.int32):
        return torch.zeros(max_num_reqs, capacity, dtype=dtype)

    counts = [torch.ones(max_num_reqs, dtype=torch.int32) for _ in range(4)]
    apply_logit_bias_(
        torch.empty(num_tokens, VOCAB),
        torch.zeros(num_tokens, dtype=torch.int32),
        torch.zeros(num_tokens, dtype=torch.int64),
        counts[0], table(1024), counts[1], table(1024), table(1024, torch.float32),
        counts[2], counts[3], table(128),
    )


def _plain_global() -> None:
    _plain_global_kernel[(1,)](torch.empty(1))


def _variants(family: str, launch: Callable[..., None], **axes: tuple) -> Iterator:
    """(name, call) for the combinations of the keyword values in ``axes``
    that meet every value and every pair of values (``pairwise_cover``).

    A compile failure that needs one constexpr value, or two together, shows
    in some case; three or more together only in the two extremes (all-last
    turns every optional feature on: the most registers and shared memory).
    The full product was 109 compilations, minutes of CPU CI."""
    for values in pairwise_cover(*axes.values()):
        kwargs = dict(zip(axes, values))
        flags = ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in kwargs.items())
        yield f"{family}:{flags}", functools.partial(launch, **kwargs)


def _cases() -> Iterator[tuple[str, Callable[[], None]]]:
    on_off = (False, True)
    yield from _variants(
        "gumbel", _gumbel, apply_temperature=on_off, noise=NOISE_CODES,
        processed_logits_out=on_off,
    )
    # 2 rows merge in the chunk kernel, 8 in the merge kernel (TOPK_SPLIT_ROWS).
    yield from _variants(
        "topk_topp",
        _top_k_top_p,
        vocab=(VOCAB,),
        rows=(2, TOPK_SPLIT_ROWS),
        apply_temperature=on_off,
        noise=NOISE_CODES,
    )
    yield from _variants(
        "topk_topp",
        _top_k_top_p,
        vocab=(SMALL_VOCAB,),
        rows=(2,),
        apply_temperature=(False,),
        noise=("fp32_philox", "fp32_murmur3"),
    )
    yield from _variants(
        "rejection",
        _rejection,
        num_reqs=REJECTION_BATCHES,
        synthetic=on_off,
        draft_logits=on_off,
        use_fp64=on_off,
        apply_temperature=on_off,
    )
    # The folded filters: each alone and all three, in both launch styles.
    yield from _variants(
        "rejection_filtered",
        _rejection,
        num_reqs=REJECTION_BATCHES,
        synthetic=(False,),
        draft_logits=on_off,
        use_fp64=(False,),
        apply_temperature=on_off,
        filters=("top_k", "top_p", "min_p", "top_k+top_p+min_p"),
    )
    yield from _variants("rejection_matching", _matching, num_reqs=(2,))
    # vLLM's default n, and a range from 1. The match loop is unrolled MAX_N
    # times; the launcher's limit, NGRAM_MAX_N = 256, takes minutes to compile
    # here, with no code path that 16 lacks.
    yield from _variants("ngram_propose", _ngram_propose, min_n=(5,), max_n=(5,))
    yield from _variants("ngram_propose", _ngram_propose, min_n=(1,), max_n=(16,))
    yield from _variants(
        "ngram_propose_into", _ngram_propose_into, num_sampled=on_off, fill_tokens=on_off
    )
    yield from _variants(
        "count_packed_matches", _count_packed_matches, index_dtype=(torch.int32, torch.int64)
    )
    yield "logit_bias", _logit_bias
    # Must fail: proves this harness catches what the interpreter lets through.
    yield SELF_CHECK, _plain_global


CASES: dict[str, Callable[[], None]] = dict(_cases())


def _skip_reason() -> str | None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return "TRITON_INTERPRET is set: kernels would be interpreted, not compiled"
    if triton.knobs.compilation.allow_non_constexpr_globals:
        return "TRITON_ALLOW_NON_CONSTEXPR_GLOBALS is set"
    try:
        from triton.backends.nvidia.compiler import get_ptxas_version

        get_ptxas_version(H100.arch)
    except Exception as error:  # noqa: BLE001 - any failure means "cannot compile here"
        return f"Triton {triton.__version__} has no usable ptxas for sm_90: {error}"
    return None


def main(argv: list[str]) -> int:
    out_path, names = argv[0], argv[1:] or list(CASES)
    reason = _skip_reason()
    if reason is not None:
        with open(out_path, "w") as f:
            json.dump({"skip": reason}, f)
        return 0
    driver.set_active(_Sm90Driver())
    # The public ops refuse CPU tensors when their kernels are not the
    # interpreter's (ops/checks.py); here CPU tensors stand in for the GPU's
    # on purpose: the kernels are compiled for sm_90, nothing is launched.
    checks.KERNELS_INTERPRETED = True
    torch.manual_seed(0)
    results = {}
    for name in names:
        start = time.perf_counter()
        with _CompileOnly() as recorder:
            try:
                CASES[name]()
                error = None
            except Exception as exc:  # noqa: BLE001 - reported per case by the test
                error = "".join(traceback.format_exception(exc))
        results[name] = {
            "error": error,
            "launched": recorder.launched,
            "compiled": recorder.compiled,
            "seconds": round(time.perf_counter() - start, 2),
        }
    with open(out_path, "w") as f:
        json.dump({"launched": launched_kernels(), "cases": results}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
