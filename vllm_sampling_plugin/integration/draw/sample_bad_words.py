"""vLLM 0.20's bad-words state, reading each draft token where it is.

In the ids the samplers receive (``input_ids[logits_indices]``), a request's
local position 0 holds its last sampled token and draft ``j`` sits at local
position ``j + 1``. vLLM 0.20's bad-words kernel reads the token at output
position ``output_len + j`` from local position ``j``, one too early, so under
speculation a bad word of two or more tokens is matched against
``..., x, x, d0`` instead of ``..., x, d0, d1`` and can be missed or
wrongly applied at the logits after the first (later vLLM releases add the
missing ``+ 1``). Handing the kernel the ids shifted by one puts draft ``j``
at local position ``j``. Without drafts every request has one logit at local
position 0, and the kernel reads no input id at all.
"""

from __future__ import annotations

import numpy as np
import torch
from vllm.v1.worker.gpu.sample.bad_words import BadWordsState


class DraftAlignedBadWordsState(BadWordsState):
    def apply_bad_words(
        self,
        logits: torch.Tensor,
        expanded_idx_mapping: torch.Tensor,
        idx_mapping_np: np.ndarray,
        input_ids: torch.Tensor,
        expanded_local_pos: torch.Tensor,
    ) -> None:
        super().apply_bad_words(
            logits,
            expanded_idx_mapping,
            idx_mapping_np,
            input_ids[1:],
            expanded_local_pos,
        )
