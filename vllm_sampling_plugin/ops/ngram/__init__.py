"""N-gram (prompt-lookup) draft proposals on the GPU."""
from .launcher import (
    NGRAM_MAX_N,
    NGRAM_MAX_SPLITS,
    ngram_propose,
    ngram_propose_into,
    ngram_scratch,
)
from .match_counts import count_packed_matches_

__all__ = [
    "NGRAM_MAX_N",
    "NGRAM_MAX_SPLITS",
    "count_packed_matches_",
    "ngram_propose",
    "ngram_propose_into",
    "ngram_scratch",
]
