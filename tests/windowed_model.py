"""A record-by-record model of the stream-stream windowed join, written from the reference alone.

``docs/kinds/windowed-join.md`` (stream mode) describes Kafka Streams' KStream-KStream join as a
loop over records in a defined order; this module is that loop, in plain Python, with no Spark and no
code shared with the engine. Tests run the same refreshes through the engine and through this model and
compare what each refresh appends.

    >>> model = StreamJoinModel(before=10, after=10, grace=0, how="left")
    >>> model.refresh(left=[Event(("a",), 5, {"id": 1})], right=[])
    []
    >>> model.refresh(left=[Event(("a",), 30, {"id": 2})], right=[])   # stream time 30 closes id 1
    [('L', {'id': 1}, None, 5)]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NEG = float("-inf")


@dataclass(frozen=True)
class Event:
    """One input row: its key (None or a tuple holding a None: a null key), event time in ms, and the
    row itself (what the output carries). Lists of events are given in the input's processing order
    (Delta commit version, then ``order_by``)."""

    key: tuple[Any, ...] | None
    t: int
    row: dict[str, Any] = field(default_factory=dict)

    @property
    def null_key(self) -> bool:
        return self.key is None or any(part is None for part in self.key)


#: An output row: (how it came: "J" a joined pair, "L"/"R" an unmatched row of that side), the left
#: row, the right row, the output event time.
Output = tuple[str, dict[str, Any] | None, dict[str, Any] | None, int]


class StreamJoinModel:
    """Kafka's KStream-KStream join, one refresh at a time (``docs/kinds/windowed-join.md``: processing order,
    state, row rules)."""

    def __init__(
        self,
        before: int,
        after: int,
        grace: int,
        how: str,
        late_unmatched: str = "respect_grace",
        same_table: bool = False,
    ) -> None:
        self.before, self.after, self.grace = before, after, grace
        self.retention = before + after + grace
        self.how, self.late_unmatched, self.same_table = how, late_unmatched, same_table
        self.stream_time: float = NEG
        self.observed: dict[str, float] = {"L": NEG, "R": NEG}
        self.stored: dict[str, list[tuple[int, Event]]] = {"L": [], "R": []}
        self.pending: list[tuple[str, int, Event]] = []  # (side, arrival, event)
        self.arrivals = 0

    def outer(self, side: str) -> bool:
        return (side == "L" and self.how in ("left", "outer")) or (side == "R" and self.how == "outer")

    def lookback(self, side: str) -> int:
        return self.after if side == "L" else self.before

    def order(self, left: list[Event], right: list[Event]) -> list[tuple[str, Event]]:
        """Processing order: the refresh's rows in processing order."""
        if self.same_table:
            assert not right, "a same-table join takes its rows as left"
            return [(side, e) for e in left for side in ("L", "R")]
        entries = []
        for side_rank, (side, events) in enumerate((("L", left), ("R", right))):
            running = NEG
            for position, event in enumerate(events):
                running = max(running, event.t)
                entries.append(((running, side_rank, position), side, event))
        entries.sort(key=lambda entry: entry[0])
        return [(side, event) for _, side, event in entries]

    def refresh(self, left: list[Event], right: list[Event]) -> list[Output]:
        out: list[Output] = []
        for side, event in self.order(left, right):
            self.process(side, event, out)
        return out

    def process(self, side: str, x: Event, out: list[Output]) -> None:
        """The row rules, steps 1-6, for one row."""
        other = "R" if side == "L" else "L"
        self.stream_time = max(self.stream_time, x.t)
        if x.null_key:
            if self.outer(side):
                out.append(self._unmatched(side, x))
            return
        self.arrivals += 1
        arrival = self.arrivals
        if self.how != "inner" and x.t == self.stream_time:
            self._close(out)
        if side == "L":
            low, high = max(0, x.t - self.before), max(0, x.t + self.after)
        else:
            low, high = max(0, x.t - self.after), max(0, x.t + self.before)
        floor = self.observed[other] - self.retention + 1
        matches = [
            (o.t, seq, o)
            for seq, o in self.stored[other]
            if o.key == x.key and low <= o.t <= high and o.t >= floor
        ]
        for _, seq, o in sorted(matches, key=lambda m: (m[0], m[1])):
            # o is removed from pending as the other side's row it was stored as (in a same-table join
            # one event is stored on both sides: its own left entry stays pending)
            self.pending = [p for p in self.pending if not (p[0] == other and p[1] == seq)]
            left_row, right_row = (x.row, o.row) if side == "L" else (o.row, x.row)
            out.append(("J", left_row, right_row, max(x.t, o.t)))
        if not matches and self.outer(side):
            slack = self.grace if self.late_unmatched == "respect_grace" else 0
            if x.t + self.lookback(side) + slack < self.stream_time:
                out.append(self._unmatched(side, x))
            else:
                self.pending.append((side, arrival, x))
        self.stored[side].append((arrival, x))
        self.observed[side] = max(self.observed[side], x.t)

    def _close(self, out: list[Output]) -> None:
        closing = [p for p in self.pending if p[2].t + self.lookback(p[0]) + self.grace < self.stream_time]
        closing.sort(key=lambda p: (p[2].t, 0 if p[0] == "R" else 1, repr(p[2].key), p[1]))
        for side, _, event in closing:
            out.append(self._unmatched(side, event))
        self.pending = [p for p in self.pending if p not in closing]

    @staticmethod
    def _unmatched(side: str, x: Event) -> Output:
        return (side, x.row, None, x.t) if side == "L" else (side, None, x.row, x.t)
