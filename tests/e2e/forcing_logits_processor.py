"""A custom logits processor for vLLM's V2 runner (0.32 and later) that
forces one token per request, used by the end-to-end tests to show that
custom processors still shape what the plugin's sampler draws.

A request opts in with ``SamplingParams(extra_args={"force_token_id": t})``:
every logit of its rows but ``t``'s becomes -inf, so whatever the draw (greedy,
Gumbel, fused top-k/top-p), the token must be ``t``. Requests without the key
are left alone. Loaded by name in the front-end (to validate requests) and in
the worker: ``logits_processors=["tests.e2e.forcing_logits_processor:ForceToken"]``.
"""

from __future__ import annotations

import numpy as np
import torch
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor

KEY = "force_token_id"


class ForceToken(LogitsProcessor):
    def __init__(self, vllm_config, req_states):
        self.device = req_states.device
        self.vocab_size = req_states.vocab_size
        # Per request slot: the forced token, or -1.
        self.forced = np.full(req_states.max_num_reqs, -1, dtype=np.int64)
        self.forced_gpu = torch.full((req_states.max_num_reqs,), -1, device=self.device)

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        token = (sampling_params.extra_args or {}).get(KEY)
        if token is not None and not isinstance(token, int):
            raise ValueError(f"{KEY} must be an int, got {token!r}")

    def add_request(self, req_idx: int, sampling_params) -> bool:
        token = (sampling_params.extra_args or {}).get(KEY)
        self.forced[req_idx] = -1 if token is None else token
        return token is not None

    def apply_staged_writes(self) -> None:
        self.forced_gpu.copy_(torch.from_numpy(self.forced))

    def apply(self, logits: torch.Tensor, ctx) -> torch.Tensor:
        forced = self.forced_gpu[ctx.expanded_idx_mapping.long()]  # [rows]
        columns = torch.arange(logits.shape[1], device=logits.device)
        drop = (forced[:, None] >= 0) & (columns[None, :] != forced[:, None])
        return logits.masked_fill_(drop, float("-inf"))
