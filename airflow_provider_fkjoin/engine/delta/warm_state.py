"""A join's warm state: its inputs' rows and its output's row positions, held in the engine's JVM between
refreshes, so that a large table's refresh looks up what a change touches instead of scanning for it.

Kafka Streams keeps a foreign-key join's tables in state stores beside the stream thread: a changed
customer finds its orders through the subscription store, not by reading every order. A refresh here
runs in a Spark session whose JVM outlives it when the session does (a Spark Connect server, a notebook's
or a benchmark's session): the engine's JVM side (:mod:`..runtime.engine_procedure`,
``WarmJoinState.java``) keeps, per output, the left rows by key with an index from foreign key to left
keys, the right rows by key, and each output key's data file and row index. Each part is valid for one
version of one table (its Delta table id and version); a refresh uses the state only when it starts from
exactly those versions, and advances it after its commit from its own change feeds and the files it
wrote. Anything else (another writer, a restarted server, a refresh written by MERGE) makes the next
refresh run its usual plan and build the state again, from one scan of each table.

Where it lives: in RocksDB databases on the JVM's local disk (``JoinStateStore.java``), one per output,
whose memory is one block cache all of a JVM's states share (``StateMemory.java``,
:data:`MEMORY_BYTES_CONF`): the JVM's heap holds a refresh's changes, not the state, and a state larger
than the cache is read from disk. Why not in Delta state tables: a lookup of 1,000 changed keys spread
over a table touches most of its files whatever the layout (sorted by key, 1,000 changed customers of 1M
touch 632 of 1,000 files), so an index stored in Delta costs what scanning the input costs.

    >>> warm = WarmState(spark, output_handle)
    >>> warm.lookup(...)  # doctest: +SKIP
    StateLookup(token='3f2a...', left=DataFrame[...], right=DataFrame[...], positions=DataFrame[...])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..core.spec import quote
from ..runtime import engine_procedure
from ..runtime import engine_protocol as protocol
from ..runtime.session import size_bytes
from .changes import ChangedKeys
from .tables import DeltaHandle

#: The native memory (bytes) all the warm states of one JVM share: RocksDB's block cache, with its index
#: and filter blocks and write buffers charged to it; the rest of a state is on the JVM's local disk.
#: Unset, the JVM takes an eighth of its maximum heap, at least 64 MiB and at most 1 GiB. The first state
#: a JVM opens fixes it.
MEMORY_BYTES_CONF = "spark.fkjoin.state.memoryBytes"

#: The free space (bytes) a build keeps on the disk that holds the state: below it, the build stops and
#: the next refresh says why. Unset, 512 MiB.
DISK_RESERVE_CONF = "spark.fkjoin.state.diskReserveBytes"

#: ``true`` in a process that ends after its refresh (``fkjoin run``, a spark-submit task): the refresh
#: waits for the state's build and durable copy before it returns, so that the next process loads it.
SETTLE_CONF = "spark.fkjoin.state.settle"

#: The state's figures a lookup reports (``warm_state.lookup`` in the result).
LOOKUP_COUNTS = (
    "left_rows",
    "right_rows",
    "located",
    "held_rows",
    "memory_bytes",
    "budget_bytes",
    "disk_bytes",
)


@dataclass(frozen=True)
class SideVersions:
    """One input as a refresh consumes it: its table id, and the versions it reads changes between."""

    table_id: str
    after: int
    to: int


@dataclass
class StateLookup:
    """What the warm state found for one refresh: the current left rows it affects (``left``), the right
    rows they and their previous versions reference (``right``), and the output positions of the affected
    keys (``positions``: key, ``_fkjoin_file``, ``_fkjoin_row``), as temporary views in the session."""

    token: str
    left: DataFrame
    right: DataFrame
    positions: DataFrame
    counts: dict[str, int]
    #: How long building the state took (in the background), reported by the first lookup after it.
    built_s: float | None = None
    #: The state's durable copy: ``loaded`` when this JVM loaded it for this lookup (how long, how many
    #: bytes, which checkpoint), ``persisted`` the last one written, and why the last write failed.
    durable: dict[str, Any] | None = None


class WarmState:
    """The engine JVM's warm state for one output (see the module docstring).

    Every method returns, rather than raises, when the state cannot serve: the refresh then runs its
    usual plan, and a reason lands in the result (``warm_state``).
    """

    def __init__(self, spark: SparkSession, output: DeltaHandle) -> None:
        self.spark = spark
        self.output = output
        self.name = output.storage_path()
        self.views = engine_procedure.RequestViews(spark)

    def available(self) -> str | None:
        """Why this session cannot hold a warm state (no engine jar, or an older one), or None."""
        if engine_procedure.supports(self.spark, "warm_lookup"):
            return None
        reason = engine_procedure.unavailable_reason(self.spark)
        return reason or "the session's engine jar predates warm state"

    def why_not_serving(
        self, output_id: str, output_version: int, inputs: dict[str, SideVersions]
    ) -> str | None:
        """None when the JVM holds, or loads from its durable copy, a state this refresh can use: the
        output's id, at most its version (a compaction since is followed), and each input's id at
        exactly the version the refresh reads changes after; otherwise why not. No Spark job; the
        lookup checks again."""
        unavailable = self.available()
        if unavailable is not None:
            return unavailable
        held = engine_procedure.call(
            self.spark,
            protocol.WarmPeek(state=self.name, output={"id": output_id, "version": output_version}),
        )
        if held.status != protocol.Status.HELD or held.output is None:
            return held.reason or str(held.status)
        if held.output["id"] != output_id:
            return "the state is of another table at the output's location (the output was replaced)"
        if int(held.output["version"]) > output_version:
            return f"the state is of output version {held.output['version']}, past {output_version}"
        sides = {"left": held.left, "right": held.right}
        for name, versions in inputs.items():
            side = sides.get(name)
            if side is None or side["id"] != versions.table_id or int(side["version"]) != versions.after:
                at = "another table" if side is None or side["id"] != versions.table_id else side["version"]
                return (
                    f"the state holds the {name} table at {at}, and this refresh reads its changes after "
                    f"version {versions.after}"
                )
        return None

    def lookup(
        self,
        output_id: str,
        output_version: int,
        left: SideVersions,
        right: SideVersions,
        left_changes: tuple[ChangedKeys, DataFrame | None],
        right_changes: tuple[ChangedKeys, DataFrame | None],
    ) -> StateLookup | str:
        """The affected rows for changes read from ``left.after``/``right.after`` (each side's changed
        keys and their rows at the pinned version), or why the state cannot serve (a str)."""
        sides = {}
        for role, versions, (changes, after) in (
            ("left", left, left_changes),
            ("right", right, right_changes),
        ):
            request: dict[str, Any] = {"id": versions.table_id, "from": versions.after, "to": versions.to}
            if changes.count and after is not None:
                request["keys"] = self.views.add(f"warm_{role}_keys", net_counts(changes))
                request["after"] = self.views.add(f"warm_{role}_after", after)
            elif changes.count:
                return f"the {role} side's changes carry no rows"
            sides[role] = request
        views = {role: self.views.name(f"warm_{role}") for role in ("left", "right", "positions")}
        answer = engine_procedure.call(
            self.spark,
            protocol.WarmLookup(
                state=self.name,
                output={"id": output_id, "version": output_version},
                left=sides["left"],
                right=sides["right"],
                views=views,
            ),
        )
        if answer.status == protocol.Status.DUPLICATES:
            return f"the {answer.side} table's changes repeat {answer.repeats} key(s)"
        if answer.status != protocol.Status.READY or answer.token is None:
            return answer.reason or str(answer.status)
        figures = answer.model_dump(include=set(LOOKUP_COUNTS), exclude_none=True)
        durable = answer.model_dump(include={"loaded", "persisted", "persist_error"}, exclude_none=True)
        return StateLookup(
            token=answer.token,
            left=self.spark.table(views["left"]),
            right=self.spark.table(views["right"]),
            positions=self.spark.table(views["positions"]),
            counts=figures,
            built_s=answer.built_ms / 1000 if answer.built_ms is not None else None,
            durable=durable or None,
        )

    def advance(
        self, token: str, version: int, removed: DataFrame | None, added: tuple[str, ...]
    ) -> str | None:
        """Apply a lookup's changes after the refresh committed ``version``: the keys whose output rows
        were replaced or deleted (``removed``) lose their positions, the data files the commit ``added``
        give the new ones, and a compaction after it is followed. None, or why the state was dropped."""
        answer = engine_procedure.call(
            self.spark,
            protocol.WarmAdvance(
                state=self.name,
                token=token,
                output=self.name,
                version=version,
                added=list(added),
                removed=self.views.add("warm_removed", removed) if removed is not None else None,
            ),
        )
        if answer.status != protocol.Status.ADVANCED:
            return answer.reason or str(answer.status)
        return None

    def build(
        self,
        output_id: str,
        output_version: int,
        left: tuple[str, int, DataFrame, list[str], list[str]],
        right: tuple[str, int, DataFrame, list[str]],
    ) -> protocol.Answer:
        """Hold the inputs' rows (``left``: table id, version, rows with their foreign-key columns, key and
        foreign-key column names; ``right``: id, version, rows, key) and the output's positions at
        ``output_version``: one scan of each, on a JVM thread of its own, so the refresh that asks does
        not wait (the next one waits for it, if it is still under way). Returns the answer (``status``
        ``building``, or ``refused`` with a ``reason`` when a size setting is not a size); a build that
        cannot finish says why in the next refresh's ``reason``."""
        left_id, left_version, left_rows, left_key, fk = left
        right_id, right_version, right_rows, right_key = right
        positions = self.output.read_with_positions(output_version).select(
            *[quote(c) for c in left_key], protocol.FILE_COLUMN, protocol.ROW_COLUMN
        )
        try:
            sizes = {
                field: parse_bytes(value, conf)
                for field, conf in (
                    ("memory_bytes", MEMORY_BYTES_CONF),
                    ("disk_reserve_bytes", DISK_RESERVE_CONF),
                )
                if (value := self.spark.conf.get(conf, None))
            }
        except ValueError as error:
            return protocol.Answer(
                protocol=protocol.PROTOCOL, status=protocol.Status.REFUSED, reason=str(error)
            )
        request = protocol.WarmBuild(
            state=self.name,
            left={
                "id": left_id,
                "version": left_version,
                "view": self.views.add("warm_build_left", left_rows),
                "key": left_key,
                "fk": fk,
            },
            right={
                "id": right_id,
                "version": right_version,
                "view": self.views.add("warm_build_right", right_rows),
                "key": right_key,
            },
            output={
                "id": output_id,
                "version": output_version,
                "view": self.views.add("warm_build_positions", positions),
            },
            **sizes,
        )
        return engine_procedure.call(self.spark, request)

    def settle(self) -> protocol.WarmSettleAnswer:
        """Wait for the state's build under way and its durable copies' uploads: a process about to end
        (``fkjoin run``) asks, so that the next JVM loads the state instead of building it."""
        return engine_procedure.call(self.spark, protocol.WarmSettle(state=self.name))

    def drop(self) -> None:
        """Forget the output's state in this JVM (the next refresh loads its durable copy when that still
        matches, or builds it again)."""
        engine_procedure.call(self.spark, protocol.WarmDrop(state=self.name))

    def release(self) -> None:
        """Drop this refresh's temporary views (the state itself stays in the JVM)."""
        self.views.drop()


def parse_bytes(value: str, setting: str) -> int:
    """A positive size setting in bytes (:func:`..runtime.session.size_bytes`); otherwise a ValueError
    naming ``setting``.

    >>> parse_bytes("512m", MEMORY_BYTES_CONF)
    536870912
    """
    try:
        parsed = size_bytes(value)
    except ValueError:
        parsed = 0
    if not 0 < parsed < 2**63:  # a JVM's long holds the size
        raise ValueError(
            f"{setting}: expected a positive size under 8 EiB such as 536870912, 512m or 1g, got {value!r}"
        )
    return parsed


def net_counts(changes: ChangedKeys) -> DataFrame:
    """Each changed key with its feed's inserts less deletes (``_fkjoin_net``): what the warm state adds to
    the key's held row (0 or 1) to know whether the table now holds it twice."""
    key = [quote(c) for c in changes.keys.columns]
    return changes.cached.where(~F.col("_fkjoin_null")).select(*key, protocol.NET_COLUMN)
