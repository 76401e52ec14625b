"""Auditing a table output: the join recomputed from scratch at the versions the output consumed, compared
with what the output holds now, row by row, without writing anything.

Joinery's "future work" was a way to verify the denormalised output after restarts and upgrades. Every kind
whose output is a keyed table (``foreign_key_join``, ``global_table_bootstrap``, table-mode
``windowed_join``, ``multiway_join``) gives an ``expected_output`` function; this module pins each input at
the version the output's last refresh recorded, recomputes, and counts the rows **missing** from the output,
**extra** in it, and **different** (same key, other values), plus keys the output holds twice.

Example::

    audit_output(load_spec("business_reviews.yaml"), spark)
    # {"kind": "multiway_join", "mode": "audit", "consistent": True,
    #  "rows": {"expected": 10412, "actual": 10412, "missing": 0, "extra": 0, "different": 0, ...}, ...}
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from .core.errors import SpecError
from .core.spec import quote
from .delta.output_log import read_progress
from .delta.tables import DeltaHandle, TableState, values_equal
from .kinds import KINDS, ExpectedOutput

_EXPECTED_FLAG, _ACTUAL_FLAG = "_fkjoin_expected_row", "_fkjoin_actual_row"


def _recompute(spec: Any) -> ExpectedOutput:
    expected = KINDS[spec.kind].expected_output
    if expected is not None and KINDS[spec.kind].recomputable(spec):
        return expected
    raise SpecError(
        f"kind: a {spec.kind} output is append-only (each refresh appends what it emits), so there is no "
        "keyed table to recompute; audit works for foreign_key_join, global_table_bootstrap, "
        "windowed_join (mode table) and multiway_join"
    )


def _pinned(spec: Any, spark: SparkSession, consumed: dict[str, Any]) -> dict[str, TableState]:
    """Each input at the version the output consumed (same table, or the audit cannot speak for it)."""
    states = {}
    for side, ref in spec.inputs().items():
        if side not in consumed:
            raise SpecError(f"{side}: the output's last refresh recorded no version for this input")
        handle = DeltaHandle(spark, ref, side)
        handle.require()
        latest = handle.state()
        if latest.table_id != consumed[side].table_id:
            raise SpecError(
                f"{side}: {handle.location} is another Delta table than the one the output consumed (table "
                "id changed: dropped and recreated?); a full refresh rebuilds the output from it"
            )
        states[side] = TableState(consumed[side].version, latest.table_id, latest.properties)
    return states


def audit_output(spec: Any, spark: SparkSession, *, examples: int = 0) -> dict[str, Any]:
    """Recompute ``spec``'s output at its consumed versions and compare (see the module docstring).

    ``examples`` > 0 also lists up to that many keys per kind of difference (key values: leave it at 0
    where results are logged).
    """
    started = time.monotonic()
    recompute = _recompute(spec)
    output = DeltaHandle(spark, spec.output, "output")
    output.require()
    progress = read_progress(output)
    if progress is None:
        raise SpecError(
            f"output: {output.location} has no refresh by this engine to audit; run the spec first"
        )
    states = _pinned(spec, spark, progress.inputs)
    rows, key, value_columns = recompute(spec, spark, states)
    latest = output.state().version
    actual = output.read(latest)
    warnings = []
    if latest != progress.output_version:
        warnings.append(
            f"the output has commits after its last refresh (version {progress.output_version}); the audit "
            f"compares version {latest}, what readers see"
        )
    if progress.kind != spec.kind:
        warnings.append(f"the output's last refresh was a {progress.kind}, not a {spec.kind}")
    columns = [*key, *value_columns]
    absent = [c for c in columns if c not in actual.columns]
    surplus = [c for c in actual.columns if c not in columns and not c.startswith("_fkjoin_")]
    result: dict[str, Any] = {
        "kind": spec.kind,
        "mode": "audit",
        "output": {"path": output.location, "version": latest, "refreshed_version": progress.output_version},
        "inputs": {
            side: {"path": DeltaHandle(spark, ref, side).location, "version": states[side].version}
            for side, ref in spec.inputs().items()
        },
    }
    if absent or surplus:
        result.update(
            consistent=False,
            columns={"missing": absent, "extra": surplus},
            warnings=[*warnings, "the output's columns differ from the join's: a full refresh rebuilds it"],
            duration_s=round(time.monotonic() - started, 3),
        )
        return result
    if not key:
        return _audit_multiset(result, rows, actual, value_columns, warnings, started)
    types = {f.name: f.dataType for f in rows.schema.fields}
    expected = rows.select(*[quote(c) for c in columns]).withColumn(_EXPECTED_FLAG, F.lit(True)).alias("e")
    found = actual.select(*[quote(c) for c in columns]).withColumn(_ACTUAL_FLAG, F.lit(True)).alias("a")
    on = None
    for column in key:
        term = F.col(f"e.{quote(column)}").eqNullSafe(F.col(f"a.{quote(column)}"))
        on = term if on is None else on & term
    same = F.expr(values_equal("e", "a", [(c, types[c]) for c in value_columns]))
    verdict = (
        F.when(F.col(f"a.{_ACTUAL_FLAG}").isNull(), "missing")
        .when(F.col(f"e.{_EXPECTED_FLAG}").isNull(), "extra")
        .when(~same, "different")
        .otherwise("same")
    )
    compared = expected.join(found, on, "full_outer").select(
        verdict.alias("verdict"),
        *[F.coalesce(F.col(f"e.{quote(c)}"), F.col(f"a.{quote(c)}")).alias(c) for c in key],
    )
    counts = {row["verdict"]: int(row["count"]) for row in compared.groupBy("verdict").count().collect()}
    duplicated = actual.groupBy(*[quote(c) for c in key]).count().where("count > 1").count()
    tally = {
        "expected": counts.get("same", 0) + counts.get("missing", 0) + counts.get("different", 0),
        "actual": counts.get("same", 0) + counts.get("extra", 0) + counts.get("different", 0),
        "missing": counts.get("missing", 0),
        "extra": counts.get("extra", 0),
        "different": counts.get("different", 0),
        "duplicated_keys": duplicated,
    }
    result["rows"] = tally
    result["consistent"] = not (tally["missing"] or tally["extra"] or tally["different"] or duplicated)
    if examples > 0 and not result["consistent"]:
        result["examples"] = {
            verdict: [
                {c: row[c] for c in key}
                for row in compared.where(F.col("verdict") == verdict).limit(examples).collect()
            ]
            for verdict in ("missing", "extra", "different")
            if tally[verdict]
        }
    result["warnings"] = warnings
    result["duration_s"] = round(time.monotonic() - started, 3)
    return result


def _audit_multiset(
    result: dict[str, Any],
    rows: Any,
    actual: Any,
    columns: list[str],
    warnings: list[str],
    started: float,
) -> dict[str, Any]:
    """The audit of a keyless output (an N-way join that shows no key): the expected and the actual
    rows compared as multisets, each distinct row by its count (nulls equal)."""
    hashed = "_fkjoin_row"
    as_json = F.to_json(F.struct(*[F.col(quote(c)) for c in columns]))
    expected = rows.select(as_json.alias(hashed)).groupBy(hashed).agg(F.count(F.lit(1)).alias("e"))
    found = actual.select(as_json.alias(hashed)).groupBy(hashed).agg(F.count(F.lit(1)).alias("a"))
    both = expected.join(found, on=hashed, how="full_outer").select(
        F.coalesce(F.col("e"), F.lit(0)).alias("e"), F.coalesce(F.col("a"), F.lit(0)).alias("a")
    )
    totals = both.agg(
        F.sum("e").alias("expected"),
        F.sum("a").alias("actual"),
        F.sum(F.greatest(F.col("e") - F.col("a"), F.lit(0))).alias("missing"),
        F.sum(F.greatest(F.col("a") - F.col("e"), F.lit(0))).alias("extra"),
    ).first()
    tally = {name: int(totals[name] or 0) for name in ("expected", "actual", "missing", "extra")}
    result["rows"] = {**tally, "different": 0, "duplicated_keys": 0}
    result["consistent"] = not (tally["missing"] or tally["extra"])
    result["warnings"] = [*warnings, "the output has no key: its rows were compared as a multiset"]
    result["duration_s"] = round(time.monotonic() - started, 3)
    return result
