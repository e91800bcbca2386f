"""What an ideal copier could take from a workload: the share of trace tokens
that continue an n-gram match. At each trace position, the last n tokens
(prompt and trace so far) are looked up among earlier text; the position counts
when some earlier occurrence of them was followed by the trace's next token.
Two places to look: the request's own prompt and trace so far (what n-gram /
prompt-lookup speculation sees), and the traces of earlier requests (what a
cross-request suffix cache, as in SuffixDecoding, holds)."""

from collections.abc import Sequence

NGRAM_SIZES = (1, 2, 3)

Continuations = dict[tuple[int, ...], set[int]]


def _index(table: Continuations, tokens: Sequence[int], n: int, end: int) -> None:
    """Record the n-gram that ends at tokens[end - 1], followed by tokens[end]."""
    table.setdefault(tuple(tokens[end - n:end]), set()).add(tokens[end])


def copyable_shares(requests: Sequence[tuple[list[int], list[int]]]) -> dict[str, dict[str, float]]:
    """For (prompt ids, trace ids) pairs in arrival order: per source ("same_request", "earlier
    requests", "either"), the share of all trace tokens an ideal copier predicts, per n."""
    shares = {source: {} for source in ("same_request", "earlier_requests", "either")}
    total = sum(len(trace) for _, trace in requests)
    for n in NGRAM_SIZES:
        hits = {source: 0 for source in shares}
        earlier: Continuations = {}
        for prompt, trace in requests:
            context = list(prompt) + list(trace)
            own: Continuations = {}
            for end in range(n, len(prompt)):
                _index(own, context, n, end)
            for position in range(len(prompt), len(context)):
                if position < n:
                    continue
                key, token = tuple(context[position - n:position]), context[position]
                in_prompt = token in own.get(key, ())
                in_earlier = token in earlier.get(key, ())
                hits["same_request"] += in_prompt
                hits["earlier_requests"] += in_earlier
                hits["either"] += in_prompt or in_earlier
                _index(own, context, n, position)
            for end in range(n, len(trace)):
                _index(earlier, trace, n, end)
        for source in shares:
            shares[source][str(n)] = hits[source] / total if total else 0.0
    return shares
