"""The checks that the plugin's draws are upstream vLLM's own, shared by the
GPU tests and their CPU twins (test_gumbel.py), which run them in a fresh
interpreter where vLLM keeps real Triton under the interpreter: FP64 against
vLLM 0.20, FP32 murmur3 (noise bits, Gumbel-max tokens, fused top-k/top-p
tokens) against vLLM 0.32 and 0.33."""

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


def assert_noise_bits_are_upstreams(seeds: torch.Tensor, pos: torch.Tensor, vocab_size: int) -> None:
    """The plugin's FP32 murmur3 noise (``random.gumbel_block`` with
    ``FP32_MURMUR3``) is bit for bit vLLM 0.32/0.33's ``murmur3_uniform32``
    followed by its ``-log(-log1p(-u))`` tail, for every (seed, position)
    pair of the arguments and every token below ``vocab_size``; both are
    inlined in one test kernel, so on the GPU the compiler sees each as the
    sampling kernels do."""
    import triton

    from tests.ops.stock_noise_kernel import noise_pair_kernel

    block = 1024
    upstream = torch.full((seeds.shape[0], vocab_size), float("nan"), device=seeds.device)
    ours = upstream.clone()
    noise_pair_kernel[(seeds.shape[0], triton.cdiv(vocab_size, block))](
        upstream, ours, seeds, pos, vocab_size, BLOCK=block
    )
    assert torch.isfinite(upstream).all()
    differ = (upstream.view(torch.int32) != ours.view(torch.int32)).nonzero()
    assert differ.numel() == 0, (differ[:5].tolist(), upstream[tuple(differ[:5].T)],
                                 ours[tuple(differ[:5].T)])


def assert_murmur3_draw_is_upstreams(
    logits: torch.Tensor,  # [num_tokens, vocab_size]
    idx_mapping: torch.Tensor,  # [num_tokens] int64, rows of the request state
    temperature: torch.Tensor,  # [max_num_reqs] fp32
    seeds: torch.Tensor,  # [max_num_reqs] int64
    pos: torch.Tensor,  # [num_tokens] int64
    apply_temperature: bool,
    use_fp64: bool,
    case: object = None,
) -> None:
    """The plugin's murmur3 stream in ``use_fp64``'s precision gives vLLM
    0.32/0.33's ``gumbel_sample(use_fp64=...)`` tokens (the draw of their
    Sampler and of their RejectionSampler's target rows)."""
    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample as upstream_gumbel_sample

    from vllm_sampling_plugin.ops.gumbel import gumbel_sample

    expected = upstream_gumbel_sample(
        logits, idx_mapping, temperature, seeds, pos, apply_temperature,
        is_drafting=False, use_fp64=use_fp64,
    )
    got = gumbel_sample(
        logits, idx_mapping.to(torch.int32), temperature, seeds, pos,
        apply_temperature=apply_temperature, use_fp64=use_fp64,
        fp32_stream="murmur3", fp64_stream="murmur3",
    )
    assert torch.equal(got, expected), (case, use_fp64, got, expected)


def assert_fp32_murmur3_top_k_top_p_is_upstreams(
    logits: torch.Tensor,  # [num_tokens, vocab_size], temperature already divided
    idx_mapping: torch.Tensor,  # [num_tokens] int64
    temperature: torch.Tensor,  # [max_num_reqs] fp32
    seeds: torch.Tensor,  # [max_num_reqs] int64
    pos: torch.Tensor,  # [num_tokens] int64
    top_k: torch.Tensor,  # [max_num_reqs] int32, vocab_size = off
    top_p: torch.Tensor,  # [max_num_reqs] fp32, 1 = off
    case: object = None,
) -> None:
    """The fused top-k/top-p kernel with ``fp32_stream="murmur3"`` gives the
    token of upstream's route: its top-k/top-p mask (the sorting PyTorch
    version, the semantics its Triton mask implements), then its FP32
    ``gumbel_sample`` on the masked logits."""
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch
    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample as upstream_gumbel_sample

    from vllm_sampling_plugin.ops.topk_topp import top_k_top_p_sample

    masked = apply_top_k_top_p_pytorch(
        logits.float().clone(), top_k[idx_mapping], top_p[idx_mapping]
    )
    expected = upstream_gumbel_sample(
        masked, idx_mapping, temperature, seeds, pos, False, is_drafting=False, use_fp64=False,
    )
    got = top_k_top_p_sample(
        logits, idx_mapping, temperature, seeds, pos, top_k, top_p,
        apply_temperature=False, use_fp64=False, fp32_stream="murmur3",
    )
    assert torch.equal(got, expected), (case, got, expected)
