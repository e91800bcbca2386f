"""chat: multi-turn conversations about Python whose replies share little with
their prompts or with each other: every turn's reply, earlier or traced, is the
next stretch of one pass over the documentation in shuffled order, so no
stretch is used twice (the questions name the reply's subject, nothing more)."""

import random

from tokenizers import Tokenizer

from benchmarks.workloads import prose
from benchmarks.workloads.corpus import Corpus, Document
from benchmarks.workloads.request import Lengths, Request, make_request

NAME = "chat"
SYSTEM = "<|system|>You are a helpful assistant who answers questions about Python and its standard library.\n"
QUESTIONS = (
    "How does {} work?", "Can you explain {}?", "What should I know about {}?",
    "I keep getting confused by {}. What does it do?", "Thanks. And what about {}?",
    "Could you walk me through {}?",
)
EARLIER_TURNS = (0, 3)
EARLIER_REPLY_TOKENS = (48, 320)


class _Replies:
    """The documentation's paragraphs, document after document in a shuffled order, each
    paragraph once (the topics repeat each other: "compound" holds "for", "with", ...),
    handed out in stretches of tokens: a stretch goes on where the last one stopped. The
    pass starts over, reshuffled, only once every paragraph has been used."""

    def __init__(self, pool: list[Document], rng: random.Random):
        self._pool, self._rng = pool, rng
        self._paragraphs: list[tuple[Document, str]] = []
        self._pending: list[int] = []  # what the last stretch left of its paragraph
        self._pending_document: Document | None = None

    def _next_paragraph(self) -> tuple[Document, str]:
        if not self._paragraphs:
            seen, order = set(), self._rng.sample(self._pool, len(self._pool))
            for document in order:
                for paragraph in document.text.split("\n\n"):
                    if paragraph.strip() and paragraph not in seen:
                        seen.add(paragraph)
                        self._paragraphs.append((document, paragraph))
            self._paragraphs.reverse()
        return self._paragraphs.pop()

    def take(self, tokenizer: Tokenizer, tokens: int) -> tuple[Document, list[int]]:
        """The next `tokens` tokens, and the document they start in."""
        if not self._pending:
            self._pending_document, text = self._next_paragraph()
            self._pending = tokenizer.encode(text).ids
        document, ids = self._pending_document, self._pending
        while len(ids) < tokens:
            self._pending_document, text = self._next_paragraph()
            ids = ids + tokenizer.encode("\n\n" + text).ids
        self._pending = ids[tokens:]
        return document, ids[:tokens]


def _question(rng: random.Random, document: Document) -> str:
    return rng.choice(QUESTIONS).format(f"`{prose.subject(document)}`")


def build(corpus: Corpus, tokenizer: Tokenizer, rng: random.Random, count: int,
          lengths: Lengths) -> list[Request]:
    replies = _Replies(list(corpus.prose), rng)
    requests = []
    while len(requests) < count:
        trace_length = lengths.draw_trace_length(rng)
        prompt = SYSTEM
        for _ in range(rng.randint(*EARLIER_TURNS)):
            length = rng.randint(*EARLIER_REPLY_TOKENS)
            document, ids = replies.take(tokenizer, length)
            prompt += f"<|user|>{_question(rng, document)}\n<|assistant|>{tokenizer.decode(ids)}\n"
        document, trace_ids = replies.take(tokenizer, trace_length)
        prompt += f"<|user|>{_question(rng, document)}\n<|assistant|>"
        if len(tokenizer.encode(prompt).ids) > lengths.prompt_max:
            continue
        requests.append(make_request(tokenizer, NAME, len(requests), prompt, trace_ids,
                                     trace_length, lengths))
    return requests
