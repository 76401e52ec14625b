"""A pure-Python model of the N-way un-windowed inner join, written from
``docs/kinds/multiway-join.md`` (not from the engine): the oracle the multiway_join tests
compare every refresh against.

Each input is a table (rows as dicts, one per primary key). The output is the inner equi-join of all
inputs on their join keys by position (a null join key never matches; a row with a null primary key is
dropped); its rows are identified by the tuple of the inputs' primary keys, and show every field minus
``exclude_fields``, renamed by ``aliases``, with join-key columns that end up with the same name shown once.

>>> model = MultiWayModel([ModelInput("r", ["rid"], ["bid"]), ModelInput("b", ["bid"], ["bid"])])
>>> model.join({"r": [{"rid": 1, "bid": 7}], "b": [{"bid": 7, "name": "cafe"}]},
...            {"r": ["rid", "bid"], "b": ["bid", "name"]})
{((1,), (7,)): {'rid': 1, 'bid': 7, 'name': 'cafe'}}
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import product
from typing import Any

Row = dict[str, Any]


@dataclass
class ModelInput:
    name: str
    key: list[str]
    join_keys: list[str]
    exclude_fields: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)

    def shown(self, column: str) -> str:
        return self.aliases.get(column, column)


@dataclass
class MultiWayModel:
    inputs: list[ModelInput]

    def columns(self, schemas: dict[str, list[str]]) -> list[tuple[str, str, str]]:
        """(input, source column, output column) in output order."""
        found: list[tuple[str, str, str]] = []
        seen: dict[str, tuple[str, int | None]] = {}
        for item in self.inputs:
            for column in schemas[item.name]:
                if column in item.exclude_fields:
                    continue
                name = item.shown(column)
                position = item.join_keys.index(column) if column in item.join_keys else None
                if name in seen:
                    assert position is not None and seen[name][1] == position, f"clash on {name}"
                    continue
                seen[name] = (item.name, position)
                found.append((item.name, column, name))
        return found

    def join(self, tables: dict[str, list[Row]], schemas: dict[str, list[str]]) -> dict[tuple, Row]:
        """The output rows by identity (a tuple of each input's key tuple)."""
        buckets: list[dict[tuple, list[Row]]] = []
        for item in self.inputs:
            bucket: dict[tuple, list[Row]] = defaultdict(list)
            for row in tables[item.name]:
                if any(row[c] is None for c in item.key):
                    continue
                on = tuple(row[c] for c in item.join_keys)
                if any(v is None for v in on):
                    continue
                bucket[on].append(row)
            buckets.append(bucket)
        columns = self.columns(schemas)
        out: dict[tuple, Row] = {}
        for on in set(buckets[0]).intersection(*[set(b) for b in buckets[1:]]):
            for combo in product(*[b[on] for b in buckets]):
                rows = {item.name: row for item, row in zip(self.inputs, combo, strict=True)}
                identity = tuple(tuple(rows[item.name][c] for c in item.key) for item in self.inputs)
                assert identity not in out
                out[identity] = {name: rows[source][column] for source, column, name in columns}
        return out
