"""The engine's shape: layers import only downwards, no import circles, and nothing imports Airflow.

The layers and the other import rules are contracts in ``pyproject.toml`` (``[tool.importlinter]``), checked
by import-linter; the circle check is here because import-linter has no contract for it. The tests' own rule,
no test module imports another (what they share lives in ``tests/support/``), is checked here too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import grimp
from support.modules import TESTS, imported_names, imports_of_test_modules, is_test_module

REPO = Path(__file__).resolve().parents[1]
ENGINE = "airflow_provider_fkjoin.engine"


def test_import_contracts_are_kept():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout


def test_the_package_has_no_import_circles():
    graph = grimp.build_graph("airflow_provider_fkjoin", exclude_type_checking_imports=True)
    modules = graph.modules
    imports = {module: graph.find_modules_directly_imported_by(module) & modules for module in modules}
    try:
        tuple(TopologicalSorter(imports).static_order())
    except CycleError as error:
        raise AssertionError(f"import circle: {' -> '.join(error.args[1])}") from None


def test_every_engine_module_sits_in_a_layer():
    """A module added at the engine's top level would escape the layer contract."""
    top = {path.stem for path in (REPO / "airflow_provider_fkjoin" / "engine").glob("*.py")}
    assert top == {"__init__", "audit", "runner"}


def test_no_test_module_imports_another_test_module():
    """Tests share builders, worlds and constants through ``tests/support/`` (or the helper modules beside
    the tests), never by importing a ``test_*`` module: every module under ``tests/`` is read with ``ast``
    (nothing imported), whatever the import's form or place (in a function, under ``TYPE_CHECKING``)."""
    assert Path(__file__).resolve().parent == TESTS
    for form in (
        "import test_a",
        "from test_a import b",
        "from tests.test_a import b",
        "from airflow.test_a import b",
        "from . import test_a",
        "def f():\n    import test_a.b",
        "importlib.import_module('test_a')",
    ):
        assert any(is_test_module(name) for _, name in imported_names(ast.parse(form))), form
    found = imports_of_test_modules()
    assert not found, "test modules imported (move what they share to tests/support/): " + "; ".join(found)
