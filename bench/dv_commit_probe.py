"""Does a MERGE-free commit make an output refresh cheaper? Delta's MERGE against a hand-built DV commit.

bench/README.md named "a commit written without MERGE" as the way to the speed targets of the FK join
and the global-table catch-up: deletion vectors for the changed keys' rows, the new rows and the
change-feed rows, one ``OptimisticTransaction``. This probe builds that commit from Delta's own
deletion-vector helpers (the ones its DELETE and UPDATE use, reached through py4j) and times it
against the engine's ``merge_output`` on two copies of the same table, with the same source, round
after round; then it checks that both copies hold the same rows and the same change feed, and times a
few commits that carry no data at all (the fixed cost of any Delta commit on this table).

    .venv/bin/python bench/dv_commit_probe.py \
        --table bench/data/run/L10000000_R1000000/orders_enriched --key order_id --every 600
    .venv/bin/python bench/dv_commit_probe.py \
        --table bench/data/gt_run/S10000000_T1000000/customers_global --key customer_id \
        --every 1000 --inserts 100

The hand-built commit reads the output once (its candidate files, the changed keys' full rows with
``_metadata.file_path`` and ``_metadata.row_index``), diffs them with the source, writes deletion
vectors from the cached rows without reading the table again, writes data and change-data files in
one ``writeFiles`` and commits with a ``SetTransaction``. It is a probe, not engine code: it relies
on Delta 4.4's internal Scala API.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_provider_fkjoin.engine import get_spark
from airflow_provider_fkjoin.engine.merge import PRESENT, CommitRequest, merge_output, sql_literal
from airflow_provider_fkjoin.engine.spec import TableRef
from airflow_provider_fkjoin.engine.tables import DeltaHandle

WORKDIR = Path(__file__).parent / "data" / "dv_commit_probe"


def _scala_seq(spark: SparkSession, items: list[Any]) -> Any:
    java_list = spark._jvm.java.util.ArrayList()
    for item in items:
        java_list.add(item)
    return spark._jvm.org.apache.spark.api.python.PythonUtils.toSeq(java_list)


def dv_commit(
    spark: SparkSession,
    path: str,
    source: DataFrame,
    key: str,
    value_columns: list[str],
    app_id: str,
    seq: int,
    key_literals: str,
) -> tuple[int, dict[str, int], dict[str, float]]:
    """Apply ``source`` (key, values, ``_fkjoin_present``) to the table at ``path`` in one DV commit."""
    jvm, session = spark._jvm, spark._jsparkSession
    delta = jvm.org.apache.spark.sql.delta
    parse = session.sessionState().sqlParser().parseExpression
    marks = [time.monotonic()]
    log = delta.DeltaLog.forTable(session, path)
    txn = log.startTransaction()
    if txn.txnVersion(app_id) >= seq:
        raise RuntimeError(f"{path}: transaction {app_id}/{seq} already committed")
    in_keys = f"{key} IN ({key_literals})"
    candidates = txn.filterFiles(_scala_seq(spark, [parse(in_keys)]), True)
    marks.append(time.monotonic())

    no_action_type = jvm.scala.Option.apply(None)
    target = DataFrame(log.createDataFrame(txn.snapshot(), candidates, False, no_action_type), spark)
    old = target.where(in_keys).select(
        F.col(key),
        *[F.col(c).alias(f"_old_{c}") for c in value_columns],
        F.col("_metadata.file_path").alias("_file"),
        F.col("_metadata.row_index").alias("_row"),
    )
    same = " AND ".join(f"(_old_{c} <=> {c})" for c in value_columns)
    kind = F.expr(
        f"CASE WHEN _file IS NULL AND {PRESENT} THEN 'insert' "
        f"WHEN _file IS NOT NULL AND {PRESENT} AND NOT ({same}) THEN 'update' "
        f"WHEN _file IS NOT NULL AND NOT {PRESENT} THEN 'delete' END"
    )
    joined = old.join(source, on=key, how="full_outer")
    diff = joined.withColumn("_kind", kind).where("_kind IS NOT NULL").persist()
    try:
        counts = {row["_kind"]: row["count"] for row in diff.groupBy("_kind").count().collect()}
        marks.append(time.monotonic())

        file_actions: list[Any] = []
        removed = diff.where("_kind IN ('update', 'delete')")
        if counts.get("update", 0) + counts.get("delete", 0):
            generator = getattr(getattr(delta.commands, "DeletionVectorBitmapGenerator$"), "MODULE$")
            helper = getattr(getattr(delta.commands, "DMLWithDeletionVectorsHelper$"), "MODULE$")
            functions = jvm.org.apache.spark.sql.functions
            bitmaps = generator.buildRowIndexSetsForFilesMatchingCondition(
                session,
                txn,
                True,
                removed._jdf,
                candidates,
                parse("true"),
                jvm.scala.Option.apply(functions.col("_file")),
                jvm.scala.Option.apply(functions.col("_row")),
            )
            touched = helper.findFilesWithMatchingRows(
                txn, helper.generateCandidateFileMap(log.dataPath(), candidates), bitmaps
            )
            stats = delta.stats.StatsCollectionUtils
            prefix = stats.getDataSkippingStringPrefixLength(session, txn.metadata())
            file_actions.append(helper.processUnmodifiedData(session, touched, txn.snapshot(), prefix)._1())
        marks.append(time.monotonic())

        columns = [key, *value_columns]
        new_rows = diff.where("_kind IN ('insert', 'update')")
        changes = (
            new_rows.select(*columns, F.lit(None).cast("string").alias("_change_type"))
            .unionByName(
                removed.select(
                    key,
                    *[F.col(f"_old_{c}").alias(c) for c in value_columns],
                    F.expr("IF(_kind = 'update', 'update_preimage', 'delete')").alias("_change_type"),
                )
            )
            .unionByName(
                new_rows.select(
                    *columns,
                    F.expr("IF(_kind = 'update', 'update_postimage', 'insert')").alias("_change_type"),
                )
            )
            .coalesce(1)
        )
        file_actions.append(txn.writeFiles(changes._jdf))
        marks.append(time.monotonic())

        actions = jvm.java.util.ArrayList()
        for group in file_actions:
            actions.addAll(jvm.scala.jdk.javaapi.CollectionConverters.asJava(group))
        now = jvm.scala.Option.apply(int(time.time() * 1000))
        actions.add(delta.actions.SetTransaction(app_id, seq, now))
        operation = getattr(getattr(delta, "DeltaOperations$ManualUpdate$"), "MODULE$")
        version = txn.commit(jvm.org.apache.spark.api.python.PythonUtils.toSeq(actions), operation)
        marks.append(time.monotonic())
    finally:
        diff.unpersist()
    phases = ["plan files", "read + diff", "deletion vectors", "write files", "commit"]
    return (
        version,
        counts,
        {name: round(b - a, 2) for name, a, b in zip(phases, marks, marks[1:], strict=False)},
    )


def empty_commit_seconds(spark: SparkSession, path: str, commits: int) -> list[float]:
    """Seconds each of ``commits`` Delta commits of a lone ``SetTransaction`` (no data) takes: the
    fixed cost every refresh commit pays on top of its own work."""
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    operation = getattr(getattr(delta, "DeltaOperations$ManualUpdate$"), "MODULE$")
    seconds = []
    for number in range(commits):
        txn = delta.DeltaLog.forTable(spark._jsparkSession, path).startTransaction()
        action = delta.actions.SetTransaction("empty-commit-probe", number + 1, jvm.scala.Option.apply(None))
        started = time.monotonic()
        txn.commit(_scala_seq(spark, [action]), operation)
        seconds.append(round(time.monotonic() - started, 2))
    return seconds


def _checksums(spark: SparkSession, path: str, from_version: int) -> tuple[Any, list[Any]]:
    table = spark.read.format("delta").load(path)
    rows = table.select(F.count("*"), F.sum(F.xxhash64(*table.columns).cast("decimal(38,0)"))).first()
    reader = spark.read.format("delta").option("readChangeFeed", "true")
    feed = reader.option("startingVersion", from_version).load(path)
    columns = [c for c in feed.columns if not c.startswith("_commit")]
    changes = sorted(
        feed.groupBy("_change_type")
        .agg(F.count("*"), F.sum(F.xxhash64(*columns).cast("decimal(38,0)")))
        .collect()
    )
    return rows, changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="a keyed Delta table with CDF and deletion vectors on")
    parser.add_argument("--key", required=True, help="its key column (an integer)")
    parser.add_argument("--every", type=int, default=600, help="change the keys divisible by this")
    parser.add_argument("--inserts", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--empty-commits", type=int, default=3, help="then time this many data-less commits (0: none)"
    )
    args = parser.parse_args()
    spark = get_spark("local[2]", conf={"spark.driver.memory": "8g", "spark.sql.shuffle.partitions": "8"})
    shutil.rmtree(WORKDIR, ignore_errors=True)
    merged, hand_built = str(WORKDIR / "merge"), str(WORKDIR / "dv_commit")
    for copy in (merged, hand_built):
        shutil.copytree(args.table, copy)
    start_version = spark.sql(f"DESCRIBE HISTORY delta.`{merged}` LIMIT 1").first()["version"] + 1
    key = args.key
    values = [c for c in spark.read.format("delta").load(merged).columns if c != key]
    first = values[0]
    for round_no in range(args.rounds):
        # The source must not be a lazy read of a table this loop writes: materialise it as Parquet.
        base = spark.read.format("delta").load(merged)
        picked = base.where(F.col(key) % (args.every + round_no) == round_no)
        bump = F.lit("changed") if dict(base.dtypes)[first] == "string" else F.col(first) + 1
        batch = (
            picked.where(F.col(key) % 7 != 0)
            .withColumn(first, bump)
            .withColumn(PRESENT, F.lit(True))
            .unionByName(picked.where(F.col(key) % 7 == 0).withColumn(PRESENT, F.lit(False)))
            .unionByName(
                base.limit(args.inserts)
                .withColumn(key, F.col(key) + 1_000_000_000 * (round_no + 1))
                .withColumn(PRESENT, F.lit(True))
            )
        )
        batch_path = str(WORKDIR / f"source_{round_no}")
        batch.write.mode("overwrite").parquet(batch_path)
        source = spark.read.parquet(batch_path).persist()
        size = source.count()
        key_type = source.schema[key].dataType
        literals = ", ".join(sql_literal(row[0], key_type) for row in source.select(key).collect())
        assert isinstance(key_type, (T.IntegerType, T.LongType)), "the probe expects an integer key"

        started = time.monotonic()
        commit = merge_output(
            DeltaHandle(spark, TableRef(path=merged), "output"),
            F.broadcast(source),
            [key],
            values,
            CommitRequest(f"probe-{round_no}", f"probe-{round_no}", "dv-commit-probe", round_no + 1),
        )
        merge_seconds = time.monotonic() - started
        started = time.monotonic()
        _, counts, phases = dv_commit(
            spark, hand_built, F.broadcast(source), key, values, "dv-commit-probe", round_no + 1, literals
        )
        dv_seconds = time.monotonic() - started
        print(
            f"round {round_no}: source {size} rows | MERGE {merge_seconds:.2f} s "
            f"(+{commit.inserted} ~{commit.updated} -{commit.deleted}) | "
            f"DV commit {dv_seconds:.2f} s {counts} {phases}"
        )
        source.unpersist()
    expected, got = _checksums(spark, merged, start_version), _checksums(spark, hand_built, start_version)
    print("same rows and change feed:", expected == got)
    assert expected == got, (expected, got)
    if args.empty_commits:
        print("empty commits (s):", empty_commit_seconds(spark, hand_built, args.empty_commits))


if __name__ == "__main__":
    main()
