"""Engine-owned state tables: Delta tables the engine keeps beside an output between refreshes.

Some joins carry rows from one refresh to the next that are not output (a windowed join's pending
unmatched rows). They live in a Delta table at ``<output location>_fkjoin_state/<name>``, beside the
output (inside it, the first refresh could not create the output: its folder would not be empty). Every
state commit names the output it belongs to, and a state location holding anything else is refused. The
output commit records the state version it goes with; a refresh reads exactly that version, so a state
commit whose refresh then failed is ignored.

    >>> state = StateTable(output)
    >>> written = state.write(pending_rows)
    >>> written.rows, state.read(written.version).count()
    (7, 7)
"""

from __future__ import annotations

import json
import uuid
from typing import NamedTuple

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..core.errors import ConcurrentRefreshError, SpecError
from ..core.spec import TableRef
from .tables import DeltaHandle, null_of, path_has_files


def _holds_anything(table: DeltaHandle) -> bool:
    local = table.local_path
    if local is not None:
        return local.exists() and (not local.is_dir() or any(local.iterdir()))
    return path_has_files(table.spark, table.location)


STATE_SUFFIX = "_fkjoin_state"
MARKER = "_fkjoin_write"
#: What Delta says when a state table or the version asked for does not exist.
GONE_MARKERS = (
    "DELTA_TABLE_NOT_FOUND",
    "DELTA_MISSING_DELTA_TABLE",
    "PATH_NOT_FOUND",
    "DELTA_CANNOT_TIME_TRAVEL",
    "VERSION_NOT_FOUND",
    "DELTA_VERSIONS_NOT_CONTIGUOUS",
    "DELTA_LOG_FILE_NOT_FOUND",
    "is not a Delta table",
    "does not exist",
)


class StateWrite(NamedTuple):
    """A state commit: its version, and the rows the table now holds."""

    version: int
    rows: int


class StateTable:
    """One state table of an output (see the module docstring)."""

    def __init__(self, output: DeltaHandle, name: str = "pending") -> None:
        self.spark = output.spark
        self.output = output
        self.name = name

    @property
    def path(self) -> str:
        """``<output path>_fkjoin_state/<name>``; an output named in a catalog has no path to put it beside
        before it exists, so it is refused (SpecError naming ``output``)."""
        if self.output.ref.path is None:
            raise SpecError(
                f"output: {self.output.location} is a catalog table, but this join keeps state in a Delta "
                "table beside its output, which needs the output's path; give output.path instead of name"
            )
        return f"{self.output.storage_path().rstrip('/')}{STATE_SUFFIX}/{self.name}"

    def readable(self, version: int) -> bool:
        """Whether the table exists and holds ``version``. Only a missing table or version counts as
        gone (the caller then rebuilds); any other failure (storage, permissions) is raised."""
        try:
            self.read(version).schema  # noqa: B018 - analysis resolves the version
        except Exception as error:
            if any(marker in str(error) for marker in GONE_MARKERS):
                return False
            raise
        return True

    @property
    def table(self) -> DeltaHandle:
        """The state table as the engine reads any table (``deltalake`` when local, Delta's SQL else)."""
        return DeltaHandle(self.spark, TableRef(path=self.path), f"state table of {self.output.role}")

    def _require_ours(self, owner: str) -> None:
        """Refuse a state location that holds something other than this output's state."""
        table = self.table
        if not _holds_anything(table):
            return
        latest = table.history(1) if table.exists() else []
        metadata = json.loads(latest[0]["userMetadata"] or "{}") if latest else {}
        if metadata.get("output") != owner:
            raise SpecError(
                f"output {self.output.location}: its state location {self.path} holds data that is not this "
                "output's join state; move that data, or write the output to another location"
            )

    def read(self, version: int) -> DataFrame:
        """The rows written at ``version`` (without the write's marker row)."""
        stored = self.table.read(version)
        return stored.where(F.col(MARKER).isNull()).drop(MARKER)

    def write(self, rows: DataFrame, files: int | None = None) -> StateWrite:
        """Replace the table's rows with ``rows`` (schema included) in one commit, as at most ``files``
        files when given; returns its version and how many rows it holds (from the commit's metrics: no
        count job).

        The commit is found again by a token in its metadata, so the version returned is this write's
        even when another refresh writes the same state table at the same time.
        """
        token = uuid.uuid4().hex
        owner = self.output.ref.identity
        self._require_ours(owner)
        # A marker row makes every write a commit: Delta may skip an overwrite that changes nothing.
        marker = self.spark.range(1).select(
            *[null_of(field.dataType).alias(field.name) for field in rows.schema.fields],
            F.lit(token).alias(MARKER),
        )
        stored = rows.withColumn(MARKER, F.lit(None).cast("string")).unionByName(marker)
        if files is not None:
            stored = stored.coalesce(files)
        (
            stored.write.format("delta")
            .mode("overwrite")
            .option("overwriteSchema", "true")
            .option("userMetadata", json.dumps({"fkjoin_state": token, "output": owner}))
            .save(self.path)
        )
        for row in self.table.history(20):
            if row["userMetadata"] and token in row["userMetadata"]:
                written = int((row["operationMetrics"] or {}).get("numOutputRows", 1))
                return StateWrite(int(row["version"]), written - 1)  # the marker row is not state
        raise ConcurrentRefreshError(
            f"state table {self.path} of output {self.output.location}: the state this refresh wrote is not "
            "in the table's recent history (other refreshes wrote it too); nothing was written to the "
            "output. Retry."
        )
