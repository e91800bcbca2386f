"""Writing a request's output row: accepted drafts, the corrected or bonus token, padding."""

import triton
import triton.language as tl


@triton.jit
def emit_row(
    req_idx,
    num_accepted,
    start,
    # [num_reqs, num_spec_steps + 1]
    sampled_ptr,
    sampled_stride,
    # [num_reqs]
    num_sampled_ptr,
    # [num_reqs, num_blocks] each: (winner_value, winner_token, fallback_value, fallback_token)
    winners,
    # [num_logits]
    draft_tokens_ptr,
    num_spec_steps,
    num_blocks,
    NUM_BLOCKS_PAD: tl.constexpr,
    OUT_PAD: tl.constexpr,
):
    """Writes a request's accepted drafts, its corrected or bonus token and the padding."""
    winner_value_ptr, winner_token_ptr, fallback_value_ptr, fallback_token_ptr = winners
    blocks = tl.arange(0, NUM_BLOCKS_PAD)
    mask = blocks < num_blocks
    values = tl.load(
        winner_value_ptr + req_idx * num_blocks + blocks, mask=mask, other=float("-inf")
    )
    # tl.argmax keeps the lowest block among equal values: the lowest token.
    if tl.max(values, axis=0) > float("-inf"):
        token = tl.load(winner_token_ptr + req_idx * num_blocks + tl.argmax(values, axis=0))
    else:
        # Rounding can leave a rejected row's residual without mass (or, in
        # synthetic mode, p == q); p itself is the only sensible choice then.
        # A row without any finite logit lands here too and emits token 0.
        values = tl.load(
            fallback_value_ptr + req_idx * num_blocks + blocks, mask=mask, other=float("-inf")
        )
        token = tl.load(fallback_token_ptr + req_idx * num_blocks + tl.argmax(values, axis=0))

    cols = tl.arange(0, OUT_PAD)
    drafts = tl.load(draft_tokens_ptr + start + 1 + cols, mask=cols < num_accepted, other=0)
    out = tl.where(
        cols < num_accepted,
        drafts.to(tl.int64),
        tl.where(cols == num_accepted, token.to(tl.int64), -1),
    )
    tl.store(sampled_ptr + req_idx * sampled_stride + cols, out, mask=cols <= num_spec_steps)
    tl.store(num_sampled_ptr + req_idx, num_accepted + 1)
