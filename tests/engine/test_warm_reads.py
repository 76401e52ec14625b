"""Table reads over the engine's warm file lists (``TableFiles`` in the engine jar, ``WarmFileReads``).

The oracle is Delta's own read of the same version (``versionAsOf``): after every step of a random history
of writes by Spark and by another writer (delta-rs), including deletion vectors, OPTIMIZE, overwrites and a
table dropped and recreated under the same path, each version the table had reads the same rows, and with
each row's file and row index as Delta's ``_metadata`` gives them. The answers' ``source`` show which path
served each read, so the test also fails if the warm path is never taken.
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from airflow_provider_fkjoin.engine.core.spec import TableRef
from airflow_provider_fkjoin.engine.delta.tables import DeltaHandle, warm_file_reads
from airflow_provider_fkjoin.engine.runtime import engine_procedure

PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}


def rows(frame: DataFrame) -> Counter[tuple[object, ...]]:
    return Counter(tuple(row) for row in frame.collect())


def delta_read(spark: SparkSession, path: str, version: int, *, positions: bool = False) -> DataFrame:
    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    if positions:
        frame = frame.selectExpr(
            "*", "_metadata.file_path AS _fkjoin_file", "_metadata.row_index AS _fkjoin_row"
        )
    return frame


def create(spark: SparkSession, path: str, start: int) -> None:
    writer = (
        spark.range(start, start + 40).selectExpr("id", "id * 2 AS v").repartition(3).write.format("delta")
    )
    for key, value in PROPERTIES.items():
        writer = writer.option(key, value)
    writer.save(path)


def step(spark: SparkSession, path: str, chance: random.Random) -> str:
    """One write to the table at ``path``, chosen by ``chance``; returns what it was."""
    table = f"delta.`{path}`"
    what = chance.choice(
        ["append", "delete", "update", "optimize", "rs_append", "overwrite", "delete_all_of_a_file"]
    )
    low = chance.randrange(0, 60)
    if what == "append":
        spark.range(100 + low, 103 + low).selectExpr("id", "id * 2 AS v").write.format("delta").mode(
            "append"
        ).save(path)
    elif what == "delete":
        spark.sql(f"DELETE FROM {table} WHERE id % 7 = {low % 7}")
    elif what == "update":
        spark.sql(f"UPDATE {table} SET v = v + 1 WHERE id BETWEEN {low} AND {low + 5}")
    elif what == "optimize":
        spark.sql(f"OPTIMIZE {table}")
    elif what == "rs_append":
        ids = [1000 + low, 1001 + low]
        write_deltalake(path, pa.table({"id": ids, "v": [2 * i for i in ids]}), mode="append")
    elif what == "overwrite":
        spark.range(low, low + 20).selectExpr("id", "id * 3 AS v").write.format("delta").mode(
            "overwrite"
        ).save(path)
    else:
        spark.sql(f"DELETE FROM {table} WHERE id < {low}")
    return what


@pytest.mark.parametrize("seed", [7, 21])
def test_every_version_reads_as_delta_reads_it(spark: SparkSession, warehouse: Path, seed: int) -> None:
    assert engine_procedure.supports(spark, "files")
    chance = random.Random(seed)
    path = str(warehouse / "table")
    create(spark, path, 0)
    handle = DeltaHandle(spark, TableRef(path=path), "left")
    sources: Counter[str] = Counter()
    history = ["create"]
    for _ in range(8):
        history.append(step(spark, path, chance))
        latest = DeltaTable(path).version()  # a write that changes nothing (OPTIMIZE) commits nothing
        versions = [latest, latest, max(0, latest - 2)]
        for version in versions:
            with warm_file_reads(spark, enabled=True) as warm:
                assert warm is not None
                read = rows(handle.read(version))
                located = rows(handle.read_with_positions(version))
                sources.update(warm.sources)
            assert read == rows(delta_read(spark, path, version)), (history, version)
            assert located == rows(delta_read(spark, path, version, positions=True)), (history, version)
    # the warm path served reads: a version read again is held, a newer one advanced from the commits
    assert sources["held"] > 0 and sources["advanced"] > 0, sources


def test_a_table_recreated_under_the_same_path_is_read_afresh(spark: SparkSession, warehouse: Path) -> None:
    path = str(warehouse / "recreated")
    create(spark, path, 0)
    handle = DeltaHandle(spark, TableRef(path=path), "left")
    with warm_file_reads(spark, enabled=True):
        assert rows(handle.read(0)) == rows(delta_read(spark, path, 0))
    shutil.rmtree(path)
    create(spark, path, 500)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 510")
    with warm_file_reads(spark, enabled=True) as warm:
        assert warm is not None
        read = rows(handle.read(1))
        assert warm.sources != ["advanced"], warm.sources
    assert read == rows(delta_read(spark, path, 1))
    assert all(row[0] >= 500 for row in read) and (510, 1020) not in read


def test_without_checksums_the_files_come_from_delta_state(spark: SparkSession, warehouse: Path) -> None:
    path = str(warehouse / "no_checksums")
    create(spark, path, 0)
    handle = DeltaHandle(spark, TableRef(path=path), "left")
    with warm_file_reads(spark, enabled=True):
        handle.read(0).count()
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 3")
    for checksum in (Path(path) / "_delta_log").glob("*.crc"):
        checksum.unlink()
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 4")
    with warm_file_reads(spark, enabled=True) as warm:
        assert warm is not None
        read = rows(handle.read(2))
        # version 0's checksum is gone, so its held files cannot be advanced from: read afresh
        assert warm.sources in (["state"], ["checksum"]), warm.sources
    assert read == rows(delta_read(spark, path, 2))


def test_reads_outside_a_block_or_of_the_latest_version_are_delta_reads(
    spark: SparkSession, warehouse: Path
) -> None:
    path = str(warehouse / "plain")
    create(spark, path, 0)
    handle = DeltaHandle(spark, TableRef(path=path), "left")
    assert "fkjoin_files_" not in handle.read(0).columns
    with warm_file_reads(spark, enabled=True) as warm:
        assert warm is not None
        handle.read().count()
        assert warm.views == {}
    with warm_file_reads(spark, enabled=False) as off:
        assert off is None
    # the block's views are dropped when it ends
    with warm_file_reads(spark, enabled=True) as warm:
        assert warm is not None
        handle.read(0).count()
        names = list(warm.views.values())
    assert names and not any(spark.catalog.tableExists(name) for name in names)
