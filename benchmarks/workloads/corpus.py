"""The real text the workloads are cut from: the running interpreter's standard
library sources, its documentation topics (``pydoc_data``) and the docstrings
in those sources, always read in the same order, so that one interpreter always
gives the same text (stats.json records which interpreter and a hash of it)."""

import ast
import functools
import hashlib
import os
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

    @functools.cached_property
    def prose(self) -> tuple[Document, ...]:
        """Documents to summarise and answer from: the topics, then long docstrings."""
        found = list(self.topics)
        for source in self.sources:
            found += docstrings(source, DOCSTRING_CHARS)
        return tuple(found)


def _is_skipped(name: str) -> bool:
    return name in SKIPPED_DIRS or name.startswith(SKIPPED_PREFIXES)


def load() -> Corpus:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for folder, folders, files in os.walk(stdlib):
        folders[:] = [name for name in folders if not _is_skipped(name)]  # not walked into
        relative = Path(folder).relative_to(stdlib)
        found += [(relative / name).as_posix() for name in files
                  if name.endswith(".py") and not _is_skipped(name)]
    sources = []
    for name in sorted(found):
        path = stdlib / name
        if SOURCE_BYTES[0] <= path.stat().st_size <= SOURCE_BYTES[1]:
            sources.append(Document(name, path.read_text(encoding="utf-8")))
    from pydoc_data.topics import topics  # the running interpreter's own, like the sources

    return Corpus(
        python=platform.python_version(),
        sources=tuple(sources),
        topics=tuple(Document(f"topic:{name}", topics[name]) for name in sorted(topics)),
    )


def docstrings(source: Document, min_chars: int) -> list[Document]:
    """The docstrings of at least min_chars of the module, then of its classes and functions,
    then of their methods (functions nested in functions are not looked into: walking every
    node took most of the time)."""
    found = []
    tree = ast.parse(source.text)
    nodes = [tree]
    while nodes:
        node = nodes.pop(0)
        text = ast.get_docstring(node)
        if text and len(text) >= min_chars:
            owner = getattr(node, "name", "")
            found.append(Document(f"doc:{source.name}:{owner}".rstrip(":"), text))
        if isinstance(node, (ast.Module, ast.ClassDef)):
            nodes += [child for child in node.body
                      if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    return found
