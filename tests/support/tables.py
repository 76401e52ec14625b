"""Tables built once per module and shared: read-only inputs, private copies, and saved states put back.

A Spark write of a tiny Delta table costs about a second and a refresh several, so test modules build their
inputs once (module scope) and share them:

* tests that only read the inputs use them in place, and :func:`assert_versions_unchanged` (or the
  :class:`SharedTables` guard) checks afterwards that nothing wrote to them;
* a test that changes its inputs gets a private copy (:func:`copy_tables`: the table folders copied, no
  Spark job) at a path of its own, where no output has ever recorded progress;
* a test that needs a state reached by refreshes (inputs and an output after a first refresh, say) restores
  it with :class:`SavedStates`: the folders saved once and copied back to the *same* paths, because an
  output's progress records its inputs' locations.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from helpers import orders_customers
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine import run_spec


def delta_version(path: Path | str) -> int | None:
    """The latest version in the table's ``_delta_log`` (listed, no Spark job); None when there is none."""
    log = Path(str(path).removeprefix("file:")) / "_delta_log"
    versions = [int(f.name[:-5]) for f in log.glob("*.json") if f.name[:-5].isdigit()]
    return max(versions) if versions else None


def delta_versions(paths: Iterable[Path | str]) -> dict[str, int | None]:
    """Each table's latest version, by path."""
    return {str(path): delta_version(path) for path in paths}


def assert_versions_unchanged(before: Mapping[str, int | None]) -> None:
    """No table of ``before`` moved: the guard of tests that share read-only tables."""
    after = delta_versions(before)
    moved = {path: (before[path], after[path]) for path in before if before[path] != after[path]}
    assert not moved, f"a test wrote to tables it shares read-only (version before, after): {moved}"


def forget_cached_logs(spark: SparkSession) -> None:
    """Drop Delta's cached table logs: a folder put back at its path may hold an older version."""
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # type: ignore[union-attr]


def copy_tables(sources: Mapping[str, Path], target: Path) -> dict[str, Path]:
    """Copy each table folder into ``target`` under its name (a private, writable copy; no Spark job)."""
    target.mkdir(parents=True, exist_ok=True)
    copies = {}
    for name, source in sources.items():
        copies[name] = target / name
        shutil.copytree(source, copies[name])
    return copies


class SharedTables:
    """Read-only tables built once (module scope), with a guard that a test left them as they were."""

    def __init__(self, tables: Mapping[str, Path]) -> None:
        self.tables = dict(tables)
        self.versions = delta_versions(self.tables.values())
        assert None not in self.versions.values(), self.versions

    def __getitem__(self, name: str) -> Path:
        return self.tables[name]

    def assert_unchanged(self) -> None:
        assert_versions_unchanged(self.versions)


class SavedStates:
    """Named states of a fixed set of folders (tables), each built once on first use and then restored by
    copying its saved folders back to the same paths.

    ``builders`` maps a state's name to ``(parent, build)``: the state is ``build()`` run over the restored
    ``parent`` state (or over empty folders when the parent is None). ``tables`` is for the caller: the
    names of the paths (and anything else its tests look up).
    """

    def __init__(
        self,
        spark: SparkSession,
        root: Path,
        paths: Iterable[Path],
        builders: Mapping[str, tuple[str | None, Callable[[], None]]],
        tables: Mapping[str, Any] | None = None,
    ) -> None:
        self.spark = spark
        self.tables = dict(tables or {})
        self.root = root
        self.paths = list(paths)
        self.builders = dict(builders)
        self._saved: set[str] = set()

    def _store(self, name: str) -> Path:
        return self.root / "saved-states" / name

    def restore(self, name: str) -> None:
        """Put the folders back as state ``name`` left them (building the state first if need be)."""
        if name not in self._saved:
            self._build(name)
            return
        for index, path in enumerate(self.paths):
            if path.exists():
                shutil.rmtree(path)
            saved = self._store(name) / str(index)
            if saved.exists():
                shutil.copytree(saved, path)
        forget_cached_logs(self.spark)

    def _build(self, name: str) -> None:
        parent, build = self.builders[name]
        if parent is None:
            for path in self.paths:
                if path.exists():
                    shutil.rmtree(path)
            forget_cached_logs(self.spark)
        else:
            self.restore(parent)
        build()
        store = self._store(name)
        for index, path in enumerate(self.paths):
            if path.exists():
                shutil.copytree(path, store / str(index))
        self._saved.add(name)


def orders_customers_spec(root: Path, how: str = "left") -> tuple[dict[str, Any], Path, Path, Path]:
    """The spec and paths ``helpers.orders_customers(spark, root, ...)`` writes, without writing anything:
    ``(spec, orders_path, customers_path, out_path)``."""
    paths = root / "orders", root / "customers", root / "out"
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(paths[0]), "key": ["order_id"]},
        "right": {"path": str(paths[1]), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": how,
        "output": {"path": str(paths[2])},
    }
    return (spec, *paths)


#: ``(spec, orders_path, customers_path, out_path)``: a foreign-key join of orders and customers.
OrdersCustomers = tuple[dict[str, Any], Path, Path, Path]


def orders_customers_states(
    spark: SparkSession,
    root: Path,
    orders: list[tuple],
    customers: list[tuple],
    check_first: Callable[[dict[str, Any], OrdersCustomers], None] | None = None,
) -> tuple[SavedStates, OrdersCustomers]:
    """A module's orders, customers and their foreign-key join output (``how: left``), at the fixed paths of
    :func:`orders_customers_spec` under ``root``, in two saved states built once on first use: ``inputs``
    (``helpers.orders_customers`` wrote the two inputs, no output) and ``refreshed`` (then a first full
    refresh, its result also given to ``check_first``). Returns the states and ``(spec, orders, customers,
    out)``."""
    tables = orders_customers_spec(root)
    spec, orders_path, customers_path, out = tables

    def inputs() -> None:
        assert orders_customers(spark, root, orders, customers)[0] == spec

    def first_refresh() -> None:
        first = run_spec(spec, spark=spark)
        assert first["mode"] == "full", first
        if check_first is not None:
            check_first(first, tables)

    builders = {"inputs": (None, inputs), "refreshed": ("inputs", first_refresh)}
    return SavedStates(spark, root, [orders_path, customers_path, out], builders), tables


def restored(states: tuple[SavedStates, OrdersCustomers], name: str) -> OrdersCustomers:
    """State ``name`` of :func:`orders_customers_states` put back, and a copy of ``(spec, orders,
    customers, out)`` the test may change."""
    states[0].restore(name)
    return copy.deepcopy(states[1])


def put_back(spark: SparkSession, saved: Path, path: Path) -> None:
    """Replace the folder at ``path`` with a copy of ``saved`` (same path, so progress still matches)."""
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(saved, path)
    forget_cached_logs(spark)
