"""The documentation against the code: docs/api.md's signatures, and every
shell and Python snippet of README.md and docs/ that runs without a GPU.

A fenced snippet names its language. ``bash`` and ``python`` snippets run
as they stand (where vLLM 0.20, the README's line, is installed), in the
repository root, in an environment without ``TRITON_INTERPRET`` (as a
user's shell has it), unless the line before the fence says otherwise:

    <!-- snippet: gpu -->                  needs a CUDA GPU
    <!-- snippet: not run: REASON -->      e.g. installs packages, or a sketch with placeholders

``vllm-sampling-plugin`` and ``python3`` in a shell snippet are this
checkout's command and this interpreter.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import stat
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import fresh_interpreter
from tests.commands import environment
from tests.integration.helpers import REPO_ROOT
from tests.vllm_lines import needs_vllm_line
from vllm_sampling_plugin import ops

DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
RUN_LANGUAGES = ("bash", "python")
MARKER = re.compile(r"<!-- snippet: (gpu|not run: \S.*?) -->")
FENCE = re.compile(r"^```(\S*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Snippet:
    where: str  # "docs/api.md:27", the fence's line
    language: str
    code: str
    marker: str | None  # "gpu", "not run: ...", or None: it runs


def snippets() -> list[Snippet]:
    found = []
    for path in DOCUMENTS:
        text = path.read_text()
        for fence in FENCE.finditer(text):
            line = text.count("\n", 0, fence.start()) + 1
            before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = MARKER.fullmatch(before.strip())
            found.append(Snippet(f"{path.relative_to(REPO_ROOT)}:{line}", fence.group(1),
                                 fence.group(2), marker.group(1) if marker else None))
    return found


SNIPPETS = snippets()
RUNNABLE = [s for s in SNIPPETS if s.language in RUN_LANGUAGES and s.marker is None]


def test_every_fence_names_its_language_and_markers_sit_on_shell_or_python():
    unnamed = [s.where for s in SNIPPETS if not s.language]
    assert unnamed == [], "name the language after the opening ``` (text for output)"
    misplaced = [s.where for s in SNIPPETS if s.marker and s.language not in RUN_LANGUAGES]
    assert misplaced == []


def test_no_indented_code_blocks():
    """This check reads fences only: an indented block would go unchecked."""
    indented = []
    for path in DOCUMENTS:
        outside_fences = FENCE.sub("", path.read_text())
        for block in re.finditer(r"\n\n( {4}\S.*)", outside_fences):
            if not re.match(r" {4}([-*|]|\d+\.)", block.group(1)):  # list and table continuations
                indented.append(f"{path.relative_to(REPO_ROOT)}: {block.group(1).strip()}")
    assert indented == [], "use a fenced block"


@pytest.fixture(scope="module")
def commands_dir(tmp_path_factory) -> Path:
    """``vllm-sampling-plugin`` and ``python3`` of the checkout under test."""
    directory = tmp_path_factory.mktemp("bin")
    for name, line in (
        ("vllm-sampling-plugin", f'exec "{sys.executable}" -m vllm_sampling_plugin.cli "$@"'),
        ("python3", f'exec "{sys.executable}" "$@"'),
    ):
        path = directory / name
        path.write_text(f"#!/bin/sh\n{line}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return directory


# A shell snippet that would change this machine or run for long is never
# run, marker or not: one left unmarked fails here instead of installing
# packages, starting servers or writing gigabytes of checkpoints.
NEVER_RUN = re.compile(
    r"\bpip install\b|\bvenv\b|\bpytest\b|\bvllm serve\b|\bsoak\b|\bcheckpoint\b"
    r"|\bbench(marks)?(\.| )(sampler|topk_topp|rejection|ngram|upstream)\b"
    r"|\bbench(marks)?(\.| )e2e\b(?!.*--render)"
    r"|\bgpu-check\.sh\b"
)


@needs_vllm_line("0.20", why="the README's set-up installs it: where a newcomer runs the snippets")
@pytest.mark.parametrize("snippet", RUNNABLE, ids=[s.where for s in RUNNABLE])
def test_snippet_runs(snippet, commands_dir):
    if snippet.language == "bash":
        for line in snippet.code.splitlines():
            if found := NEVER_RUN.search(line.split("#", 1)[0]):
                pytest.fail(f"{snippet.where} runs {found.group(0)!r}: mark it "
                            "<!-- snippet: gpu --> or <!-- snippet: not run: REASON -->")
    env = environment({"TRITON_INTERPRET": None})
    env["PATH"] = f"{commands_dir}:{env['PATH']}"
    if snippet.language == "bash":
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", snippet.code],
                              capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300)
    else:
        proc = fresh_interpreter.run(["-c", snippet.code], env=env, cwd=REPO_ROOT, timeout=300)
    assert proc.returncode == 0, f"{snippet.where}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


# docs/api.md: one table row per public op, `ops.NAME(...)` | what | details.
API_ROW = re.compile(r"^\| `ops\.(\w+)(\(.*?\))` \| (.*?) \| .* \|$", re.MULTILINE)
PUBLIC_OPS = ("sample", "rejection_sample", "ngram_propose", "apply_logit_bias_")


def documented_signature(function) -> str:
    """``(a, b=None, *, c=False)``: the signature as docs/api.md writes it,
    without annotations."""
    parts, keyword_only_marked = [], False
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY and not keyword_only_marked:
            parts.append("*")
            keyword_only_marked = True
        text = parameter.name
        if parameter.default is not parameter.empty:
            default = parameter.default
            text += "=" + (json.dumps(default) if isinstance(default, str) else repr(default))
        parts.append(text)
    return f"({', '.join(parts)})"


def first_docstring_line(function) -> str:
    return inspect.getdoc(function).splitlines()[0].replace("``", "`")


def api_rows() -> dict[str, tuple[str, str]]:
    text = (REPO_ROOT / "docs" / "api.md").read_text()
    return {name: (signature, what) for name, signature, what in API_ROW.findall(text)}


def test_api_md_signatures_are_the_codes():
    rows = api_rows()
    assert sorted(rows) == sorted(PUBLIC_OPS)
    for name, (signature, _) in rows.items():
        real = documented_signature(getattr(ops, name))
        assert f"ops.{name}{signature}" == f"ops.{name}{real}", "docs/api.md must show the code's"


def test_api_md_summaries_start_with_the_docstrings_first_lines():
    for name, (_, what) in api_rows().items():
        assert what.startswith(first_docstring_line(getattr(ops, name))), name


def test_documented_signature_marks_keyword_only_and_quotes_strings():
    def op(a, b=None, *, c=False, d="x"):
        pass

    assert documented_signature(op) == '(a, b=None, *, c=False, d="x")'


def test_api_md_launcher_names_exist():
    text = (REPO_ROOT / "docs" / "api.md").read_text()
    launchers = text[text.index("Runner-facing launchers"):text.index("## Randomness")]
    names = re.findall(r"`ops\.([\w.]+)`", launchers)
    assert len(names) >= 6
    for dotted in names:
        module, _, attribute = f"vllm_sampling_plugin.ops.{dotted}".rpartition(".")
        assert callable(getattr(importlib.import_module(module), attribute)), dotted


def test_package_summary_is_the_readmes():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    summary = pyproject["project"]["description"]
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    assert summary in readme


def test_install_steps_name_the_extra_that_draws_the_plots():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert "matplotlib" in pyproject["project"]["optional-dependencies"]["bench"]
    install = (REPO_ROOT / "README.md").read_text().split("## Install", 1)[1].split("\n## ")[0]
    assert "[bench]" in install


def test_no_doc_sends_users_to_vllm_serve_help():
    # `vllm serve --help` fails where vLLM finds no GPU; `info` works anywhere.
    offenders = [str(path.relative_to(REPO_ROOT)) for path in DOCUMENTS
                 if "serve --help" in path.read_text()]
    assert offenders == []
