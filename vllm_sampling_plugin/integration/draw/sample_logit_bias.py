"""vLLM 0.20's logit-bias state, applied by the plugin's race-free kernel.

vLLM 0.20's ``_bias_kernel`` keeps ``allowed_token_ids`` by saving the
allowed logits, storing ``-inf`` over the row and restoring them, with no
barrier between the threads that do each; on a GPU the restore can be lost and
every token comes out as id 0 (issue 27; docs/troubleshooting.md). The state
stays vLLM's (same tables, capacities and staged writes); two things change:

* ``add_request`` stages each list sorted (allowed ids, the logit-bias
  dict by token, the stop ids), which the plugin's kernel searches;
* ``apply_logit_bias`` runs ``ops.logit_bias.apply_logit_bias_``, where each
  logit is read and written by one thread only.

The Sampler's processing runs this for the sampler and for speculative
verification alike (``PluginRejectionSampler`` processes every target logit
through the Sampler). The kernel's one compile variant is built by vLLM's own
start-up warm-up, whose requests carry a logit bias (``warmup_kernels``).

Behaviour differs from vLLM 0.20 in one more place, on purpose: the stop
tokens of ``min_tokens`` are masked for exactly ``min_tokens`` outputs
(``pos + 1 < prompt_len + min_tokens``, as vLLM >= 0.24 and the V1 runner
do); 0.20's ``pos < min_len`` masks them one output longer.
"""

from __future__ import annotations

import copy
import logging

import numpy as np
import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.worker.gpu.sample.logit_bias import LogitBiasState

from vllm_sampling_plugin.ops.logit_bias import apply_logit_bias_

logger = logging.getLogger("vllm.vllm_sampling_plugin")


class RaceFreeLogitBiasState(LogitBiasState):
    def __init__(self, max_num_reqs: int, device: torch.device):
        super().__init__(max_num_reqs, device)
        # The buffers never change; their checks run on the first launch only.
        self.inputs_checked = False
        logger.info(
            "vllm-sampling-plugin: allowed_token_ids, logit_bias and min_tokens "
            "are applied by the plugin's race-free kernel (vLLM 0.20's bias "
            "kernel can lose the allowed logits)."
        )

    def add_request(
        self, req_idx: int, prompt_len: int, sampling_params: SamplingParams
    ) -> None:
        super().add_request(req_idx, prompt_len, with_sorted_id_lists(sampling_params))

    def apply_logit_bias(
        self,
        logits: torch.Tensor,  # [num_logits, vocab_size] fp32, in place
        expanded_idx_mapping: torch.Tensor,  # [num_logits] int32
        idx_mapping_np: np.ndarray,
        pos: torch.Tensor,  # [num_logits] int64
    ) -> None:
        if not np.any(self.use_logit_bias[idx_mapping_np]):
            return
        apply_logit_bias_(
            logits,
            expanded_idx_mapping,
            pos,
            self.num_allowed_token_ids.gpu,
            self.allowed_token_ids.gpu,
            self.num_logit_bias.gpu,
            self.logit_bias_token_ids.gpu,
            self.logit_bias.gpu,
            self.min_lens.gpu,
            self.num_stop_token_ids.gpu,
            self.stop_token_ids.gpu,
            check_inputs=not self.inputs_checked,
        )
        self.inputs_checked = True


def with_sorted_id_lists(params: SamplingParams) -> SamplingParams:
    """A copy of ``params`` whose allowed ids, logit-bias dict and stop ids
    are in ascending token order (vLLM stages them in iteration order)."""
    shown = copy.copy(params)
    if params.allowed_token_ids:
        # Duplicates change nothing in the mask; dropping them leaves room.
        shown.allowed_token_ids = sorted(set(params.allowed_token_ids))
    if params.logit_bias:
        shown.logit_bias = dict(sorted(params.logit_bias.items()))
    # all_stop_token_ids reads this set; a sorted list stages in order.
    shown._all_stop_token_ids = sorted(params.all_stop_token_ids)
    return shown
