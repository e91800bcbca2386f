"""A test kernel that draws vLLM 0.32/0.33's FP32 Gumbel noise and the
plugin's FP32 murmur3 noise side by side (``stock_gumbel.assert_noise_bits_are_upstreams``).
Imports upstream's Triton functions at module level, as ``@triton.jit`` needs:
import it only where vLLM 0.32 or 0.33 is installed."""

import triton
import triton.language as tl
from vllm.v1.worker.gpu.sample.gumbel import _log1p_neg_stable, murmur3_uniform32

from vllm_sampling_plugin.ops.random import FP32_MURMUR3, gumbel_block, request_key


@triton.jit
def noise_pair_kernel(upstream_ptr, ours_ptr, seeds_ptr, pos_ptr, vocab_size, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    start = tl.program_id(1) * BLOCK
    tokens = start + tl.arange(0, BLOCK)
    in_vocab = tokens < vocab_size
    seed = tl.load(seeds_ptr + row)
    position = tl.load(pos_ptr + row)
    # Upstream's FP32 noise exactly as its gumbel_noised_argmax computes it.
    upstream = -tl.log(-_log1p_neg_stable(murmur3_uniform32(seed, position, tokens)))
    ours = gumbel_block(request_key(seed, position, FP32_MURMUR3), start, BLOCK, FP32_MURMUR3)
    offsets = row.to(tl.int64) * vocab_size + tokens
    tl.store(upstream_ptr + offsets, upstream, mask=in_vocab)
    tl.store(ours_ptr + offsets, ours, mask=in_vocab)
