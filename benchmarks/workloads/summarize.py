"""summarize: the prompt is a real document (a documentation topic or a long
docstring) and a request for a summary; the trace mixes sentences copied from
the document, in its order, with new text (sentences of other documents), as a
summary that quotes its source does."""

import random

from tokenizers import Tokenizer

from benchmarks.workloads import prose
from benchmarks.workloads.corpus import Corpus, Document
from benchmarks.workloads.request import Lengths, Request, clip_to_tokens, make_request

NAME = "summarize"
DOCUMENT_CHARS = 2_500  # shorter documents leave too little to summarise
COPY_SHARE = 0.5  # about half the summary's sentences are the document's own
CONNECTIVES = ("", "", "In short, ", "Note that ", "The document also says: ", "Put simply, ",
               "As a result, ")
INSTRUCTION = "Summarise the following documentation for a newcomer to Python, quoting its key sentences.\n\n"
INSTRUCTION_ALLOWANCE = 48
# Sentences counted one by one may merge into fewer tokens when joined.
SLACK_TOKENS = 16


def build(corpus: Corpus, tokenizer: Tokenizer, rng: random.Random, count: int,
          lengths: Lengths) -> list[Request]:
    pool = list(corpus.prose)
    documents = [d for d in pool if len(d.text) >= DOCUMENT_CHARS]
    requests = []
    while len(requests) < count:
        document = rng.choice(documents)
        trace_length = lengths.draw_trace_length(rng)
        # Long documents are summarised from a paragraph on, so requests on one differ.
        paragraphs = document.text.split("\n\n")
        start = rng.randrange(max(1, len(paragraphs) - 4))
        budget = rng.randint(min(trace_length + 128, lengths.prompt_max - INSTRUCTION_ALLOWANCE),
                             lengths.prompt_max - INSTRUCTION_ALLOWANCE)
        text = clip_to_tokens(tokenizer, "\n\n".join(paragraphs[start:]), budget)
        source = prose.sentences(Document(document.name, text))
        others = [d for d in pool if d.name != document.name]
        new = prose.sentences(rng.choice(others))
        summary, copied, written, tokens = [], 0, 0, 0
        # Each sentence is counted alone; the final encoding of the summary is checked in make_request.
        while tokens < trace_length + SLACK_TOKENS:
            if copied < len(source) and (rng.random() < COPY_SHARE or written >= len(new)):
                sentence = source[copied]
                copied += 1 + rng.choice((0, 0, 1, 2))  # a summary skips sentences
            elif written < len(new):
                sentence = rng.choice(CONNECTIVES) + new[written]
                written += 1
            else:
                new, written = prose.sentences(rng.choice(others)), 0
                continue
            summary.append(sentence)
            tokens += len(tokenizer.encode(sentence).ids)
        trace_ids = tokenizer.encode(" ".join(summary)).ids
        requests.append(make_request(tokenizer, NAME, len(requests), INSTRUCTION + text,
                                     trace_ids, trace_length, lengths))
    return requests
