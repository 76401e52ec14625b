"""Safe by construction (``docs/safety.md``; ``docs/concepts/semantics.md``, safe by construction): one test
per class of bad input or interference. Each asserts the error type, that the message names the culprit, and
that no input and no output changed (versions and contents compared before and after); or, where the right
answer is a rebuild, that the output equals the join recomputed from scratch in Python.

``docs/safety.md`` lists every class with the test that keeps it true (``test_safety_doc_is_true``).
"""

from __future__ import annotations

import json
import re
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    CUSTOMERS,
    ORDERS,
    append_rows,
    create_table,
    oracle,
    output_state,
    read_rows,
    rows_at,
    write,
)
from support.modules import defined_tests
from support.stream_table_joins import ORDERS as STREAM_ORDERS
from support.stream_table_joins import PRODUCTS, join_spec
from support.tables import SavedStates, SharedTables, copy_tables, put_back

from airflow_provider_fkjoin.engine import (
    ConcurrentRefreshError,
    FkJoinError,
    InputDataError,
    SpecError,
    noop_result,
    run_spec,
)
from airflow_provider_fkjoin.engine.core import progress as commit_log_module
from airflow_provider_fkjoin.engine.core.errors import FullRebuildRefusedError
from airflow_provider_fkjoin.engine.core.spec import TableRef, load_spec
from airflow_provider_fkjoin.engine.core.trace import phase_listener
from airflow_provider_fkjoin.engine.delta.changes import FeedUnavailable, feed_errors
from airflow_provider_fkjoin.engine.delta.tables import DeltaHandle

ORDER_ROWS = [(1, 10, 5.0), (2, 10, 7.5), (3, 20, 1.0), (4, None, 2.0)]

CUSTOMER_ROWS = [(10, "ann"), (20, "bob"), (30, "cy")]


def snapshot(spark, *paths: Path) -> dict[str, Any]:
    """Each table's version and sorted rows (None when there is no Delta table): compare before/after."""
    state: dict[str, Any] = {}
    for path in paths:
        if not any((path / "_delta_log").glob("*.json")):
            files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
            state[str(path)] = files or None
            continue
        handle = DeltaHandle(spark, TableRef(path=str(path)), "t")
        rows = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows_at(spark, path))
        state[str(path)] = (handle.state().version, rows)
    return state


@pytest.fixture(scope="module")
def inputs(spark, tmp_path_factory: pytest.TempPathFactory) -> SharedTables:
    """``orders``, ``customers`` and ``customers2`` (a second right input, the same rows), written once for
    the module in one folder and never written again."""
    folder = tmp_path_factory.mktemp("safety_inputs")
    write(spark, ORDER_ROWS, ORDERS, folder / "orders")
    write(spark, CUSTOMER_ROWS, CUSTOMERS, folder / "customers")
    write(spark, CUSTOMER_ROWS, CUSTOMERS, folder / "customers2")
    return SharedTables({name: folder / name for name in ("orders", "customers", "customers2")})


@pytest.fixture
def shared(inputs: SharedTables, tmp_path: Path) -> Iterator[dict[str, Path]]:
    """The module's read-only inputs, their folder ``w``, and an output path ``out`` of the test's own;
    afterwards no input may have moved (every refusal's "nothing written" holds for them too)."""
    yield {**inputs.tables, "w": inputs["orders"].parent, "out": tmp_path / "out"}
    inputs.assert_unchanged()


@pytest.fixture
def tables(inputs: SharedTables, warehouse: Path) -> dict[str, Path]:
    """Private copies of the module's ``orders`` and ``customers`` (folders copied, no Spark job) in the
    test's folder ``w``, with its output path ``out``: for a test that changes its inputs."""
    copies = copy_tables({name: inputs[name] for name in ("orders", "customers")}, warehouse)
    return {**copies, "w": warehouse, "out": warehouse / "out"}


@pytest.fixture(scope="module")
def first_refreshed(spark, inputs: SharedTables, tmp_path_factory: pytest.TempPathFactory) -> SavedStates:
    """Outputs after one first refresh over the shared inputs, each built once and put back at the same
    path for every test that starts there: ``unnamed`` (the plain spec) and ``owned`` (with
    ``output.owner: sales.orders_enriched``)."""
    root = tmp_path_factory.mktemp("safety_outputs")
    base = {**inputs.tables, "out": root / "out"}
    specs = {
        "unnamed": fk_spec(base),
        "owned": fk_spec(base, output={"path": str(base["out"]), "owner": "sales.orders_enriched"}),
    }

    def builder(name: str) -> tuple[None, Callable[[], None]]:
        def build() -> None:
            result = run_spec(specs[name], spark=spark)
            assert result["mode"] == "full" and output_state(spark, base["out"]) == oracle(spark, result)

        return None, build

    return SavedStates(spark, root, [base["out"]], {name: builder(name) for name in specs})


@pytest.fixture
def unnamed(first_refreshed: SavedStates, shared: dict[str, Path]) -> dict[str, Path]:
    """:func:`shared`, its ``out`` holding the first refresh of ``fk_spec(unnamed)``."""
    first_refreshed.restore("unnamed")
    return {**shared, "out": first_refreshed.paths[0]}


@pytest.fixture
def owned(first_refreshed: SavedStates, shared: dict[str, Path]) -> dict[str, Path]:
    """:func:`shared`, its ``out`` holding the first refresh of the spec ``sales.orders_enriched`` owns."""
    first_refreshed.restore("owned")
    return {**shared, "out": first_refreshed.paths[0]}


