"""The plugin's ops against vLLM 0.32's or 0.33's own code for the same job, on one GPU.

    python3 -m benchmarks upstream --out bench-results/upstream
    python3 -m benchmarks upstream --parts verify_filtered --budget-s 500 --out bench-results/verify-filtered
    TRITON_INTERPRET=1 python3 -m benchmarks upstream --device cpu --small --out /tmp/upstream
    python3 -m benchmarks.upstream --ratios bench-results/upstream/upstream.json

Issue 13: on vLLM 0.32 the plugin should replace only what it does better.
Every row runs two calls on the same tensors, each as its runtime makes it:

* ``gumbel`` (fp32, fp64), B x V float32 logits, temperature already applied,
  no top-k/top-p: ``ops.gumbel.gumbel_sample`` against upstream's
  ``Sampler._sample_random`` on that batch (its ``apply_top_k_top_p`` returns
  at once, then ``sample/gumbel.py``'s ``gumbel_sample(use_fp64=...)``).
  FP64 draws upstream's murmur3 stream on both sides (as the plugin's 0.32
  sampler does), so ``same_tokens_share`` is 1 there; FP32 noise differs.
* ``topk_topp_seeded`` (fp32, fp64), top_k=50, top_p=0.9, one seed per
  request: ``ops.topk_topp.top_k_top_p_sample`` against ``_sample_random``
  with the fused sampler off, as upstream runs batches with greedy rows or
  explicit seeds: ``apply_top_k_top_p`` (in place), then ``gumbel_sample``.
  The bench copies the logits before each upstream call (the mask would
  otherwise see its own output); that copy is timed alone in the same rounds
  and subtracted: ``upstream_us`` is net, ``upstream_gross_us`` and
  ``overhead_us`` are kept.
* ``flashinfer`` (``--flashinfer``; needs the ``flashinfer`` package): the
  batches upstream gives FlashInfer (``_sample_random`` with the fused sampler
  on) against the plugin's fused kernel (fp32). Off by default: FlashInfer
  0.7.0.post1 has no ahead-of-time sampling module, and its first call
  compiles for about two minutes.
* ``rejection`` (ngram: no draft logits; eagle: draft logits), fp32,
  temperature 1, standard mode: ``ops.rejection_sample_packed`` against
  ``spec_decode/rejection_sampler_utils.py``'s ``rejection_sample`` on the
  processed target logits (``apply_sampling_params``, which both need, is not
  timed).
* ``verify_filtered`` (``ngram+topk_topp``: no draft logits;
  ``eagle+topk_topp``: draft logits), fp32, temperature 0.8, top_k=50,
  top_p=0.9 on every request, ``rows = B * (K + 1)`` target rows of raw
  float32 logits: ``ops.rejection_sample_packed`` with the temperature and
  the filters folded in (``apply_temperature=True``, ``top_k``, ``top_p``)
  against upstream's whole verification path as ``RejectionSampler``
  runs it (0.33's ``_verify_in_chunks``): per chunk of at most 1 GiB of
  float32 rows, the FP32 canvas (``apply_sampling_params``' copy), the
  temperature kernel, ``apply_top_k_top_p``, then ``rejection_sample``.
  Here nothing is left out of the timing: the filters are the work. The row
  also says what each side allocates per call (``<side>_alloc_bytes``, every
  new tensor of a torch op during one warm call, counted by a dispatch mode;
  ``_half_v``: the same call on the first V/2 columns) and whether that
  grows with V (``<side>_alloc_scales_with_v``); ``<side>_cold_alloc_bytes``
  counts the first call with the side's kept workspaces dropped (the
  plugin's rejection tile statistics grow with V / 2048).
* ``verify_processed`` (``ngram+topk_topp+processors``): the shapes and
  upstream side of ``verify_filtered``; the plugin side is its route for a
  batch with logits processors where a request uses top-k/top-p: per
  upstream chunk, upstream's FP32 canvas and temperature kernel, then
  ``ops.rejection_sample_packed`` with top-k/top-p folded in
  (``apply_temperature=False``). The processors themselves run on that
  canvas in both engines alike and are left out of both sides, so the ratio
  is what the route saves on their top-k/top-p and rejection kernels, over
  the whole of both paths but the processors.
* ``ngram``, R histories of L tokens, n in [2, 3], k drafts:
  ``ops.ngram_propose_into`` against ``NgramGPUSpeculator.propose``, built
  from a namespace holding the four config values its constructor reads.

Timing: each side is called once first (compiles; its output feeds the row's
checks), then ``--repeats`` rounds each time upstream, then the plugin (then
the overhead), with ``triton.testing.do_bench`` (median over ``--rep-ms``,
L2 flushed before every call), so drift hits both alike. A row keeps, per
side, the median of the rounds and their min, max and spread, and ``ratio`` =
upstream / plugin (above 1: the plugin is faster). A case that fails (a
signature mismatch, an OOM) becomes a row with ``error`` and the rest run,
and the command then exits 1; once ``--budget-s`` seconds have passed the
remaining cases are skipped rows (not failures). On a vLLM line without
0.32's or 0.33's internals (0.20) the command stops before any work, in one
line. The JSON (``upstream.json``) is rewritten after every row, so a run cut
short keeps what it measured; the Markdown table is printed at the end and
written to ``upstream.md``.

``--device cpu --small`` runs everything on tiny shapes through Triton's
interpreter (``TRITON_INTERPRET=1`` in the environment): it checks every
signature and the report, not speed. ``parts_ratios`` (``--ratios FILE``)
turns a report into the ratio strings of ``integration/parts.py``'s 0.32
column.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks import report, timing
from benchmarks.harness import (
    ERROR_CHARS,
    Ratio,
    measure_interleaved,
    run_header,
)
from vllm_sampling_plugin.integration import parts
from vllm_sampling_plugin.integration.common import shapes
from vllm_sampling_plugin.integration.version import (
    LINE_SEAMS,
    installed_vllm_version,
    release_line,
)

TOP_K, TOP_P = 50, 0.9
MIN_N, MAX_N = 2, 3


@dataclasses.dataclass(frozen=True)
class Shapes:
    """The cases of one run."""

    batch_sizes: tuple[int, ...]  # rows of gumbel, topk_topp_seeded, flashinfer
    vocab_sizes: tuple[int, ...]  # gumbel
    topk_vocab_size: int  # topk_topp_seeded, flashinfer
    rejection_batch_sizes: tuple[int, ...]
    num_spec: int  # K drafts per request
    rejection_vocab_size: int
    ngram_requests: int
    ngram_length: int  # L: history width, max_model_len
    ngram_ks: tuple[int, ...]
    # verify_filtered: target rows B * (K + 1), at each K; V = rejection_vocab_size
    filtered_rows: tuple[int, ...] = (1024, 2048, 4096)
    filtered_num_specs: tuple[int, ...] = (3, 7)


FULL = Shapes(
    batch_sizes=(64, 256, 1024),
    vocab_sizes=(151936, 128256),
    topk_vocab_size=151936,
    rejection_batch_sizes=(64, 256),
    num_spec=3,
    rejection_vocab_size=151936,
    ngram_requests=256,
    ngram_length=8192,
    ngram_ks=(3, 5),
)
# What the Triton interpreter gets through in seconds per call.
SMALL = Shapes(
    batch_sizes=(4,),
    vocab_sizes=(1024,),
    topk_vocab_size=1024,
    rejection_batch_sizes=(4,),
    num_spec=3,
    rejection_vocab_size=1024,
    ngram_requests=4,
    ngram_length=256,
    ngram_ks=(3,),
    filtered_rows=(8,),
    filtered_num_specs=(3,),
)


@dataclasses.dataclass
class Pair:
    """One row: the plugin's call and upstream's, on shared tensors."""

    plugin: Callable[[], object]
    upstream: Callable[[], object]
    # Work the bench adds to the upstream call only (a copy its in-place op
    # needs here but not in the runner): timed alone, subtracted.
    overhead: Callable[[], object] | None = None
    # (plugin output, upstream output) on the host -> row fields.
    check: Callable[[object, object], dict] | None = None
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Part:
    """A job both sides do: its cases, and how to build one case's Pair.

    ``cases(shapes) -> [(variant, shape)]``; ``build(variant, shape, device)
    -> Pair``; ``skip(args) -> reason or None`` skips every case of the part;
    ``parts_name`` is its row in ``integration/parts.py``."""

    name: str
    parts_name: str
    cases: Callable[[Shapes], list[tuple[str, dict]]]
    build: Callable[[str, dict, torch.device], Pair]
    skip: Callable[[argparse.Namespace], str | None] = lambda args: None


def generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def sampler_state(num_rows: int, vocab_size: int, device: torch.device) -> SimpleNamespace:
    """B rows of float32 logits (temperature applied) and the per-request
    state the 0.32 runner holds, one request slot per row: idx_mapping int64
    (the runner's dtype on 0.32), temperature float32, seeds and pos int64,
    top_k int32, top_p float32."""
    gen = generator(device, num_rows * 7 + vocab_size)
    return SimpleNamespace(
        logits=torch.randn(num_rows, vocab_size, generator=gen, device=device) * 3,
        idx_mapping=torch.arange(num_rows, dtype=torch.int64, device=device),
        idx_mapping_np=np.arange(num_rows, dtype=np.intp),
        temperature=torch.rand(num_rows, generator=gen, device=device) + 0.5,
        seeds=torch.randint(-(2**63), 2**63 - 1, (num_rows,), generator=gen, device=device),
        pos=torch.randint(0, 1 << 16, (num_rows,), generator=gen, device=device),
        top_k=torch.full((num_rows,), TOP_K, dtype=torch.int32, device=device),
        top_p=torch.full((num_rows,), TOP_P, dtype=torch.float32, device=device),
    )


def upstream_sample_random(state: SimpleNamespace, use_fp64: bool, use_flashinfer: bool = False):
    """0.32's or 0.33's ``Sampler._sample_random`` on ``state``, called
    unbound with a namespace holding the four attributes it reads, so the draw
    is upstream's own method body. Top-k/top-p go in per row, as
    ``get_top_k_top_p`` gathers them (one slot per row here, so the state
    tensors are already that). 0.33 also takes ``has_topp_only_rows``: whether
    some row has top-p without top-k, never the case in these batches (top-k
    and top-p come together or not at all)."""
    from vllm.v1.worker.gpu.sample.sampler import Sampler

    takes_topp_only_flag = "has_topp_only_rows" in inspect.signature(Sampler._sample_random).parameters

    sampler = SimpleNamespace(
        sampling_states=SimpleNamespace(
            temperature=SimpleNamespace(gpu=state.temperature),
            seeds=SimpleNamespace(gpu=state.seeds),
        ),
        use_fp64_gumbel=use_fp64,
        use_flashinfer=use_flashinfer,
        use_xpu_sampler=False,
    )

    def call(logits: torch.Tensor, top_k, top_p) -> torch.Tensor:
        release_args = {"has_topp_only_rows": top_p is not None and top_k is None} if takes_topp_only_flag else {}
        sampled, _ = Sampler._sample_random(
            sampler,
            processed_logits=logits,
            expanded_idx_mapping=state.idx_mapping,
            idx_mapping_np=state.idx_mapping_np,
            pos=state.pos,
            top_k=top_k,
            top_p=top_p,
            use_fused_sampler=use_flashinfer,
            **release_args,
        )
        return sampled

    return call


def tokens_valid(tokens: torch.Tensor, num_rows: int, vocab_size: int) -> bool:
    return tokens.shape == (num_rows,) and bool(((tokens >= 0) & (tokens < vocab_size)).all())


def in_top_k_share(logits: torch.Tensor, tokens: torch.Tensor) -> float:
    """Share of rows whose token is among the row's TOP_K largest logits."""
    kth = logits.topk(TOP_K, dim=-1).values[:, -1]
    chosen = logits.gather(1, tokens.to(logits.device).view(-1, 1)).view(-1)
    return float((chosen >= kth).float().mean())


def token_checks(state: SimpleNamespace, top_k: bool) -> Callable[[object, object], dict]:
    num_rows, vocab_size = state.logits.shape

    def check(plugin_tokens, upstream_tokens) -> dict:
        out = {
            "plugin_tokens_valid": tokens_valid(plugin_tokens, num_rows, vocab_size),
            "upstream_tokens_valid": tokens_valid(upstream_tokens, num_rows, vocab_size),
            # 1.0 for FP64 (one noise stream); FP32 noise differs by design.
            "same_tokens_share": float(
                (plugin_tokens.view(-1) == upstream_tokens.view(-1)).float().mean()
            ),
        }
        if top_k:
            out["plugin_in_top_k"] = in_top_k_share(state.logits, plugin_tokens)
            out["upstream_in_top_k"] = in_top_k_share(state.logits, upstream_tokens)
        return out

    return check


# Gumbel-max, no top-k/top-p.


def gumbel_cases(batch_sizes: Sequence[int], vocab_sizes: Sequence[int]) -> list[tuple[str, dict]]:
    return [
        (variant, {"B": b, "V": v})
        for v in vocab_sizes
        for b in batch_sizes
        for variant in ("fp32", "fp64")
    ]


def build_gumbel(variant: str, shape: dict, device: torch.device) -> Pair:
    from vllm_sampling_plugin.integration.draw.noise import upstream_fp64_stream
    from vllm_sampling_plugin.ops.gumbel import gumbel_sample

    use_fp64 = variant == "fp64"
    state = sampler_state(shape["B"], shape["V"], device)
    upstream = upstream_sample_random(state, use_fp64)
    return Pair(
        # As the plugin's 0.32 sampler calls it (integration/draw/).
        plugin=lambda: gumbel_sample(
            state.logits,
            state.idx_mapping,
            state.temperature,
            state.seeds,
            state.pos,
            apply_temperature=False,
            use_fp64=use_fp64,
            fp64_stream=upstream_fp64_stream(),
        ),
        upstream=lambda: upstream(state.logits, None, None),
        check=token_checks(state, top_k=False),
        note="fp64: one noise stream, same tokens; fp32: other noise, same law",
    )


# top-k/top-p on the batches upstream keeps off FlashInfer.


def topk_cases(shapes: Shapes) -> list[tuple[str, dict]]:
    return [
        (variant, {"B": b, "V": shapes.topk_vocab_size})
        for b in shapes.batch_sizes
        for variant in ("fp32", "fp64")
    ]


def build_topk_topp_seeded(variant: str, shape: dict, device: torch.device) -> Pair:
    from vllm_sampling_plugin.integration.draw.noise import upstream_fp64_stream
    from vllm_sampling_plugin.ops.topk_topp import top_k_top_p_sample

    use_fp64 = variant == "fp64"
    state = sampler_state(shape["B"], shape["V"], device)
    upstream = upstream_sample_random(state, use_fp64)
    work = torch.empty_like(state.logits)
    return Pair(
        plugin=lambda: top_k_top_p_sample(
            state.logits,
            state.idx_mapping,
            state.temperature,
            state.seeds,
            state.pos,
            state.top_k,
            state.top_p,
            apply_temperature=False,
            use_fp64=use_fp64,
            fp64_stream=upstream_fp64_stream(),
        ),
        upstream=lambda: upstream(work.copy_(state.logits), state.top_k, state.top_p),
        overhead=lambda: work.copy_(state.logits),
        check=token_checks(state, top_k=True),
        note="upstream: apply_top_k_top_p + gumbel_sample, net of the logits copy; "
        "ties at the thresholds: the plugin keeps them together",
    )


def flashinfer_skip(args: argparse.Namespace) -> str | None:
    if args.device == "cpu":
        return "FlashInfer needs a CUDA GPU"
    if not args.flashinfer:
        return (
            "not asked for (--flashinfer): FlashInfer 0.7.0.post1's first sampling "
            "call compiles for about two minutes"
        )
    try:
        import flashinfer.sampling  # noqa: F401
    except Exception as exc:  # noqa: BLE001 (any import failure means no FlashInfer row)
        return f"flashinfer not importable: {type(exc).__name__}: {exc}"[:ERROR_CHARS]
    return None


def build_flashinfer(variant: str, shape: dict, device: torch.device) -> Pair:
    from vllm_sampling_plugin.ops.topk_topp import top_k_top_p_sample

    state = sampler_state(shape["B"], shape["V"], device)
    upstream = upstream_sample_random(state, use_fp64=False, use_flashinfer=True)
    return Pair(
        plugin=lambda: top_k_top_p_sample(
            state.logits,
            state.idx_mapping,
            state.temperature,
            state.seeds,
            state.pos,
            state.top_k,
            state.top_p,
            apply_temperature=False,
        ),
        upstream=lambda: upstream(state.logits, state.top_k, state.top_p),
        check=token_checks(state, top_k=True),
        note="upstream: flashinfer_sample (unseeded batches); plugin fp32 fused kernel",
    )


# Rejection sampling.


def rejection_cases(shapes: Shapes) -> list[tuple[str, dict]]:
    return [
        (variant, {"B": b, "K": shapes.num_spec, "V": shapes.rejection_vocab_size})
        for b in shapes.rejection_batch_sizes
        for variant in ("ngram", "eagle")
    ]


@dataclasses.dataclass
class _SpecBatch:
    """One verification step's inputs in the V2 runner's packed layout: B
    requests with K drafts each, request slot = batch row."""

    target: torch.Tensor  # [B * (K + 1), V] float32, raw logits
    raw_draft: torch.Tensor  # [B, K, V] float32, the draft model's raw logits
    draft_sampled: torch.Tensor  # [B * (K + 1)] int32: input_ids[logits_indices]
    idx_mapping: torch.Tensor  # [B] int64
    pos: torch.Tensor  # [B * (K + 1)] int64
    cu_num_logits: torch.Tensor  # [B + 1] int32
    cu_num_logits_np: np.ndarray  # [B + 1], the host copy the runner keeps
    expanded_idx_mapping: torch.Tensor  # [B * (K + 1)] int64
    expanded_local_pos: torch.Tensor  # [B * (K + 1)] int32
    seeds: torch.Tensor  # [B] int64


def _spec_batch(
    num_reqs: int, num_spec: int, vocab_size: int, gen, device, draft_temperature: float
) -> _SpecBatch:
    num_logits = num_reqs * (num_spec + 1)
    target = torch.randn(num_logits, vocab_size, generator=gen, device=device) * 3
    raw_draft = target.view(num_reqs, num_spec + 1, vocab_size)[:, :num_spec]
    raw_draft = raw_draft + 0.5 * torch.randn(raw_draft.shape, generator=gen, device=device)
    # Drafts drawn from the draft distribution (Gumbel-max), as Eagle draws
    # them; without draft logits (n-gram) the same ids are point masses.
    uniform = torch.rand(raw_draft.shape, generator=gen, device=device).clamp_(min=1e-20)
    drafts = (raw_draft / draft_temperature - (-uniform.log()).log()).argmax(-1)
    del uniform
    # input_ids[logits_indices]: request r's draft j sits at row r * (K + 1) + j + 1.
    draft_sampled = torch.zeros(num_reqs, num_spec + 1, dtype=torch.int32, device=device)
    draft_sampled[:, 1:] = drafts
    idx_mapping = torch.arange(num_reqs, dtype=torch.int64, device=device)
    start_pos = torch.randint(0, 1 << 14, (num_reqs, 1), generator=gen, device=device)
    cu_num_logits_np = np.arange(num_reqs + 1, dtype=np.int32) * (num_spec + 1)
    return _SpecBatch(
        target=target,
        raw_draft=raw_draft,
        draft_sampled=draft_sampled.view(-1),
        idx_mapping=idx_mapping,
        pos=(start_pos + torch.arange(num_spec + 1, device=device)).view(-1),
        cu_num_logits=torch.from_numpy(cu_num_logits_np).to(device),
        cu_num_logits_np=cu_num_logits_np,
        expanded_idx_mapping=idx_mapping.repeat_interleave(num_spec + 1),
        expanded_local_pos=torch.arange(num_spec + 1, dtype=torch.int32, device=device).repeat(
            num_reqs
        ),
        seeds=torch.randint(-(2**63), 2**63 - 1, (num_reqs,), generator=gen, device=device),
    )


def build_rejection(variant: str, shape: dict, device: torch.device) -> Pair:
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample

    from vllm_sampling_plugin.ops.rejection import rejection_sample_packed

    num_reqs, num_spec, vocab_size = shape["B"], shape["K"], shape["V"]
    gen = generator(device, num_reqs * 131 + num_spec)
    batch = _spec_batch(num_reqs, num_spec, vocab_size, gen, device, draft_temperature=1.0)
    target, draft_sampled, cu_num_logits, idx_mapping, pos, seeds = (
        batch.target, batch.draft_sampled, batch.cu_num_logits, batch.idx_mapping, batch.pos,
        batch.seeds,
    )
    expanded_idx_mapping, expanded_local_pos = batch.expanded_idx_mapping, batch.expanded_local_pos
    # Temperature 1: upstream divides its (raw) draft logits by the
    # temperature, the plugin takes them already divided; at 1 they agree.
    temperature = torch.ones(num_reqs, dtype=torch.float32, device=device)
    draft = batch.raw_draft.contiguous() if variant == "eagle" else None

    def check(plugin_out, upstream_out) -> dict:
        out = {}
        for side, (sampled, num_sampled) in (("plugin", plugin_out), ("upstream", upstream_out)):
            out[f"{side}_counts_valid"] = sampled.shape == (num_reqs, num_spec + 1) and bool(
                ((num_sampled >= 1) & (num_sampled <= num_spec + 1)).all()
            )
            out[f"{side}_mean_emitted"] = float(num_sampled.float().mean())
        return out

    return Pair(
        plugin=lambda: rejection_sample_packed(
            target,
            draft_sampled,
            cu_num_logits,
            idx_mapping=idx_mapping,
            pos=pos,
            temperature=temperature,
            seeds=seeds,
            num_speculative_steps=num_spec,
            draft_logits=draft,
        ),
        # Argument order of RejectionSampler._verify's call.
        upstream=lambda: rejection_sample(
            target,
            draft,
            draft_sampled,
            cu_num_logits,
            pos,
            idx_mapping,
            expanded_idx_mapping,
            expanded_local_pos,
            temperature,
            seeds,
            num_spec,
            None,
            use_fp64=False,
        ),
        check=check,
        note="standard (probabilistic) mode, same law; "
        + (
            "point-mass drafts (no draft logits)"
            if draft is None
            else "draft logits [B, K, V], temperature 1"
        ),
    )


# Verification with top-k/top-p folded in, against upstream's whole path.

FILTERED_TEMPERATURE = 0.8


def verify_filtered_cases(shapes: Shapes) -> list[tuple[str, dict]]:
    return [
        (variant, {"B": rows // (k + 1), "K": k, "V": shapes.rejection_vocab_size})
        for k in shapes.filtered_num_specs
        for rows in shapes.filtered_rows
        for variant in ("ngram+topk_topp", "eagle+topk_topp")
    ]


PROCESSED_VARIANT = "ngram+topk_topp+processors"


def verify_processed_cases(shapes: Shapes) -> list[tuple[str, dict]]:
    return [
        (PROCESSED_VARIANT, shape)
        for variant, shape in verify_filtered_cases(shapes)
        if variant == "ngram+topk_topp"
    ]


class AllocationCounter(TorchDispatchMode):
    """Counts every tensor a torch op allocates while active (outputs whose
    storage is none of the op's inputs'): what a call asks of the caching
    allocator, on any device. Triton kernels allocate nothing themselves."""

    def __init__(self):
        super().__init__()
        self.total = 0
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr()
            for t in pytree.tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        }
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                if storage.nbytes() and storage.data_ptr() not in inputs:
                    self.total += storage.nbytes()
                    self.largest = max(self.largest, storage.nbytes())
        return out


def allocated_bytes(call: Callable[[], object]) -> tuple[int, int]:
    """(total, largest) bytes the torch ops of one ``call()`` allocate."""
    with AllocationCounter() as counter:
        call()
    return counter.total, counter.largest


def allocation_fields(
    side: str,
    call: Callable[[], object],
    call_half_v: Callable[[], object],
    drop_workspaces: Callable[[], None],
    rows: int,
    vocab_size: int,
) -> dict:
    """What ``call`` allocates per warm call, at V and at V / 2, and on a cold
    first call (``drop_workspaces`` first), at both."""
    drop_workspaces()
    cold, _ = allocated_bytes(call)
    drop_workspaces()
    cold_half, _ = allocated_bytes(call_half_v)
    call()
    total, largest = allocated_bytes(call)
    total_half, _ = allocated_bytes(call_half_v)
    return {
        f"{side}_alloc_bytes": total,
        f"{side}_largest_alloc_bytes": largest,
        f"{side}_alloc_bytes_half_v": total_half,
        f"{side}_alloc_bytes_per_row_token": total / (rows * vocab_size),
        f"{side}_alloc_scales_with_v": total > total_half,
        f"{side}_cold_alloc_bytes": cold,
        f"{side}_cold_alloc_bytes_half_v": cold_half,
    }


def drop_plugin_workspaces() -> None:
    from vllm_sampling_plugin.ops.rejection import filters, workspace
    from vllm_sampling_plugin.ops.topk_topp import workspace as topk_topp_workspace

    filters._THRESHOLDS.clear()
    topk_topp_workspace._WORKSPACES.clear()
    workspace._WORKSPACES.clear()


def drop_upstream_workspaces() -> None:
    from vllm.v1.sample.ops import topk_topp_triton

    for name in ("_TRITON_BUFFER_CACHE", "_TRITON_TABLE_CACHE", "_TRITON_SPLIT_CACHE"):
        getattr(topk_topp_triton, name, {}).clear()


def upstream_filtered_verify(
    batch: _SpecBatch,
    # [B * (K + 1), V'] batch.target or its first V' columns
    logits: torch.Tensor,
    # None, or [B, K, V'] raw draft logits
    draft_logits: torch.Tensor | None,
    # [B] each, by request slot
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    num_spec: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's verification of one batch, step for step as 0.33's
    ``RejectionSampler._verify_in_chunks`` (``spec_decode/rejection_sampler.py``)
    runs it for requests with temperature, top-k and top-p and nothing else
    (no penalties, bias, min_p, logprobs): per chunk of at most
    ``get_max_chunk_logits(V)`` rows, ``Sampler.apply_sampling_params``'
    steps (``sample/sampler.py``: the FP32 canvas, ``apply_temperature``,
    ``apply_top_k_top_p`` on the gathered per-row values), then
    ``rejection_sample`` on the canvas. Upstream's own functions, called
    here because its Sampler needs a whole engine's state to build."""
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils import rejection_sample

    takes_topp_only_flag = "has_topp_only_rows" in inspect.signature(apply_top_k_top_p).parameters

    def verify_chunk(start: int, end: int, lo: int, hi: int):
        rows = batch.expanded_idx_mapping[lo:hi]
        canvas = tempered_canvas(logits[lo:hi], rows, temperature)
        canvas = apply_top_k_top_p(
            canvas,
            top_k[rows],
            top_p[rows],
            **({"has_topp_only_rows": False} if takes_topp_only_flag else {}),
        )
        return rejection_sample(
            canvas,
            draft_logits,
            batch.draft_sampled[lo:hi],
            batch.cu_num_logits[start : end + 1] - lo,
            batch.pos[lo:hi],
            batch.idx_mapping[start:end],
            rows,
            batch.expanded_local_pos[lo:hi],
            temperature,
            batch.seeds,
            num_spec,
            None,
            use_fp64=False,
        )

    return verify_in_chunks(verify_chunk, batch.cu_num_logits_np, logits.shape)


def tempered_canvas(
    # [rows, V] raw logits of one chunk
    logits: torch.Tensor,
    # [rows] request slot of each row
    rows: torch.Tensor,
    # [max_num_reqs]
    temperature: torch.Tensor,
) -> torch.Tensor:
    """``Sampler.apply_sampling_params``' FP32 copy of a chunk's logits with
    upstream's temperature kernel applied (what a batch with logits
    processors has before its top-k/top-p, less the processors)."""
    from vllm.v1.worker.gpu.sample.gumbel import apply_temperature

    canvas = torch.empty_like(logits, dtype=torch.float32).copy_(logits)
    apply_temperature(canvas, rows, temperature)
    return canvas


def verify_in_chunks(
    verify_chunk: Callable[[int, int, int, int], tuple[torch.Tensor, torch.Tensor]],
    cu_num_logits_np: np.ndarray,
    logits_shape: tuple[int, int],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``verify_chunk(start, end, lo, hi)`` over upstream's request chunks
    (``RejectionSampler._verify_in_chunks``: at most
    ``get_max_chunk_logits(V)`` rows each; requests ``start:end``, logits
    ``lo:hi``), outputs concatenated."""
    from vllm.v1.worker.gpu.spec_decode import rejection_sampler

    num_reqs = len(cu_num_logits_np) - 1
    max_chunk = rejection_sampler.get_max_chunk_logits(logits_shape[1])
    if logits_shape[0] <= max_chunk:
        chunks: Iterable[tuple[int, int]] = ((0, num_reqs),)
    else:
        chunks = rejection_sampler._iter_request_chunks(cu_num_logits_np, max_chunk)
    outputs = [
        verify_chunk(start, end, int(cu_num_logits_np[start]), int(cu_num_logits_np[end]))
        for start, end in chunks
    ]
    if len(outputs) == 1:
        return outputs[0]
    return torch.cat([o[0] for o in outputs]), torch.cat([o[1] for o in outputs])


def plugin_processed_verify(
    batch: _SpecBatch,
    # [B * (K + 1), V'] batch.target or its first V' columns
    logits: torch.Tensor,
    # [B] each, by request slot
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    num_spec: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The plugin's verification of a batch with logits processors where a
    request uses top-k/top-p (``PluginVerifyingRejectionSampler._verify``'s
    canvas route), less the processors: per upstream chunk, the tempered FP32
    canvas, then the plugin's kernel with top-k/top-p folded in."""
    from vllm_sampling_plugin.ops.rejection import rejection_sample_packed

    min_p_off = torch.zeros_like(temperature)

    def verify_chunk(start: int, end: int, lo: int, hi: int):
        canvas = tempered_canvas(logits[lo:hi], batch.expanded_idx_mapping[lo:hi], temperature)
        return rejection_sample_packed(
            canvas,
            batch.draft_sampled[lo:hi],
            batch.cu_num_logits[start : end + 1] - lo,
            batch.idx_mapping[start:end],
            batch.pos[lo:hi],
            temperature,
            batch.seeds,
            num_spec,
            apply_temperature=False,
            scale_draft_logits=True,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p_off,
        )

    return verify_in_chunks(verify_chunk, batch.cu_num_logits_np, logits.shape)


def build_verify_filtered(variant: str, shape: dict, device: torch.device) -> Pair:
    from vllm_sampling_plugin.ops.rejection import rejection_sample_packed

    num_reqs, num_spec, vocab_size = shape["B"], shape["K"], shape["V"]
    gen = generator(device, num_reqs * 137 + num_spec)
    num_logits = num_reqs * (num_spec + 1)
    # Raw target logits: both sides apply the temperature and the filters.
    batch = _spec_batch(
        num_reqs, num_spec, vocab_size, gen, device, draft_temperature=FILTERED_TEMPERATURE
    )
    target, raw_draft, draft_sampled, cu_num_logits, idx_mapping, pos, seeds = (
        batch.target, batch.raw_draft, batch.draft_sampled, batch.cu_num_logits,
        batch.idx_mapping, batch.pos, batch.seeds,
    )
    temperature = torch.full((num_reqs,), FILTERED_TEMPERATURE, device=device)
    top_k = torch.full((num_reqs,), TOP_K, dtype=torch.int32, device=device)
    top_p = torch.full((num_reqs,), TOP_P, dtype=torch.float32, device=device)
    eagle = variant.startswith("eagle")
    # Both take the drafter's logits before the temperature, as 0.32/0.33's
    # drafters cache them, and divide them as they read them.
    draft = raw_draft.contiguous() if eagle else None

    def plugin_call(columns: int = vocab_size):
        if variant == PROCESSED_VARIANT:
            return lambda: plugin_processed_verify(
                batch, target[:, :columns], temperature, top_k, top_p, num_spec
            )
        return lambda: rejection_sample_packed(
            target[:, :columns],
            draft_sampled,
            cu_num_logits,
            idx_mapping=idx_mapping,
            pos=pos,
            temperature=temperature,
            seeds=seeds,
            num_speculative_steps=num_spec,
            draft_logits=None if draft is None else draft[..., :columns],
            apply_temperature=True,
            scale_draft_logits=True,
            top_k=top_k,
            top_p=top_p,
        )

    def upstream_call(columns: int = vocab_size):
        return lambda: upstream_filtered_verify(
            batch,
            target[:, :columns],
            None if draft is None else draft[..., :columns],
            temperature,
            top_k,
            top_p,
            num_spec,
        )

    def in_top_k_share_of(sampled: torch.Tensor, num_sampled: torch.Tensor) -> float:
        """Share of emitted tokens among the TOP_K largest logits of the row
        that emitted them (accepted drafts and the corrected or bonus token).
        The outputs arrive as host copies; the logits stay on the device."""
        sampled, num_sampled = sampled.to(device), num_sampled.to(device)
        cols = torch.arange(num_spec + 1, device=device)
        emitted = cols[None, :] < num_sampled[:, None]
        rows = (torch.arange(num_reqs, device=device)[:, None] * (num_spec + 1) + cols)[emitted]
        tokens = sampled[emitted].long()
        kth = target[rows].topk(TOP_K, dim=-1).values[:, -1]
        return float((target[rows, tokens] >= kth).float().mean())

    def check(plugin_out, upstream_out) -> dict:
        out = {"rows": num_logits}
        for side, (sampled, num_sampled) in (("plugin", plugin_out), ("upstream", upstream_out)):
            out[f"{side}_counts_valid"] = sampled.shape == (num_reqs, num_spec + 1) and bool(
                ((num_sampled >= 1) & (num_sampled <= num_spec + 1)).all()
            )
            out[f"{side}_mean_emitted"] = float(num_sampled.float().mean())
            out[f"{side}_in_top_k"] = in_top_k_share_of(sampled, num_sampled)
        half = vocab_size // 2
        out.update(
            allocation_fields(
                "plugin", plugin_call(), plugin_call(half), drop_plugin_workspaces,
                num_logits, vocab_size,
            )
        )
        out.update(
            allocation_fields(
                "upstream", upstream_call(), upstream_call(half), drop_upstream_workspaces,
                num_logits, vocab_size,
            )
        )
        return out

    return Pair(
        plugin=plugin_call(),
        upstream=upstream_call(),
        check=check,
        note=f"rows={num_logits}, temperature {FILTERED_TEMPERATURE}, top_k={TOP_K}, "
        f"top_p={TOP_P}, raw fp32 logits; upstream: chunked FP32 canvas + temperature + "
        "apply_top_k_top_p + rejection_sample; "
        + ("plugin: chunked FP32 canvas + temperature + its kernel (the route of batches "
           "with logits processors, the processors left out of both); "
           if variant == PROCESSED_VARIANT else "")
        + ("point-mass drafts" if draft is None else "draft logits [B, K, V]"),
    )


# N-gram proposer.


def ngram_cases(shapes: Shapes) -> list[tuple[str, dict]]:
    return [
        (
            f"n={MIN_N}-{MAX_N}",
            {"R": shapes.ngram_requests, "L": shapes.ngram_length, "k": k},
        )
        for k in shapes.ngram_ks
    ]


def build_ngram(variant: str, shape: dict, device: torch.device) -> Pair:
    from vllm.v1.worker.gpu.spec_decode.ngram.speculator import NgramGPUSpeculator

    from benchmarks.ngram import make_histories
    from vllm_sampling_plugin.ops.ngram import ngram_propose_into, ngram_scratch

    num_reqs, length, k = shape["R"], shape["L"], shape["k"]
    rng = np.random.default_rng(num_reqs + length)
    tokens = make_histories(rng, num_reqs, length)
    lens = (length - rng.integers(0, min(64, length // 2), num_reqs)).astype(np.int32)
    # The runner's all_token_ids is [max_num_reqs, max_model_len] int32.
    history = torch.from_numpy(tokens).to(device)
    total_len = torch.from_numpy(lens).to(device)
    rows = torch.arange(num_reqs, device=device)
    # [max_num_reqs, 1] int64: req_states.last_sampled_tokens, the fill token.
    last_sampled = history[rows, total_len.long() - 1].long().unsqueeze(1)
    num_sampled = torch.ones(num_reqs, dtype=torch.int32, device=device)

    # The four config values NgramGPUSpeculator.__init__ reads; it allocates
    # its own scratch and drafts and picks its block size from max_model_len.
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(
            num_speculative_tokens=k, prompt_lookup_min=MIN_N, prompt_lookup_max=MAX_N
        ),
        scheduler_config=SimpleNamespace(max_num_seqs=num_reqs),
        model_config=SimpleNamespace(max_model_len=length),
    )
    req_states = SimpleNamespace(
        all_token_ids=SimpleNamespace(gpu=history), total_len=SimpleNamespace(gpu=total_len)
    )
    speculator = NgramGPUSpeculator(config, device, req_states)
    # 0.32's InputBatch.idx_mapping is int64; the plugin's op takes int32.
    batch = SimpleNamespace(num_reqs=num_reqs, idx_mapping=rows.to(torch.int64))

    drafts = torch.zeros(num_reqs, k, dtype=torch.int64, device=device)
    num_drafts = torch.zeros(num_reqs, dtype=torch.int32, device=device)
    scratch = ngram_scratch(num_reqs, device)
    idx_mapping = rows.to(torch.int32)

    def plugin():
        ngram_propose_into(
            history,
            total_len,
            idx_mapping,
            drafts,
            num_drafts,
            scratch,
            min_n=MIN_N,
            max_n=MAX_N,
            max_model_len=length,
            num_sampled=num_sampled,
            fill_tokens=last_sampled,
        )
        return drafts, num_drafts

    def upstream():
        # Only the arguments propose() reads; the rest are a model's.
        return speculator.propose(
            batch, None, None, None, None, num_sampled, None, last_sampled, None, None, None
        )

    def check(plugin_out, upstream_drafts) -> dict:
        plugin_drafts, plugin_num = plugin_out
        return {
            "rows_with_drafts_plugin": int((plugin_num > 0).sum()),
            "rows_same_drafts": int((plugin_drafts == upstream_drafts).all(dim=1).sum()),
        }

    return Pair(
        plugin=plugin,
        upstream=upstream,
        check=check,
        note="longest n first; ties: plugin earliest match, upstream rightmost, "
        "so drafts may differ (rows_same_drafts)",
    )


# In the order they run: every part at its first vocabulary before the
# Gumbel rows at the others, so that a run cut short by --budget-s (the
# first calls compile) loses the least. FlashInfer last: its first call may
# compile for minutes.
PARTS = (
    Part(
        "gumbel",
        parts.GUMBEL,
        lambda shapes: gumbel_cases(shapes.batch_sizes, shapes.vocab_sizes[:1]),
        build_gumbel,
    ),
    Part("topk_topp_seeded", parts.TOP_K_TOP_P_SEEDED, topk_cases, build_topk_topp_seeded),
    Part("rejection", parts.REJECTION, rejection_cases, build_rejection),
    Part("verify_filtered", parts.REJECTION, verify_filtered_cases, build_verify_filtered),
    Part("verify_processed", parts.REJECTION, verify_processed_cases, build_verify_filtered),
    Part("ngram", parts.NGRAM, ngram_cases, build_ngram),
    Part(
        "gumbel",
        parts.GUMBEL,
        lambda shapes: gumbel_cases(shapes.batch_sizes, shapes.vocab_sizes[1:]),
        build_gumbel,
    ),
    Part(
        "flashinfer",
        parts.TOP_K_TOP_P_FLASHINFER,
        lambda shapes: [
            ("fp32", {"B": b, "V": shapes.topk_vocab_size}) for b in shapes.batch_sizes
        ],
        build_flashinfer,
        skip=flashinfer_skip,
    ),
)
PART_NAMES = {part.name: part.parts_name for part in PARTS}
# Parts a plain run leaves out: verify_filtered's 12 cases and
# verify_processed's 6 move up to 2.5 GB of logits each (``--parts
# verify_filtered --budget-s 500``).
OPT_IN_PARTS = ("verify_filtered", "verify_processed")


# Measuring.

# A row's ``ratio``: above 1, the plugin is faster.
UPSTREAM_OVER_PLUGIN = Ratio("ratio", "upstream", "plugin")
# What identifies a row, the first columns of its table.
ROW_KEYS = ("part", "variant", "shape")


def measure(pair: Pair, timer: Callable[[Callable[[], object]], float], repeats: int) -> dict:
    """The row fields of ``pair``: ``harness.measure_interleaved``'s (per side
    ``<side>_us``, the median of the rounds, ``_min``, ``_max``,
    ``_spread_pct``, ``_samples``; upstream net of the pair's overhead;
    ``ratio``) and the checks, run on the outputs of the first (compiling)
    calls, upstream's first, so a failure names the side that failed after
    the other ran."""
    row, outputs = measure_interleaved(
        {"upstream": pair.upstream, "plugin": pair.plugin},
        timer,
        repeats,
        overhead=None if pair.overhead is None else ("upstream", pair.overhead),
        ratios=(UPSTREAM_OVER_PLUGIN,),
    )
    if pair.check is not None:
        try:
            row.update(pair.check(outputs["plugin"], outputs["upstream"]))
        except Exception as exc:  # noqa: BLE001 (a broken check must not drop the timings)
            row["check_error"] = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
    return row


def run_part(
    part: Part,
    args: argparse.Namespace,
    shapes: Shapes,
    device: torch.device,
    timer: Callable[[Callable[[], object]], float],
    deadline: float,
) -> Iterable[dict]:
    """One row per case of ``part``: measured, failed (``error``) or skipped."""
    reason = part.skip(args)
    for variant, shape in part.cases(shapes):
        row = {"part": part.name, "variant": variant, "shape": shape}
        if reason is not None:
            yield {**row, "skipped": reason}
            continue
        if time.monotonic() > deadline:
            yield {**row, "skipped": f"--budget-s {args.budget_s:g} s spent"}
            continue
        try:
            pair = part.build(variant, shape, device)
            row["note"] = pair.note
            row.update(measure(pair, timer, args.repeats))
        except Exception as exc:  # noqa: BLE001 (one part's failure must not end the run)
            row["error"] = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
            if args.traceback:
                traceback.print_exc()
        finally:
            # Free the case's tensors before the next case allocates its own.
            pair = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
        yield row


# Reports.


def markdown_table(rows: Sequence[dict]) -> str:
    """The rows as a Markdown table (``report.paired_markdown_table``)."""
    return report.paired_markdown_table(rows, ROW_KEYS, ("plugin", "upstream"), "upstream/plugin")


def _span(values: Sequence) -> str:
    low, high = min(values), max(values)
    return f"{low}" if low == high else f"{low}-{high}"


def parts_ratios(data: dict) -> dict[str, str]:
    """``{integration/parts.py part name: ratio string}`` from a report, for
    the parts' 0.32 ratio cells. Per variant: the range of upstream/plugin
    over the measured shapes and the shapes, e.g. ``"upstream/plugin: fp32
    1.10-1.31x, fp64 0.97-1.02x at B=64-1024, V=128256-151936 (bench
    upstream, NVIDIA H100 80GB HBM3)"``. Parts without a measured row are
    left out."""
    measured: dict[str, dict[str, list[dict]]] = {}
    for row in data["results"]:
        if "ratio" in row:
            variants = measured.setdefault(PART_NAMES[row["part"]], {})
            variants.setdefault(row["variant"], []).append(row)
    out = {}
    for name, variants in measured.items():
        cells = []
        for variant, rows in variants.items():
            ratios = [row["ratio"] for row in rows]
            low, high = min(ratios), max(ratios)
            cells.append(
                f"{variant} {low:.2f}x"
                if f"{low:.2f}" == f"{high:.2f}"
                else f"{variant} {low:.2f}-{high:.2f}x"
            )
        shapes = [row["shape"] for rows in variants.values() for row in rows]
        keys = {key: _span(sorted({s[key] for s in shapes})) for key in shapes[0]}
        where = ", ".join(f"{key}={span}" for key, span in keys.items())
        out[name] = (
            f"upstream/plugin: {', '.join(cells)} at {where} (bench upstream, {data['gpu']})"
        )
    return out


def record_ratios(data: dict, path: Path | None = None) -> None:
    """Write a report's ratios into data/measurements.json under its vLLM
    line, where ``vllm-sampling-plugin info`` and docs/compatibility.md read them."""
    from benchmarks import measurements

    run = f" (bench upstream, {data['gpu']})"
    source = f"bench upstream, {data['gpu']}, vLLM {data['vllm']}"
    for name, text in parts_ratios(data).items():
        measurements.record(
            data["vllm_line"], name, text.removesuffix(run), source, path or measurements.PATH
        )


def installed(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def require_upstream_line(vllm_version: str | None) -> None:
    """Exit with one line, before any work, unless the installed vLLM has the
    0.32/0.33 internals the upstream side of every row calls."""
    # Those internals come with the verify-step shape of the rejection seam.
    measured_shapes = LINE_SEAMS.get(release_line(vllm_version), {})
    if measured_shapes.get(shapes.REJECTION) == shapes.VERIFY_STEP_OVER_UPSTREAM:
        return
    found = f"vLLM {vllm_version} is installed" if vllm_version else "vLLM is not installed"
    raise SystemExit(
        f"bench upstream times the plugin against vLLM 0.32's and 0.33's own kernels, but "
        f"{found}: install vLLM 0.32 or 0.33 "
        "(ci/constraints-0.32.txt), or on 0.20 run `python3 -m benchmarks sampler` "
        "(or topk_topp, rejection, ngram), which time stock vLLM 0.20"
    )


def prepare_cpu() -> None:
    """Let vLLM's Triton kernels run on CPU tensors in the interpreter
    (``--device cpu``: a check of the plumbing, never a timing).

    * Without an active GPU driver vLLM's ``triton_utils`` swaps Triton for
      a placeholder, unless ``CUDA_VISIBLE_DEVICES`` is empty (its lenient
      check for distributed start-up), which on a CPU machine changes
      nothing else.
    * ``apply_top_k_top_p``'s Triton kernel strides rows with ``tl.range``,
      whose index the interpreter hands over as a Python int (no ``.to``):
      on the CPU upstream's sort-based PyTorch mask stands in (same call,
      same arguments; the GPU runs the Triton kernel).
    * The interpreter has no libdevice (its functions return None); the
      rejection resample kernel's one call, ``log1p``, gets ``log(1 + x)``.
    * Triton 3.9's interpreter backs a scalar ``a & b`` of comparisons with
      int32 data and then refuses it in a load mask (docs/compatibility.md),
      which both n-gram finalize kernels have: masks are made bool first.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit(
            "--device cpu runs the kernels in Triton's interpreter: set "
            "TRITON_INTERPRET=1 in the environment before starting Python"
        )
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from vllm.triton_utils import HAS_TRITON

    if not HAS_TRITON:
        raise SystemExit(
            "vLLM's triton_utils chose its placeholder (it was imported before "
            "CUDA_VISIBLE_DEVICES was emptied): vLLM's kernels cannot run here"
        )
    import triton.language as tl
    from triton.language.extra import libdevice
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle
    from vllm.v1.sample.ops import topk_topp_sampler

    topk_topp_sampler.HAS_TRITON = False
    libdevice.log1p = lambda x: tl.log(x + 1.0)
    masked_load = InterpreterBuilder.create_masked_load

    def create_masked_load(self, ptrs, mask, *rest):
        mask = TensorHandle(mask.data.astype(bool), tl.int1)
        return masked_load(self, ptrs, mask, *rest)

    InterpreterBuilder.create_masked_load = create_masked_load


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m benchmarks upstream",
        description=__doc__.split("\n")[0] + " Needs vLLM 0.32 or 0.33 "
        "(ci/constraints-0.32.txt) on either device; it stops in one line on any other.",
    )
    p.add_argument("--out", default="bench-results/upstream", help="output directory")
    p.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda",
        help="cuda (default): time both sides on a GPU; cpu: check every call and the report "
        "in Triton's interpreter (TRITON_INTERPRET=1 set before Python starts), not speed",
    )
    p.add_argument("--small", action="store_true", help="tiny shapes (for --device cpu)")
    p.add_argument(
        "--parts",
        nargs="+",
        choices=list(PART_NAMES),
        default=[name for name in PART_NAMES if name not in OPT_IN_PARTS],
        help=f"default: all but {', '.join(OPT_IN_PARTS)} (ask for those by name)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="interleaved rounds per case (default 5 on cuda, 2 on cpu)",
    )
    p.add_argument("--rep-ms", type=int, default=25, help="do_bench measuring time per round")
    p.add_argument("--warmup-ms", type=int, default=10, help="do_bench warm-up per round")
    p.add_argument(
        "--budget-s",
        type=float,
        default=80.0,
        help="skip the cases left once this many seconds have passed",
    )
    p.add_argument(
        "--flashinfer",
        action="store_true",
        help="also time FlashInfer's batches (its first call compiles for minutes)",
    )
    p.add_argument("--traceback", action="store_true", help="print the traceback of errors")
    p.add_argument(
        "--ratios",
        metavar="FILE",
        type=report.read_json_argument,
        help="print the parts.py ratio strings of a report and exit",
    )
    p.add_argument(
        "--record",
        action="store_true",
        help="write the ratios (of this run, or of --ratios FILE) into the "
        "package's data/measurements.json, which info reads",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    start = time.monotonic()
    args = parser().parse_args(argv)
    if args.ratios:
        for name, text in parts_ratios(args.ratios).items():
            print(f"{name}: {text}")
        if args.record:
            record_ratios(args.ratios)
        return 0
    vllm_version = installed_vllm_version()
    require_upstream_line(vllm_version)
    if args.device == "cpu":
        prepare_cpu()
    elif not torch.cuda.is_available():
        raise SystemExit(
            "bench upstream needs a CUDA GPU and torch sees none: run it on a machine "
            "with an NVIDIA GPU (--device cpu --small checks the plumbing, not speed)"
        )
    device = torch.device(args.device)
    if args.repeats is None:
        args.repeats = 5 if args.device == "cuda" else 2
    shapes = SMALL if args.small else FULL
    if args.device == "cuda":

        def timer(call):
            return timing.median_us(call, args.rep_ms, args.warmup_ms)
    else:
        timer = timing.one_call_us

    header = run_header(
        "upstream",
        vllm=vllm_version,
        vllm_line=release_line(vllm_version),
        flashinfer=installed("flashinfer-python"),
        device=args.device,
        repeats=args.repeats,
        rep_ms=args.rep_ms,
        warmup_ms=args.warmup_ms,
        shapes=dataclasses.asdict(shapes),
        top_k=TOP_K,
        top_p=TOP_P,
        ngram_n=[MIN_N, MAX_N],
    )
    print(
        f"{header['gpu']}, vLLM {vllm_version}, torch {header['torch']}, "
        f"triton {header['triton']}; {args.repeats} rounds per case"
    )
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "upstream.json")
    rows: list[dict] = []
    deadline = start + args.budget_s
    for part in PARTS:
        if part.name not in args.parts:
            continue
        for row in run_part(part, args, shapes, device, timer, deadline):
            rows.append(row)
            report.write_json(
                path, {**header, "elapsed_s": time.monotonic() - start, "results": rows}
            )
            outcome = row.get("error") or row.get("skipped") or f"{row['ratio']:.2f}x"
            print(f"{part.name} {row['variant']} {report.key_text(row['shape'])}: {outcome}",
                  flush=True)
    table = (
        f"{header['gpu']}, vLLM {vllm_version}, torch {header['torch']}, triton "
        f"{header['triton']}; median us of {args.repeats} interleaved rounds "
        "(spread: (max - min) / median)\n\n" + markdown_table(rows)
    )
    print(f"\n{table}")
    with open(os.path.join(args.out, "upstream.md"), "w") as f:
        f.write(table + "\n")
    if args.record:
        with open(path) as f:
            record_ratios(json.load(f))
    failed = sum("error" in row for row in rows)
    print(
        f"\nwrote {path} and upstream.md ({len(rows)} rows, {failed} failed) in "
        f"{time.monotonic() - start:.0f} s"
    )
    if failed:
        print(
            f"bench upstream: {failed} of {len(rows)} rows failed (their ERROR notes above; "
            "--traceback prints where)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
