"""The foreign-key join's warm state (``warm_state: true``): refreshes that look up the rows a change
touches in the engine JVM's state store (RocksDB, off the heap) must write what the usual plan writes;
the state's budget, disk reserve and durable copy behave as documented.

The oracle is the join recomputed in Python from the inputs at each result's pinned versions
(``helpers.oracle``); each refresh's change feed is checked against the two output states it connects.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    append_rows,
    change_problems,
    delete_keys,
    oracle,
    orders_customers,
    output_state,
    read_changes,
    read_rows,
    upsert,
)

from airflow_provider_fkjoin.engine import InputDataError, run_spec
from airflow_provider_fkjoin.engine.core.spec import TableRef
from airflow_provider_fkjoin.engine.delta.tables import DeltaHandle
from airflow_provider_fkjoin.engine.delta.warm_state import WarmState

#: Each test runs a handful of refreshes with the oracle checked after each: the slow tier's work.
pytestmark = pytest.mark.slow

ORDER_KEY = ["order_id"]
CUSTOMER_KEY = ["customer_id"]


def _order(order_id: int, customer_id: int | None, amount: float) -> dict[str, Any]:
    return {"order_id": order_id, "customer_id": customer_id, "amount": amount}


def _refresh_and_check(spark, spec: dict[str, Any], out: Path, how: str) -> dict[str, Any]:
    """One refresh; the output must equal the oracle and its change feed the difference of the states."""
    before = read_rows(spark, str(out)) if out.exists() else []
    result = run_spec(spec, spark)
    assert output_state(spark, out) == oracle(spark, result, how), result
    if result["mode"] == "incremental":
        version = result["output"]["version"]
        changes = read_changes(spark, str(out), version, version)
        problems, counts = change_problems(changes, before, read_rows(spark, str(out)), ORDER_KEY)
        assert not problems, problems
        assert {kind: result["rows"][kind] for kind in counts} == counts
    return result


@pytest.mark.parametrize("how", ["left", "inner"])
def test_warm_refreshes_equal_the_join(spark, tmp_path: Path, how: str) -> None:
    """Left inserts, updates, foreign-key moves, identical rewrites and deletes, right renames, deletes
    and late arrivals, a null foreign key, an OPTIMIZE of the output by its user: every refresh after the
    first is served by the warm state and equals the join recomputed from scratch."""
    orders = [(1, 10, 1.0), (2, 10, 2.0), (3, 20, 3.0), (4, None, 4.0), (5, 30, 5.0)]
    spec, orders_path, customers_path, out = orders_customers(
        spark, tmp_path, orders, [(10, "a"), (20, "b")], how
    )
    spec["warm_state"] = True
    first = _refresh_and_check(spark, spec, out, how)
    assert first["mode"] == "full"
    assert first["warm_state"]["built"]["status"] == "building", first["warm_state"]

    steps = [
        lambda: upsert(spark, str(customers_path), [{"customer_id": 10, "name": "A"}], CUSTOMER_KEY),
        lambda: upsert(
            spark, str(orders_path), [_order(2, 20, 2.5), _order(6, 10, 6.0), _order(4, 20, 4.0)], ORDER_KEY
        ),
        lambda: upsert(spark, str(customers_path), [{"customer_id": 30, "name": "c"}], CUSTOMER_KEY),
        # an identical rewrite: the output row stays where it is, and the next step must still find it
        lambda: upsert(spark, str(orders_path), [_order(2, 20, 2.5)], ORDER_KEY),
        lambda: delete_keys(spark, str(customers_path), [20], CUSTOMER_KEY),
        lambda: delete_keys(spark, str(orders_path), [1, 5], ORDER_KEY),
        lambda: spark.sql(f"OPTIMIZE delta.`{out}`").collect(),
        lambda: (
            upsert(spark, str(orders_path), [_order(7, None, 7.0), _order(3, 10, 3.5)], ORDER_KEY),
            upsert(spark, str(customers_path), [{"customer_id": 20, "name": "b2"}], CUSTOMER_KEY),
        ),
    ]
    for step in steps:
        step()
        result = _refresh_and_check(spark, spec, out, how)
        if result["mode"] == "noop":
            continue
        assert result["mode"] == "incremental", result
        assert result["write_path"] == "net_changes", result["warnings"]
        warm = result["warm_state"]
        assert warm["used"] and warm.get("advanced"), warm
        assert warm["lookup"]["held_rows"] > 0
        assert result["strategy"]["chosen"] == "incremental"


def test_a_lost_state_is_built_again(spark, tmp_path: Path) -> None:
    """A JVM without the state (a restarted server) loads its durable copy from beside the output (a
    VACUUM keeps it); without that copy too it runs the usual plan, then holds the state again; a
    state whose disk runs short of the reserve is not built, and the next refresh says why; a size
    setting that is not a size is refused with the setting's name."""
    spec, orders_path, customers_path, out = orders_customers(
        spark, tmp_path, [(1, 10, 1.0), (2, 20, 2.0)], [(10, "a"), (20, "b")], "left"
    )
    spec["warm_state"] = True
    _refresh_and_check(spark, spec, out, "left")
    warm_state = WarmState(spark, DeltaHandle(spark, TableRef(path=str(out)), "output"))
    warm_state.settle()
    # a JVM that lost the state (a restart) loads its durable copy, which a VACUUM leaves alone
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        spark.sql(f"VACUUM delta.`{out}` RETAIN 0 HOURS").collect()
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    warm_state.drop()
    upsert(spark, str(orders_path), [_order(2, 10, 2.5)], ORDER_KEY)
    reloaded = _refresh_and_check(spark, spec, out, "left")
    loaded = reloaded["warm_state"]
    assert loaded["used"] and loaded["advanced"], loaded
    assert loaded["loaded_in_s"] >= 0 and loaded["durable"]["loaded"]["loaded_bytes"] > 0, loaded
    assert reloaded["strategy"]["basis"] == "state", reloaded["strategy"]

    # without the durable copy too, the refresh scans and builds the state again
    warm_state.settle()
    warm_state.drop()
    shutil.rmtree(out / "_fkjoin")
    upsert(spark, str(customers_path), [{"customer_id": 20, "name": "B"}], CUSTOMER_KEY)
    cold = _refresh_and_check(spark, spec, out, "left")
    assert not cold["warm_state"]["used"]
    assert "holds no warm state" in cold["warm_state"]["reason"]
    assert cold["warm_state"]["built"]["status"] == "building"
    # a state that cannot serve leaves auto to weigh scanning against recomputing, as without one
    assert cold["strategy"]["basis"] != "state", cold["strategy"]
    upsert(spark, str(orders_path), [_order(3, 20, 3.0)], ORDER_KEY)
    warm = _refresh_and_check(spark, spec, out, "left")
    assert warm["warm_state"]["used"] and warm["warm_state"]["advanced"]
    assert warm["warm_state"]["built_in_s"] >= 0

    warm_state.settle()
    shutil.rmtree(out / "_fkjoin")
    spark.conf.set("spark.fkjoin.state.diskReserveBytes", "1024t")
    try:
        run_spec(spec, spark, full_refresh=True)
    finally:
        spark.conf.unset("spark.fkjoin.state.diskReserveBytes")
    upsert(spark, str(orders_path), [_order(4, 10, 4.0)], ORDER_KEY)
    no_room = _refresh_and_check(spark, spec, out, "left")
    assert not no_room["warm_state"]["used"]
    assert "a state keeps free (spark.fkjoin.state.diskReserveBytes)" in no_room["warm_state"]["reason"]

    spark.conf.set("spark.fkjoin.state.memoryBytes", "lots")
    try:
        refused = run_spec(spec, spark, full_refresh=True)
    finally:
        spark.conf.unset("spark.fkjoin.state.memoryBytes")
    assert refused["warm_state"]["built"]["status"] == "refused", refused["warm_state"]
    assert (
        "spark.fkjoin.state.memoryBytes: expected a positive size" in refused["warm_state"]["built"]["reason"]
    )


