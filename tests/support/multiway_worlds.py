"""The multiway_join world: input tables kept in Delta and, in parallel, in Python (what the pure-Python model
in ``multiway_model.py`` joins), refreshed and checked against that model; the yelp world (businesses, their
reviews and owners) and its inputs; the output read by identity."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import (
    assert_clean_changes,
    create_table,
    delete_keys,
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


def identity_columns(spec: dict[str, Any]) -> list[str]:
    return [f"_fkjoin_id__{i['name']}__{k}" for i in spec["inputs"] for k in i["key"]]


def output_by_identity(spark: SparkSession, path: str, spec: dict[str, Any]) -> dict[tuple, Row]:
    """The output's rows by identity (a tuple of each input's key tuple), visible columns only."""
    found: dict[tuple, Row] = {}
    for row in read_rows(spark, path):
        identity = tuple(
            tuple(row[f"_fkjoin_id__{i['name']}__{k}"] for k in i["key"]) for i in spec["inputs"]
        )
        assert identity not in found, f"identity {identity} twice in the output"
        found[identity] = {c: v for c, v in row.items() if not c.startswith("_fkjoin_")}
    return found


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
        actual = output_by_identity(self.spark, out, self.spec)
        expected = self.expected()
        assert actual == expected, _diff(actual, expected)
        counts = assert_clean_changes(self.spark, out, identity_columns(self.spec), before, after)
        if result["mode"] != "noop":
            assert {k: result["rows"][k] for k in ("inserted", "updated", "deleted")} == counts
        self.versions.append(after)
        return result


def _diff(actual: dict[tuple, Row], expected: dict[tuple, Row]) -> str:
    missing = {k: v for k, v in expected.items() if k not in actual}
    extra = {k: v for k, v in actual.items() if k not in expected}
    different = {k: (actual[k], expected[k]) for k in actual if k in expected and actual[k] != expected[k]}
    return f"missing {missing}\nextra {extra}\ndifferent {different}"


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
