"""Launch shape of the fused top-k/top-p sampler: the tuning, its checks, and the
per-vocabulary shape (chunk, group, listed tokens) that keeps tokens batch invariant."""

import dataclasses
import functools

from ..host_math import cdiv, next_power_of_2


@dataclasses.dataclass(frozen=True)
class TopKTopPTuning:
    """Launch shape. It depends on the vocabulary only (never on the batch),
    so a row's arithmetic, and thus its token, is batch invariant."""

    # Tokens per program of the first kernel (power of two).
    chunk: int = 4096
    # A chunk lists the `per_group` largest logits of every `group`
    # consecutive tokens (powers of two): 64 per chunk by default, ~2400 per
    # row of 151936. Rows are decided from the lists unless more than
    # `per_group` of their top tokens share a group (rare for top_k in the
    # tens or low hundreds).
    group: int = 128
    per_group: int = 2
    # Listed tokens the merge keeps and compares pairwise (power of
    # two): the common rows are decided on it. A row with top-k keeps
    # about k + k/4 of them, and a list that fits in half the lanes is
    # decided on half (the pairwise work grows with the square); rows with
    # top_k beyond about 4/5 of this size take the collect step.
    short_list: int = 128
    # Other rows collect every token from a bound up, in one walk over the
    # row, into this many lanes (power of two); rows needing more (top_k in
    # the thousands, very wide top-p sets) take the exact whole-row path.
    wide_list: int = 4096
    # Warps of a program: it streams its chunk, and the row's last chunk
    # then merges the row.
    num_warps: int = 8
    # A launch of at most this many programs (rows x chunks: one wave on the
    # tuned GPU) merges each row in the chunk kernel, as its last chunk finishes:
    # one launch instead of two. Larger ones merge in a second kernel of
    # `merge_warps` warps, since the merge's registers would otherwise limit
    # how many chunk programs an SM runs at once.
    fused_max_programs: int = 132
    merge_warps: int = 16
    # Tokens per loop step of the exact whole-row path (power of two).
    row_block: int = 2048


DEFAULT_TUNING = TopKTopPTuning()
# Tokens per step when a chunk of an unfiltered row draws its Gumbel winner.
GUMBEL_TILE = 1024


@functools.cache
def check_tuning(tuning: TopKTopPTuning) -> None:
    for name in ("chunk", "group", "per_group", "short_list", "wide_list", "row_block"):
        value = getattr(tuning, name)
        if value < 2 or next_power_of_2(value) != value:
            raise ValueError(f"tuning.{name} must be a power of two >= 2, got {value}")
    if not 4 <= tuning.group * 2 <= tuning.chunk:
        raise ValueError(
            f"tuning.group ({tuning.group}) must be at most half of tuning.chunk "
            f"({tuning.chunk})"
        )
    if tuning.per_group > tuning.group:
        raise ValueError(
            f"tuning.per_group ({tuning.per_group}) must be at most tuning.group "
            f"({tuning.group})"
        )
    if tuning.wide_list < tuning.short_list:
        raise ValueError(
            f"tuning.wide_list ({tuning.wide_list}) must be at least tuning.short_list "
            f"({tuning.short_list})"
        )


@dataclasses.dataclass(frozen=True)
class LaunchShape:
    chunk: int
    group: int
    per_group: int
    num_chunks: int

    @property
    def list_len(self) -> int:
        """Listed tokens per chunk: ``per_group`` of every group."""
        return self.per_group * self.chunk // self.group


def launch_shape(vocab_size: int, tuning: TopKTopPTuning) -> LaunchShape:
    """From the vocabulary size only (never the batch): tokens are batch invariant."""
    if vocab_size <= tuning.short_list:
        # One chunk of pairs lists every token: the row is decided from the lists.
        chunk = max(next_power_of_2(vocab_size), 4)
        return LaunchShape(chunk=chunk, group=2, per_group=2, num_chunks=1)
    chunk = min(tuning.chunk, next_power_of_2(vocab_size))
    group = min(tuning.group, chunk // 2)
    return LaunchShape(
        chunk=chunk,
        group=group,
        per_group=min(tuning.per_group, group),
        num_chunks=cdiv(vocab_size, chunk),
    )


def merges_in_chunk_kernel(num_tokens: int, shape: LaunchShape, tuning: TopKTopPTuning) -> bool:
    """Whether each row is merged by the chunk kernel's last program (one
    launch) rather than by a second, merge-only kernel: the one choice of the
    launch that depends on the batch size."""
    return num_tokens * shape.num_chunks <= tuning.fused_max_programs
