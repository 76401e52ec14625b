"""The no-JVM noop check (``engine.deltalog.watermarks.noop_result``): what the Airflow hook runs before
starting Spark. Its one promise: when it says ``noop``, a real refresh would have found nothing to do and
left the output as it is. The oracle is a real refresh run right after each check, on real Delta tables,
and the inputs' own versions read back; the check must also say None whenever the refresh has work to do."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from helpers import CUSTOMERS, ORDERS, write
from support.tables import OrdersCustomers as Tables
from support.tables import SavedStates, orders_customers_states, restored

from airflow_provider_fkjoin.engine import high_watermark, run_spec
from airflow_provider_fkjoin.engine.deltalog.watermarks import noop_result


@pytest.fixture(scope="module")
def states(spark, tmp_path_factory: pytest.TempPathFactory) -> tuple[SavedStates, Tables]:
    """The module's orders, customers and output (fixed paths), in two saved states built once on first
    use: ``inputs`` (the two inputs, no output) and ``refreshed`` (then a first full refresh)."""
    root = tmp_path_factory.mktemp("noop_check")
    return orders_customers_states(spark, root, [(1, 10, 1.0), (2, 20, 2.0)], [(10, "a"), (20, "b")])


@pytest.fixture
def fk(states: tuple[SavedStates, Tables]) -> Tables:
    """``(spec, orders, customers, out)``: the two inputs as written, no output yet."""
    return restored(states, "inputs")


@pytest.fixture
def refreshed(states: tuple[SavedStates, Tables]) -> Tables:
    """``(spec, orders, customers, out)`` after a first full refresh."""
    return restored(states, "refreshed")


def _agrees_with_a_refresh(spark, spec: dict, *, expect_noop: bool) -> dict:
    """Check, then refresh for real: the check says noop exactly when the refresh is a noop."""
    checked = noop_result(spec)
    refreshed = run_spec(spec, spark=spark)
    assert (checked is not None) is expect_noop, (checked, refreshed["mode"])
    assert (refreshed["mode"] == "noop") is expect_noop, refreshed
    if checked is not None:
        assert checked["mode"] == "noop" and checked["source"] == "precheck"
        assert checked["output"] == refreshed["output"]
        for side, info in refreshed["inputs"].items():
            at = high_watermark(info["path"])
            assert checked["inputs"][side] == {"path": info["path"], "from_version": at, "to_version": at}
        assert checked["rows"] == {"inserted": 0, "updated": 0, "deleted": 0}
    return refreshed


def test_noop_only_when_no_input_moved(spark, fk) -> None:
    spec, orders, customers, out = fk
    assert noop_result(spec) is None  # no output yet
    _agrees_with_a_refresh(spark, spec, expect_noop=False)  # first run
    _agrees_with_a_refresh(spark, spec, expect_noop=True)

    spark.sql(f"OPTIMIZE delta.`{out}`")  # others may compact the output: still nothing to do
    _agrees_with_a_refresh(spark, spec, expect_noop=True)

    DeltaTable.forPath(spark, str(customers)).update("customer_id = 10", {"name": "'A'"})
    _agrees_with_a_refresh(spark, spec, expect_noop=False)
    _agrees_with_a_refresh(spark, spec, expect_noop=True)

    write(spark, [(3, 10, 3.0)], ORDERS, orders, mode="append")
    _agrees_with_a_refresh(spark, spec, expect_noop=False)

    changed = {**spec, "how": "inner"}  # a changed spec rebuilds
    assert _agrees_with_a_refresh(spark, changed, expect_noop=False)["mode"] == "full"
    _agrees_with_a_refresh(spark, changed, expect_noop=True)

    spark.sql(f"DELETE FROM delta.`{out}` WHERE order_id = 1")  # someone else changed the output's rows
    assert _agrees_with_a_refresh(spark, changed, expect_noop=False)["mode"] == "full"

    shutil.rmtree(customers)  # recreated at the same path, same version number: a new table id
    write(spark, [(10, "a"), (20, "b")], CUSTOMERS, customers)
    DeltaTable.forPath(spark, str(customers)).update("customer_id = 20", {"name": "'B'"})
    assert high_watermark(customers) == 1  # the version the last refresh consumed, of the old table
    assert noop_result(changed) is None
    assert run_spec(changed, spark=spark)["mode"] == "full"


def test_stricter_than_the_engine_never_looser(spark, warehouse: Path) -> None:
    """A stream-table join's table moving without new stream rows is a noop for the engine; the check,
    which compares every input the commit recorded, leaves that call to the engine."""
    stream, table, out = warehouse / "stream", warehouse / "table", warehouse / "out"
    write(spark, [(1, 10)], "order_id long, product_id long", stream)
    write(spark, [(10, "p")], "product_id long, name string", table)
    spec = {
        "kind": "stream_table_join",
        "stream": {"path": str(stream)},
        "table": {"path": str(table), "key": ["product_id"]},
        "key_mapper": ["product_id"],
        "allow_unbootstrapped_table": True,
        "output": {"path": str(out)},
    }
    run_spec(spec, spark=spark)
    assert noop_result(spec) is not None
    write(spark, [(11, "q")], "product_id long, name string", table, mode="append")
    assert noop_result(spec) is None
    assert run_spec(spec, spark=spark)["mode"] == "noop"


def test_the_check_loads_no_pyspark(refreshed) -> None:
    """Run in a fresh interpreter where importing pyspark fails: the check still answers."""
    spec = refreshed[0]
    script = (
        "import json, sys\n"
        "sys.modules['pyspark'] = None  # any import of pyspark now raises ImportError\n"
        "from airflow_provider_fkjoin.engine.deltalog.watermarks import noop_result\n"
        f"print(json.dumps(noop_result(json.loads({json.dumps(json.dumps(spec))}))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["mode"] == "noop"