def test_the_states_of_a_jvm_share_its_memory_budget(spark, tmp_path: Path) -> None:
    """Two outputs' states live side by side (each in its own store on local disk) and both keep serving;
    the native memory they report together stays within the JVM's one budget."""
    worlds = []
    for name in ("a", "b"):
        spec, orders_path, _customers, out = orders_customers(
            spark, tmp_path / name, [(1, 10, 1.0), (2, 20, 2.0)], [(10, "a"), (20, "b")], "left"
        )
        spec["warm_state"] = True
        _refresh_and_check(spark, spec, out, "left")
        worlds.append((spec, orders_path, out))
    for step in range(3, 6):
        for spec, orders_path, out in worlds:
            upsert(spark, str(orders_path), [_order(step, 10 if step % 2 else 20, float(step))], ORDER_KEY)
            warm = _refresh_and_check(spark, spec, out, "left")["warm_state"]
            assert warm["used"] and warm["advanced"], warm
            lookup = warm["lookup"]
            assert 0 < lookup["memory_bytes"] <= lookup["budget_bytes"] * 1.1, lookup
            assert lookup["disk_bytes"] > 0, lookup


def test_a_write_the_engine_did_not_make_is_not_trusted(spark, tmp_path: Path) -> None:
    """Another writer's commit to the output (an UPDATE that moves a row to a new file) is not followed:
    the refresh rebuilds the output (as without a warm state) and the state with it; a duplicate key the
    feeds add fails the refresh as the usual plan does, before anything is written."""
    spec, orders_path, customers_path, out = orders_customers(
        spark, tmp_path, [(1, 10, 1.0), (2, 20, 2.0)], [(10, "a"), (20, "b")], "left"
    )
    spec["warm_state"] = True
    _refresh_and_check(spark, spec, out, "left")
    spark.sql(f"UPDATE delta.`{out}` SET amount = amount WHERE order_id = 2").collect()
    upsert(spark, str(customers_path), [{"customer_id": 20, "name": "B"}], CUSTOMER_KEY)
    moved = _refresh_and_check(spark, spec, out, "left")
    assert moved["mode"] == "full" and not moved["warm_state"]["used"]
    assert moved["warm_state"]["built"]["status"] == "building"
    upsert(spark, str(orders_path), [_order(3, 10, 3.0)], ORDER_KEY)
    assert _refresh_and_check(spark, spec, out, "left")["warm_state"]["advanced"]

    rebuilt = run_spec(spec, spark, full_refresh=True)
    assert rebuilt["mode"] == "full" and rebuilt["warm_state"]["built"]["status"] == "building"
    version = rebuilt["output"]["version"]
    append_rows(spark, str(orders_path), [_order(1, 20, 9.0)])
    with pytest.raises(InputDataError, match="duplicate keys"):
        run_spec(spec, spark)
    assert DeltaHandle(spark, TableRef(path=str(out)), "output").state().version == version
