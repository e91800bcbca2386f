"""The real text the workloads are cut from: the running interpreter's standard
library sources, its documentation topics (``pydoc_data``) and the docstrings
in those sources, always read in the same order, so that one interpreter always
gives the same text (stats.json records which interpreter and a hash of it)."""

import ast
import hashlib
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Tests, IDLE, demos, the bundled pip, codec tables and lib2to3's fixtures are
# not what users send a model; config-* and _sysconfigdata hold this machine's
# build paths, which would make the text differ between two installs of one
# Python version.
SKIPPED_DIRS = frozenset({
    "site-packages", "test", "tests", "idlelib", "turtledemo", "lib2to3", "ensurepip",
    "encodings", "pydoc_data", "__pycache__", "__phello__",
})
SKIPPED_PREFIXES = ("_sysconfigdata", "config-")
# Below this a file is too short to edit in a request; above it (decimal's
# pure-Python twin, for one) it is one outlier that would dominate the training text.
SOURCE_BYTES = (2_000, 200_000)
# Parsing every source for its docstrings took 6 s on a busy machine; every
# fourth file gives a few hundred documents, enough for the prose workloads.
DOCSTRING_FILE_STRIDE = 4
DOCSTRING_CHARS = 400


@dataclass(frozen=True)
class Document:
    name: str  # "json/encoder.py", "topic:with", "doc:json/encoder.py:JSONEncoder"
    text: str


@dataclass(frozen=True)
class Corpus:
    python: str  # "3.11.7": the interpreter whose stdlib this is
    sources: tuple[Document, ...]  # sorted by path
    topics: tuple[Document, ...]  # pydoc_data's documentation topics, sorted by name

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for document in (*self.sources, *self.topics):
            digest.update(document.name.encode() + b"\0" + document.text.encode() + b"\0")
        return digest.hexdigest()

    def training_texts(self, max_bytes: int | None) -> list[str]:
        """The topics, then the sources in path order, up to max_bytes (all when None)."""
        texts, total = [], 0
        for document in (*self.topics, *self.sources):
            size = len(document.text.encode())
            if max_bytes is not None and total + size > max_bytes:
                break
            texts.append(document.text)
            total += size
        return texts

    def prose(self) -> list[Document]:
        """Documents to summarise and answer from: the topics, then long docstrings."""
        found = list(self.topics)
        for source in self.sources[::DOCSTRING_FILE_STRIDE]:
            found += docstrings(source, DOCSTRING_CHARS)
        return found


def _is_skipped(relative: Path) -> bool:
    return any(part in SKIPPED_DIRS or part.startswith(SKIPPED_PREFIXES) for part in relative.parts)


def load() -> Corpus:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = []
    for path in sorted(stdlib.rglob("*.py"), key=lambda p: p.relative_to(stdlib).as_posix()):
        relative = path.relative_to(stdlib)
        if _is_skipped(relative) or not SOURCE_BYTES[0] <= path.stat().st_size <= SOURCE_BYTES[1]:
            continue
        sources.append(Document(relative.as_posix(), path.read_text(encoding="utf-8")))
    from pydoc_data.topics import topics  # the running interpreter's own, like the sources

    return Corpus(
        python=platform.python_version(),
        sources=tuple(sources),
        topics=tuple(Document(f"topic:{name}", topics[name]) for name in sorted(topics)),
    )


def docstrings(source: Document, min_chars: int) -> list[Document]:
    """The module's, classes' and functions' docstrings of at least min_chars, in source order."""
    found = []
    for node in ast.walk(ast.parse(source.text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node)
            if text and len(text) >= min_chars:
                owner = getattr(node, "name", "")
                found.append(Document(f"doc:{source.name}:{owner}".rstrip(":"), text))
    return found
