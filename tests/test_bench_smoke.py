"""The benchmarks still start: ``python -m bench.<name> --help`` answers, each module imports, and every name
a benchmark takes from the provider (at module level or inside a function, where most of them are) exists.
So moving engine code cannot break a benchmark unseen. Nothing here starts Spark or runs a benchmark."""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH = REPO_ROOT / "bench"
BENCHMARKS = [
    "airflow_modes",
    "connect_refresh",
    "fixed_cost",
    "fk_join",
    "floor",
    "floor_windowed",
    "global_table",
    "joins_view",
    "multiway",
    "object_store",
    "self_join",
    "sweep",
    "windowed",
    "windowed_table",
]
#: The modules the benchmarks share, imported too.
SHARED = ["common", "datagen"]
PROJECT_PACKAGES = ("airflow_provider_fkjoin", "bench")
AIRFLOW_LAYER = tuple(
    f"airflow_provider_fkjoin.{package}"
    for package in ("hooks", "operators", "sensors", "triggers", "plugins")
)


def test_every_benchmark_is_listed() -> None:
    modules = {path.stem for path in BENCH.glob("*.py")} - {"__init__"}
    assert modules == set(BENCHMARKS) | set(SHARED)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_help(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m bench.{name} "), done.stdout[:300]
    assert "--json-out" in done.stdout


def _project_imports(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import of a project module in ``path``, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PROJECT_PACKAGES:
                found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [
                (alias.name, []) for alias in node.names if alias.name.split(".")[0] in PROJECT_PACKAGES
            ]
    return found


def _is_airflow_layer(module_name: str) -> bool:
    """The provider's Airflow modules import Airflow, which sets up an AIRFLOW_HOME: checked in a child."""
    return module_name.startswith(AIRFLOW_LAYER)


#: Resolves ``(module, names)`` pairs, and the functions ``--noop-dags-test`` wraps by name; prints what
#: is missing as JSON. Run from the repository's root, in a child process with its own AIRFLOW_HOME.
RESOLVE = """
import importlib, json, sys
from bench.airflow_modes import TRACED
missing = []
for module_name, names in json.loads(sys.argv[1]):
    module = importlib.import_module(module_name)
    missing += [f"{module_name}.{name}" for name in names if not hasattr(module, name)]
for _, module_name, path in TRACED:
    owner = importlib.import_module(module_name)
    try:
        for part in path.split("."):
            owner = getattr(owner, part)
    except AttributeError:
        missing.append(f"{module_name}.{path}")
print(json.dumps(missing))
"""


@pytest.fixture
def repo_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench`` importable, as ``python -m bench.<name>`` from the repository's root finds it."""
    monkeypatch.syspath_prepend(str(REPO_ROOT))


@pytest.mark.parametrize("name", BENCHMARKS + SHARED)
@pytest.mark.usefixtures("repo_on_path")
def test_imports(name: str) -> None:
    importlib.import_module(f"bench.{name}")
    missing = []
    for module_name, names in _project_imports(BENCH / f"{name}.py"):
        if _is_airflow_layer(module_name):
            continue
        module = importlib.import_module(module_name)
        for attribute in names:
            if not hasattr(module, attribute):
                try:
                    importlib.import_module(f"{module_name}.{attribute}")
                except ImportError:
                    missing.append(f"{module_name}.{attribute}")
    assert not missing, f"bench/{name}.py imports names that do not exist: {missing}"


def test_airflow_layer_imports(tmp_path: Path) -> None:
    """What ``bench.airflow_modes`` and its DAGs take from the provider's Airflow modules, and the
    functions (Airflow's and the provider's) that ``--noop-dags-test`` wraps by name, all exist."""
    pytest.importorskip("airflow")
    imports = [
        pair
        for path in (BENCH / "airflow_modes.py", BENCH / "dags" / "fkjoin_bench_modes.py")
        for pair in _project_imports(path)
        if _is_airflow_layer(pair[0])
    ]
    assert imports, "no import of the provider's Airflow modules found"
    done = subprocess.run(
        [sys.executable, "-c", RESOLVE, json.dumps(imports)],
        cwd=REPO_ROOT,
        env={**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
