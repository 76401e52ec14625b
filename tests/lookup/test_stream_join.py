"""Stream-table lookup joins (KStream-GlobalKTable, KIP-99) on Delta tables.

Kafka's behaviours, with our own data: stream records join the table as of their refresh; table
updates never trigger output nor change earlier output; a tombstone clears an entry for later
records only; null mapped keys (inner drops, left emits with a null table side); a null stream key
joins; an empty table; the bootstrap latch; the broadcast in the physical plan."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import append_rows, create_table, delete_keys, read_rows, upsert
from support.stream_table_joins import ORDERS, PRODUCTS, join_spec, out_rows

from airflow_provider_fkjoin.engine import (
    InputDataError,
    SpecError,
    TableNotBootstrappedError,
    refresh_status,
    run_spec,
)
from airflow_provider_fkjoin.engine.core.spec import load_spec
from airflow_provider_fkjoin.engine.delta.tables import DeltaHandle
from airflow_provider_fkjoin.engine.kinds.stream_join import LookupTable, lookup_join, resolve_shape


def test_lookup_semantics_inner_and_left(spark, warehouse: Path) -> None:
    orders, products = warehouse / "orders", warehouse / "products"
    create_table(spark, products, [{"product_id": 1, "name": "A"}, {"product_id": 2, "name": "B"}], PRODUCTS)
    create_table(
        spark,
        orders,
        [
            {"order_id": 1, "product_id": 1, "qty": 1},
            {"order_id": 2, "product_id": 3, "qty": 1},  # no such product
            {"order_id": 3, "product_id": None, "qty": 1},  # null mapped key
            {"order_id": None, "product_id": 2, "qty": 1},  # null stream key: joins (KAFKA-10277)
        ],
        ORDERS,
    )
    inner = join_spec(orders, products, warehouse / "inner", columns={"qty": "s.qty", "name": "t.name"})
    left = join_spec(orders, products, warehouse / "left", how="left")
    first_inner, first_left = run_spec(inner, spark=spark), run_spec(left, spark=spark)
    assert first_inner["mode"] == first_left["mode"] == "full"
    assert first_left["rows"]["join_strategy"] == "broadcast"
    assert out_rows(spark, warehouse / "inner") == [(1, 1, "A"), (None, 1, "B")]
    assert out_rows(spark, warehouse / "left") == sorted(
        [(1, 1, 1, "A"), (2, 3, 1, None), (3, None, 1, None), (None, 2, 1, "B")], key=repr
    )

    # table updates alone trigger nothing and change no earlier output
    upsert(spark, products, [{"product_id": 1, "name": "A2"}, {"product_id": 3, "name": "C"}], ["product_id"])
    delete_keys(spark, products, [2], ["product_id"])  # tombstone
    noop = run_spec(left, spark=spark)
    assert noop["mode"] == "noop" and noop["output"]["version"] == first_left["output"]["version"]

    # new stream records join the table as of this refresh; earlier output is not re-emitted or retracted
    append_rows(
        spark,
        orders,
        [
            {"order_id": 5, "product_id": 1, "qty": 2},
            {"order_id": 6, "product_id": 2, "qty": 2},  # cleared by the tombstone
            {"order_id": 7, "product_id": 3, "qty": 2},
            {"order_id": 8, "product_id": None, "qty": 2},
        ],
    )
    second_inner, second_left = run_spec(inner, spark=spark), run_spec(left, spark=spark)
    assert second_left["mode"] == "incremental"
    assert second_left["inputs"]["stream"] == {"path": str(orders), "from_version": 0, "to_version": 1}
    assert second_left["inputs"]["table"]["to_version"] == 2
    assert second_left["rows"]["stream_records_read"] == 4 and second_left["rows"]["inserted"] == 4
    assert second_inner["rows"]["inserted"] == 2
    assert out_rows(spark, warehouse / "inner") == sorted(
        [(1, 1, "A"), (None, 1, "B"), (5, 2, "A2"), (7, 2, "C")], key=repr
    )
    assert out_rows(spark, warehouse / "left") == sorted(
        [
            (1, 1, 1, "A"),
            (2, 3, 1, None),
            (3, None, 1, None),
            (None, 2, 1, "B"),
            (5, 1, 2, "A2"),
            (6, 2, 2, None),
            (7, 3, 2, "C"),
            (8, None, 2, None),
        ],
        key=repr,
    )
    status = refresh_status(left, spark=spark)
    assert (
        status["inputs"]["stream"]["consumed_version"] == 1
        and status["inputs"]["table"]["consumed_version"] == 2
    )


def test_global_table_latch_expr_mapper_and_empty_table(spark, warehouse: Path) -> None:
    """Bootstrap then updates: the join refuses a global table behind its source unless allowed."""
    cdc, glob, orders = warehouse / "cdc", warehouse / "global", warehouse / "orders"
    create_table(spark, cdc, [], "product_id long, op string, lsn long, name string")
    boot = {
        "kind": "global_table_bootstrap",
        "source": {
            "path": str(cdc),
            "key": ["product_id"],
            "changelog": {"op_column": "op", "order_by": ["lsn"]},
        },
        "output": {"path": str(glob)},
    }
    run_spec(boot, spark=spark)  # an empty global table
    create_table(spark, orders, [{"order_id": 1, "sku": "1"}], "order_id long, sku string")
    spec = join_spec(orders, glob, warehouse / "out", how="left", key_mapper={"expr": "CAST(sku AS BIGINT)"})
    run_spec(spec, spark=spark)
    assert out_rows(spark, warehouse / "out") == [(1, "1", None)]  # no _fkjoin_order column leaks

    append_rows(spark, cdc, [{"product_id": 1, "op": "c", "lsn": 1, "name": "A"}])
    append_rows(spark, orders, [{"order_id": 2, "sku": "1"}])
    with pytest.raises(TableNotBootstrappedError, match=r"checkpoint version 0 .* high watermark 1"):
        run_spec(spec, spark=spark)
    allowed = run_spec(dict(spec, allow_unbootstrapped_table=True), spark=spark)
    assert allowed["mode"] == "incremental", "allow_unbootstrapped_table is not part of the fingerprint"
    assert any("allow_unbootstrapped_table" in w for w in allowed["warnings"])
    assert out_rows(spark, warehouse / "out") == [(1, "1", None), (2, "1", None)]

    assert allowed["rows"]["table_rows_looked_up"] == 0  # the global table is still empty

    run_spec(boot, spark=spark)
    append_rows(spark, orders, [{"order_id": 3, "sku": "1"}, {"order_id": 4, "sku": "1"}])
    append_rows(spark, orders, [{"order_id": 5, "sku": "2"}])
    caught_up = run_spec(spec, spark=spark)
    # a global table's slice is counted by an observed metric of the join itself
    assert caught_up["rows"]["table_rows_looked_up"] == 1 and caught_up["rows"]["stream_records_read"] == 3
    assert out_rows(spark, warehouse / "out") == [
        (1, "1", None),
        (2, "1", None),
        (3, "1", "A"),
        (4, "1", "A"),
        (5, "2", None),
    ]


def test_broadcast_in_physical_plan_and_shuffle_above_limit(spark, warehouse: Path) -> None:
    orders, products = warehouse / "orders", warehouse / "products"
    create_table(spark, products, [{"product_id": 1, "name": "A"}], PRODUCTS)
    create_table(spark, orders, [{"order_id": 1, "product_id": 1, "qty": 1}], ORDERS)
    spec = load_spec(join_spec(orders, products, warehouse / "out", how="left"))
    stream = DeltaHandle(spark, spec.stream, "stream")
    table = DeltaHandle(spark, spec.table, "table")
    lookup = LookupTable(spec, table, table.state())
    shape = resolve_shape(spec, stream, stream.read(0), lookup)

    def plan(broadcast: bool) -> str:
        frame = lookup_join(stream.read(0), lookup.rows(), shape, "left", broadcast=broadcast)
        return frame._jdf.queryExecution().executedPlan().toString()

    broadcast = plan(True)
    assert "BroadcastHashJoin" in broadcast and "BuildRight" in broadcast
    assert "Exchange hashpartitioning" not in broadcast, broadcast  # the stream is not shuffled
    shuffled = plan(False)
    assert "SortMergeJoin" in shuffled and "Exchange hashpartitioning" in shuffled

    result = run_spec(
        dict(join_spec(orders, products, warehouse / "out", how="left"), broadcast_limit_bytes=0), spark=spark
    )
    assert result["rows"]["join_strategy"] == "shuffle"
    assert any("broadcast_limit_bytes" in w for w in result["warnings"])
    assert out_rows(spark, warehouse / "out") == [(1, 1, 1, "A")]


def test_bad_specs(spark, warehouse: Path) -> None:
    orders, products = warehouse / "orders", warehouse / "products"
    create_table(spark, products, [{"product_id": 1, "name": "A"}], PRODUCTS)
    create_table(
        spark,
        orders,
        [{"order_id": 1, "product_id": 1, "name": "x"}],
        "order_id long, product_id long, name string",
    )
    base = join_spec(orders, products, warehouse / "out")
    with pytest.raises(SpecError, match=r"columns: .*\['name'\] on both sides.*table_name: t.name"):
        run_spec(base, spark=spark)
    with pytest.raises(SpecError, match=r"key_mapper\[0\]: column 'pid' is not in stream table"):
        run_spec(dict(base, key_mapper=["pid"], columns={"n": "t.name"}), spark=spark)
    with pytest.raises(
        SpecError, match=r"key_mapper.expr\[0\]: .* is string but table.key 'product_id' is bigint"
    ):
        run_spec(dict(base, key_mapper={"expr": "name"}, columns={"n": "t.name"}), spark=spark)
    with pytest.raises(SpecError, match=r"key_mapper has 2 part\(s\)"):
        run_spec(dict(base, key_mapper=["product_id", "name"]), spark=spark)
    assert not (warehouse / "out").exists()


def test_duplicate_keys_in_a_plain_table_fail_before_writing(spark, warehouse: Path) -> None:
    orders, products, out = warehouse / "orders", warehouse / "products", warehouse / "out"
    create_table(spark, products, [{"product_id": 1, "name": "A"}], PRODUCTS)
    create_table(spark, orders, [{"order_id": 1, "product_id": 1, "qty": 1}], ORDERS)
    spec = join_spec(orders, products, out)
    assert run_spec(spec, spark=spark)["mode"] == "full"
    rows_before = len(read_rows(spark, out))
    append_rows(spark, products, [{"product_id": 1, "name": "A again"}])
    append_rows(spark, orders, [{"order_id": 2, "product_id": 1, "qty": 1}])
    with pytest.raises(InputDataError, match=r"duplicate keys .*product_id=1"):
        run_spec(spec, spark=spark)
    assert len(read_rows(spark, out)) == rows_before, "nothing was appended"


def test_batch_size_from_the_log_for_blind_appends_else_from_the_feed(spark, warehouse: Path) -> None:
    """Blind appends are counted from their commits' metrics; any other commit sends the refresh to
    the change feed, which also finds the records a stream should not have lost."""
    orders, products = warehouse / "orders", warehouse / "products"
    create_table(spark, products, [{"product_id": 1, "name": "A"}], PRODUCTS)
    create_table(spark, orders, [{"order_id": 1, "product_id": 1, "qty": 1}], ORDERS)
    spec = join_spec(orders, products, warehouse / "out", how="left")
    run_spec(spec, spark=spark)
    stream = DeltaHandle(spark, load_spec(spec).stream, "stream")

    append_rows(spark, orders, [{"order_id": 2, "product_id": 1, "qty": 1}])
    append_rows(spark, orders, [{"order_id": i, "product_id": 9, "qty": 1} for i in (3, 4, 5)])
    assert stream.appended_rows(0, 2) == 4 and stream.appended_rows(2, 2) == 0
    both = run_spec(spec, spark=spark)
    assert both["mode"] == "incremental"
    assert both["rows"]["stream_records_read"] == 4 and both["rows"]["inserted"] == 4
    assert both["rows"]["stream_changes_ignored"] == 0 and both["rows"]["table_rows_looked_up"] == 1

    append_rows(spark, orders, [{"order_id": 6, "product_id": 1, "qty": 1}])
    delete_keys(spark, orders, [1], ["order_id"])
    assert stream.appended_rows(2, 4) is None
    mixed = run_spec(spec, spark=spark)
    assert mixed["rows"]["stream_records_read"] == 1 and mixed["rows"]["stream_changes_ignored"] == 1
    assert any("deleted or updated 1 record(s)" in w for w in mixed["warnings"])
    assert sorted(r["order_id"] for r in read_rows(spark, warehouse / "out")) == [1, 2, 3, 4, 5, 6]
