"""One module per join kind, and :data:`KINDS`: the one registry the runner and the audit dispatch on.

Each kind module holds its join's algorithm; the change feeds, progress, the output writer, ownership and
state tables it uses live once, in the layers below. A new kind is a module here and one line in
:data:`KINDS`.

>>> KINDS["foreign_key_join"].run(spec, spark, RunOptions())["mode"]
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
from ..write.refresh import RunOptions
from . import fk_join, global_table, multiway_join, stream_join
from .windowed import run_windowed_join, self_join
from .windowed import table as windowed_table

#: Refresh a spec's output once; returns the result dict.
Run = Callable[[Any, SparkSession, RunOptions], dict[str, Any]]
#: The output a spec should hold given its inputs at pinned versions: (rows, key columns, columns).
ExpectedOutput = Callable[[Any, SparkSession, dict[str, TableState]], tuple[DataFrame, list[str], list[str]]]


@dataclass(frozen=True)
class JoinKind:
    """How the engine runs one ``kind``, and how the audit recomputes its output (``None``: append-only)."""

    run: Run
    expected_output: ExpectedOutput | None = None

    def recomputable(self, spec: Any) -> bool:
        """Whether the audit can recompute this spec's output: a keyed table, not an append-only log."""
        return self.expected_output is not None and getattr(spec, "mode", "table") == "table"


KINDS: dict[str, JoinKind] = {
    "foreign_key_join": JoinKind(fk_join.run_foreign_key_join, fk_join.expected_output),
    "global_table_bootstrap": JoinKind(global_table.run_global_table_bootstrap, global_table.expected_output),
    "stream_table_join": JoinKind(stream_join.run_stream_table_join),
    "windowed_join": JoinKind(run_windowed_join, windowed_table.expected_output),
    "self_join": JoinKind(self_join.run_self_join),
    "multiway_join": JoinKind(multiway_join.run_multiway_join, multiway_join.expected_output),
}
