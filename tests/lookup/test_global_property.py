"""Property: for any sequence of CDC events, bootstraps and stream appends,

* the global table equals the source's latest state per key at its checkpoint, whichever plan
  (``refresh_strategy``) each catch-up draws, and
* the stream join's output equals each stream record joined with the table version of its refresh

(the global table as of its last bootstrap, since the join pins the table when it starts). The
oracle is plain Python over the generated events; it never reads the engine's output to decide."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from helpers import append_rows, create_table, read_rows, small_refresh_bound
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_fkjoin.engine import run_spec

KEYS = st.integers(min_value=0, max_value=3)
#: Each catch-up of the global table draws its plan: every plan must give the same table.
STRATEGIES = ["auto", "incremental", "recompute"]
EVENT = st.tuples(KEYS, st.sampled_from(["c", "u", "d", "r"]), st.integers(min_value=0, max_value=9))
STEP = st.fixed_dictionaries(
    {
        "events": st.lists(EVENT, max_size=4),
        "bootstrap": st.booleans(),
        "records": st.lists(st.one_of(st.none(), KEYS), max_size=3),
    }
)


def latest_state(events: list[dict]) -> dict:
    """Per key, the event with the greatest lsn (lsns are unique); deletes remove the key."""
    latest: dict = {}
    for e in events:
        if e["id"] not in latest or e["lsn"] > latest[e["id"]]["lsn"]:
            latest[e["id"]] = e
    return {k: e["name"] for k, e in latest.items() if e["op"] != "d"}


@given(
    steps=st.lists(STEP, min_size=1, max_size=3),
    how=st.sampled_from(["inner", "left"]),
    data=st.data(),
    adaptive=st.booleans(),
)
def test_global_table_and_lookup_join_match_oracle(spark, steps, how, data, adaptive) -> None:
    with small_refresh_bound(spark, adaptive):
        warehouse = Path(tempfile.mkdtemp(prefix="gtprop-"))
        cdc, glob, orders, out = (warehouse / n for n in ("cdc", "global", "orders", "out"))
        total = sum(len(s["events"]) for s in steps)
        lsns = iter(data.draw(st.permutations(list(range(total))), label="lsn order"))  # arrival != lsn order
        create_table(spark, cdc, [], "id long, op string, lsn long, name string")
        create_table(spark, orders, [], "order_id long, pid long")
        boot = {
            "kind": "global_table_bootstrap",
            "source": {"path": str(cdc), "key": ["id"], "changelog": {"op_column": "op", "order_by": "lsn"}},
            "output": {"path": str(glob)},
        }
        join = {
            "kind": "stream_table_join",
            "stream": {"path": str(orders)},
            "table": {"path": str(glob), "key": ["id"]},
            "key_mapper": ["pid"],
            "how": how,
            "columns": {"order_id": "s.order_id", "name": "t.name"},
            "allow_unbootstrapped_table": True,
            "output": {"path": str(out)},
        }
        events: list[dict] = []
        table_at_checkpoint: dict = {}
        expected_output: Counter = Counter()
        next_order = 0
        for index, step in enumerate(steps):
            batch = [{"id": k, "op": op, "lsn": next(lsns), "name": f"n{v}"} for k, op, v in step["events"]]
            if batch:
                append_rows(spark, cdc, batch)
                events += batch
            if step["bootstrap"] or index == 0:
                strategy = data.draw(st.sampled_from(STRATEGIES), label="refresh_strategy")
                result = run_spec({**boot, "refresh_strategy": strategy}, spark=spark)
                if result["mode"] == "incremental" and strategy != "auto":
                    assert result["strategy"]["chosen"] == strategy, result["strategy"]
                    assert "fallback" not in result["strategy"], result["strategy"]
                assert result["caught_up"] and result["checkpoint"] == result["high_watermark"]
                table_at_checkpoint = latest_state(events)
                got = {r["id"]: r["name"] for r in read_rows(spark, glob)}
                assert got == table_at_checkpoint
            records = []
            for pid in step["records"]:
                records.append({"order_id": next_order, "pid": pid})
                next_order += 1
            if records:
                append_rows(spark, orders, records)
            run_spec(join, spark=spark)
            for record in records:
                name = table_at_checkpoint.get(record["pid"]) if record["pid"] is not None else None
                if name is not None or how == "left":
                    expected_output[(record["order_id"], name)] += 1
            got_output = Counter((r["order_id"], r["name"]) for r in read_rows(spark, out))
            assert got_output == expected_output
