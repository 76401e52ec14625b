"""No-JVM progress helpers (``engine.deltalog.watermarks``): versions and refresh commits read with
``deltalake``.

Tables are written with ``deltalake`` itself (no Spark), plus one real refresh commit from the engine
for ``progress``/``consumed_version``/``refresh_result_from_commit``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, write_deltalake

from airflow_provider_fkjoin.engine import (
    TableMissingError,
    consumed_version,
    high_watermark,
    output_freshness,
    progress,
    refresh_result_from_commit,
    run_spec,
)
from airflow_provider_fkjoin.engine.deltalog.watermarks import parse_commit_metadata


def _write(path: Path, rows: list[int], metadata: str | None = None) -> None:
    props = CommitProperties(custom_metadata={"userMetadata": metadata}) if metadata else None
    write_deltalake(
        str(path), pa.table({"id": pa.array(rows, pa.int64())}), mode="append", commit_properties=props
    )


def test_high_watermark_and_missing_tables(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _write(table, [1])
    _write(table, [2])
    assert high_watermark(table) == 1
    assert high_watermark(f"file://{table}") == 1
    with pytest.raises(TableMissingError, match="no Delta table at"):
        high_watermark(tmp_path / "missing")
    with pytest.raises(TableMissingError):
        progress(tmp_path / "missing")
    assert progress(table) is None  # commits that are not ours
    assert consumed_version(table, "/anything") is None
    with pytest.raises(TableMissingError, match="holds no fkjoin refresh commit"):
        refresh_result_from_commit(table, after_version=None)


def test_parse_commit_metadata_ignores_foreign_payloads() -> None:
    assert parse_commit_metadata(None) is None
    assert parse_commit_metadata("not json") is None
    assert parse_commit_metadata(json.dumps({"other": {}})) is None
    assert parse_commit_metadata(json.dumps({"fkjoin": {"inputs": "x"}})) is None
    assert parse_commit_metadata(json.dumps({"fkjoin": {"inputs": {}}})) == {"inputs": {}}


def test_progress_from_a_refresh_commit_skips_later_foreign_commits(tmp_path: Path) -> None:
    """An fkjoin payload written by another writer, then a commit that is not ours (say OPTIMIZE)."""
    out = tmp_path / "out"
    payload = {
        "fkjoin": {
            "seq": 2,
            "kind": "global_table_bootstrap",
            "mode": "incremental",
            "reason": "changes since the last refresh",
            "inputs": {"source": {"location": "/w/src/", "table_id": "abc", "version": 7}},
            "extra": {},
        }
    }
    _write(out, [1], json.dumps(payload))
    _write(out, [2])
    found = progress(out)
    assert found is not None and found["output_version"] == 0 and found["kind"] == "global_table_bootstrap"
    assert found["inputs"]["source"] == {"location": "/w/src/", "table_id": "abc", "version": 7}
    assert consumed_version(out, "file:///w/src") == 7  # locations compare without scheme or slash
    assert consumed_version(out, "/w/other") is None
    rebuilt = refresh_result_from_commit(out, after_version=None)
    assert rebuilt["mode"] == "incremental" and rebuilt["inputs"]["source"]["to_version"] == 7
    assert refresh_result_from_commit(out, after_version=1)["mode"] == "noop"


def test_helpers_agree_with_a_real_bootstrap(spark, warehouse: Path) -> None:
    src, out = warehouse / "src", warehouse / "global"
    spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string").write.format("delta").option(
        "delta.enableChangeDataFeed", "true"
    ).save(str(src))
    result = run_spec(
        {
            "kind": "global_table_bootstrap",
            "source": {"path": str(src), "key": ["id"]},
            "output": {"path": str(out)},
        },
        spark=spark,
    )
    assert high_watermark(src) == result["high_watermark"] == 0
    assert consumed_version(out, str(src)) == result["checkpoint"] == 0
    rebuilt = refresh_result_from_commit(out, after_version=None)
    assert rebuilt["mode"] == "full" and rebuilt["reason"] == result["reason"]
    assert rebuilt["rows"]["inserted"] == result["rows"]["inserted"] == 2
    assert rebuilt["output"]["version"] == result["output"]["version"]


def test_a_refresh_records_its_origin_and_row_counts_for_a_retry(spark, warehouse: Path) -> None:
    """What a retry reads back without Spark (``refresh_by_origin``) is what the driver reported: mode,
    output version, rows (a net-change commit records them; Delta records no metrics for it)."""
    from helpers import orders_customers

    from airflow_provider_fkjoin.engine import refresh_by_origin

    orders = [(1, 10, 1.0), (2, 20, 2.0), (3, 20, 3.0)]
    spec, orders, customers, out = orders_customers(spark, warehouse, orders, [(10, "a"), (20, "b")], "inner")
    task = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}
    run_spec(spec, spark=spark, origin={**task, "try_number": 1})
    spark.sql(f"UPDATE delta.`{customers}` SET name = 'B' WHERE customer_id = 20")
    spark.sql(f"DELETE FROM delta.`{orders}` WHERE order_id = 1")
    before = high_watermark(out)
    reported = run_spec(spec, spark=spark, origin={**task, "try_number": 2})
    assert reported["write_path"] == "net_changes"

    found = refresh_by_origin(out, {**task, "try_number": 3})
    assert found is not None and found["origin"] == {**task, "try_number": 2}
    assert (found["mode"], found["output"]["version"]) == (reported["mode"], reported["output"]["version"])
    assert found["rows"] == {k: reported["rows"][k] for k in ("inserted", "updated", "deleted")}
    assert found["rows"] == {"inserted": 0, "updated": 2, "deleted": 1}
    assert refresh_by_origin(out, {**task, "task_id": "other"}) is None
    assert refresh_result_from_commit(out, before, origin={**task, "try_number": 2})["mode"] == "incremental"
    zombie = refresh_result_from_commit(out, before, origin={**task, "try_number": 9})
    assert zombie["mode"] == "noop"  # another try's commit is not this one's result


def test_a_refresh_loads_a_table_log_once_and_sees_later_commits(tmp_path: Path) -> None:
    """Inside ``opened_once`` every handle of a table shares one load, brought up to date on each read."""
    from airflow_provider_fkjoin.engine.core.spec import TableRef
    from airflow_provider_fkjoin.engine.delta.tables import DeltaHandle, opened_once

    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1]}))
    with opened_once() as logs:
        first = DeltaHandle(None, TableRef(path=str(path)), "left")  # type: ignore[arg-type]
        assert first.state().version == 0
        write_deltalake(str(path), pa.table({"id": [2]}), mode="append")
        again = DeltaHandle(None, TableRef(path=str(path)), "left")  # type: ignore[arg-type]
        assert again.state().version == 1
        assert [entry["version"] for entry in again.history(5)] == [1, 0]
        assert list(logs) == [str(path)]


def _refresh(output: Path, kind: str, inputs: dict[str, tuple[Path, int]]) -> None:
    """A refresh commit as the engine writes one (its progress in userMetadata), without a JVM."""
    progress = {
        "kind": kind,
        "mode": "incremental",
        "reason": "changes since the last refresh",
        "inputs": {side: {"location": str(path), "version": v} for side, (path, v) in inputs.items()},
    }
    _write(output, [1], json.dumps({"fkjoin": progress}))


def test_lag_too_far_back_to_date_is_unknown_not_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_fkjoin.engine.deltalog import freshness

    source, out = tmp_path / "source", tmp_path / "out"
    for i in range(4):  # versions 0-3
        _write(source, [i])
    _refresh(out, "foreign_key_join", {"left": (source, 0)})
    dated = output_freshness(str(out))["inputs"]["left"]
    assert (dated["lag_versions"], dated["behind_since"] is not None) == (3, True)
    assert dated["lag_s"] is not None and dated["lag_s"] >= 0

    monkeypatch.setattr(freshness, "MAX_LAG_SCAN", 2)  # version 1's commit is beyond the scan
    fresh = output_freshness(str(out))
    assert (fresh["inputs"]["left"]["lag_versions"], fresh["inputs"]["left"]["lag_s"]) == (3, None)
    assert fresh["lag_s"] is None, "an output behind for an unknown time is not reported fresh"


def test_a_looked_up_table_moving_does_not_make_a_stream_join_stale(tmp_path: Path) -> None:
    stream, table, out = tmp_path / "stream", tmp_path / "table", tmp_path / "out"
    _write(stream, [1])
    _write(table, [1])
    _refresh(out, "stream_table_join", {"stream": (stream, 0), "table": (table, 0)})
    _write(table, [2])  # the table moves; the stream does not
    fresh = output_freshness(str(out))
    assert fresh["inputs"]["table"]["lag_versions"] == 1 and fresh["inputs"]["table"]["lag_s"] > 0
    assert fresh["lag_s"] == 0.0, "a refresh now would be a noop: the output is not behind"
