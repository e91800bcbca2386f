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
from packaging.version import Version

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


def test_benchmarks_doc_names_the_extra_that_draws_the_plots():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert "matplotlib" in pyproject["project"]["optional-dependencies"]["bench"]
    assert '".[bench]"' in (REPO_ROOT / "docs" / "benchmarks.md").read_text()


def test_no_doc_sends_users_to_vllm_serve_help():
    # `vllm serve --help` fails where vLLM finds no GPU; `info` works anywhere.
    offenders = [str(path.relative_to(REPO_ROOT)) for path in DOCUMENTS
                 if "serve --help" in path.read_text()]
    assert offenders == []


# Links: [text](path#anchor) in every document (outside code), and the
# bench-data files a document names in backticks.
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`[^`\n]+`")
DATA_PATH = re.compile(r"`((?:\.\./)*(?:docs/)?(?:lab/)?bench-data/[^`\s]+\.(?:json|png))`")


def heading_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, spaces to
    hyphens, punctuation dropped, a repeated one numbered."""
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", path.read_text()), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in anchors:
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors


def broken_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    broken = []
    for target in LINK.findall(CODE_SPAN.sub("", text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in heading_anchors(resolved):
            broken.append(target)
    for named in DATA_PATH.findall(text):
        if re.search(r"[*{]", named):  # a pattern, not a file
            continue
        if not ((path.parent / named).exists() or (REPO_ROOT / named).exists()):
            broken.append(named)
    return broken


def test_heading_anchors_are_githubs(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("# Title\n## vLLM 0.33: k = 7, the A/A twin (issue 25)\n## Title\n")
    assert heading_anchors(doc) == {"title", "vllm-033-k--7-the-aa-twin-issue-25", "title-1"}


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_link_and_named_data_file_exists(path):
    """Files and anchors that links point at, and bench-data files named in
    backticks (relative to the document or to the repository root)."""
    assert broken_links(path) == []


# What a newcomer reads first (issues 60 and 61).
README = REPO_ROOT / "README.md"
README_MAX_LINES = 110
PARAGRAPH_MAX_WORDS = 100
BENCHMARKS_MAX_LINES = 600


def readme_sections() -> dict[str, str]:
    """README.md's ``## `` sections by heading."""
    parts = re.split(r"^## (.+)$", README.read_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_readme_is_short_and_its_paragraphs_too():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    # Prose only: tables and comments are not paragraphs.
    prose = "\n".join(line for line in FENCE.sub("", text).splitlines()
                      if not line.startswith(("|", "<!--")))
    long = [p[:60] for p in re.split(r"\n\s*\n", prose) if len(p.split()) > PARAGRAPH_MAX_WORDS]
    assert long == []


def test_readme_table_is_the_rendered_one():
    """The README's "your vLLM -> what it does -> measured gain" table reads
    data/measurements.json through parts.readme_markdown(), as info does."""
    from tests.scripts_dir import load_script
    from vllm_sampling_plugin.integration.parts import readme_markdown

    render = load_script("render_docs")
    assert render.between(README.read_text(), "vllm table") == readme_markdown()


def test_the_first_install_command_installs_the_checkout():
    """Item 1: the package is not on a registry; the first `pip install` a
    reader meets installs the directory they cloned."""
    installs = re.findall(r"^(?:python3 -m )?pip install (\S+)", README.read_text(), re.MULTILINE)
    assert installs and installs[0] == "."
    assert "vllm-sampling-plugin" not in " ".join(installs)


def test_readme_says_which_vllm_the_test_extra_installs_and_why():
    """Item 8: the extra's pin and the README's words agree."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    vllm = next(Requirement(r) for r in pyproject["project"]["optional-dependencies"]["test"]
                if Requirement(r).name == "vllm")
    assert vllm.specifier.contains(Version("0.20.2")) and not vllm.specifier.contains(Version("0.21.0"))
    test = " ".join(readme_sections()["Test"].split())
    assert "The test extra installs vLLM 0.20.x because" in test


QUICK = REPO_ROOT / "tests" / "quick.txt"


def test_readme_quick_tests_exist_and_say_how_long_they_take():
    """Item 2: the quick command reads tests/quick.txt (pytest's @file), whose
    paths exist and leave out the slow statistical tests; the README gives
    its time and the full suite's."""
    assert "python3 -m pytest @tests/quick.txt" in readme_sections()["Test"]
    paths = QUICK.read_text().split()
    assert paths and all((REPO_ROOT / p).is_file() for p in paths), paths
    slow = [p for p in paths
            if re.search(r"^\s*@pytest\.mark\.slow\b", (REPO_ROOT / p).read_text(), re.MULTILINE)]
    assert slow == []
    test = " ".join(readme_sections()["Test"].split())
    assert re.search(r"The quick command above passes in about \d+ minutes on a 2-core machine "
                     r"without a GPU", test)
    assert "The full suite, `python3 -m pytest tests`, takes about an hour" in test


def test_flashinfer_values_are_said_in_one_sentence_everywhere():
    """Item 6: the README, docs/configuration.md and `info` (tests/test_cli.py)
    give config.FLASHINFER_VALUES, and nothing says FlashInfer is on "where
    supported" beside it."""
    from vllm_sampling_plugin import config

    for path in (README, REPO_ROOT / "docs" / "configuration.md"):
        text = " ".join(path.read_text().split())
        assert config.FLASHINFER_VALUES in text, path
        assert "on where supported" not in text, path


def test_speculation_defaults_are_the_codes_everywhere():
    """Item 6: the lines where adaptive is the default policy, and where the
    plugin verifies by default, as the defaults table
    (integration/settings/defaults.py) answers for each measured release's
    shapes, are the ones the README and docs/configuration.md name."""
    from vllm_sampling_plugin import config
    from vllm_sampling_plugin.integration.settings.defaults import defaults
    from vllm_sampling_plugin.integration.version import LINE_SEAMS

    adaptive = [line for line, seams in LINE_SEAMS.items()
                if defaults(seams).get(config.SPECULATION_POLICY_ATTR) == config.ADAPTIVE]
    # The documents name no list of releases (adding one touches only the
    # measured-release table), so the rule they state must hold for every row.
    later = [line for line in LINE_SEAMS if Version(line) >= Version("0.32")]
    assert adaptive == ["0.20", *later]
    configuration = " ".join((REPO_ROOT / "docs" / "configuration.md").read_text().split())
    assert ("| default | `adaptive` wherever the plugin owns the speculator: vLLM 0.20, and "
            "0.32 onward") in configuration
    assert "keeps upstream's fixed k" not in configuration
    assert "| adaptive where the plugin owns the speculator: 0.20, and 0.32 onward |" in README.read_text()
    verifying = [line for line, seams in LINE_SEAMS.items()
                 if defaults(seams).get(config.VERIFICATION_ATTR) == config.PLUGIN]
    assert verifying == later
    assert ("| default | `plugin` wherever the plugin owns the verification: vLLM 0.32 "
            "onward") in configuration
    assert "| plugin where the plugin owns the verification: 0.32 onward |" in README.read_text()


# A measured ratio as the documents write it: 1.07x, 0.992-1.058x.
FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?:-\d+\.\d+)?x\b")


def test_a_figure_in_two_documents_comes_from_the_one_source():
    """Item 6 and issue 60: a ratio that the README, docs/compatibility.md or
    docs/configuration.md share with another of them is in
    data/measurements.json (which `info` prints) or in docs/benchmarks.md's
    summary, so two documents cannot quote one cell differently from it."""
    from vllm_sampling_plugin import measurements

    sources = measurements.PATH.read_text() + (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    where: dict[str, set[str]] = {}
    for name in ("README.md", "docs/compatibility.md", "docs/configuration.md"):
        for figure in FIGURE.findall((REPO_ROOT / name).read_text()):
            where.setdefault(figure, set()).add(name)
    shared = {figure for figure, names in where.items() if len(names) > 1}
    assert shared, "the check reads no figure: FIGURE no longer matches the documents"
    assert sorted(shared - set(FIGURE.findall(sources))) == []


def test_readme_describes_benchmarks_md_as_it_is():
    """Item 6: the GPUs and vLLM lines docs/benchmarks.md measured are the ones
    the README's documentation list names."""
    summary = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    bullet = next(line for line in README.read_text().splitlines()
                  if line.startswith("- [docs/benchmarks.md]"))
    for gpu in sorted(set(re.findall(r"\bH[12]00\b", summary))):
        assert gpu in bullet
    for line in sorted(set(re.findall(r"^\| (0\.\d\d) \|", summary, re.MULTILINE))):
        assert line in bullet


def test_benchmarks_md_is_a_summary():
    """Issue 60: at most 600 lines; every question's table names its GPU."""
    text = (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    assert len(text.splitlines()) <= BENCHMARKS_MAX_LINES
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    assert len(sections) >= 5
    for section in sections:
        if "|---" in section:
            assert re.search(r"\bH[12]00\b", section), section.splitlines()[0]


def test_render_docs_replaces_only_between_its_markers(tmp_path):
    """scripts/render_docs.py, which a release added to the measured table is
    followed by: the text between the markers is replaced, the rest kept, and
    a second run changes nothing."""
    from tests.scripts_dir import load_script

    render = load_script("render_docs")
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- t: begin -->\n| old |\n<!-- t: end -->\noutro\n")
    assert render.replace_between(page, "t", "| new |\n| row |")
    assert page.read_text() == "intro\n<!-- t: begin -->\n| new |\n| row |\n<!-- t: end -->\noutro\n"
    assert not render.replace_between(page, "t", "| new |\n| row |")