@pytest.fixture(scope="module")
def refreshed_copies(spark, inputs: SharedTables, tmp_path_factory: pytest.TempPathFactory) -> SavedStates:
    """Copies of the module's ``orders`` and ``customers`` and an output after a first refresh of the plain
    spec over them (fixed paths), built once and put back for each test that starts there."""
    root = tmp_path_factory.mktemp("safety_refreshed")
    paths = {"orders": root / "orders", "customers": root / "customers", "out": root / "out", "w": root}

    def build() -> None:
        copy_tables({name: inputs[name] for name in ("orders", "customers")}, root)
        result = run_spec(fk_spec(paths), spark=spark)
        assert result["mode"] == "full" and output_state(spark, paths["out"]) == oracle(spark, result)

    table_paths = [paths["orders"], paths["customers"], paths["out"]]
    return SavedStates(spark, root, table_paths, {"first": (None, build)}, tables=paths)


@pytest.fixture
def refreshed(refreshed_copies: SavedStates) -> dict[str, Path]:
    """Private ``orders`` and ``customers`` (to change), ``out`` after a first refresh of the plain spec."""
    refreshed_copies.restore("first")
    return dict(refreshed_copies.tables)


def fk_spec(tables: dict[str, Path], **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "foreign_key_join",
        "left": {"path": str(tables["orders"]), "key": ["order_id"]},
        "right": {"path": str(tables["customers"]), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": str(tables["out"])},
    }
    spec.update(overrides)
    return spec


def refused(spark, spec: dict, error: type[Exception], *culprits: str, watch: list[Path]) -> str:
    """Run ``spec``, expect ``error`` naming every culprit, and nothing changed in ``watch``."""
    before = snapshot(spark, *watch)
    with pytest.raises(error) as info:
        run_spec(spec, spark=spark)
    message = str(info.value)
    for culprit in culprits:
        assert culprit in message, message
    assert snapshot(spark, *watch) == before
    return message


# ------------------------------------------------------------------ the appended world

#: Each case of ``test_output_changed_by_others_rebuilds``: a foreign rewrite of the output (``{out}``).
INTERFERENCES = [
    "DELETE FROM delta.`{out}` WHERE order_id = 1",
    "UPDATE delta.`{out}` SET name = 'forged' WHERE order_id = 2",
    "RESTORE TABLE delta.`{out}` TO VERSION AS OF 0",
]
#: The one order the appended world appends between its two phases.
APPENDED_ORDER = (5, 30, 9.0)


class AppendedWorld:
    """The scenarios that append an order between two refreshes, each on an output of its own, over one
    pair of inputs (private copies of the module's): phase 0 refreshes every output in full; others then
    write to some outputs (the inputs unchanged; those outputs refreshed again); one order is appended;
    phase 1 refreshes every output; last, each case of :data:`INTERFERENCES` rewrites the output phase 1
    left ``changed`` with (put back at its path for each case), which is refreshed once more.

    ``seen[key]`` holds what each step of a scenario returned or read; a step that raises ends only its
    scenario, and :meth:`results` raises it again in the scenario's tests.
    """

    SCENARIOS = ("changed", "optimized", "scanned", "claimed", "stream")

    def __init__(self, spark, inputs: SharedTables, root: Path) -> None:
        self.spark = spark
        self.tables = {**copy_tables({n: inputs[n] for n in ("orders", "customers")}, root), "w": root}
        self.outs = {name: root / f"out_{name}" for name in self.SCENARIOS}
        self.specs = {name: fk_spec({**self.tables, "out": self.outs[name]}) for name in self.SCENARIOS}
        self.specs["stream"] = stream_spec({**self.tables, "out": self.outs["stream"]})
        owner = {"path": str(self.outs["claimed"]), "owner": "sales.orders_enriched"}
        self.named = fk_spec({**self.tables, "out": self.outs["claimed"]}, output=owner)
        self.seen: dict[str, dict[str, Any]] = defaultdict(dict)
        self.failed: dict[str, Exception] = {}

    def step(self, key: str, action: Callable[[dict[str, Any]], None], after: str | None = None) -> None:
        """Run ``action(seen[key])`` unless ``key`` (or ``after``) already failed; record a failure."""
        if key in self.failed or (after is not None and after in self.failed):
            return
        try:
            action(self.seen[key])
        except Exception as error:
            self.failed[key] = error

    def results(self, *keys: str) -> dict[str, Any]:
        """What the steps of the last of ``keys`` saw, once every one of ``keys`` went through."""
        for key in keys:
            if key in self.failed:
                raise self.failed[key]
        return self.seen[keys[-1]]

    def refresh(self, name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
        return run_spec(spec or self.specs[name], spark=self.spark)

    def checked(self, seen: dict[str, Any], result: dict[str, Any], name: str) -> None:
        """Keep ``result``, the output's rows after it and the oracle at its input versions."""
        seen.update(result=result, state=output_state(self.spark, self.outs[name]))
        seen["oracle"] = oracle(self.spark, result)

    def build(self) -> None:
        spark, outs = self.spark, self.outs
        for name in self.SCENARIOS:  # phase 0
            self.step(name, lambda seen, name=name: seen.update(first=self.refresh(name)))

        def optimize_and_set_a_property(seen: dict[str, Any]) -> None:
            spark.sql(f"OPTIMIZE delta.`{outs['optimized']}`")
            spark.sql(f"ALTER TABLE delta.`{outs['optimized']}` SET TBLPROPERTIES ('team' = 'data')")
            seen["noop"] = self.refresh("optimized")

        def scan_past_the_history(seen: dict[str, Any]) -> None:
            for _ in range(3):
                spark.sql(f"OPTIMIZE delta.`{outs['scanned']}`")
                spark.sql(f"ALTER TABLE delta.`{outs['scanned']}` SET TBLPROPERTIES ('touched' = 'yes')")

        def name_the_owner(seen: dict[str, Any]) -> None:
            seen["precheck"] = noop_result(self.named)
            seen["noop"] = self.refresh("claimed", self.named)

        self.step("optimized", optimize_and_set_a_property)
        self.step("scanned", scan_past_the_history)
        self.step("claimed", name_the_owner)
        delete_order_1 = f"DELETE FROM delta.`{outs['stream']}` WHERE order_id = 1"
        self.step("stream", lambda seen: spark.sql(delete_order_1))

        write(spark, [APPENDED_ORDER], ORDERS, self.tables["orders"], mode="append")

        def scanned_with_a_short_history(seen: dict[str, Any]) -> None:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(commit_log_module, "HISTORY_SCAN", 2)
                self.checked(seen, self.refresh("scanned"), "scanned")
                patch.setattr(commit_log_module, "HISTORY_SCAN", 1000)
                seen["again"] = self.refresh("scanned")

        def claimed(seen: dict[str, Any]) -> None:
            seen["result"] = self.refresh("claimed", self.named)
            properties = DeltaHandle(spark, TableRef(path=str(outs["claimed"])), "output").state().properties
            seen["owner"] = json.loads(properties["fkjoin.owner"])

        def stream(seen: dict[str, Any]) -> None:
            seen["result"] = self.refresh("stream")
            seen["ids"] = sorted(r["order_id"] for r in rows_at(spark, outs["stream"]))

        # phase 1
        self.step("changed", lambda seen: seen.update(second=self.refresh("changed")))
        self.step("optimized", lambda seen: self.checked(seen, self.refresh("optimized"), "optimized"))
        self.step("scanned", scanned_with_a_short_history)
        self.step("claimed", claimed)
        self.step("stream", stream)

        saved = self.tables["w"] / "changed_after_phase_1"
        self.step("changed", lambda seen: shutil.copytree(outs["changed"], saved))
        for interference in INTERFERENCES:

            def rewritten_by_others(seen: dict[str, Any], interference: str = interference) -> None:
                put_back(spark, saved, outs["changed"])
                spark.sql(interference.format(out=outs["changed"]))
                self.checked(seen, self.refresh("changed"), "changed")

            self.step(interference, rewritten_by_others, after="changed")


@pytest.fixture(scope="module")
def appended(spark, inputs: SharedTables, tmp_path_factory: pytest.TempPathFactory) -> AppendedWorld:
    """The :class:`AppendedWorld`, built (all of it) on first use."""
    world = AppendedWorld(spark, inputs, tmp_path_factory.mktemp("safety_appended"))
    world.build()
    return world


# ------------------------------------------------------------------ 1. output ownership and locations


@pytest.mark.parametrize(
    "spelling",
    ["{orders}/", "file://{orders}", "file:{orders}", "{w}/./orders", "{w}/x/../orders", "/{orders}"],
)
def test_output_spelled_as_an_input_is_refused(spark, shared, spelling) -> None:
    out = spelling.format(orders=shared["orders"], w=shared["w"])
    spec = fk_spec(shared, output={"path": out})
    refused(spark, spec, SpecError, "output.path", "left", watch=[shared["orders"], shared["customers"]])


@pytest.mark.parametrize(
    ("output", "culprit"), [("{orders}/enriched", "inside left"), ("{w}", "inside output")]
)
def test_output_nested_with_an_input_is_refused(spark, shared, output, culprit) -> None:
    spec = fk_spec(shared, output={"path": output.format(orders=shared["orders"], w=shared["w"])})
    refused(spark, spec, SpecError, "output.path", culprit, watch=[shared["orders"], shared["customers"]])


@pytest.mark.parametrize(("path", "culprit"), [("out_relative", "relative"), ("ftp://host/out", "ftp")])
def test_relative_path_or_unknown_scheme_is_refused(spark, shared, path, culprit) -> None:
    spec = fk_spec(shared, output={"path": path})
    refused(spark, spec, SpecError, "output.path", culprit, watch=[shared["orders"], shared["customers"]])


def test_same_delta_table_id_on_both_sides_is_refused(spark, shared, tmp_path: Path) -> None:
    copy = tmp_path / "orders_copy"
    shutil.copytree(shared["orders"], copy)
    spec = fk_spec(shared, output={"path": str(copy)})
    refused(
        spark,
        spec,
        SpecError,
        "same Delta table as left",
        watch=[shared["orders"], shared["customers"], copy],
    )


def test_catalog_name_resolving_to_an_input_is_refused(spark, shared) -> None:
    spark.sql(f"CREATE TABLE IF NOT EXISTS default.safety_orders USING delta LOCATION '{shared['orders']}'")
    try:
        spec = fk_spec(shared, output={"name": "default.safety_orders"})
        refused(spark, spec, SpecError, "output.path", "left", watch=[shared["orders"], shared["customers"]])
    finally:
        spark.sql("DROP TABLE IF EXISTS default.safety_orders")


def test_foreign_delta_table_at_output_is_refused_then_adopted(spark, shared) -> None:
    write(spark, [(99, "theirs")], "id long, note string", shared["out"])
    spec = fk_spec(shared)
    refused(
        spark,
        spec,
        SpecError,
        str(shared["out"]),
        "did not create",
        "adopt_existing_output",
        watch=[shared["orders"], shared["customers"], shared["out"]],
    )
    result = run_spec(
        {**spec, "output": {"path": str(shared["out"]), "adopt_existing_output": True}}, spark=spark
    )
    assert result["mode"] == "full"
    assert output_state(spark, shared["out"]) == oracle(spark, result)
    again = run_spec(spec, spark=spark)  # owned now: no adopt flag needed
    assert again["mode"] == "noop"


def test_another_specs_output_is_refused(spark, unnamed) -> None:
    spec = fk_spec(unnamed, right={"path": str(unnamed["customers2"]), "key": ["customer_id"]})
    refused(
        spark,
        spec,
        SpecError,
        "belongs to an unnamed foreign_key_join",
        "adopt_existing_output",
        watch=[unnamed["out"], unnamed["orders"], unnamed["customers2"]],
    )


def test_another_owners_output_is_refused_before_anything_is_read(spark, owned) -> None:
    """Two DAGs, same kind and inputs, different how and columns: the second is refused (it would rebuild
    the first's output on every run, each erasing the other's rows), by the Spark refresh and by the no-JVM
    noop check alike, until it says adopt_existing_output: true."""
    first = fk_spec(owned, output={"path": str(owned["out"]), "owner": "sales.orders_enriched"})
    columns = {"amount": "l.amount", "customer": "r.name"}
    second = fk_spec(
        owned, how="left", columns=columns, output={"path": str(owned["out"]), "owner": "ops.orders_report"}
    )
    watch = [owned["out"], owned["orders"], owned["customers"]]
    refused(
        spark,
        second,
        SpecError,
        "owner 'sales.orders_enriched'",
        "owner 'ops.orders_report'",
        "adopt_existing_output: true",
        watch=watch,
    )
    unnamed = fk_spec(owned, how="left", columns=columns)
    refused(
        spark, unnamed, SpecError, "owner 'sales.orders_enriched'", "an unnamed foreign_key_join", watch=watch
    )
    assert noop_result(second) is None and noop_result(first)["mode"] == "noop"

    second["output"]["adopt_existing_output"] = True
    taken = run_spec(second, spark=spark)
    expected = {key: (amount, name) for key, (_, amount, name) in oracle(spark, taken, how="left").items()}
    assert taken["mode"] == "full"
    assert {r["order_id"]: (r["amount"], r["customer"]) for r in rows_at(spark, owned["out"])} == expected
    owner = json.loads(
        DeltaHandle(spark, TableRef(path=str(owned["out"])), "output").state().properties["fkjoin.owner"]
    )
    assert owner["owner"] == "ops.orders_report"
    refused(spark, first, SpecError, "owner 'ops.orders_report'", watch=watch)


def test_the_same_owner_editing_its_spec_rebuilds_naming_what_changed(spark, owned) -> None:
    output = {"path": str(owned["out"]), "owner": "sales.orders_enriched"}
    edited = fk_spec(owned, how="left", output=output)
    result = run_spec(edited, spark=spark)
    assert (result["mode"], result["reason"]) == ("full", "spec changed since the last refresh: how")
    assert output_state(spark, owned["out"]) == oracle(spark, result, how="left")
    renamed = fk_spec(owned, how="left", columns={"amount": "l.amount * 2", "name": "r.name"}, output=output)
    assert run_spec(renamed, spark=spark)["reason"] == "spec changed since the last refresh: columns"
    doubled = fk_spec(owned, how="left", columns={"amount": "l.amount * 3", "name": "r.name"}, output=output)
    assert run_spec(doubled, spark=spark)["reason"] == "spec changed since the last refresh: columns.amount"
    moved = fk_spec(owned, right={"path": str(owned["customers2"]), "key": ["customer_id"]}, output=output)
    assert run_spec(moved, spark=spark)["mode"] == "full"  # even its inputs: the owner's to change


def test_an_unnamed_output_is_claimed_by_the_same_spec_naming_its_owner(spark, appended) -> None:
    """The appended world's ``claimed``: created by the plain spec, then refreshed by the same spec naming
    its owner before and after an order is appended."""
    seen = appended.results("claimed")
    assert seen["precheck"]["mode"] == "noop" and seen["noop"]["mode"] == "noop"
    assert seen["result"]["mode"] == "incremental"
    assert seen["owner"]["owner"] == "sales.orders_enriched"
    watch = [appended.outs["claimed"], appended.tables["orders"], appended.tables["customers"]]
    refused(spark, appended.specs["claimed"], SpecError, "owner 'sales.orders_enriched'", watch=watch)


def test_non_delta_files_at_output_are_refused(spark, shared) -> None:
    shared["out"].mkdir()
    (shared["out"] / "report.csv").write_text("a,b\n1,2\n")
    watch = [shared["out"], shared["orders"], shared["customers"]]
    refused(spark, fk_spec(shared), SpecError, "holds files", watch=watch)
    assert (shared["out"] / "report.csv").read_text() == "a,b\n1,2\n"


@pytest.mark.parametrize("leftovers", ["data files", "an empty log"])
def test_files_a_killed_create_left_do_not_block_the_rerun(spark, shared, leftovers, tmp_path: Path) -> None:
    """A first refresh killed inside its create leaves a ``_delta_log`` with no commit, and perhaps data
    files no version references; the rerun creates the output over them, reading none of them."""
    (shared["out"] / "_delta_log").mkdir(parents=True)
    if leftovers == "data files":
        stray = tmp_path / "stray"
        rows = [(7, 10, 1.0, "not joined")]
        spark.createDataFrame(rows, ORDERS + ", name string").write.parquet(str(stray))
        for part in stray.glob("part-*.parquet"):
            shutil.copy(part, shared["out"] / part.name)
    result = run_spec(fk_spec(shared), spark=spark)
    assert result["mode"] == "full" and result["output"]["version"] == 0
    assert output_state(spark, shared["out"]) == oracle(spark, result)
    assert run_spec(fk_spec(shared), spark=spark)["mode"] == "noop"


@pytest.mark.parametrize("beside", ["report.csv", "_delta_log/00000000000000000000.checkpoint.parquet"])
def test_a_log_without_commits_beside_other_files_is_still_refused(spark, shared, beside) -> None:
    """Only what a killed create leaves is gone over: a user's file, or a log that holds a checkpoint
    (a copy in progress), is someone's data."""
    (shared["out"] / "_delta_log").mkdir(parents=True)
    (shared["out"] / beside).write_text("theirs")
    watch = [shared["out"], shared["orders"], shared["customers"]]
    refused(spark, fk_spec(shared), SpecError, "holds files", watch=watch)
    assert (shared["out"] / beside).read_text() == "theirs"


def test_a_create_over_leftovers_never_replaces_a_table(spark, shared, monkeypatch) -> None:
    """Should another writer commit a table at the location between the leftovers check and the create
    (a race of milliseconds, forced here), the create puts that table back and fails as concurrent."""
    (shared["out"] / "_delta_log").mkdir(parents=True)
    phases: list[str] = []
    leftovers_check = DeltaHandle.left_by_failed_create

    def another_writer_commits_right_after(handle: DeltaHandle) -> bool:
        found = leftovers_check(handle)
        if found and "merge_started" in phases:
            write(spark, [(99, "theirs")], "id long, note string", shared["out"])
        return found

    monkeypatch.setattr(DeltaHandle, "left_by_failed_create", another_writer_commits_right_after)
    with phase_listener(phases.append), pytest.raises(ConcurrentRefreshError, match="restored to version 0"):
        run_spec(fk_spec(shared), spark=spark)
    assert rows_at(spark, shared["out"]) == [{"id": 99, "note": "theirs"}]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{shared['out']}`").orderBy("version").collect()
    assert [row["operation"] for row in history] == ["WRITE", "CREATE OR REPLACE TABLE AS SELECT", "RESTORE"]


def test_output_records_its_owner(spark, unnamed) -> None:
    properties = DeltaHandle(spark, TableRef(path=str(unnamed["out"])), "output").state().properties
    owner = json.loads(properties["fkjoin.owner"])
    assert owner["kind"] == "foreign_key_join" and owner["spec"]
    assert properties["delta.enableChangeDataFeed"] == "true"


# ------------------------------------------------------------------ 2. expressions are pure row-level SQL


@pytest.mark.parametrize(
    ("expression", "construct"),
    [
        ("reflect('java.lang.System', 'getenv', 'HOME')", "reflect"),
        ("(SELECT max(id) FROM range(3))", "subquery"),
        ("rank() OVER (PARTITION BY l.customer_id ORDER BY l.amount)", "window"),
        ("rand()", "determin"),
        ("current_timestamp()", "time"),
        ("explode(array(1, 2))", "generator"),
    ],
)
def test_impure_expression_is_refused(spark, shared, expression, construct) -> None:
    spec = fk_spec(shared, columns={"bad": expression})
    message = refused(
        spark, spec, SpecError, "columns.bad", watch=[shared["orders"], shared["customers"], shared["out"]]
    )
    assert construct in message.lower(), message


def test_row_level_cast_failure_names_column_and_value(spark, shared) -> None:
    spec = fk_spec(shared, columns={"name_as_int": "CAST(r.name AS INT)"})
    message = refused(
        spark,
        spec,
        InputDataError,
        "columns.name_as_int",
        "ann",
        watch=[shared["orders"], shared["customers"], shared["out"]],
    )
    assert "try_cast" in message


# ---------------------------------------------------- 3. schema changes never get a refresh stuck


def test_added_input_column_rebuilds_with_reason(spark, refreshed) -> None:
    tables = refreshed
    spark.sql(f"ALTER TABLE delta.`{tables['customers']}` ADD COLUMNS (tier STRING)")
    spark.sql(f"UPDATE delta.`{tables['customers']}` SET tier = 'gold' WHERE customer_id = 10")
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "full" and "'tier' added" in result["reason"], result["reason"]
    tiers = {r["order_id"]: r["tier"] for r in rows_at(spark, tables["out"])}
    assert tiers == {1: "gold", 2: "gold", 3: None}
    assert run_spec(fk_spec(tables), spark=spark)["mode"] == "noop"


def test_widened_input_column_rebuilds_with_reason(spark, refreshed) -> None:
    tables = refreshed
    write(
        spark,
        [(1, 10, 5), (2, 10, 7), (3, 20, 1)],
        "order_id long, customer_id long, amount bigint",
        tables["orders"],
        overwriteSchema="true",
    )
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "full" and "'amount' changed type double -> bigint" in result["reason"]
    assert {r["order_id"]: r["amount"] for r in rows_at(spark, tables["out"])} == {1: 5, 2: 7, 3: 1}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("DROP COLUMN tier", "column 'tier' dropped"),
        ("RENAME COLUMN tier TO level", "column 'level' added; column 'tier' dropped"),
    ],
)
def test_dropped_or_renamed_input_column_rebuilds_with_reason(spark, tables, change, reason) -> None:
    write(
        spark,
        [(10, "ann", "gold"), (20, "bob", "silver")],
        "customer_id long, name string, tier string",
        tables["customers"],
        overwriteSchema="true",
    )
    spark.sql(
        f"ALTER TABLE delta.`{tables['customers']}` SET TBLPROPERTIES ("
        "'delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
    )
    run_spec(fk_spec(tables), spark=spark)
    spark.sql(f"ALTER TABLE delta.`{tables['customers']}` {change}")
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "full" and reason in result["reason"], result["reason"]
    expected = {"order_id", "customer_id", "amount", "name", *(["level"] if "RENAME" in change else [])}
    assert set(rows_at(spark, tables["out"])[0]) == expected


def test_variant_value_column_works_across_refreshes(spark, tables) -> None:
    documents = spark.sql(
        "SELECT * FROM VALUES (10L, 'ann', parse_json('{\"a\": 1}')), (20L, 'bob', parse_json('[1, 2]')) "
        "AS c(customer_id, name, doc)"
    )
    documents.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
        str(tables["customers"])
    )
    run_spec(fk_spec(tables), spark=spark)
    spark.sql(
        f"UPDATE delta.`{tables['customers']}` SET doc = parse_json('{{\"a\": 2}}') WHERE customer_id = 10"
    )
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "incremental" and result["rows"]["updated"] == 2, result
    docs = {
        r["order_id"]: r["doc"]
        for r in spark.read.format("delta")
        .load(str(tables["out"]))
        .selectExpr("order_id", "to_json(doc) AS doc")
        .collect()
    }
    assert docs == {1: '{"a":2}', 2: '{"a":2}', 3: "[1,2]"}
    assert run_spec(fk_spec(tables), spark=spark)["mode"] == "noop"


def test_projected_column_gone_is_a_spec_error(spark, tables) -> None:
    spec = fk_spec(tables, columns={"customer": "r.name"})
    run_spec(spec, spark=spark)
    write(spark, [(10,), (20,)], "customer_id long", tables["customers"], overwriteSchema="true")
    watch = [tables["orders"], tables["customers"], tables["out"]]
    refused(spark, spec, SpecError, "columns.customer", "name", watch=watch)


def test_map_and_struct_value_columns_work_across_refreshes(spark, tables) -> None:
    schema = "customer_id long, name string, tags map<string,string>, info struct<a:int,m:map<string,int>>"
    write(
        spark,
        [(10, "ann", {"x": "1"}, (1, {"k": 1})), (20, "bob", {}, (2, {}))],
        schema,
        tables["customers"],
        overwriteSchema="true",
    )
    first = run_spec(fk_spec(tables), spark=spark)
    spark.sql(f"UPDATE delta.`{tables['customers']}` SET tags = map('x', '2') WHERE customer_id = 10")
    spark.sql(f"UPDATE delta.`{tables['customers']}` SET name = 'bobby' WHERE customer_id = 20")
    second = run_spec(fk_spec(tables), spark=spark)
    assert second["mode"] == "incremental", second["reason"]
    assert second["rows"]["updated"] == 3 and second["rows"]["inserted"] == 0
    got = {r["order_id"]: (r["tags"], r["name"]) for r in rows_at(spark, tables["out"])}
    assert got == {1: ({"x": "2"}, "ann"), 2: ({"x": "2"}, "ann"), 3: ({}, "bobby")}
    assert first["output"]["version"] < second["output"]["version"]
    assert run_spec(fk_spec(tables), spark=spark)["mode"] == "noop"


# ------------------------------------------------------------------ 4. writes by others are detected


@pytest.mark.parametrize("interference", INTERFERENCES)
def test_output_changed_by_others_rebuilds(appended, interference) -> None:
    """The appended world's ``changed``: a first refresh, an appended order, an incremental refresh, then
    ``interference`` by someone else."""
    assert appended.results("changed")["second"]["mode"] == "incremental"
    seen = appended.results("changed", interference)
    result = seen["result"]
    assert result["mode"] == "full" and "changed outside this engine" in result["reason"], result["reason"]
    assert seen["state"] == seen["oracle"]


def test_optimize_and_properties_are_not_changes(appended) -> None:
    """The appended world's ``optimized``: OPTIMIZE and a property set on the output after its first
    refresh (a noop follows), then an appended order."""
    seen = appended.results("optimized")
    assert seen["noop"]["mode"] == "noop"
    assert seen["result"]["mode"] == "incremental"
    assert seen["state"] == seen["oracle"]


# ------------------------------------------------------------------ 5. full-refresh escape


def test_full_refresh_rebuilds_and_rewrites_nothing_unchanged(spark, unnamed) -> None:
    before = output_state(spark, unnamed["out"])  # the first refresh's output, checked against the oracle
    result = run_spec(fk_spec(unnamed), spark=spark, full_refresh=True)
    assert result["mode"] == "full" and result["reason"] == "full refresh requested"
    assert result["rows"] == {**result["rows"], "inserted": 0, "updated": 0, "deleted": 0}
    assert output_state(spark, unnamed["out"]) == oracle(spark, result) == before


# ---------------------------------------------------- 6. exactly once without assumptions about history


def test_progress_beyond_the_scanned_history_still_commits(appended) -> None:
    """The appended world's ``scanned``: six commits of others on the output after its first refresh, then
    an appended order, refreshed while the engine scans only the last 2 commits, then with 1000."""
    seen = appended.results("scanned")
    result = seen["result"]
    assert result["mode"] == "full" and "no refresh progress" in result["reason"]
    assert seen["state"] == seen["oracle"]
    assert seen["again"]["mode"] == "noop"


def test_only_genuine_feed_errors_mean_feed_unavailable(spark, shared) -> None:
    handle = DeltaHandle(spark, TableRef(path=str(shared["orders"])), "left")
    with pytest.raises(FeedUnavailable, match="left"), feed_errors(handle, 0, 1):
        raise RuntimeError("[DELTA_MISSING_CHANGE_DATA] Error getting change data for range [1 , 1]")
    with pytest.raises(RuntimeError, match="executor lost"), feed_errors(handle, 0, 1):
        raise RuntimeError("executor lost")


def stream_spec(tables: dict[str, Path], **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "stream_table_join",
        "stream": {"path": str(tables["orders"])},
        "table": {"path": str(tables["customers"]), "key": ["customer_id"]},
        "key_mapper": ["customer_id"],
        "how": "left",
        "output": {"path": str(tables["out"])},
    }
    spec.update(overrides)
    return spec


def test_append_only_output_is_never_replaced_without_opt_in(spark, shared) -> None:
    run_spec(stream_spec(shared), spark=spark)
    changed = stream_spec(shared, how="inner")
    message = refused(
        spark,
        changed,
        FullRebuildRefusedError,
        str(shared["out"]),
        "allow_full_replace",
        watch=[shared["out"]],
    )
    assert "spec changed" in message
    result = run_spec({**changed, "allow_full_replace": True}, spark=spark)
    assert result["mode"] == "full" and result["rows"]["inserted"] == 3


def test_append_only_output_changed_by_others_keeps_appending(appended) -> None:
    """The appended world's ``stream``: order 1 deleted from the output by someone else after its first
    refresh, then an appended order."""
    seen = appended.results("stream")
    result = seen["result"]
    assert result["mode"] == "incremental" and result["rows"]["inserted"] == 1
    assert any("changed outside this engine" in w for w in result["warnings"])
    assert seen["ids"] == [2, 3, 4, APPENDED_ORDER[0]]


# ------------------------------------------------------------------ 7. names and reserved columns


def test_backtick_in_an_input_column_name_is_quoted(spark, tables) -> None:
    write(
        spark,
        [(10, "ann", "x"), (20, "bob", "y")],
        "customer_id long, name string, `we``ird` string",
        tables["customers"],
        overwriteSchema="true",
    )
    # as an output column it is refused (Delta's MERGE cannot name it); renamed through columns it joins
    watch = [tables["orders"], tables["customers"], tables["out"]]
    refused(spark, fk_spec(tables), SpecError, "column 'we`ird' holds a backtick", watch=watch)
    renamed = fk_spec(tables, columns={"name": "r.name", "weird": "r.`we``ird`"})
    result = run_spec(renamed, spark=spark)
    assert result["mode"] == "full"
    assert {r["order_id"]: r["weird"] for r in rows_at(spark, tables["out"])} == {1: "x", 2: "x", 3: "y"}
    write(spark, [(5, 20, 3.0)], ORDERS, tables["orders"], mode="append")
    again = run_spec(renamed, spark=spark)
    assert again["mode"] == "incremental" and again["rows"]["inserted"] == 1
    assert {r["order_id"]: r["weird"] for r in rows_at(spark, tables["out"])}[5] == "y"


def test_reserved_prefix_in_an_input_is_refused(spark, tables) -> None:
    write(
        spark,
        [(10, "ann", True)],
        "customer_id long, name string, _fkjoin_present boolean",
        tables["customers"],
        overwriteSchema="true",
    )
    refused(
        spark,
        fk_spec(tables),
        SpecError,
        "_fkjoin_present",
        "right",
        watch=[tables["orders"], tables["customers"], tables["out"]],
    )


def test_global_table_as_an_input_keeps_its_engine_columns_out(spark, shared, tmp_path: Path) -> None:
    events = tmp_path / "customers_cdc"
    write(
        spark,
        [(10, "c", 1, "ann"), (20, "c", 2, "bob")],
        "customer_id long, op string, lsn long, name string",
        events,
    )
    global_out = tmp_path / "customers_global"
    run_spec(
        {
            "kind": "global_table_bootstrap",
            "source": {
                "path": str(events),
                "key": ["customer_id"],
                "changelog": {"op_column": "op", "order_by": ["lsn"]},
            },
            "output": {"path": str(global_out)},
        },
        spark=spark,
    )
    result = run_spec(fk_spec(shared, right={"path": str(global_out), "key": ["customer_id"]}), spark=spark)
    assert set(rows_at(spark, shared["out"])[0]) == {"order_id", "customer_id", "amount", "name"}
    assert output_state(spark, shared["out"]) == oracle(spark, result)


# ------------------------------------------------------------------ 8. key values stay out of commit history


def test_commit_history_holds_no_key_values(spark, warehouse) -> None:
    users, accounts, out = warehouse / "users", warehouse / "accounts", warehouse / "out"
    write(
        spark,
        [("alice@example.com", "acct-4111"), ("bob@example.com", "acct-5500")],
        "email string, account string",
        users,
    )
    write(spark, [("acct-4111", "gold"), ("acct-5500", "silver")], "account string, tier string", accounts)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(users), "key": ["email"]},
        "right": {"path": str(accounts), "key": ["account"]},
        "foreign_key": ["account"],
        "output": {"path": str(out)},
    }
    run_spec(spec, spark=spark)
    spark.sql(f"UPDATE delta.`{accounts}` SET tier = 'platinum' WHERE account = 'acct-4111'")
    spark.sql(f"UPDATE delta.`{users}` SET account = 'acct-5500' WHERE email = 'bob@example.com'")
    assert run_spec(spec, spark=spark)["mode"] == "incremental"
    history = [
        line
        for commit in sorted((out / "_delta_log").glob("*.json"))
        for line in commit.read_text().splitlines()
        if line.startswith('{"commitInfo"')
    ]
    assert len(history) == 2 and ('"MERGE"' in history[1] or '"UPDATE"' in history[1])
    log = "\n".join(history)
    for secret in (
        "alice@example.com",
        "bob@example.com",
        "acct-4111",
        "acct-5500",
        b"alice@example.com".hex(),
    ):
        assert secret not in log


