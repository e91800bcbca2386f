"""What an ideal copier could take from a workload: the share of trace tokens
that continue an n-gram match. At each trace position, the last n tokens
(prompt and trace so far) are looked up among earlier text; the position counts
when some earlier occurrence of them was followed by the trace's next token,
that is, when the (n+1)-gram ending at the position occurred before. Two places
to look: the request's own prompt and trace so far (what n-gram / prompt-lookup
speculation sees), and the traces of earlier requests (what a cross-request
suffix cache, as in SuffixDecoding, holds)."""

from collections.abc import Sequence

NGRAM_SIZES = (1, 2, 3)
SOURCES = ("same_request", "earlier_requests", "either")


def _grams(tokens: Sequence[int], size: int) -> set[tuple[int, ...]]:
    return set(zip(*(tokens[i:] for i in range(size))))


def copyable_shares(requests: Sequence[tuple[list[int], list[int]]]) -> dict[str, dict[str, float]]:
    """For (prompt ids, trace ids) pairs in arrival order: per source (SOURCES), the share
    of all trace tokens an ideal copier predicts, per n."""
    shares = {source: {} for source in SOURCES}
    total = sum(len(trace) for _, trace in requests)
    for n in NGRAM_SIZES:
        hits = dict.fromkeys(SOURCES, 0)
        earlier: set[tuple[int, ...]] = set()
        for prompt, trace in requests:
            context = list(prompt) + list(trace)
            own = _grams(prompt, n + 1)
            for position in range(max(len(prompt), n), len(context)):
                gram = tuple(context[position - n:position + 1])
                in_own, in_earlier = gram in own, gram in earlier
                hits["same_request"] += in_own
                hits["earlier_requests"] += in_earlier
                hits["either"] += in_own or in_earlier
                own.add(gram)
            earlier |= _grams(trace, n + 1)
        for source in SOURCES:
            shares[source][str(n)] = hits[source] / total if total else 0.0
    return shares
