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


def record_refresh(output: Path, consumed: dict[str, tuple[str, int]], kind: str = "foreign_key_join") -> int:
    """Commit to ``output`` as an fkjoin refresh that consumed ``{side: (location, version)}``."""
    metadata = {
        "kind": kind,
        "mode": "incremental",
        "reason": "test",
        "inputs": {side: {"location": loc, "version": ver} for side, (loc, ver) in consumed.items()},
    }
    return write_table(output, [1], metadata)
