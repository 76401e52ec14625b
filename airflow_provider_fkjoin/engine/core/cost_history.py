"""What each plan of an output's refreshes cost, learned from the output's own log: pure, no Spark.

``refresh_strategy: auto`` weighs two plans of an incremental refresh (join what changed, or recompute
the join and commit what differs). The constants of :class:`.planning.CostModel` are a prior, measured
once on one machine; every refresh records in its own commit (the ``strategy`` entry of its progress
metadata, :func:`strategy_record`) which plan ran, when it started and what it read, and the commit's own
timestamp says when it ended. The next refresh of the same output reads those records from the history
it reads anyway (:func:`observations`), and scales each plan's prior estimate by how far the plan's
recent refreshes on the same cluster were from their own prior estimates (:func:`learned_estimate`).

A full rebuild joins everything as a recompute does, so it calibrates the recompute plan until that
plan has run itself; a plan the output has not run for :data:`EXPLORE_AFTER` refreshes is tried once
when its estimate is close (:data:`EXPLORE_WITHIN`), so a prior that flatters one plan cannot hide the
other for good.

>>> history = [{"version": 5, "timestamp": datetime(2026, 1, 5, 12, 0, 9, tzinfo=UTC),
...             "userMetadata": json.dumps({"fkjoin": {"started_at": "2026-01-05T12:00:00+00:00",
...                 "strategy": {"chosen": "incremental", "plan_start_s": 1.0, "cluster": "c1",
...                              "features": {"feed_bytes": 10, "input_bytes": 1000, "output_bytes": 500,
...                                           "incremental_jobs": 6, "recompute_jobs": 5}}}})}]
>>> [(o.plan, o.seconds) for o in observations(history)]
[('incremental', 8.0)]
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from .planning import CostModel, StrategyEstimate, estimate_costs

#: The plans an incremental refresh chooses between, and the full rebuild that calibrates a recompute.
PLANS = ("incremental", "recompute")
FULL = "full"
#: How many of each plan's newest observations the estimate weighs.
OBSERVATIONS_PER_PLAN = 8
#: A plan not run in this many of the output's newest refreshes (on this cluster) is tried once when its
#: estimate is within :data:`EXPLORE_WITHIN` of the cheaper one's.
EXPLORE_AFTER = 8
EXPLORE_WITHIN = 1.25
#: A chosen plan that took more than this many times the other plan's estimate logs a warning.
WARN_RATIO = 1.5
#: The share of the tables' bytes that changed (the change feeds' bytes over the inputs') at or above
#: which ``auto`` recomputes without estimating, as Snowflake's dynamic tables fall back to a full
#: refresh; ``spark.fkjoin.recomputeChangeRatio`` sets it (0 turns it off).
RECOMPUTE_CHANGE_RATIO = 0.25


@dataclass(frozen=True)
class PlanFeatures:
    """What a refresh reads, as the cost model weighs it: the change feeds', inputs' and output's bytes
    (from the Delta logs), and each plan's Spark jobs."""

    feed_bytes: int
    input_bytes: int
    output_bytes: int
    incremental_jobs: int
    recompute_jobs: int

    def prior(self, model: CostModel) -> StrategyEstimate:
        """Both plans' estimates by the model's constants alone."""
        return estimate_costs(model=model, **asdict(self))

    @property
    def change_ratio(self) -> float:
        """The change feeds' bytes over the inputs' (0 when the inputs are empty)."""
        return self.feed_bytes / self.input_bytes if self.input_bytes else 0.0


@dataclass(frozen=True)
class CostObservation:
    """One earlier refresh of the output: the plan that ran (or ``full``), its seconds from the plan's
    start to its commit, what it read, and the cluster it ran on."""

    plan: str
    seconds: float
    features: PlanFeatures
    cluster: str
    output_version: int


def cluster_id(master: str | None, executors: str | None = None, cores: str | None = None) -> str:
    """A short, stable name of the cluster a refresh runs on, so that estimates learned on one cluster are
    not used on another. Built from the Spark master (without a Connect URL's parameters, which may hold
    a token) and the executors' count and cores; a hash, never the values.

    >>> cluster_id("local[2]") == cluster_id("local[2]", None, None)
    True
    >>> cluster_id("sc://host:15002/;token=secret") == cluster_id("sc://host:15002/;token=other")
    True
    """
    base = (master or "").split(";", 1)[0].rstrip("/")
    return hashlib.sha256(f"{base}|{executors or ''}|{cores or ''}".encode()).hexdigest()[:12]


