"""The recompute plan of a ``multiway_join`` (``refresh_strategy: recompute``): the whole join from the pinned
inputs, compared with the output key by key, and only the rows that differ committed. Checked against the
pure-Python model (``multiway_model.py``), never against the engine's own output: the output equals the
model's join, and the result's counts and the output's change feed are exactly the model's net change; over
tables, and over a changelog input (its table is the latest event per key). A keyless output cannot be
compared key by key: the incremental plan runs and the result's ``strategy.fallback`` says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import append_rows, assert_clean_changes, create_table, delete_keys, table_version, upsert
from multiway_model import ModelInput, MultiWayModel, Row
from pyspark.sql import SparkSession
from support.multiway_worlds import (
    BUSINESS,
    BUSINESS_INPUT,
    OWNER,
    OWNER_INPUT,
    REVIEW,
    REVIEW_INPUT,
    as_rows,
    net_counts,
    output_key,
    output_rows,
    yelp_rows,
)

from airflow_provider_fkjoin.engine import InputDataError, run_spec

BUSINESS_LOG = "business_id INT, op STRING, lsn BIGINT, name STRING, city STRING"
#: The model's columns per input, in table order.
COLUMNS = {
    name: [part.split()[0] for part in schema.split(",")]
    for name, schema in {"business": BUSINESS, "review": REVIEW, "owner": OWNER}.items()
}
#: How each test's business input is stored, and whether the output shows every input's key.
FORMS = {"tables": ("table", True), "changelog": ("changelog", True), "keyless": ("table", False)}


class YelpInputs:
    """Businesses (a table or a changelog of CDC events), their reviews and owners, kept in Delta and, for
    the model, as Python rows (the table each input describes)."""

    def __init__(self, spark: SparkSession, root: Path, business_form: str, keyed: bool) -> None:
        self.spark, self.root, self.business_form = spark, root, business_form
        self.tables: dict[str, dict[int, Row]] = {
            name: {row[COLUMNS[name][0]]: row for row in rows} for name, rows in yelp_rows().items()
        }
        self.lsn = 10
        business = {**BUSINESS_INPUT, "path": self.path("business")}
        if business_form == "changelog":
            create_table(
                spark, self.path("business"), self._events(self.tables["business"].values()), BUSINESS_LOG
            )
            business["changelog"] = {"op_column": "op", "order_by": ["lsn"]}
        else:
            create_table(spark, self.path("business"), self.tables["business"].values(), BUSINESS)
        create_table(spark, self.path("review"), self.tables["review"].values(), REVIEW)
        create_table(spark, self.path("owner"), self.tables["owner"].values(), OWNER)
        # the keyless output leaves the review's key out: two reviews with equal stars look alike
        review = {**REVIEW_INPUT, "exclude_fields": ["text"] if keyed else ["text", "review_id"]}
        self.spec: dict[str, Any] = {
            "kind": "multiway_join",
            "inputs": [
                business,
                {**review, "path": self.path("review")},
                {**OWNER_INPUT, "path": self.path("owner")},
            ],
            "output": {"path": str(root / "out")},
            "refresh_strategy": "recompute",
        }

    def path(self, name: str) -> str:
        return str(self.root / name)

    def _events(self, rows: Any, op: str = "u") -> list[Row]:
        events = []
        for row in rows:
            self.lsn += 1
            events.append({**row, "op": op, "lsn": self.lsn})
        return events

    def upsert(self, name: str, rows: list[Row]) -> None:
        """Rows written (an event each for the changelog); the model's table follows."""
        if name == "business" and self.business_form == "changelog":
            append_rows(self.spark, self.path(name), self._events(rows))
        else:
            upsert(self.spark, self.path(name), rows, [COLUMNS[name][0]])
        self.tables[name].update({row[COLUMNS[name][0]]: row for row in rows})

    def delete(self, name: str, key: int) -> None:
        delete_keys(self.spark, self.path(name), [key], [COLUMNS[name][0]])
        self.tables[name].pop(key)

    def model(self) -> dict[tuple, Row]:
        """The N-way join of the inputs as the model computes it."""
        model = MultiWayModel(
            [
                ModelInput(
                    item["name"],
                    item["key"],
                    item["join_keys"],
                    item.get("exclude_fields", []),
                    {a["from"]: a["to"] for a in item.get("aliases", [])},
                )
                for item in self.spec["inputs"]
            ]
        )
        return model.join({name: list(rows.values()) for name, rows in self.tables.items()}, COLUMNS)


@pytest.mark.parametrize("form", list(FORMS))
def test_a_forced_recompute_commits_only_the_rows_that_differ(
    spark: SparkSession, tmp_path: Path, form: str
) -> None:
    """Business 1 (two reviews x two owners) renamed, business 2 rewritten with its own values (for the
    changelog: a new event, and a late one older than the rename), a review deleted, a review and an owner
    joining business 3: four updates, one delete and one insert, and nothing else in the change feed."""
    business_form, keyed = FORMS[form]
    world = YelpInputs(spark, tmp_path, business_form, keyed)
    out = world.spec["output"]["path"]
    first = run_spec(world.spec, spark=spark)
    assert first["mode"] == "full", first
    assert output_rows(spark, out) == as_rows(world.model())
    before, before_version = world.model(), table_version(spark, out)

    world.upsert("business", [{"business_id": 1, "name": "Cafe Nova", "city": "SF"}])
    world.upsert("business", [{"business_id": 2, "name": "Deli", "city": "NY"}])  # its own values
    if business_form == "changelog":  # older than the rename: changes nothing
        append_rows(spark, world.path("business"), [{"business_id": 1, "op": "u", "lsn": 1, "name": "late"}])
    world.delete("review", 12)
    world.upsert("review", [{"review_id": 15, "biz_id": 3, "stars": 4, "text": "new"}])
    world.upsert("owner", [{"owner_id": 103, "business_id": 3, "owner_name": "Di"}])
    result = run_spec(world.spec, spark=spark)

    after = world.model()
    assert output_rows(spark, out) == as_rows(after), "the output is the model's join"
    assert result["mode"] == "incremental", result
    strategy = result["strategy"]
    assert strategy["chosen"] == "recompute", strategy
    assert result["output"]["version"] == before_version + 1, "one commit"
    counts = {kind: result["rows"][kind] for kind in ("inserted", "updated", "deleted")}
    assert counts == net_counts(world.spec, before, after), counts
    if keyed:
        assert "fallback" not in strategy, strategy
        assert result["write_path"] == "net_changes"
        assert counts == {"inserted": 1, "updated": 4, "deleted": 1}
        key = output_key(world.spec)
        assert key is not None
        assert_clean_changes(
            spark,
            out,
            key,
            before_version,
            before_version + 1,
            before_rows=before.values(),
            after_rows=after.values(),
        )
    else:
        assert strategy.get("fallback"), strategy  # the incremental plan ran, and the result says why


def test_a_forced_recompute_refuses_a_repeated_key(spark: SparkSession, tmp_path: Path) -> None:
    """An owner key appended again: the recompute fails before writing, naming the key, as a full rebuild
    does."""
    world = YelpInputs(spark, tmp_path, "table", keyed=True)
    out = world.spec["output"]["path"]
    run_spec(world.spec, spark=spark)
    version = table_version(spark, out)
    append_rows(spark, world.path("owner"), [{"owner_id": 100, "business_id": 2, "owner_name": "Ann again"}])
    with pytest.raises(InputDataError, match=r"owner table .* has duplicate keys .*owner_id=100\) x2"):
        run_spec(world.spec, spark=spark)
    assert table_version(spark, out) == version, "nothing was written"
