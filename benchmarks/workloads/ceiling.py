"""What n-gram speculation can take from a workload before any engine runs:
each request's trace replayed step by step against a prompt-lookup proposer
(the longest n in [min_n, max_n] whose last-n tokens occurred earlier in the
request with a token after them, then one of those occurrences, up to k of
the tokens that followed it). Which occurrence is the proposer's: vLLM
0.34's V2 n-gram speculator takes the latest (the one the GPU cells of
0.34 run), vLLM's CPU proposer and the plugin's kernel the earliest.

A step verifies the proposal against the trace, emits the accepted prefix
and one token more, as greedy verification does. Per workload this gives
the acceptance length (tokens a step emits) and what each verification
policy pays for it: upstream's fixed k verifies k slots for every request
every step, the plugin's adaptive policy only the drafts proposed. The
acceptance length bounds what speculation can gain where a step costs the
same with and without drafts (small batches); the slots verified per token
say what it costs where the batch is compute-bound. Tokens only: the
proposer sees what an engine's would, and no GPU speed is assumed.

``python -m benchmarks.workloads ceiling DIR`` prints the table for a build
and writes DIR/ceiling-OCCURRENCE-kK.json.
"""

from collections.abc import Sequence

# The n-gram sizes bench e2e's engines ask for (speculative_config's
# prompt_lookup_min and prompt_lookup_max, benchmarks/e2e/engine.py).
MIN_N, MAX_N = 2, 4
# Which earlier occurrence of the matched n-gram a proposer drafts from.
OCCURRENCES = ("latest", "earliest")


class PromptLookup:
    """A request's history with, for each n, the position where each n-gram
    that has a following token occurred (the earliest or the latest, as
    ``occurrence`` says); ``propose`` is the proposer's answer for the
    history so far."""

    def __init__(self, prompt: Sequence[int], occurrence: str = "latest",
                 min_n: int = MIN_N, max_n: int = MAX_N) -> None:
        if occurrence not in OCCURRENCES:
            raise ValueError(f"occurrence must be one of {OCCURRENCES}, not {occurrence!r}")
        self.tokens: list[int] = []
        self.keep_latest = occurrence == "latest"
        self.min_n, self.max_n = min_n, max_n
        self.starts: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(min_n, max_n + 1)}
        for token in prompt:
            self.append(token)

    def append(self, token: int) -> None:
        # The n-grams ending just before the new token now have a follower.
        end = len(self.tokens)
        for n, starts in self.starts.items():
            if end >= n:
                gram = tuple(self.tokens[end - n:end])
                if self.keep_latest:
                    starts[gram] = end - n
                else:
                    starts.setdefault(gram, end - n)
        self.tokens.append(token)

    def propose(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the longest matching n-gram's
        occurrence (fewer near the history's end); none without a match."""
        end = len(self.tokens)
        for n in range(self.max_n, self.min_n - 1, -1):
            if end < n:
                continue
            start = self.starts[n].get(tuple(self.tokens[end - n:]))
            if start is not None:
                return self.tokens[start + n:start + n + k]
        return []


def accepted_run(trace: Sequence[int], emitted: int, drafts: Sequence[int]) -> int:
    """How many of ``drafts`` a request that has emitted ``emitted`` tokens of
    ``trace`` accepts: the leading drafts equal to the trace's next tokens."""
    accepted = 0
    while (accepted < len(drafts) and emitted + accepted < len(trace)
           and drafts[accepted] == trace[emitted + accepted]):
        accepted += 1
    return accepted


def verify_and_emit(history: PromptLookup, trace: Sequence[int], emitted: int,
                    drafts: Sequence[int]) -> tuple[int, int]:
    """One greedy step of a request that has emitted ``emitted`` tokens of
    ``trace``: the drafts are accepted while they equal the trace, the step
    emits that run and one token more (fewer at the trace's end), which
    ``history`` takes in. Returns (tokens emitted, drafts accepted)."""
    accepted = accepted_run(trace, emitted, drafts)
    step = min(accepted + 1, len(trace) - emitted)
    for token in trace[emitted:emitted + step]:
        history.append(token)
    return step, accepted


def replay(prompt: Sequence[int], trace: Sequence[int], k: int,
           occurrence: str = "latest") -> dict[str, int]:
    """One request: steps taken, steps with a proposal, drafts proposed,
    drafts accepted, and the slots a fixed-k verification would have verified
    (k a step)."""
    history = PromptLookup(prompt, occurrence)
    counts = {"steps": 0, "drafting_steps": 0, "proposed": 0, "accepted": 0, "fixed_slots": 0,
              "tokens": len(trace)}
    emitted = 0
    while emitted < len(trace):
        drafts = history.propose(k)
        step, accepted = verify_and_emit(history, trace, emitted, drafts)
        emitted += step
        counts["steps"] += 1
        counts["drafting_steps"] += bool(drafts)
        counts["proposed"] += len(drafts)
        counts["accepted"] += accepted
        counts["fixed_slots"] += k
    return counts


def workload_ceiling(requests: Sequence[tuple[list[int], list[int]]], k: int,
                     occurrence: str = "latest") -> dict:
    """Sums of :func:`replay` over (prompt ids, trace ids) pairs, and the
    ratios a reader compares: the acceptance length (tokens a step), the
    share of steps with a proposal, drafts proposed a step, and per policy
    the drafts verified per accepted draft."""
    totals = dict.fromkeys(("steps", "drafting_steps", "proposed", "accepted", "fixed_slots",
                            "tokens"), 0)
    for prompt, trace in requests:
        for key, value in replay(prompt, trace, k, occurrence).items():
            totals[key] += value
    steps, accepted = totals["steps"], max(totals["accepted"], 1)
    return {
        **totals,
        "k": k,
        "occurrence": occurrence,
        "acceptance_length": round(totals["tokens"] / steps, 3),
        "steps_with_drafts": round(totals["drafting_steps"] / steps, 3),
        "drafts_per_step": round(totals["proposed"] / steps, 3),
        "verified_per_accepted": {
            "fixed": round(totals["fixed_slots"] / accepted, 2),
            "adaptive": round(totals["proposed"] / accepted, 2),
        },
    }


def table(ceilings: dict[str, dict]) -> str:
    """The ceilings of a build as a markdown table."""
    rows = ["| workload | occurrence | k | acceptance length (tokens a step) | steps with drafts "
            "| drafts proposed a step | drafts verified per accepted draft: fixed k / adaptive |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, c in ceilings.items():
        per = c["verified_per_accepted"]
        rows.append(f"| {name} | {c['occurrence']} | {c['k']} | {c['acceptance_length']:.2f} "
                    f"| {100 * c['steps_with_drafts']:.0f}% | {c['drafts_per_step']:.2f} "
                    f"| {per['fixed']:.1f} / {per['adaptive']:.1f} |")
    return "\n".join(rows)
