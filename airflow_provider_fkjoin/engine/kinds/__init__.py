"""One module per join kind, and :data:`KINDS`: the one registry the runner and the audit dispatch on.

Each kind module holds its join's algorithm; the change feeds, progress, the output writer, ownership and
state tables it uses live once, in the layers below. A new kind is a module here and one line in
:data:`KINDS`.

>>> refresh_once(KINDS["foreign_key_join"].refresh(spec, spark), options)["mode"]
'incremental'
>>> KINDS["self_join"].expected_output is None  # append-only: nothing keyed to recompute
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ..delta.tables import TableState
from ..refresh.skeleton import KindRefresh
from . import fk_join, global_table, multiway_join, stream_join
from .windowed import self_join, windowed_join_refresh
from .windowed import table as windowed_table

#: A spec's refresh: its kind's algorithm, which :func:`..refresh.skeleton.refresh_once` runs.
Refresh = Callable[[Any, SparkSession], KindRefresh]
#: The output a spec should hold given its inputs at pinned versions: (rows, key columns, columns).
ExpectedOutput = Callable[[Any, SparkSession, dict[str, TableState]], tuple[DataFrame, list[str], list[str]]]


@dataclass(frozen=True)
class JoinKind:
    """How the engine refreshes one ``kind``, and how the audit recomputes its output (``None``:
    append-only)."""

    refresh: Refresh
    expected_output: ExpectedOutput | None = None

    def recomputable(self, spec: Any) -> bool:
        """Whether the audit can recompute this spec's output: a keyed table, not an append-only log."""
        return self.expected_output is not None and getattr(spec, "mode", "table") == "table"


KINDS: dict[str, JoinKind] = {
    "foreign_key_join": JoinKind(fk_join.ForeignKeyJoinRefresh, fk_join.expected_output),
    "global_table_bootstrap": JoinKind(global_table.GlobalTableRefresh, global_table.expected_output),
    "stream_table_join": JoinKind(stream_join.StreamTableJoinRefresh),
    "windowed_join": JoinKind(windowed_join_refresh, windowed_table.expected_output),
    "self_join": JoinKind(self_join.self_join_refresh),
    "multiway_join": JoinKind(multiway_join.MultiWayJoinRefresh, multiway_join.expected_output),
}
