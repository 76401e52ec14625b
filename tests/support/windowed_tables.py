"""Table-mode windowed joins: the errors-per-minute windowed table (a row per service and minute, weeks
apart), the join recomputed from scratch in Python, and the output read back by key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import read_rows

WEEK = 7 * 86_400_000
MINUTE = 60_000
ERRORS = "service string, ws long, we long, errors int"


def scratch(
    left: list[dict], right: list[dict], left_key: list[str], right_map, how: str, values
) -> dict[tuple, tuple]:
    """The join from scratch: ``right_map(row)`` is a right row's key in the left's key space."""
    lefts = {tuple(r[k] for k in left_key): r for r in left if all(r[k] is not None for k in left_key)}
    rights: dict[tuple, dict] = {}
    for row in right:
        mapped = right_map(row)
        if all(part is not None for part in mapped):
            rights[mapped] = row
    out = {}
    for key, row in lefts.items():
        match = rights.get(key)
        if match is None and how == "inner":
            continue
        out[key] = values(row, match)
    if how == "outer":
        for key, row in rights.items():
            if key not in lefts:
                out[key] = values(None, row)
    return out


def output_of(spark, path: Path, key: list[str], columns: list[str]) -> dict[tuple, tuple]:
    return {tuple(r[k] for k in key): tuple(r[c] for c in columns) for r in read_rows(spark, path)}


def errors_row(service: str, minute: int, errors: int, week: int = 0) -> dict[str, Any]:
    start = week * WEEK + minute * MINUTE
    return {"service": service, "ws": start, "we": start + MINUTE, "errors": errors}
