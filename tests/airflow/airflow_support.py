"""Delta tables written with deltalake (no JVM) for the Airflow layer's tests, importable by name.

Not in conftest.py: tests/e2e has a conftest too, and two modules named ``conftest`` collide when one
pytest worker collects both folders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_table(path: Path, rows: list[int], metadata: dict[str, Any] | None = None) -> int:
    """Append ``rows`` (column ``k``) to a Delta table at ``path``; returns the new version."""
    import deltalake
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake

    props = None
    if metadata is not None:
        props = CommitProperties(custom_metadata={"userMetadata": json.dumps({"fkjoin": metadata})})
    write_deltalake(
        str(path), pa.table({"k": pa.array(rows, pa.int64())}), mode="append", commit_properties=props
    )
    return deltalake.DeltaTable(str(path)).version()


def record_refresh(
    output: Path,
    consumed: dict[str, tuple[str, int] | tuple[str, int, str | None]],
    kind: str = "foreign_key_join",
    origin: dict[str, Any] | None = None,
    rows: dict[str, int] | None = None,
) -> int:
    """Commit to ``output`` as an fkjoin refresh that consumed ``{side: (location, version[, table_id])}``;
    without a table id, the table's id now (None when it does not exist)."""
    import deltalake

    def table_id(location: str) -> str | None:
        try:
            return str(deltalake.DeltaTable(location).metadata().id)
        except Exception:
            return None

    inputs = {}
    for side, (loc, ver, *rest) in consumed.items():
        inputs[side] = {"location": loc, "version": ver, "table_id": rest[0] if rest else table_id(loc)}
    metadata = {"kind": kind, "mode": "incremental", "reason": "test", "inputs": inputs}
    if origin:
        metadata["origin"] = origin
    if rows:
        metadata["rows"] = rows  # as a net-change commit records them
    return write_table(output, [1], metadata)


class FakeStateStore:
    """``context["task_state_store"]`` at its boundary: what one task instance keeps across its tries."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any, retention: Any = None) -> None:
        self.values[key] = value
