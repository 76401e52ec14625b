"""Two drivers writing one output on S3, with Delta's DynamoDB-backed log store: refreshes of the same
output race 8 times from two processes, and no race lands two refresh commits.

Each driver is a long-lived worker process (``support.refresh_worker``: its own JVM, S3A on the test
bucket, ``S3DynamoDBLogStore`` on a DynamoDB endpoint the fixture starts), so the races cost two JVM
starts, not two each. A race: the inputs change (in this process), both workers refresh the output, and each
is held at ``committing`` (its net changes prepared, its commit about to be written) until both are there;
then both are let go at once, so both commits reach the log store together. One commit lands; the other
refresh fails with the concurrent-refresh error, having written nothing, and its retry is a noop; the
output equals the join recomputed in Python over the winner's input versions (``helpers.oracle``). The
log store's DynamoDB table holds a completed entry for every commit the workers wrote, so the races ran
through it and not through the single-driver log store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import CUSTOMERS, ORDERS, oracle, output_state, table_version, upsert, write
from support.crash import with_env
from support.refresh_worker import RefreshWorker
from support.s3 import DynamoDBServer, S3Server, orders_join, start_dynamodb
from support.tables import forget_cached_logs

from airflow_provider_fkjoin.engine import run_spec
from airflow_provider_fkjoin.engine.runtime.packaging import s3a_jars

#: Each race exercises the same mutual exclusion (the log store's put-if-absent of the next commit); the
#: rounds vary the changed order (five keys), which side changed (the customer every third round) and, by
#: chance, which worker wins. Eight cover every order key and both kinds of change; a round costs 25-40 s
#: on a busy 2-core machine.
RACES = 8
HOLD_AT = "committing"


@pytest.fixture(scope="module")
def dynamodb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DynamoDBServer]:
    if not any(Path(jar).name.startswith("delta-storage-s3-dynamodb") for jar in s3a_jars()):
        pytest.fail("no DynamoDB log store jar: run ./scripts/setup.sh (it builds it into .jars/s3a/)")
    server = start_dynamodb(tmp_path_factory.mktemp("dynamodb"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def workers(
    s3: S3Server, dynamodb: DynamoDBServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[RefreshWorker]]:
    """Two refresh workers, each a Spark driver committing through the DynamoDB log store."""
    folder = tmp_path_factory.mktemp("workers")
    env = dynamodb.driver_env(s3, with_env(None))
    started: list[RefreshWorker] = []
    try:
        for name in ("a", "b"):
            started.append(RefreshWorker(env, folder / f"worker-{name}.log"))
        yield started
    finally:
        for worker in started:
            worker.close()


def race(workers: list[RefreshWorker], spec: dict) -> list[dict]:
    """Both workers refresh ``spec``, held at :data:`HOLD_AT` until both are there, then let go together;
    returns each worker's answer (``result`` or ``error``)."""
    for worker in workers:
        worker.send({"spec": spec, "hold_at": HOLD_AT})
    arrived = [worker.receive() for worker in workers]
    assert all(answer == {"at": HOLD_AT} for answer in arrived), f"not both at {HOLD_AT}: {arrived}"
    for worker in workers:
        worker.send({})
    return [worker.receive() for worker in workers]


@pytest.mark.timeout(1800)  # 8 races of two drivers: about 5 minutes on a busy 2-core machine
def test_racing_refreshes_from_two_drivers_land_one_commit_each_time(
    s3: S3Server, s3_spark, dynamodb: DynamoDBServer, workers: list[RefreshWorker]
) -> None:
    spark = s3_spark
    root = s3.url("concurrent-writers")
    write(spark, [(1, 10, 1.0), (2, 20, 2.0), (3, None, 3.0), (4, 30, 4.0)], ORDERS, root / "orders")
    write(spark, [(10, "ann"), (20, "bob")], CUSTOMERS, root / "customers")
    spec = orders_join(root)
    out = spec["output"]["path"]
    assert run_spec(spec, spark=spark)["mode"] == "full"
    committed_by_workers = []
    for round_ in range(RACES):
        order = {
            "order_id": 1 + round_ % 5,
            "customer_id": (10, 20, 30)[round_ % 3],
            "amount": 100.0 + round_,
        }
        upsert(spark, root / "orders", [order], ["order_id"])
        if round_ % 3 == 0:
            upsert(spark, root / "customers", [{"customer_id": 30, "name": f"cy{round_}"}], ["customer_id"])
        base_version = table_version(spark, out)
        answers = race(workers, spec)
        won = [
            (worker, answer["result"])
            for worker, answer in zip(workers, answers, strict=True)
            if "result" in answer
        ]
        lost = [
            (worker, answer) for worker, answer in zip(workers, answers, strict=True) if "error" in answer
        ]
        assert len(won) == 1 and len(lost) == 1, f"race {round_}: {answers}"
        winner, loser_answer = won[0][1], lost[0][1]
        assert loser_answer["error"] == "ConcurrentRefreshError", f"race {round_}: {loser_answer}"
        assert winner["mode"] == "incremental", winner
        forget_cached_logs(spark)
        assert table_version(spark, out) == base_version + 1 == winner["output"]["version"], (round_, winner)
        committed_by_workers.append(winner["output"]["version"])
        loser = lost[0][0]
        loser.send({"spec": spec})
        retry = loser.receive()
        assert retry.get("result", {}).get("mode") == "noop", f"race {round_}: {retry}"
        assert output_state(spark, out) == oracle(spark, winner, "left"), f"race {round_}"
    entries = {entry["fileName"]: entry for entry in dynamodb.entries(out)}
    for version in committed_by_workers:
        entry = entries.get(f"{version:020d}.json")
        assert entry is not None and entry["complete"] == "true", (version, sorted(entries))
