"""code-edit: the prompt is an excerpt of a real source file and an instruction;
the trace is the excerpt written back with the instruction's small edits (a
rename, an added check, changed literals, two blocks swapped), as an assistant
asked to edit code returns it."""

import builtins
import keyword
import random
import re
from dataclasses import dataclass

from tokenizers import Tokenizer

from benchmarks.workloads.corpus import Corpus, Document
from benchmarks.workloads.request import Lengths, Request, clip_to_tokens, count_tokens, make_request

NAME = "code-edit"
IDENTIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{3,}\b")
# A whole number, not part of a name or of a float's fraction.
INTEGER = re.compile(r"(?<![\w.])\d+(?![\w.])")
SIMPLE_DEF = re.compile(r"^(\s*)(?:async\s+)?def (\w+)\((.*)\)[^:]*:\s*$")
RESERVED = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | {"self", "cls"}
RENAME_SUFFIXES = ("_value", "_item", "_result", "_data", "_info")
# The instruction's tokens, the fence lines and a margin come out of the excerpt's share.
INSTRUCTION_ALLOWANCE = 160


def _rename(lines: list[str], rng: random.Random) -> str | None:
    counts: dict[str, int] = {}
    for name in IDENTIFIER.findall("".join(lines)):
        if name not in RESERVED:
            counts[name] = counts.get(name, 0) + 1
    candidates = sorted(name for name, count in counts.items() if count >= 2)
    if not candidates:
        return None
    old = rng.choice(candidates)
    new = old + rng.choice(RENAME_SUFFIXES)
    pattern = re.compile(rf"\b{re.escape(old)}\b")
    lines[:] = [pattern.sub(new, line) for line in lines]
    return f"Rename `{old}` to `{new}`."


def body_start(lines: list[str], def_index: int) -> int:
    """The index after the def line and, when there is one, its docstring."""
    index = def_index + 1
    if index < len(lines) and lines[index].lstrip().startswith(('"""', "'''", 'r"""')):
        quote = '"""' if '"""' in lines[index] else "'''"
        if lines[index].count(quote) >= 2:
            return index + 1
        index += 1
        while index < len(lines) and quote not in lines[index]:
            index += 1
        return index + 1
    return index


@dataclass(frozen=True)
class Checkable:
    """A one-line def with arguments, where a check on one of them can go."""

    def_index: int
    function: str
    arguments: tuple[str, ...]
    body: int  # the index of the first line after the def and its docstring


def checkable_functions(lines: list[str]) -> list[Checkable]:
    found = []
    for index, line in enumerate(lines):
        if (match := SIMPLE_DEF.match(line.rstrip("\n"))) is None:
            continue
        arguments = [a.split("=")[0].split(":")[0].strip(" *") for a in match.group(3).split(",")]
        arguments = tuple(a for a in arguments if a and a not in ("self", "cls", "/"))
        body = body_start(lines, index)
        if arguments and body < len(lines) and lines[body].strip():
            found.append(Checkable(index, match.group(2), arguments, body))
    return found


def check_lines(body_line: str, argument: str) -> list[str]:
    """The added check, indented like the body line it goes above."""
    indent = body_line[: len(body_line) - len(body_line.lstrip())]
    return [f"{indent}if {argument} is None:\n",
            f'{indent}    raise ValueError("{argument} must not be None")\n']


def _add_check(lines: list[str], rng: random.Random) -> str | None:
    options = checkable_functions(lines)
    if not options:
        return None
    chosen = rng.choice(options)
    argument = rng.choice(chosen.arguments)
    lines[chosen.body:chosen.body] = check_lines(lines[chosen.body], argument)
    return f"In `{chosen.function}`, raise ValueError when `{argument}` is None."


def _change_literal(lines: list[str], rng: random.Random) -> str | None:
    spots = [(i, m) for i, line in enumerate(lines) if not line.lstrip().startswith("#")
             for m in INTEGER.finditer(line)]
    if not spots:
        return None
    index, match = rng.choice(spots)
    old = int(match.group())
    new = old * 2 if old > 1 else old + 1
    line = lines[index]
    lines[index] = line[: match.start()] + str(new) + line[match.end():]
    return f"On the line `{line.strip()}`, change {old} to {new}."


def _swap_blocks(lines: list[str], rng: random.Random) -> str | None:
    """Two neighbouring blocks (runs of lines between blank lines) of one indentation trade places."""
    blocks, start = [], 0
    for index in range(len(lines) + 1):
        if index == len(lines) or not lines[index].strip():
            if index > start:
                blocks.append((start, index))
            start = index + 1

    def indent(block):
        first = lines[block[0]]
        return len(first) - len(first.lstrip())

    pairs = [(a, b) for a, b in zip(blocks, blocks[1:])
             if indent(a) == indent(b) and not lines[a[0]].lstrip().startswith(("def ", "@", "class "))
             and not lines[b[0]].lstrip().startswith(("def ", "@", "class "))]
    if not pairs:
        return None
    (a_start, a_end), (b_start, b_end) = rng.choice(pairs)
    first, gap, second = lines[a_start:a_end], lines[a_end:b_start], lines[b_start:b_end]
    lines[a_start:b_end] = second + gap + first
    return (f"Move the block that starts with `{first[0].strip()}` below the block "
            f"that starts with `{second[0].strip()}`.")


EDITS = (_rename, _add_check, _change_literal, _swap_blocks)


def _excerpt(tokenizer: Tokenizer, source: Document, rng: random.Random, budget: int) -> str:
    """A run of whole lines from a def or class line on, within budget tokens."""
    lines = source.text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "class "))]
    start = rng.choice(starts) if starts else 0
    return clip_to_tokens(tokenizer, "".join(lines[start:]), budget)


def build(corpus: Corpus, tokenizer: Tokenizer, rng: random.Random, count: int,
          lengths: Lengths) -> list[Request]:
    requests = []
    while len(requests) < count:
        source = rng.choice(corpus.sources)
        trace_length = lengths.draw_trace_length(rng)
        budget = rng.randint(min(trace_length + 64, lengths.prompt_max - INSTRUCTION_ALLOWANCE),
                             lengths.prompt_max - INSTRUCTION_ALLOWANCE)
        excerpt = _excerpt(tokenizer, source, rng, budget)
        # The trace returns the excerpt's first trace_length tokens: the edits go there.
        edited_part = clip_to_tokens(tokenizer, excerpt, trace_length)
        if count_tokens(tokenizer, excerpt) < trace_length + 32 or not edited_part:
            continue  # a short file: the excerpt cannot carry the trace
        lines = edited_part.splitlines(keepends=True)
        # Each edit changes the lines in place and returns its sentence of the instruction.
        sentences = [s for s in (edit(lines, rng) for edit in rng.sample(EDITS, len(EDITS))[:3]) if s]
        if len(sentences) < 2:
            continue
        instruction = " ".join(sentences)
        prompt = (f"Edit `{source.name}`. {instruction} Reply with the whole excerpt, edited.\n\n"
                  f"```python\n{excerpt}```\n")
        trace = "".join(lines) + excerpt[len(edited_part):]
        trace_ids = tokenizer.encode(f"```python\n{trace}").ids
        if len(trace_ids) < trace_length or count_tokens(tokenizer, prompt) > lengths.prompt_max:
            continue  # edits that quote long lines can push the prompt over
        requests.append(make_request(tokenizer, NAME, len(requests), prompt, trace_ids,
                                     trace_length, lengths))
    return requests