def strategy_record(
    chosen: str,
    plan_start_s: float,
    features: PlanFeatures | None,
    cluster: str,
    *,
    estimate: StrategyEstimate | None = None,
    basis: str | None = None,
) -> dict[str, Any]:
    """What a refresh commit records of its plan (the ``strategy`` entry of its progress metadata):
    read back by :func:`observations` for the next refresh's estimate, and by ``fkjoin status`` and the
    Joins view (with the commit's timestamp, :func:`plan_seconds` gives the plan's actual seconds).
    ``basis`` is what chose the plan (:class:`PlanChoice`); ``estimate``, both plans' estimated seconds.

    >>> strategy_record("recompute", 1.25, None, "ab12", basis="spec")
    {'chosen': 'recompute', 'plan_start_s': 1.25, 'cluster': 'ab12', 'basis': 'spec'}
    """
    record: dict[str, Any] = {"chosen": chosen, "plan_start_s": round(plan_start_s, 3), "cluster": cluster}
    if basis is not None:
        record["basis"] = basis
    if features is not None:
        record["features"] = asdict(features)
    if estimate is not None:
        record["estimate"] = {
            "incremental_s": round(estimate.incremental_s, 3),
            "recompute_s": round(estimate.recompute_s, 3),
        }
    return record


def recorded_strategy(payload: dict[str, Any], committed_at: Any) -> dict[str, Any] | None:
    """What a refresh commit says of its plan, as ``fkjoin status`` and the Joins view show it: the plan
    (``chosen``: ``incremental``, ``recompute`` or ``full``), what chose it (``basis``), both plans'
    estimated seconds (``estimate``, None when not estimated) and the plan's actual seconds
    (``actual_s``); None for a commit that recorded no plan (an older version's, or an append-only kind's).

    >>> shown = recorded_strategy({"started_at": "2026-01-05T12:00:00+00:00", "strategy": {
    ...     "chosen": "recompute", "plan_start_s": 1.0, "basis": "history",
    ...     "estimate": {"incremental_s": 6.0, "recompute_s": 3.5}}}, "2026-01-05T12:00:04+00:00")
    >>> shown["chosen"], shown["estimate"]["incremental_s"], shown["actual_s"]
    ('recompute', 6.0, 3.0)
    """
    record = payload.get("strategy")
    if not isinstance(record, dict) or not isinstance(record.get("chosen"), str):
        return None
    estimate = record.get("estimate")
    return {
        "chosen": record["chosen"],
        "basis": record.get("basis") if isinstance(record.get("basis"), str) else None,
        "estimate": dict(estimate) if isinstance(estimate, dict) else None,
        "actual_s": plan_seconds(payload, committed_at),
    }


