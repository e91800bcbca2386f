"""Run Python snippets in fresh interpreters, as vLLM's own processes would."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from tests import fresh_interpreter

REPO_ROOT = Path(__file__).resolve().parents[2]

# vLLM's start-up chatter is irrelevant to these checks; errors still show.
QUIET_ENV = {"VLLM_LOGGING_LEVEL": "ERROR", "TOKENIZERS_PARALLELISM": "false"}


def run_python(
    code: str, env: dict[str, str | None] | None = None, timeout: int = 300, prelude: str = ""
) -> str:
    """Run ``prelude`` then ``code`` (dedented) in a new interpreter; return
    stdout, fail with its stderr. ``env`` adds to this process's environment;
    a ``None`` value removes that variable."""
    merged = {**os.environ, **QUIET_ENV, **(env or {})}
    full_env = {name: value for name, value in merged.items() if value is not None}
    proc = fresh_interpreter.run(
        ["-c", prelude + textwrap.dedent(code)], env=full_env, cwd=REPO_ROOT, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
        )
    return proc.stdout


# Without a GPU, vLLM resolves no platform and cannot infer a device type,
# which argument parsing needs (DeviceConfig defaults). Naming the CPU device
# type lets the real parser run; nothing else about the platform changes.
CPU_DEVICE_SHIM = (
    "import vllm.platforms.interface as _platform\n"
    "_platform.UnspecifiedPlatform.device_type = 'cpu'\n"
)


# The newer lines (0.32, 0.33) on the CPU: builds upstream's Sampler, which
# is the plugin's subclass once the plugin is loaded, with the keyword
# arguments of GPUModelRunner.load_model (model_runner.py:471-483 in 0.32.0,
# 481-495 in 0.33.0). Without pinned memory, vLLM's buffers fall back to
# plain tensors. Goes after CPU_DEVICE_SHIM in a snippet's prelude.
UPSTREAM_SAMPLER_BUILDER = """
import numpy as np
import torch
import vllm.v1.worker.gpu.buffer_utils as buffer_utils
buffer_utils.is_uva_available = lambda: False
buffer_utils.is_pin_memory_available = lambda: False
from vllm.plugins import load_general_plugins
load_general_plugins()
import vllm.v1.worker.gpu.model_runner as mr
from vllm.config import VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.worker.gpu.states import RequestState

VOCAB, MAX_REQS = 64, 8
CPU = torch.device("cpu")

def build_sampler(**overrides):
    vllm_config = VllmConfig()
    req_states = RequestState(
        max_num_reqs=MAX_REQS, max_model_len=128, max_num_batched_tokens=128,
        num_speculative_steps=0, vocab_size=VOCAB, device=CPU,
    )
    kwargs = dict(
        vllm_config=vllm_config, max_num_reqs=MAX_REQS, vocab_size=VOCAB,
        device=CPU, req_states=req_states, logprobs_mode="raw_logprobs",
        num_speculative_tokens=1, use_fp64_gumbel=False,
        enable_trace_replay=False, return_sampling_mask=False,
        custom_logits_processors=(),
    )
    kwargs.update(overrides)
    return mr.Sampler(**kwargs)

LOGITS = torch.randn(MAX_REQS, VOCAB, generator=torch.Generator().manual_seed(0))
"""

# VLLM_USE_FLASHINFER_SAMPLER on the newer lines, as the 0.20 line's
# tri-state: its value (None: unset), whether upstream's FlashInfer keeps the
# seedless top-k/top-p batches, and words of the plugin's one log line.
FLASHINFER_DECISIONS = [
    (None, False, "FlashInfer would take are the plugin's fused kernel's"),
    ("1", True, "FlashInfer batches stay upstream's"),
    ("0", False, "FlashInfer is off"),
]
FLASHINFER_DECISION_IDS = ["unset", "1", "0"]


def flashinfer_decision_prelude(env_value: str | None) -> str:
    """Prelude code, after UPSTREAM_SAMPLER_BUILDER, for a sampler built
    with VLLM_USE_FLASHINFER_SAMPLER at ``env_value``: upstream's support
    check stands in for a GPU it supports (on unless ``0``), and
    ``decision_line()`` gives the plugin's one log line about FlashInfer."""
    return f"""
import logging
import os
from vllm import envs
import vllm.v1.worker.gpu.sample.sampler as upstream
upstream.flashinfer_sampler_supported = lambda: envs.VLLM_USE_FLASHINFER_SAMPLER
os.environ.pop("VLLM_USE_FLASHINFER_SAMPLER", None)
if {env_value!r} is not None:
    os.environ["VLLM_USE_FLASHINFER_SAMPLER"] = {env_value!r}

PLUGIN_NOTES = []
class _KeepNotes(logging.Handler):
    def emit(self, record):
        PLUGIN_NOTES.append(record.getMessage())
_plugin_logger = logging.getLogger("vllm.vllm_sampling_plugin")
_plugin_logger.addHandler(_KeepNotes())
_plugin_logger.setLevel(logging.INFO)  # the tests' environment quiets vLLM

def decision_line():
    (line,) = [n for n in PLUGIN_NOTES if n.startswith("vllm-sampling-plugin sampler:")]
    return line
"""


def registered_as(release: str) -> str:
    """A snippet's prelude: the plugin registers (vLLM's general plugins
    load) as if vLLM ``release`` were installed, and ``records`` keeps every
    record the plugin's logger emits, at any level."""
    return textwrap.dedent(f"""
        import logging
        import vllm_sampling_plugin.integration.version as version
        version.installed_vllm_version = lambda: {release!r}
        from vllm.plugins import load_general_plugins
        # After vLLM configured logging (which resets child loggers' handlers).
        records = []
        class Keep(logging.Handler):
            def emit(self, record):
                records.append(record)
        logging.getLogger("vllm.vllm_sampling_plugin").addHandler(Keep())
        load_general_plugins()
    """)
