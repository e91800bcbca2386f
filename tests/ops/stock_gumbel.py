"""The check that the plugin's FP64 Gumbel draw is vLLM 0.20's own, shared by
the GPU test and its CPU twin (test_gumbel.py), which runs it in a fresh
interpreter where vLLM keeps real Triton under the interpreter."""

from __future__ import annotations

import torch


def assert_fp64_draw_is_stocks(
    logits: torch.Tensor,  # [num_tokens, vocab_size]
    idx_mapping: torch.Tensor,  # [num_tokens] int32, rows of the request state
    temperature: torch.Tensor,  # [max_num_reqs] fp32
    seeds: torch.Tensor,  # [max_num_reqs] int64
    pos: torch.Tensor,  # [num_tokens] int64
    apply_temperature: bool,
    case: object = None,
) -> None:
    """``use_fp64=True`` gives stock ``gumbel_sample``'s tokens and writes the
    same processed logits into a request-state buffer (``case`` names the
    batch in a failure)."""
    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample as stock_gumbel_sample

    from vllm_sampling_plugin.ops.gumbel import gumbel_sample

    stock_processed = torch.full((temperature.shape[0], logits.shape[1]), 7.0,
                                 device=logits.device)
    our_processed = stock_processed.clone()
    expected = stock_gumbel_sample(
        logits, idx_mapping, temperature, seeds, pos, apply_temperature,
        processed_logits_out=stock_processed,
    )
    got = gumbel_sample(
        logits, idx_mapping, temperature, seeds, pos,
        apply_temperature=apply_temperature, use_fp64=True,
        processed_logits_out=our_processed,
    )
    assert torch.equal(got, expected), (case, got, expected)
    assert torch.equal(our_processed, stock_processed), case
