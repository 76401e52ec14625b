"""The test modules read as source, with ``ast`` (nothing imported): the tests a module defines, and the test
modules any module under ``tests/`` imports (none may: what tests share lives in ``support/``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
#: The functions that import a module named by a string.
IMPORT_CALLS = {"import_module", "__import__"}


def defined_tests(path: Path) -> set[str]:
    """The names of the tests ``path`` defines at its top level (functions and classes named ``test_*``)."""
    tree = ast.parse(path.read_text(), str(path))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds) and node.name.startswith("test_")}


def is_test_module(name: str) -> bool:
    """Whether a dotted name (``test_x``, ``tests.test_x``, ``airflow.test_x.y``) names a test module."""
    return any(part.startswith("test_") for part in name.split("."))


def imported_names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every module (and every name taken from one) the tree imports, with its line: ``import a.b`` gives
    ``a.b``, ``from a import b`` gives ``a`` and ``a.b``, ``from . import b`` gives ``b``; a call of
    ``importlib.import_module`` or ``__import__`` with a literal name gives that name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.module:
                yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}" if node.module else alias.name
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            function = node.func
            called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
            if called in IMPORT_CALLS and isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value


def imports_of_test_modules(root: Path = TESTS) -> list[str]:
    """``path:line: name`` for every import of a test module by a module under ``root`` (one per line)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        tree = ast.parse(path.read_text(), str(path))
        lines: dict[int, str] = {}
        for line, name in imported_names(tree):
            if is_test_module(name):
                lines.setdefault(line, name)
        found += [f"{path.relative_to(root)}:{line}: {name}" for line, name in sorted(lines.items())]
    return found
