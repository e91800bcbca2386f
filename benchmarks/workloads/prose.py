"""Sentences of real documentation, as the summarize and chat workloads quote
and recombine them."""

import re

from benchmarks.workloads.corpus import Document

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Shorter pieces are headings, list markers and grammar fragments, not sentences.
SENTENCE_CHARS = 30


def sentences(document: Document) -> list[str]:
    """The document's sentences, verbatim (line breaks inside one are kept)."""
    return [piece for piece in SENTENCE_END.split(document.text) if len(piece) >= SENTENCE_CHARS]


def subject(document: Document) -> str:
    """What a user would call the document: `with`, `JSONEncoder`, `json/encoder.py`."""
    name = document.name.split(":")
    return name[-1].replace("-", " ")
