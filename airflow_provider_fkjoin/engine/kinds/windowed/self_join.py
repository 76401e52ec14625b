"""The self-join (Kafka's KIP-862): a stream joined with itself inside a time window, read once.

The contract (``docs/kinds/self-join.md``) is the stream-mode ``windowed_join`` with
``left = right = input`` and ``how: inner``, row for row. That join processes each new row ``v`` twice, as
a left row and then as a right row, against two window stores holding the same rows; this one keeps one
store and asks it both questions:

* **A** (``v`` as the left row): a stored row ``o`` with ``v``'s key, processed before ``v`` (an earlier
  refresh's row, or a smaller position in this one), ``v.t - before <= o.t <= v.t + after`` (clamped at 0)
  and ``o.t >= prev - R + 1``, where ``prev`` is the observed time before ``v``: the pair ``(l = v, r = o)``.
* **B** (``v`` as the right row): the same, but ``o`` may be ``v`` itself, the band is
  ``[v.t - after, v.t + before]`` and the expiry bound uses the observed time including ``v``: the pair
  ``(l = o, r = v)``. So every row joins itself unless it arrived already expired.

Both questions are one join of the new rows with the candidates (new rows and the retained earlier rows,
``t >= observed - R + 1``, of the new rows' keys) on the key, with ``A or B`` as its condition: the input
is read once and each row is shuffled once, where the two-sided join reads and shuffles everything twice.
The observed times before and after each row come from the numbering's own window pass (no extra sort).
No state is kept besides the times in the output's progress: an inner join has no pending rows.

Everything else (reading the change feed, the checks, progress, the exactly-once append) is the stream
join's (:mod:`.stream`). A ``windowed_join`` of one table with itself runs as this one unless
its spec says ``optimize: false``; its result then says ``"optimized": "self_join"``.

Example::

    refresh_once(SelfJoinKindRefresh(load_spec({"kind": "self_join",
        "input": {"path": "/w/atm_txns", "key": ["account_id"], "time": "txn_ts", "order_by": ["offset"]},
        "window": {"before": "10m", "after": "10m"},
        "columns": {"account_id": "l.account_id", "txn": "l.txn_id", "paired_txn": "r.txn_id"},
        "output": {"path": "/w/atm_pairs"}}), spark), options)
    # {"kind": "self_join", "mode": "incremental", "optimized": "self_join", "rows": {"pairs": 12, ...}}
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ...core.spec import EVENT_TIME, SelfJoinSpec, WindowedJoinSpec, quote
from ...delta.changes import maybe_broadcast
from .stream import _LEFT_ROW, _NULL, _POS, _T, EventJoinRefresh, StreamJoinRefresh

_OBS_BEFORE = "_fkjoin_obs_before"
_OBS_AFTER = "_fkjoin_obs_after"


class SelfJoinRefresh(StreamJoinRefresh):
    """One self-join refresh: the stream join's reading and commits, with the one-store computation."""

    def _numbered_columns(self, in_order: Window) -> dict[str, Column]:
        stored_time = F.when(~F.col(_NULL), F.col(_T))
        carried = F.lit(self.carried.observed[0]).cast("long")
        return {
            _OBS_BEFORE: F.greatest(
                carried, F.max(stored_time).over(in_order.rowsBetween(Window.unboundedPreceding, -1))
            ),
            _OBS_AFTER: F.greatest(
                carried, F.max(stored_time).over(in_order.rowsBetween(Window.unboundedPreceding, 0))
            ),
        }

    def compute(self, new: dict[int, DataFrame]) -> tuple[DataFrame, None]:
        """The pairs of passes A and B (module docstring) as output rows; never pending rows."""
        stored = new[0].where(~F.col(_NULL))
        keys = self.key_columns
        candidates = stored.select(*keys, _POS, _T, _LEFT_ROW)
        earlier = self._earlier_rows(0)
        if earlier is not None:
            # Earlier rows can only pair with a new row of the same key: keep those keys' rows only.
            new_keys = maybe_broadcast(stored.select(*keys).distinct(), self.new_row_count)
            earlier = earlier.join(new_keys, keys, "left_semi")
            candidates = candidates.unionByName(
                earlier.select(*keys, F.lit(None).cast("long").alias(_POS), _T, _LEFT_ROW)
            )
        probe = stored.select(*keys, _POS, _T, _LEFT_ROW, _OBS_BEFORE, _OBS_AFTER).alias("x")
        same_key = F.lit(True)
        for column in keys:
            same_key = same_key & (F.col(f"x.{column}") == F.col(f"o.{column}"))
        t, o_t = F.col(f"x.{_T}"), F.col(f"o.{_T}")
        o_pos, x_pos = F.col(f"o.{_POS}"), F.col(f"x.{_POS}")
        zero = F.lit(0).cast("long")
        expired_below = F.lit(self.retention - 1)

        def band(low: Column, high: Column) -> Column:
            return (o_t >= F.greatest(zero, low)) & (o_t <= F.greatest(zero, high))

        as_left = (
            (o_pos.isNull() | (o_pos < x_pos))
            & band(t - self.before, t + self.after)
            & (o_t >= F.col(f"x.{_OBS_BEFORE}") - expired_below)
        )
        as_right = (
            (o_pos.isNull() | (o_pos <= x_pos))
            & band(t - self.after, t + self.before)
            & (o_t >= F.col(f"x.{_OBS_AFTER}") - expired_below)
        )
        matches = probe.join(candidates.alias("o"), same_key & (as_left | as_right)).select(
            as_left.alias("_fkjoin_a"),
            as_right.alias("_fkjoin_b"),
            F.col(f"x.{_LEFT_ROW}").alias("_fkjoin_x"),
            F.col(f"o.{_LEFT_ROW}").alias("_fkjoin_o"),
        )
        x_row, o_row = F.col("_fkjoin_x"), F.col("_fkjoin_o")
        pairs = matches.select(
            F.explode(
                F.array(
                    F.when(F.col("_fkjoin_a"), F.struct(x_row.alias("l"), o_row.alias("r"))),
                    F.when(F.col("_fkjoin_b"), F.struct(o_row.alias("l"), x_row.alias("r"))),
                )
            ).alias("_fkjoin_pair")
        ).where(F.col("_fkjoin_pair").isNotNull())
        time = quote(self.prepared.spec.left.time)
        joined = pairs.select("_fkjoin_pair.l", "_fkjoin_pair.r").select(
            *self.prepared.shape.projection,
            F.greatest(F.col(f"l.{time}"), F.col(f"r.{time}")).alias(EVENT_TIME),
            F.lit("J").alias("_fkjoin_kind"),
        )
        return joined, None


class SelfJoinKindRefresh(EventJoinRefresh):
    """A ``self_join``'s refresh: the stream join's skeleton with the one-store computation, computing the
    spec as the windowed join it is (progress stays keyed by the self_join spec and its one ``input``)."""

    computation = SelfJoinRefresh
    optimized = "self_join"

    @classmethod
    def computed_spec(cls, identity: Any) -> WindowedJoinSpec:
        """The self_join as the stream-mode windowed join it is (``SelfJoinSpec.as_windowed_join``)."""
        spec: SelfJoinSpec = identity
        return spec.as_windowed_join()


class WindowedJoinAsSelfJoinRefresh(EventJoinRefresh):
    """A stream-mode ``windowed_join`` of one table with itself, refreshed with the self-join's one store.

    The spec keeps its own identity (``left``/``right`` names, fingerprint); only the computation changes.
    """

    computation = SelfJoinRefresh
    optimized = "self_join"

    @classmethod
    def serves(cls, spec: Any) -> bool:
        """A stream-mode join that runs as a self-join (``WindowedJoinSpec.runs_as_self_join``)."""
        return spec.mode == "stream" and bool(spec.runs_as_self_join)
