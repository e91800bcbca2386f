"""docs/architecture.md's trees name every module of the package and of the
lab beside it (benchmarks/), and every module opens with a comment saying
the one idea it holds."""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vllm_sampling_plugin"
LAB = ROOT / "benchmarks"


def _modules(root: pathlib.Path) -> list[pathlib.Path]:
    return sorted(
        p for p in root.rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts
    )


def _tree_names(root: pathlib.Path) -> set[str]:
    """The file names in docs/architecture.md's code block that draws ``root``."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    tree = next(block for block in text.split("```")[1::2]
                if block.removeprefix("text\n").startswith(f"{root.name}/"))
    return set(re.findall(r"[\w]+\.py", tree))


@pytest.mark.parametrize("root", [PACKAGE, LAB], ids=lambda root: root.name)
def test_architecture_tree_names_every_module(root):
    missing = [str(p.relative_to(root)) for p in _modules(root) if p.name not in _tree_names(root)]
    assert not missing, f"docs/architecture.md's {root.name}/ tree lacks {missing}"


@pytest.mark.parametrize("root", [PACKAGE, LAB], ids=lambda root: root.name)
def test_every_module_opens_with_its_idea(root):
    silent = [
        str(p.relative_to(root))
        for p in _modules(root)
        if not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert not silent, f"modules without an opening docstring: {silent}"


def _imported_roots(path: pathlib.Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_ops_never_import_vllm():
    ops = [p for p in (PACKAGE / "ops").rglob("*.py") if "__pycache__" not in p.parts]
    offenders = [str(p.relative_to(PACKAGE)) for p in ops if "vllm" in _imported_roots(p)]
    assert not offenders, f"ops/ must not import vllm: {offenders}"


def test_the_package_never_imports_the_lab():
    """benchmarks/ is not in the wheel: an installed plugin importing it would fail."""
    modules = [p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts]
    offenders = [str(p.relative_to(PACKAGE)) for p in modules if "benchmarks" in _imported_roots(p)]
    assert not offenders, f"the package imports benchmarks/: {offenders}"


def test_decisions_never_import_vllm():
    """The decisions that need no vLLM live outside integration/ and are
    tested without it: the speculation policy and the FlashInfer choice."""
    decisions = [PACKAGE / "policy.py", PACKAGE / "selection.py"]
    offenders = [p.name for p in decisions if "vllm" in _imported_roots(p)]
    assert not offenders, f"these decide without vLLM and must not import it: {offenders}"


def test_runtime_code_carries_no_dated_runs_or_gpu_names():
    """Issue 60: measurements live in data files and docs; the code says why
    in words that stay true when the next run lands."""
    dated_or_named = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b[HAB]\d00\b")
    offenders = [f"{path.relative_to(PACKAGE)}:{number}"
                 for path in sorted(PACKAGE.rglob("*.py"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if dated_or_named.search(line)]
    assert not offenders, offenders
