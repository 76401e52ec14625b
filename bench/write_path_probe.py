"""Measure before building (write-path issue, point 1): what a MERGE-free refresh commit would pay.

Three questions, each timed side by side in one warm Spark session on the same 10M-row FK output:

1. **The fixed cost of a Delta commit** by operation: ``ManualUpdate`` (what ``dv_commit_probe.py`` used),
   ``Update`` (a real operation: Delta derives the new checksum incrementally from the previous one),
   each with no action at all and with a lone ``SetTransaction`` (a ``txnVersion``), plus Delta's own
   one-row ``INSERT`` and ``SET TBLPROPERTIES`` commits for reference.
2. **A key-only read of the output** once its files carry deletion vectors: Delta's reader (applies the
   deletion vectors), plain Parquet of the live files (ignores them), plain Parquet with
   ``_metadata.row_index`` (what locating rows for new deletion vectors needs), and pyarrow (no JVM).
3. **A read of the left table's FK column** (``order_id, customer_id``): what finding the left rows of
   changed right keys costs without the other columns, through Spark and through pyarrow.

Each read XORs ``xxhash64`` of the columns, so Spark must decode them (a ``max`` could be answered
from file statistics). Nothing here is engine code; it uses py4j for the hand-built commits.

    .venv/bin/python bench/write_path_probe.py --left-rows 10000000 --right-rows 1000000 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen

from airflow_provider_fkjoin.engine import get_spark, run_spec


def timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return round(time.perf_counter() - started, 3)


def _seq(spark: Any, items: list[Any]) -> Any:
    java_list = spark._jvm.java.util.ArrayList()
    for item in items:
        java_list.add(item)
    return spark._jvm.org.apache.spark.api.python.PythonUtils.toSeq(java_list)


def commit_seconds(spark: Any, path: str, operation: str, with_txn: bool, commits: int) -> list[float]:
    """Seconds each hand-built commit takes (``txn.commit`` including Delta's post-commit hooks)."""
    jvm = spark._jvm
    delta = jvm.org.apache.spark.sql.delta
    if operation == "ManualUpdate":
        op = getattr(getattr(delta, "DeltaOperations$ManualUpdate$"), "MODULE$")
    else:
        op = getattr(delta, "DeltaOperations$Update")(jvm.scala.Option.apply(None))
    seconds = []
    for number in range(commits):
        started = time.perf_counter()
        txn = delta.DeltaLog.forTable(spark._jsparkSession, path).startTransaction()
        actions = []
        if with_txn:
            app = f"probe-{operation}"
            actions.append(
                delta.actions.SetTransaction(
                    app, int(time.time() * 1000) + number, jvm.scala.Option.apply(None)
                )
            )
        txn.commit(_seq(spark, actions), op)
        seconds.append(round(time.perf_counter() - started, 3))
    return seconds


def sql_commit_seconds(spark: Any, path: str, key: str, commits: int) -> dict[str, list[float]]:
    """Delta's own small commits: a one-row INSERT (WRITE) and SET TBLPROPERTIES (metadata only)."""
    insert, props = [], []
    schema = spark.read.format("delta").load(path).schema
    for number in range(commits):
        row = spark.createDataFrame(
            [tuple(-(number + 1) if f.name == key else None for f in schema.fields)], schema
        )
        insert.append(timed(lambda row=row: row.write.format("delta").mode("append").save(path)))
        props.append(
            timed(
                lambda n=number: spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('probe' = '{n}')")
            )
        )
    spark.sql(f"DELETE FROM delta.`{path}` WHERE {key} < 0")
    return {"insert_one_row": insert, "set_tblproperties": props}


def read_seconds(spark: Any, path: str, columns: list[str], repeat: int) -> dict[str, list[float]]:
    """Key-only (or FK-column) reads of a Delta table, four ways."""
    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    files = DeltaTable(path).file_uris()
    digest = F.bit_xor(F.xxhash64(*[F.col(c) for c in columns]))
    out: dict[str, list[float]] = {
        "delta_reader": [],
        "parquet_live_files": [],
        "parquet_row_index": [],
        "pyarrow": [],
    }
    for _ in range(repeat):
        out["delta_reader"].append(
            timed(lambda: spark.read.format("delta").load(path).select(*columns).agg(digest).collect())
        )
        out["parquet_live_files"].append(
            timed(lambda: spark.read.parquet(*files).select(*columns).agg(digest).collect())
        )
        out["parquet_row_index"].append(
            timed(
                lambda: (
                    spark.read.parquet(*files)
                    .select(*columns, F.col("_metadata.file_path"), F.col("_metadata.row_index"))
                    .agg(digest, F.max("row_index"))
                    .collect()
                )
            )
        )
        out["pyarrow"].append(
            timed(lambda: ds.dataset([f.removeprefix("file://") for f in files]).to_table(columns=columns))
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--left-rows", type=int, default=10_000_000)
    parser.add_argument("--right-rows", type=int, default=1_000_000)
    parser.add_argument("--change-rows-left", type=int, default=10_000)
    parser.add_argument("--change-rows-right", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(__file__).resolve().parent / "data")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).resolve().parent / "results_write_path_probe.json"
    )
    args = parser.parse_args(argv)
    spark = get_spark("local[2]", conf={"spark.sql.shuffle.partitions": "8"})
    base = datagen.ensure_base_tables(spark, args.workdir.resolve(), args.left_rows, args.right_rows)
    run = args.workdir.resolve() / "probe_run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    left, right, out = run / "orders", run / "customers", run / "orders_enriched"
    datagen.copy_table(base.left, left)
    datagen.copy_table(base.right, right)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(left), "key": ["order_id"]},
        "right": {"path": str(right), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": str(out)},
    }
    report: dict[str, Any] = {"left_rows": args.left_rows, "right_rows": args.right_rows}
    report["full_build_s"] = timed(lambda: run_spec(spec, spark=spark))
    datagen.apply_right_changes(spark, right, args.right_rows, args.change_rows_right, 0)
    datagen.apply_left_changes(
        spark, left, args.left_rows, args.right_rows, args.change_rows_left, args.change_rows_right, 0
    )
    refresh: dict[str, Any] = {}
    report["incremental_refresh_s"] = timed(lambda: refresh.update(run_spec(spec, spark=spark)))
    report["incremental_rows"] = refresh.get("rows")
    report["output_files"], report["output_files_with_deletion_vectors"] = _files_with_deletion_vectors(out)
    print(json.dumps(report), flush=True)

    commits: dict[str, list[float]] = {}
    for operation in ("ManualUpdate", "Update"):
        for with_txn in (False, True):
            label = f"{operation}{'+txn' if with_txn else ''}"
            commits[label] = commit_seconds(spark, str(out), operation, with_txn, args.repeat + 1)[1:]
            print(label, commits[label], flush=True)
    commits.update(sql_commit_seconds(spark, str(out), "order_id", args.repeat))
    report["commit_s"] = commits
    report["output_key_read_s"] = read_seconds(spark, str(out), ["order_id"], args.repeat)
    print("output key", report["output_key_read_s"], flush=True)
    report["left_fk_read_s"] = read_seconds(spark, str(left), ["order_id", "customer_id"], args.repeat)
    print("left fk", report["left_fk_read_s"], flush=True)
    args.json.write_text(json.dumps(report, indent=2))
    print(json.dumps(report), flush=True)


def _files_with_deletion_vectors(path: Path) -> tuple[int, int]:
    """(live files, files carrying a deletion vector) of a local Delta table, from its log."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    return len(table.file_uris()), pa.table(table.deletion_vectors()).num_rows


if __name__ == "__main__":
    main()
