"""Cross-references name things that exist. Every Sphinx role (``:func:``, ``:class:``, ``:mod:``,
``:meth:``, ``:data:``, ``:attr:``, ``:exc:``) and every relative module name in double backquotes (such
as ``.watermarks``) in the package's docstrings and comments, and every dotted ``airflow_provider_fkjoin.…``
name there, in ``README.md`` and in ``docs/``, resolves: the module imports, the object is an attribute.

A relative reference is resolved as a relative import of the module it is written in would be
(``.x`` is a sibling of that module, ``..x`` a sibling of its package), so a module that moved to another
layer leaves its references dangling here rather than silently. A bare name resolves in the module's
namespace (including names imported inside functions or under ``TYPE_CHECKING``), then in the enclosing
class. Pure: imports the package (and with it pyspark's Python side and Airflow), starts no JVM.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import os
import re
import tempfile
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

# Airflow reads AIRFLOW_HOME when first imported (the Airflow-layer modules import it): keep it isolated.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="fkjoin-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "airflow_provider_fkjoin"
ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc|obj|const):`(?P<target>[^`]+)`")
RELATIVE = re.compile(r"(?<!`)``(?P<target>\.{1,3}[A-Za-z_]\w*(?:\.\w+)*)``(?!`)")
DOTTED = re.compile(rf"(?<![\w./])(?P<target>{PACKAGE}(?:\.\w+)+)")
#: Repository paths the docs name that a build or a run creates: not in a fresh checkout.
GENERATED_PATHS = {"airflow_provider_fkjoin/engine/runtime/jars/fkjoin-engine.jar", "bench/data/"}
REPO_PATH = re.compile(
    r"`(?P<path>(?:airflow_provider_fkjoin|tests|bench|scripts|dags|docker|jvm|docs)/[^`\s*]*)`"
)
BENCH_MODULE = re.compile(r"`bench\.(?P<name>\w+)`")


@dataclass(frozen=True)
class Reference:
    """One cross-reference: where it is written, in which module (and class), and what it names."""

    where: str
    target: str
    module: str | None = None
    cls: str | None = None


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _docstrings(tree: ast.Module) -> Iterator[tuple[int, str, str | None]]:
    """(first line, text, enclosing class) of every docstring in a module."""

    def visit(node: ast.AST, cls: str | None) -> Iterator[tuple[int, str, str | None]]:
        body = getattr(node, "body", None)
        if isinstance(body, list) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                yield first.lineno, first.value.value, cls
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, child.name if cls is None else f"{cls}.{child.name}")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from visit(child, cls)

    yield from visit(tree, None)


def _matches(text: str, line: int, patterns: tuple[re.Pattern[str], ...]) -> Iterator[tuple[int, str]]:
    """(line, target) of every match of ``patterns`` in ``text``, which starts at ``line``."""
    for pattern in patterns:
        for match in pattern.finditer(text):
            yield line + text.count("\n", 0, match.start()), match.group("target")


def _comments(source: str) -> Iterator[tuple[int, str, str | None]]:
    """(line, text, None) of every comment in a module (``#:`` documents an attribute)."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string, None


def docstring_references() -> list[Reference]:
    """Every cross-reference in the package's docstrings and comments."""
    found = []
    for path in sorted((REPO / PACKAGE).rglob("*.py")):
        module = _module_name(path)
        source = path.read_text()
        for line, text, cls in [*_docstrings(ast.parse(source, str(path))), *_comments(source)]:
            for number, target in _matches(text, line, (ROLE, RELATIVE, DOTTED)):
                where = f"{path.relative_to(REPO)}:{number}"
                found.append(Reference(where, target, module, cls))
    return found


def markdown_references() -> list[Reference]:
    """Every dotted name of the package (and any Sphinx role) in README.md and docs/."""
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for _, target in _matches(line, number, (ROLE, DOTTED)):
                found.append(Reference(f"{path.relative_to(REPO)}:{number}", target))
    return found


@cache
def _imported_names(module: str) -> dict[str, str]:
    """Alias -> absolute dotted name, for every import anywhere in a module (functions, TYPE_CHECKING)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    package = module if spec.submodule_search_locations is not None else module.rpartition(".")[0]
    names = {}
    for node in ast.walk(ast.parse(Path(spec.origin).read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                head = alias.name.partition(".")[0]  # ``import a.b`` binds ``a``
                names[alias.asname or head] = alias.name if alias.asname else head
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
    return names


def _has_attribute(obj: Any, name: str) -> tuple[bool, Any]:
    if hasattr(obj, name):
        return True, getattr(obj, name)
    # a dataclass or pydantic field without a default is an annotation, not a class attribute
    fields = {
        field
        for klass in getattr(obj, "__mro__", ())
        for field in (*getattr(klass, "__annotations__", {}), *getattr(klass, "model_fields", {}))
    }
    return name in fields, None


def lookup(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute (chain) of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except (ImportError, ValueError):
            continue
        obj: Any = importlib.import_module(name)
        for attribute in parts[cut:]:
            found, obj = _has_attribute(obj, attribute)
            if not found:
                return False
        return True
    return False


def resolves(reference: Reference) -> bool:
    """Whether a reference names something that exists, read as the module it is written in reads it."""
    target = reference.target.lstrip("~!").removesuffix("()")
    module = reference.module
    if module is None:
        return lookup(target)
    if target.startswith("."):
        spec = importlib.util.find_spec(module)
        assert spec is not None
        package = module if spec.submodule_search_locations is not None else module.rpartition(".")[0]
        try:
            return lookup(importlib.util.resolve_name(target, package))
        except ImportError:  # more dots than the package has parents
            return False
    head, _, rest = target.partition(".")
    candidates = [f"{module}.{target}"]
    if reference.cls:
        candidates.append(f"{module}.{reference.cls}.{target}")
    imported = _imported_names(module)
    if head in imported:
        candidates.append(imported[head] + (f".{rest}" if rest else ""))
    candidates.append(target)
    return any(lookup(candidate) for candidate in candidates)


DOCSTRING_REFERENCES = docstring_references()
MARKDOWN_REFERENCES = markdown_references()


def test_references_are_found() -> None:
    """The scan sees the references the package is known to have, so an empty scan cannot pass."""
    roles = [ref for ref in DOCSTRING_REFERENCES if not ref.target.startswith(PACKAGE)]
    assert len(roles) > 100, f"only {len(roles)} docstring cross-references found"
    assert len(MARKDOWN_REFERENCES) > 5, f"only {len(MARKDOWN_REFERENCES)} references found in the docs"


@pytest.mark.parametrize("source", ["docstrings", "docs"])
def test_every_reference_resolves(source: str) -> None:
    references = DOCSTRING_REFERENCES if source == "docstrings" else MARKDOWN_REFERENCES
    dangling = [f"{ref.where}: {ref.target}" for ref in references if not resolves(ref)]
    assert not dangling, f"{len(dangling)} cross-references name nothing that exists:\n" + "\n".join(dangling)


def test_repository_paths_in_the_docs_exist() -> None:
    """A file or folder the docs name in backquotes (``tests/tiers.py``) is in the repository."""
    missing = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for match in REPO_PATH.finditer(line):
                named = match.group("path")
                if named not in GENERATED_PATHS and not (REPO / named).exists():
                    missing.append(f"{path.relative_to(REPO)}:{number}: {named}")
    assert not missing, "the docs name paths that do not exist:\n" + "\n".join(missing)


def test_development_guide_lists_every_benchmark() -> None:
    """``docs/development.md`` names each runnable ``bench`` module, and only modules that exist."""
    text = (REPO / "docs" / "development.md").read_text()
    named = set(BENCH_MODULE.findall(text))
    runnable = {
        path.stem for path in (REPO / "bench").glob("*.py") if '__name__ == "__main__"' in path.read_text()
    }
    assert named, "docs/development.md names no bench module"
    assert not runnable - named, f"benchmarks missing from docs/development.md: {sorted(runnable - named)}"
    assert not named - runnable, f"docs/development.md names no such benchmark: {sorted(named - runnable)}"
