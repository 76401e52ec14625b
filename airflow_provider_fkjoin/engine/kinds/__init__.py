"""One module per join kind, and :data:`KINDS`: the one registry the runner and the audit dispatch on.

Each kind module holds its join's algorithm, as a :class:`..refresh.skeleton.KindRefresh` subclass whose
instance is one refresh's state: what its ``prepare`` resolved (shapes, inputs at pinned versions), read
by its steps. The change feeds, progress, the output writer, ownership and state tables it uses live once,
in the layers below. A new kind is a module here and one line in :data:`KINDS`.

Every kind's refresh is a class, built as ``cls(spec, spark)``; a kind refreshed by several (a windowed
join's modes) lists the others as ``forms``, and :meth:`JoinKind.refresh_for` picks the class, the one
place that does.

>>> refresh_once(KINDS["foreign_key_join"].refresh_for(spec, spark), options)["mode"]
'incremental'
>>> type(KINDS["windowed_join"].refresh_for(table_mode_outer_spec, spark)).__name__
'OuterWindowedTableJoinRefresh'
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
from .windowed import self_join, stream
from .windowed import table as windowed_table

#: The output a spec should hold given its inputs at pinned versions: (rows, key columns, columns).
ExpectedOutput = Callable[[Any, SparkSession, dict[str, TableState]], tuple[DataFrame, list[str], list[str]]]


@dataclass(frozen=True)
class JoinKind:
    """How the engine refreshes one ``kind``, and how the audit recomputes its output (``None``:
    append-only).

    ``refresh`` is the kind's class; ``forms`` are classes that refresh some of its specs instead, each
    saying exactly which by its ``serves`` (no two serve the same spec). Build a refresh with
    :meth:`refresh_for`, never ``refresh(...)`` directly: for a kind with forms that would skip them.
    """

    refresh: type[KindRefresh]
    expected_output: ExpectedOutput | None = None
    forms: tuple[type[KindRefresh], ...] = ()

    def refresh_for(self, spec: Any, spark: SparkSession) -> KindRefresh:
        """The refresh of ``spec``: the first of ``forms`` that serves it, else ``refresh``, built as
        ``cls(spec, spark)``. The one place a spec's refresh class is chosen."""
        chosen = next((form for form in self.forms if form.serves(spec)), self.refresh)
        return chosen(spec, spark)

    def recomputable(self, spec: Any) -> bool:
        """Whether the audit can recompute this spec's output: a keyed table, not an append-only log."""
        return self.expected_output is not None and getattr(spec, "mode", "table") == "table"


KINDS: dict[str, JoinKind] = {
    "foreign_key_join": JoinKind(fk_join.ForeignKeyJoinRefresh, fk_join.expected_output),
    "global_table_bootstrap": JoinKind(global_table.GlobalTableRefresh, global_table.expected_output),
    "stream_table_join": JoinKind(stream_join.StreamTableJoinRefresh),
    "windowed_join": JoinKind(
        stream.EventJoinRefresh,
        windowed_table.expected_output,
        forms=(
            windowed_table.WindowedTableAsForeignKeyRefresh,
            windowed_table.OuterWindowedTableJoinRefresh,
            self_join.WindowedJoinAsSelfJoinRefresh,
        ),
    ),
    "self_join": JoinKind(self_join.SelfJoinKindRefresh),
    "multiway_join": JoinKind(multiway_join.MultiWayJoinRefresh, multiway_join.expected_output),
}
