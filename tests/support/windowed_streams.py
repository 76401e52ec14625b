"""Stream-mode windowed joins over event tables: the tables (a side appended a batch at a time), the events,
the ``windowed_join`` (stream mode) and ``self_join`` specs over them, and the rows a refresh appended,
read from the output's change feed, next to the rows the record-by-record model (``windowed_model``)
emitted."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from helpers import append_rows, create_table, read_changes
from windowed_model import Event

EVENTS = "k string, t long, seq int, v string"
COLUMNS = {"k": "coalesce(l.k, r.k)", "lv": "l.v", "rv": "r.v"}


class Side:
    """One input table of events, appended a refresh's batch at a time (one commit per batch)."""

    def __init__(self, spark, path: Path) -> None:
        self.spark, self.path, self.seq = spark, path, 0

    def append(self, events: list[Event]) -> None:
        rows = []
        for event in events:
            self.seq += 1
            key = None if event.key is None else event.key[0]
            rows.append({"k": key, "t": event.t, "seq": self.seq, "v": event.row["v"]})
        if not self.path.exists():
            create_table(self.spark, self.path, rows, EVENTS)
        elif rows:
            append_rows(self.spark, self.path, rows)


def ev(key: str | None, t: int, v: str) -> Event:
    return Event(None if key is None else (key,), t, {"v": v})


def spec_for(left: Path, right: Path, out: Path, window: dict, how: str, **extra: Any) -> dict:
    return {
        "kind": "windowed_join",
        "mode": "stream",
        "left": {"path": str(left), "key": ["k"], "time": "t", "order_by": ["seq"]},
        "right": {"path": str(right), "key": ["k"], "time": "t", "order_by": ["seq"]},
        "window": window,
        "how": how,
        "columns": COLUMNS,
        "output": {"path": str(out)},
        **extra,
    }


def appended(spark, out: Path, result: dict) -> Counter:
    """The rows the refresh of ``result`` appended to the output (its commit's change feed)."""
    version = result["output"]["version"]
    rows = read_changes(spark, str(out), version, version)
    return Counter((r["k"], r["lv"], r["rv"], r["event_time"]) for r in rows if r["_change_type"] == "insert")


def expected(outputs: list) -> Counter:
    found = Counter()
    for _kind, left, right, t in outputs:
        key = None
        for row in (left, right):
            if row is not None and row.get("k") is not None:
                key = row["k"]
        found[(key, left["v"] if left else None, right["v"] if right else None, t)] += 1
    return found


def with_keys(events: list[Event]) -> list[Event]:
    """The model's rows carry the key too (the output's coalesced key)."""
    return [Event(e.key, e.t, {"v": e.row["v"], "k": None if e.key is None else e.key[0]}) for e in events]


def self_spec(events: Path, out: Path, window: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "kind": "self_join",
        "input": {"path": str(events), "key": ["k"], "time": "t", "order_by": ["seq"]},
        "window": window,
        "columns": COLUMNS,
        "output": {"path": str(out)},
        **extra,
    }
