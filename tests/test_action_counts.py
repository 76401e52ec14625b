"""How many Spark jobs and SQL executions a small incremental refresh runs, counted, not timed.

A refresh's fixed cost is its number of separate Spark actions (each plans, lists the Delta files it
reads and schedules its stages), not the rows it touches. These bounds keep that number from creeping
back unseen: a change that adds an action to a kind's refresh fails here and must raise the bound on
purpose. Counted from Spark's own scheduler and SQL status store, after its listener bus is drained.
Every refresh is also checked against a recompute, so a bound is never met by skipping work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from delta.tables import DeltaTable
from helpers import CUSTOMERS, ORDERS, oracle, output_state, write
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_provider_fkjoin.engine import run_spec


class Counted(NamedTuple):
    result: dict[str, Any]
    jobs: int
    executions: int


def _settled(spark: SparkSession) -> tuple[int, int]:
    """(jobs submitted so far, SQL executions recorded so far), once Spark's listeners caught up."""
    context = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    context.listenerBus().waitUntilEmpty()
    executions = spark._jsparkSession.sharedState().statusStore().executionsList().size()  # type: ignore[attr-defined]
    return int(context.dagScheduler().nextJobId()), int(executions)


def counted(spark: SparkSession, refresh: Callable[[], dict[str, Any]]) -> Counted:
    """Run ``refresh`` and count the Spark jobs and SQL executions (nested ones included) it started."""
    jobs_before, executions_before = _settled(spark)
    result = refresh()
    jobs_after, executions_after = _settled(spark)
    return Counted(result, jobs_after - jobs_before, executions_after - executions_before)


@pytest.fixture
def fk_tables(spark: SparkSession, warehouse: Path) -> dict[str, Any]:
    orders, customers, out = warehouse / "orders", warehouse / "customers", warehouse / "out"
    write(spark, [(i, i % 100, float(i)) for i in range(1000)], ORDERS, orders)
    write(spark, [(i, f"c{i}") for i in range(100)], CUSTOMERS, customers)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(orders), "key": ["order_id"]},
        "right": {"path": str(customers), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": str(out)},
    }
    return {"spec": spec, "orders": orders, "customers": customers, "out": out}


#: The most jobs and SQL executions a small incremental foreign-key refresh (one order and one customer
#: changed, 11 output rows) may run with the net-change writer: 44-45 jobs and 25 executions when the
#: bound was set (54 and 29 before the compute phase became one action), a little headroom for Delta's
#: own background work.
FK_REFRESH_MAX_JOBS = 48
FK_REFRESH_MAX_EXECUTIONS = 28


def test_a_small_foreign_key_refresh_runs_a_few_spark_actions(spark, fk_tables) -> None:
    spec, out = fk_tables["spec"], fk_tables["out"]
    run_spec(spec, spark=spark)
    # warm once: the first incremental refresh of a session also loads classes and caches
    DeltaTable.forPath(spark, str(fk_tables["orders"])).update("order_id = 3", {"amount": F.lit(0.5)})
    run_spec(spec, spark=spark)
    DeltaTable.forPath(spark, str(fk_tables["orders"])).update("order_id = 7", {"amount": F.lit(1.5)})
    DeltaTable.forPath(spark, str(fk_tables["customers"])).update("customer_id = 5", {"name": F.lit("e")})

    refresh = counted(spark, lambda: run_spec(spec, spark=spark))

    assert refresh.result["mode"] == "incremental"
    assert refresh.result["write_path"] == "net_changes"
    assert refresh.result["rows"]["updated"] == 11
    assert output_state(spark, out) == oracle(spark, refresh.result)
    measured = f"{refresh.jobs} jobs, {refresh.executions} SQL executions"
    assert refresh.jobs <= FK_REFRESH_MAX_JOBS, measured
    assert refresh.executions <= FK_REFRESH_MAX_EXECUTIONS, measured
