"""The join state an output keeps beside it, driven by the refresh skeleton: a kind asks it, never runs it.

Kafka Streams' processors ask a store by name and never open, restore, flush or checkpoint it: the
runtime does. Here a kind declares what its state holds (:class:`StateInputs`, from
:meth:`.skeleton.KindRefresh.state_inputs`); the skeleton opens a :class:`JoinStateStore` for the
refresh, asks it what the refresh will read and which plan it prefers, the kind asks it for the rows a
change affects (:meth:`JoinStateStore.lookup`), the commit brings it up to date
(:meth:`JoinStateStore.advance`), and after the commit the skeleton has it build itself when it could
not follow, waits for its durable copy in a process about to end (:data:`..delta.warm_state.SETTLE_CONF`),
and puts its report in the result (``warm_state``). The state itself is the engine JVM's
(:mod:`..delta.warm_state`).

    >>> store = JoinStateStore(spark, output, kind.state_inputs())
    >>> store.serving(refresh, plan)  # it serves, and the refresh reads its change feeds' bytes
    (True, 2114)
    >>> found = store.lookup(plan, refresh, (left_changes, left_after), (right_changes, None))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..core.cost_history import PlanChoice
from ..core.planning import RefreshPlan
from ..core.spec import quote
from ..core.trace import phase
from ..delta.changes import ChangedKeys
from ..delta.tables import DeltaHandle, feed_bytes
from ..delta.warm_state import SETTLE_CONF, SideVersions, StateLookup, WarmState
from ..write.merge import Commit
from ..write.net_changes import CHANGE, NetChanges

if TYPE_CHECKING:
    from .skeleton import RefreshContext

#: The sides a join state holds.
SIDES = ("left", "right")


@dataclass(frozen=True)
class StateSide:
    """One input as the state holds it: its table and pinned version, its key, for the left side the
    foreign-key columns, and its rows at that version (asked only when the state is built)."""

    handle: DeltaHandle
    table_id: str
    version: int
    key: list[str]
    rows: Callable[[], DataFrame]
    fk: list[str] | None = None


@dataclass(frozen=True)
class StateInputs:
    """What a kind's join state holds (``sides``: ``left`` and ``right``), or why it can never serve
    this spec (``refused``: a changelog input, whose latest state per key is not a table's)."""

    sides: dict[str, StateSide]
    refused: str | None = None


class JoinStateStore:
    """One output's join state for one refresh (see the module docstring). Every method returns rather
    than raises when the state cannot serve: the refresh then runs its usual plan, and ``report``
    says why."""

    def __init__(self, spark: SparkSession, output: DeltaHandle, inputs: StateInputs) -> None:
        self.inputs = inputs
        self.client = WarmState(spark, output)
        #: The result's ``warm_state``: whether the state served and why not, and what it did.
        self.report: dict[str, Any] | None = None
        #: What :meth:`JoinStateStore.serving` found (None: not asked): a state found not to serve is
        #: not asked again.
        self.serves: bool | None = None

    def preferred_plan(self) -> PlanChoice:
        """The plan ``refresh_strategy: auto`` takes when the state serves the refresh: the incremental
        one, whose scans it turns into lookups."""
        return PlanChoice(
            "incremental",
            "the join state holds this refresh's versions: the incremental plan looks up what it would scan",
            "state",
        )

    def _versions(self, plan: RefreshPlan) -> dict[str, SideVersions]:
        sides = self.inputs.sides
        return {
            name: SideVersions(sides[name].table_id, plan.from_versions[name] or 0, sides[name].version)
            for name in SIDES
        }

    def serving(self, refresh: RefreshContext, plan: RefreshPlan) -> tuple[bool, int | None]:
        """Whether the JVM holds, or loads from its durable copy, a state this refresh can use (no Spark
        job; when not, the report says why), and then the bytes the refresh reads: its change feeds'
        (None when a feed's size is unknown: the refresh counts its tables)."""
        self.serves = False
        output_id, output_version = refresh.log.table_id, refresh.log.latest_version
        if output_id is None or output_version is None:
            return False, None
        versions = self._versions(plan)
        unserved = self.inputs.refused or self.client.why_not_serving(output_id, output_version, versions)
        if unserved is not None:
            self.report = {"used": False, "reason": unserved}
            return False, None
        self.serves = True
        sizes = feed_bytes([(self.inputs.sides[name].handle, v.after, v.to) for name, v in versions.items()])
        return True, None if None in sizes else sum(size or 0 for size in sizes)

    def lookup(
        self,
        plan: RefreshPlan,
        refresh: RefreshContext,
        left: tuple[ChangedKeys, DataFrame | None],
        right: tuple[ChangedKeys, DataFrame | None],
    ) -> StateLookup | None:
        """The rows and output positions this refresh's changes affect (each side's changed keys and
        their rows at the pinned version), or None, the report saying why: the refresh then scans, and
        the state is built again after its commit."""
        if self.serves is False:  # the report says why
            return None
        unavailable = self.inputs.refused or self.client.available()
        if unavailable is not None:
            self.report = {"used": False, "reason": unavailable}
            return None
        assert refresh.log.table_id is not None and refresh.log.latest_version is not None
        versions = self._versions(plan)
        found = self.client.lookup(
            refresh.log.table_id, refresh.log.latest_version, versions["left"], versions["right"], left, right
        )
        if isinstance(found, str):
            self.report = {"used": False, "reason": found}
            return None
        report: dict[str, Any] = {"used": True, "reason": None, "lookup": found.counts}
        if found.built_s is not None:
            report["built_in_s"] = found.built_s
        if found.durable:
            loaded = found.durable.get("loaded")
            if loaded:
                report["loaded_in_s"] = int(loaded["loaded_ms"]) / 1000
            report["durable"] = found.durable
        self.report = report
        return found

    def advance(self, found: StateLookup, commit: Commit, net: NetChanges | None, key: list[str]) -> None:
        """Bring the state to the refresh's commit, or drop it when the commit is not one it can follow
        (written by MERGE, or without net changes to follow): the keys ``net`` replaced or deleted lose
        their positions, the files the commit added give the new ones."""
        report = self.report
        assert report is not None
        if commit.write_path != "net_changes" or net is None:
            self.client.drop()
            how = "by MERGE" if commit.write_path != "net_changes" else "without net changes"
            report["reason"] = f"the refresh was written {how}: the state is built again"
            return
        removed = net.frame.where(F.col(CHANGE).isin("update", "delete")).select(*[quote(c) for c in key])
        problem = self.client.advance(
            found.token, commit.version, removed if net.updated + net.deleted else None, commit.added_files
        )
        if problem is None:
            report["advanced"] = True
        else:
            report["reason"] = f"the state could not follow the commit ({problem}): it is built again"

    def after_commit(self, plan: RefreshPlan) -> None:
        """Once the refresh committed: build the state at the versions just committed when the refresh
        did not advance it (in the background), and in a process about to end, wait for its durable
        copy so that the next process loads it."""
        if not (self.report or {}).get("advanced"):
            self._build(plan)
        if str(self.client.spark.conf.get(SETTLE_CONF, "false")).lower() != "true" or self.report is None:
            return
        if self.client.available() is None:
            phase("warm_state_settling")
            answer = self.client.settle()
            self.report["settled"] = answer.model_dump(exclude={"protocol"}, exclude_none=True, mode="json")

    def _build(self, plan: RefreshPlan) -> None:
        report = self.report or {"used": False, "reason": f"a {plan.mode} refresh"}
        self.report = report
        unavailable = self.inputs.refused or self.client.available()
        if unavailable is not None:
            report["built"] = {"status": "refused", "reason": unavailable}
            return
        phase("warm_state_building")
        left, right = self.inputs.sides["left"], self.inputs.sides["right"]
        output = self.client.output.state()
        answer = self.client.build(
            output.table_id,
            output.version,
            (left.table_id, left.version, left.rows(), left.key, left.fk or []),
            (right.table_id, right.version, right.rows(), right.key),
        )
        report["built"] = answer.model_dump(exclude={"protocol"}, exclude_none=True, mode="json")

    def result(self) -> dict[str, Any]:
        """The result's ``warm_state``."""
        return self.report or {"used": False, "reason": "nothing was committed"}

    def release(self) -> None:
        """Drop the refresh's temporary views (the state stays in the JVM)."""
        self.client.release()