def _utc(value: Any) -> datetime | None:
    """A commit timestamp (an aware or naive datetime, epoch milliseconds, or ISO 8601) in UTC."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return value.astimezone(UTC)  # a naive datetime is local time, as Spark's DESCRIBE HISTORY gives it


def plan_seconds(payload: dict[str, Any], committed_at: Any) -> float | None:
    """The seconds a refresh's plan took, from its start to its commit, from the refresh's progress
    ``payload`` and its commit's timestamp; None when the commit does not say.

    >>> plan_seconds({"started_at": "2026-01-05T12:00:00+00:00", "strategy": {"plan_start_s": 2.0}},
    ...              "2026-01-05T12:00:07+00:00")
    5.0
    """
    record = payload.get("strategy")
    started, ended = _utc(payload.get("started_at")), _utc(committed_at)
    if not isinstance(record, dict) or started is None or ended is None:
        return None
    try:
        seconds = (ended - started).total_seconds() - float(record.get("plan_start_s", 0.0))
    except (TypeError, ValueError):
        return None
    return round(seconds, 3) if seconds > 0 else None


def _features(record: dict[str, Any]) -> PlanFeatures | None:
    try:
        return PlanFeatures(
            **{name: int(record["features"][name]) for name in PlanFeatures.__dataclass_fields__}
        )
    except (KeyError, TypeError, ValueError):
        return None


def observations(entries: list[dict[str, Any]]) -> list[CostObservation]:
    """The cost observations in an output's history (newest first: ``version``, ``timestamp``,
    ``userMetadata``, as :meth:`..delta.tables.DeltaHandle.history` gives them); commits that are not
    refreshes, or that recorded no plan, are skipped."""
    found: list[CostObservation] = []
    for entry in entries:
        try:
            payload = json.loads(entry.get("userMetadata") or "null")["fkjoin"]
            record = payload["strategy"]
        except (ValueError, KeyError, TypeError):
            continue
        if not isinstance(record, dict):
            continue
        features = _features(record)
        seconds = plan_seconds(payload, entry.get("timestamp"))
        plan = record.get("chosen")
        if features is None or seconds is None or plan not in (*PLANS, FULL):
            continue
        found.append(
            CostObservation(
                str(plan), seconds, features, str(record.get("cluster", "")), int(entry["version"])
            )
        )
    return found


@dataclass(frozen=True)
class LearnedEstimate:
    """Both plans' estimates (:class:`.planning.StrategyEstimate`), the prior they scale, and what they
    were learned from: ``basis`` is ``history`` (this output's earlier refreshes on this cluster) or
    ``prior`` (the model's constants alone); ``runs`` counts the observations of each plan weighed;
    ``explore`` names a plan to try once (see the module docstring), or None."""

    estimate: StrategyEstimate
    prior: StrategyEstimate
    features: PlanFeatures
    basis: str
    runs: dict[str, int]
    factors: dict[str, float]
    explore: str | None = None

    @property
    def change_ratio(self) -> float:
        """The change feeds' bytes over the inputs' (:attr:`PlanFeatures.change_ratio`)."""
        return self.features.change_ratio

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.estimate.as_dict(),
            "prior_incremental_s": round(self.prior.incremental_s, 3),
            "prior_recompute_s": round(self.prior.recompute_s, 3),
            "basis": self.basis,
            "runs": dict(self.runs),
            "change_ratio": round(self.change_ratio, 6),
        }


def _geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _prior_seconds(observation: CostObservation, model: CostModel, output_bytes: int) -> float:
    """The prior estimate of an observed refresh's plan. A first full rebuild read no output (its
    ``output_bytes`` are 0) but wrote one about ``output_bytes`` large (the output's size now): weighed
    as such, so that it calibrates the recompute, which reads the output."""
    features = observation.features
    if observation.plan == FULL and features.output_bytes == 0:
        features = replace(features, output_bytes=output_bytes)
    prior = features.prior(model)
    return prior.incremental_s if observation.plan == "incremental" else prior.recompute_s


def learned_estimate(
    features: PlanFeatures, model: CostModel, history: list[CostObservation], cluster: str
) -> LearnedEstimate:
    """Both plans' estimates for a refresh reading ``features``: the model's prior, each plan's scaled by
    how its newest refreshes on ``cluster`` (up to :data:`OBSERVATIONS_PER_PLAN`) compared with their own
    prior estimates (the geometric mean of actual over prior). A plan that has not run is scaled by the
    full rebuilds (for the recompute) or by the other plan (the cluster's speed), else left at the prior.

    >>> f = PlanFeatures(feed_bytes=1_000, input_bytes=100_000, output_bytes=80_000,
    ...                  incremental_jobs=6, recompute_jobs=5)
    >>> slow = CostObservation("incremental", 2 * f.prior(CostModel()).incremental_s, f, "c1", 4)
    >>> learned = learned_estimate(f, CostModel(), [slow], "c1")
    >>> learned.basis, round(learned.estimate.incremental_s / learned.prior.incremental_s, 2)
    ('history', 2.0)
    """
    prior = features.prior(model)
    mine = [o for o in history if o.cluster == cluster]
    ratios: dict[str, list[float]] = {plan: [] for plan in (*PLANS, FULL)}
    for observation in mine:
        expected = _prior_seconds(observation, model, features.output_bytes)
        if expected > 0 and len(ratios[observation.plan]) < OBSERVATIONS_PER_PLAN:
            ratios[observation.plan].append(observation.seconds / expected)
    factors: dict[str, float] = {}
    for plan in PLANS:
        if ratios[plan]:
            factors[plan] = _geometric_mean(ratios[plan])
    if "recompute" not in factors and ratios[FULL]:
        factors["recompute"] = _geometric_mean(ratios[FULL])
    for plan, other in (("incremental", "recompute"), ("recompute", "incremental")):
        if plan not in factors and other in factors:
            factors[plan] = factors[other]
    estimate = StrategyEstimate(
        prior.incremental_s * factors.get("incremental", 1.0),
        prior.recompute_s * factors.get("recompute", 1.0),
        prior.feed_bytes,
        prior.input_bytes,
        prior.output_bytes,
    )
    runs = {plan: len(ratios[plan]) for plan in PLANS}
    return LearnedEstimate(
        estimate,
        prior,
        features,
        "history" if factors else "prior",
        runs,
        factors,
        _to_explore(estimate, mine),
    )


def _to_explore(estimate: StrategyEstimate, mine: list[CostObservation]) -> str | None:
    """The plan worth trying once: the dearer one by the estimate, when it is within
    :data:`EXPLORE_WITHIN` of the cheaper and none of the output's newest :data:`EXPLORE_AFTER`
    refreshes on this cluster ran it (and at least that many ran at all)."""
    dearer = "incremental" if estimate.incremental_s > estimate.recompute_s else "recompute"
    cheap, dear = sorted((estimate.incremental_s, estimate.recompute_s))
    recent = [o.plan for o in mine[:EXPLORE_AFTER] if o.plan in PLANS]
    if len(recent) < EXPLORE_AFTER or dearer in recent or dear > cheap * EXPLORE_WITHIN:
        return None
    return dearer


def slower_than_expected(chosen: str, actual_s: float, estimate: StrategyEstimate) -> str | None:
    """The plan that would likely have been faster, when the chosen plan took more than
    :data:`WARN_RATIO` times the other plan's estimate; else None.

    >>> slower_than_expected("incremental", 9.0, StrategyEstimate(4.0, 5.0, 0, 0, 0))
    'recompute'
    """
    other = "recompute" if chosen == "incremental" else "incremental"
    other_s = estimate.recompute_s if other == "recompute" else estimate.incremental_s
    return other if other_s > 0 and actual_s > WARN_RATIO * other_s else None


@dataclass(frozen=True)
class PlanChoice:
    """The plan an incremental refresh takes, why, and on what basis: ``spec`` (``refresh_strategy``
    forced it), ``change_ratio`` (the change was too large to weigh), ``history`` or ``prior`` (the
    cheaper estimate), ``explore`` (tried once, :func:`learned_estimate`) or ``unknown`` (no estimate)."""

    chosen: str
    reason: str
    basis: str


def choose_plan(
    requested: str,
    learned: LearnedEstimate | None,
    *,
    unknown: str | None = None,
    change_ratio_limit: float = RECOMPUTE_CHANGE_RATIO,
) -> PlanChoice:
    """The plan for ``refresh_strategy: requested``: the spec's when forced; for ``auto``, the recompute
    when the change feeds hold at least ``change_ratio_limit`` of the inputs' bytes (0: never), else the
    cheaper of the ``learned`` estimates (the incremental plan on a tie or without an estimate,
    ``unknown`` saying why), or a plan :func:`learned_estimate` says to try once.

    >>> f = PlanFeatures(feed_bytes=40_000, input_bytes=100_000, output_bytes=80_000,
    ...                  incremental_jobs=6, recompute_jobs=5)
    >>> choose_plan("auto", learned_estimate(f, CostModel(), [], "c1")).basis
    'change_ratio'
    >>> choose_plan("incremental", None).reason
    'refresh_strategy: incremental in the spec'
    """
    if requested in PLANS:
        return PlanChoice(requested, f"refresh_strategy: {requested} in the spec", "spec")
    if learned is None:
        return PlanChoice(
            "incremental", f"no cost estimate ({unknown or 'unknown sizes'}): the incremental plan", "unknown"
        )
    if change_ratio_limit > 0 and learned.change_ratio >= change_ratio_limit:
        return PlanChoice(
            "recompute",
            f"the change feeds hold {learned.change_ratio:.1%} of the inputs' bytes, at or above "
            f"spark.fkjoin.recomputeChangeRatio ({change_ratio_limit:g}): recomputing without estimating",
            "change_ratio",
        )
    estimate = learned.estimate
    source = "this output's earlier refreshes" if learned.basis == "history" else "the cost model's constants"
    weighed = (
        f"estimated {estimate.incremental_s:.2f} s incremental against {estimate.recompute_s:.2f} s "
        f"recomputing, from {source}"
    )
    if learned.explore is not None:
        return PlanChoice(
            learned.explore,
            f"{weighed}; trying the {learned.explore} plan once: none of the last {EXPLORE_AFTER} refreshes "
            "ran it and its estimate is close",
            "explore",
        )
    cheaper = "recompute" if estimate.recompute_s < estimate.incremental_s else "incremental"
    return PlanChoice(cheaper, weighed, learned.basis)