@pytest.mark.parametrize("race_at", ["merge_started", "committing"])
def test_two_runs_of_one_append_refresh_append_once(spark, warehouse: Path, race_at: str) -> None:
    """A second run of the same stream refresh commits first, before the first's write begins or
    between its files and its commit: the first fails cleanly (nothing of it lands), every record is
    appended once, and a retry is a noop. The appended output is also a blind append whose row count
    the log records, as a stream input reading it needs."""
    orders, products, out = warehouse / "orders", warehouse / "products", warehouse / "out"
    create_table(spark, products, [{"product_id": 1, "name": "A"}], PRODUCTS)
    create_table(spark, orders, [{"order_id": 1, "product_id": 1, "qty": 1}], STREAM_ORDERS)
    spec = join_spec(orders, products, out, how="left")
    run_spec(spec, spark=spark)
    append_rows(spark, orders, [{"order_id": i, "product_id": 1, "qty": i} for i in (2, 3)])
    raced: list[dict] = []

    def other_run_commits_first(name: str) -> None:
        if name == race_at and not raced:
            raced.append({})
            raced[0] = run_spec(spec, spark=spark)

    with phase_listener(other_run_commits_first), pytest.raises(ConcurrentRefreshError, match="retry"):
        run_spec(spec, spark=spark)
    assert raced[0]["mode"] == "incremental" and raced[0]["rows"]["inserted"] == 2
    assert sorted(r["order_id"] for r in read_rows(spark, out)) == [1, 2, 3]
    assert run_spec(spec, spark=spark)["mode"] == "noop"
    written = DeltaHandle(spark, load_spec(spec).output, "output")
    version = raced[0]["output"]["version"]
    assert written.appended_rows(version - 1, version) == 2


