"""The multiway_join world: input tables kept in Delta and, in parallel, in Python (what the pure-Python model
in ``multiway_model.py`` joins), refreshed and checked against that model; the yelp world (businesses, their
reviews and owners) and its inputs; the output read as users see it (its columns only, compared as a
multiset of rows) and its key as ``docs/kinds/multiway-join.md`` states it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import (
    CDF_META,
    assert_clean_changes,
    create_table,
    delete_keys,
    read_changes,
    read_rows,
    read_table,
    table_version,
    upsert,
)
from multiway_model import ModelInput, MultiWayModel, Row
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine import run_spec

BUSINESS = "business_id INT, name STRING, city STRING"
REVIEW = "review_id INT, biz_id INT, stars INT, text STRING"
OWNER = "owner_id INT, business_id INT, owner_name STRING"

#: A row as a hashable value (its column names and values), for multisets of rows.
Frozen = tuple[tuple[str, Any], ...]


def frozen(row: Row) -> Frozen:
    return tuple(sorted(row.items()))


def output_key(spec: dict[str, Any]) -> list[str] | None:
    """The output's key as the docs state it: ``output.pkey`` when it is unique (it holds every input's key,
    or ``enforce_pkey`` checks it); else the columns showing every input's key, when all are shown; else
    none (the output is a multiset of rows)."""

    def name(item: dict[str, Any], column: str) -> str | None:
        if column in item.get("exclude_fields", []):
            return None
        return {a["from"]: a["to"] for a in item.get("aliases", [])}.get(column, column)

    # a join key's position shows when some input shows its join key there
    positions: dict[int, str] = {}
    for item in spec["inputs"]:
        for position, column in enumerate(item["join_keys"]):
            if name(item, column) is not None:
                positions.setdefault(position, name(item, column))
    shown: list[str | None] = []
    for item in spec["inputs"]:
        for column in item["key"]:
            joined = item["join_keys"].index(column) if column in item["join_keys"] else None
            shown.append(name(item, column) or (positions.get(joined) if joined is not None else None))
    pkey = spec["output"].get("pkey")
    pkey = [pkey] if isinstance(pkey, str) else pkey
    if pkey and (spec.get("enforce_pkey", True) or all(n is not None and n in pkey for n in shown)):
        return list(pkey)
    if all(n is not None for n in shown):
        return list(dict.fromkeys(n for n in shown if n is not None))
    return None


def output_rows(spark: SparkSession, path: str, version: int | None = None) -> Counter[Frozen]:
    """The output's rows as a multiset; it must hold no engine column."""
    rows = read_rows(spark, path, version)
    hidden = sorted({c for row in rows for c in row if c.startswith("_fkjoin")})
    assert not hidden, f"the output holds engine columns {hidden}"
    return Counter(frozen(row) for row in rows)


def as_rows(model: dict[tuple, Row]) -> Counter[Frozen]:
    """The model's join (rows by identity) as the output shows it: a multiset of rows."""
    return Counter(frozen(row) for row in model.values())


def assert_clean_copies(spark: SparkSession, out: str, before: int | None, after: int) -> dict[str, int]:
    """A keyless output's change feed over one refresh is clean: inserts and deletes only, every deleted
    copy was there, no row both deleted and inserted, and it takes the rows before to the rows after."""
    start = 0 if before is None else before + 1
    changes = read_changes(spark, out, start, after) if after >= start else []
    kinds = Counter(c["_change_type"] for c in changes)
    assert set(kinds) <= {"insert", "delete"}, f"a keyless output's feed holds {dict(kinds)}"

    def copies(kind: str) -> Counter[Frozen]:
        return Counter(
            frozen({n: v for n, v in c.items() if n not in CDF_META})
            for c in changes
            if c["_change_type"] == kind
        )

    inserted, deleted = copies("insert"), copies("delete")
    assert not set(inserted) & set(deleted), (
        f"rows deleted and inserted again: {set(inserted) & set(deleted)}"
    )
    previous = Counter() if before is None else output_rows(spark, out, before)
    assert not deleted - previous, f"deleted copies that were not there: {deleted - previous}"
    assert previous - deleted + inserted == output_rows(spark, out, after), "the feed does not add up"
    return {"inserted": sum(inserted.values()), "updated": 0, "deleted": sum(deleted.values())}


def assert_clean_output_changes(
    spark: SparkSession, out: str, spec: dict[str, Any], before: int | None, after: int
) -> dict[str, int]:
    """The output's change feed over one refresh is clean, by its key (:func:`output_key`) or, keyless, by
    copies of rows; returns the counts."""
    key = output_key(spec)
    if key is None:
        return assert_clean_copies(spark, out, before, after)
    return assert_clean_changes(spark, out, key, before, after)


def net_counts(spec: dict[str, Any], before: dict[tuple, Row], after: dict[tuple, Row]) -> dict[str, int]:
    """The net change between two model states as the result counts it: per output key, or for a keyless
    output per copy of a row (inserted and deleted only)."""
    key = output_key(spec)
    if key is None:
        old, new = as_rows(before), as_rows(after)
        return {"inserted": sum((new - old).values()), "updated": 0, "deleted": sum((old - new).values())}
    old_by_key = {tuple(r[c] for c in key): r for r in before.values()}
    new_by_key = {tuple(r[c] for c in key): r for r in after.values()}
    return {
        "inserted": len(new_by_key.keys() - old_by_key.keys()),
        "updated": sum(1 for k in new_by_key.keys() & old_by_key.keys() if new_by_key[k] != old_by_key[k]),
        "deleted": len(old_by_key.keys() - new_by_key.keys()),
    }


