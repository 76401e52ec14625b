"""The warm state across processes: each ``fkjoin run`` is a new driver JVM (a spark-submit task), which
loads the state's durable copy from beside the output instead of building it, and a refresh killed at
any of its phases leaves output and copy consistent: the rerun equals the join recomputed from scratch.

The oracle is the join recomputed in Python from the inputs at the result's pinned versions
(``helpers.oracle``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import oracle, orders_customers, output_state, upsert
from support.crash import run_fkjoin

pytestmark = pytest.mark.slow

ORDER_KEY = ["order_id"]


def _result(run) -> dict[str, Any]:
    assert run.returncode == 0, run.stderr_tail
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_new_jvm_loads_the_state_and_kills_leave_it_consistent(spark, tmp_path: Path) -> None:
    spec, orders_path, _customers, out = orders_customers(
        spark, tmp_path, [(1, 10, 1.0), (2, 20, 2.0), (3, None, 3.0)], [(10, "a"), (20, "b")], "left"
    )
    spec["warm_state"] = True
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))

    first = _result(run_fkjoin(spec_path, tmp_path))
    assert first["mode"] == "full"
    assert first["warm_state"]["settled"]["status"] == "persisted", first["warm_state"]
    assert output_state(spark, out) == oracle(spark, first, "left")

    upsert(spark, str(orders_path), [{"order_id": 4, "customer_id": 10, "amount": 4.0}], ORDER_KEY)
    second = _result(run_fkjoin(spec_path, tmp_path))
    warm = second["warm_state"]
    assert second["mode"] == "incremental" and warm["used"] and warm["advanced"], warm
    assert warm["loaded_in_s"] >= 0, warm
    assert output_state(spark, out) == oracle(spark, second, "left")

    step = 5
    for phase in ("committing", "committed", "warm_state_settling"):
        upsert(spark, str(orders_path), [{"order_id": step, "customer_id": 20, "amount": 5.0}], ORDER_KEY)
        step += 1
        killed = run_fkjoin(spec_path, tmp_path, kill_at=phase)
        assert killed.killed_at == phase, (phase, killed.phases, killed.stderr_tail)
        rerun = _result(run_fkjoin(spec_path, tmp_path))
        assert output_state(spark, out) == oracle(spark, rerun, "left"), phase
        warm = rerun["warm_state"]
        if phase == "committing":
            # nothing was committed: the rerun starts where the copy is, and the state serves it
            assert warm["used"] and warm["advanced"], (phase, warm)
        else:
            # the commit landed: the rerun has nothing to do, or the copy may be one refresh behind
            assert rerun["mode"] in ("noop", "incremental", "full"), (phase, rerun["mode"])

    upsert(spark, str(orders_path), [{"order_id": 1, "customer_id": 20, "amount": 9.0}], ORDER_KEY)
    last = _result(run_fkjoin(spec_path, tmp_path))
    assert output_state(spark, out) == oracle(spark, last, "left")
    assert last["warm_state"]["settled"]["status"] == "persisted", last["warm_state"]