# ------------------------------------------------------------------ the docs table


def test_safety_doc_is_true() -> None:
    """Every row of docs/safety.md names a test in this module or test_column_names, and every test in them
    has a row."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "safety.md").read_text()
    named = set(re.findall(r"`(test_[a-z0-9_]+)`", doc)) - {"test_safety_doc_is_true"}
    here = {name for name, test in globals().items() if name.startswith("test_") and callable(test)}
    here |= defined_tests(Path(__file__).with_name("test_column_names.py"))  # read, not imported
    here.discard("test_safety_doc_is_true")
    assert named - here == set(), f"docs/safety.md names tests that do not exist: {sorted(named - here)}"
    assert here - named == set(), f"tests missing from docs/safety.md: {sorted(here - named)}"


def test_every_engine_error_is_an_fkjoin_error() -> None:
    assert issubclass(FullRebuildRefusedError, FkJoinError)
    assert not FullRebuildRefusedError.retryable


def test_duplicates_are_found_among_many_partially_null_keys(spark, warehouse) -> None:
    """A thousand partially-null composite keys must not hide a duplicate (nor under-count null keys)."""
    left, right, out = warehouse / "pairs", warehouse / "groups", warehouse / "out"
    rows = [(i, None, 1) for i in range(1500)] + [(7, 7, 1), (7, 7, 1)]
    write(spark, rows, "a long, b long, g long", left)
    write(spark, [(1, "one")], "g long, name string", right)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(left), "key": ["a", "b"]},
        "right": {"path": str(right), "key": ["g"]},
        "foreign_key": ["g"],
        "output": {"path": str(out)},
    }
    refused(spark, spec, InputDataError, "duplicate keys", "a=7, b=7", "x2", watch=[left, right, out])