@dataclass
class World:
    """Input tables kept in Delta and, in parallel, in Python (what the model joins)."""

    spark: SparkSession
    root: Path
    spec: dict[str, Any]
    schemas: dict[str, str]
    tables: dict[str, dict[tuple, Row]] = field(default_factory=dict)
    versions: list[int] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        spark: SparkSession,
        root: Path,
        inputs: list[dict[str, Any]],
        schemas: dict[str, str],
        rows: dict[str, list[Row]],
        **extra: Any,
    ) -> World:
        spec_inputs = []
        for item in inputs:
            path = str(root / item["name"])
            create_table(spark, path, rows.get(item["name"], []), schemas[item["name"]])
            spec_inputs.append({**item, "path": path})
        spec = {
            "kind": "multiway_join",
            "inputs": spec_inputs,
            "output": {"path": str(root / "out")},
            **extra,
        }
        world = cls(spark, root, spec, schemas)
        for item in inputs:
            world.tables[item["name"]] = {
                tuple(r[k] for k in item["key"]): dict(r) for r in rows.get(item["name"], [])
            }
        return world

    def key(self, name: str) -> list[str]:
        return next(i["key"] for i in self.spec["inputs"] if i["name"] == name)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def upsert(self, name: str, rows: list[Row]) -> None:
        key = self.key(name)
        upsert(self.spark, self.path(name), rows, key)
        for row in rows:
            self.tables[name][tuple(row[k] for k in key)] = dict(row)

    def delete(self, name: str, keys: list[Any]) -> None:
        key = self.key(name)
        delete_keys(self.spark, self.path(name), keys, key)
        for value in keys:
            self.tables[name].pop(value if isinstance(value, tuple) else (value,), None)

    def model(self) -> MultiWayModel:
        return MultiWayModel(
            [
                ModelInput(
                    i["name"],
                    i["key"],
                    i["join_keys"],
                    i.get("exclude_fields", []),
                    {a["from"]: a["to"] for a in i.get("aliases", [])},
                )
                for i in self.spec["inputs"]
            ]
        )

    def expected(self) -> dict[tuple, Row]:
        schemas = {
            name: [part.split()[0] for part in schema.split(",")] for name, schema in self.schemas.items()
        }
        return self.model().join({n: list(t.values()) for n, t in self.tables.items()}, schemas)

    def refresh(self, **options: Any) -> dict[str, Any]:
        """Run a refresh and check the output against the model and its change feed."""
        out = str(self.root / "out")
        before = self.versions[-1] if self.versions else None
        result = run_spec(self.spec, spark=self.spark, **options)
        after = table_version(self.spark, out)
        actual = output_rows(self.spark, out)
        expected = as_rows(self.expected())
        assert actual == expected, f"missing {expected - actual}\nextra {actual - expected}"
        counts = assert_clean_output_changes(self.spark, out, self.spec, before, after)
        if result["mode"] == "incremental":
            assert {k: result["rows"][k] for k in ("inserted", "updated", "deleted")} == counts
        self.versions.append(after)
        return result


BUSINESS_INPUT = {
    "name": "business",
    "key": ["business_id"],
    "join_keys": ["business_id"],
    "aliases": [{"from": "business_id", "to": "biz_id"}],
}
REVIEW_INPUT = {"name": "review", "key": ["review_id"], "join_keys": ["biz_id"], "exclude_fields": ["text"]}
OWNER_INPUT = {
    "name": "owner",
    "key": ["owner_id"],
    "join_keys": ["business_id"],
    "exclude_fields": ["business_id"],
}


def yelp_rows(offset: int = 0) -> dict[str, list[Row]]:
    """Businesses, their reviews (1:N) and owners (a business with two owners and several reviews: N:M);
    every id and join key moved up by ``offset``."""

    def at(value: int | None) -> int | None:
        return None if value is None else value + offset

    return {
        "business": [
            {"business_id": at(1), "name": "Cafe", "city": "SF"},
            {"business_id": at(2), "name": "Deli", "city": "NY"},
            {"business_id": at(3), "name": "Bar", "city": "LA"},
        ],
        "review": [
            {"review_id": at(10), "biz_id": at(1), "stars": 5, "text": "great"},
            {"review_id": at(11), "biz_id": at(1), "stars": 3, "text": "ok"},
            {"review_id": at(12), "biz_id": at(2), "stars": 4, "text": "nice"},
            {"review_id": at(13), "biz_id": None, "stars": 1, "text": "orphan"},
            {"review_id": at(14), "biz_id": at(9), "stars": 2, "text": "no business"},
        ],
        "owner": [
            {"owner_id": at(100), "business_id": at(1), "owner_name": "Ann"},
            {"owner_id": at(101), "business_id": at(1), "owner_name": "Bob"},
            {"owner_id": at(102), "business_id": at(2), "owner_name": "Cy"},
        ],
    }


def yelp_world(spark: SparkSession, tmp_path: Path, **extra: Any) -> World:
    """Businesses, their reviews (1:N) and owners (a business with two owners and several reviews: N:M)."""
    return World.create(
        spark,
        tmp_path,
        [BUSINESS_INPUT, REVIEW_INPUT, OWNER_INPUT],
        {"business": BUSINESS, "review": REVIEW, "owner": OWNER},
        yelp_rows(),
        **extra,
    )


def model_at(spark: SparkSession, world: World, versions: dict[str, int]) -> dict[tuple, Row]:
    """The model's join of the inputs as Delta holds them at ``versions`` (read back, not the mirror)."""
    tables: dict[str, list[Row]] = {}
    columns: dict[str, list[str]] = {}
    for name, version in versions.items():
        tables[name], columns[name] = read_table(spark, world.path(name), version)
    return world.model().join(tables, columns)
