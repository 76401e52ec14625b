"""multiway_join (Joinery's N-way un-windowed inner join), checked after every refresh against the pure-Python
model in ``multiway_model.py``, with a clean output change feed (one net change per changed identity)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_clean_changes, create_table, delete_keys, read_rows, table_version, upsert
from multiway_model import ModelInput, MultiWayModel, Row
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine import InputDataError, SpecError, run_spec

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


def yelp_world(spark: SparkSession, tmp_path: Path, **extra: Any) -> World:
    """Businesses, their reviews (1:N) and owners (a business with two owners and several reviews: N:M)."""
    rows = {
        "business": [
            {"business_id": 1, "name": "Cafe", "city": "SF"},
            {"business_id": 2, "name": "Deli", "city": "NY"},
            {"business_id": 3, "name": "Bar", "city": "LA"},
        ],
        "review": [
            {"review_id": 10, "biz_id": 1, "stars": 5, "text": "great"},
            {"review_id": 11, "biz_id": 1, "stars": 3, "text": "ok"},
            {"review_id": 12, "biz_id": 2, "stars": 4, "text": "nice"},
            {"review_id": 13, "biz_id": None, "stars": 1, "text": "orphan"},
            {"review_id": 14, "biz_id": 9, "stars": 2, "text": "no business"},
        ],
        "owner": [
            {"owner_id": 100, "business_id": 1, "owner_name": "Ann"},
            {"owner_id": 101, "business_id": 1, "owner_name": "Bob"},
            {"owner_id": 102, "business_id": 2, "owner_name": "Cy"},
        ],
    }
    return World.create(
        spark,
        tmp_path,
        [BUSINESS_INPUT, REVIEW_INPUT, OWNER_INPUT],
        {"business": BUSINESS, "review": REVIEW, "owner": OWNER},
        rows,
        **extra,
    )


def test_three_inputs_one_to_many_and_many_to_many(spark: SparkSession, tmp_path: Path) -> None:
    world = yelp_world(spark, tmp_path)
    first = world.refresh()
    assert first["mode"] == "full" and first["rows"]["inserted"] == 5  # 2 reviews x 2 owners + 1 x 1
    out_columns = [c for c in read_rows(spark, str(tmp_path / "out"))[0] if not c.startswith("_fkjoin_")]
    assert out_columns == ["biz_id", "name", "city", "review_id", "stars", "owner_id", "owner_name"]

    world.upsert("business", [{"business_id": 1, "name": "Cafe Nova", "city": "SF"}])  # fans out to 4 rows
    result = world.refresh()
    assert result["mode"] == "incremental"
    assert result["rows"]["updated"] == 4 and result["rows"]["join_keys_affected"] == 1

    world.upsert("review", [{"review_id": 11, "biz_id": 2, "stars": 3, "text": "ok"}])  # moves to business 2
    world.upsert("owner", [{"owner_id": 103, "business_id": 3, "owner_name": "Di"}])  # business 3 now joins
    world.upsert("review", [{"review_id": 15, "biz_id": 3, "stars": 5, "text": "new"}])
    result = world.refresh()
    assert result["rows"] == {**result["rows"], "inserted": 2, "deleted": 2, "updated": 0}

    world.delete("owner", [100])
    world.delete("business", [2])
    world.upsert("review", [{"review_id": 13, "biz_id": 1, "stars": 1, "text": "found"}])
    world.refresh()
    assert world.refresh()["mode"] == "noop"


def test_a_row_and_its_partner_change_in_one_refresh(spark: SparkSession, tmp_path: Path) -> None:
    """The double-count trap: a business and its review both change; each identity changes once."""
    world = yelp_world(spark, tmp_path)
    world.refresh()
    world.upsert("business", [{"business_id": 2, "name": "Deli II", "city": "NY"}])
    world.upsert("review", [{"review_id": 12, "biz_id": 2, "stars": 1, "text": "worse"}])
    world.upsert("owner", [{"owner_id": 102, "business_id": 2, "owner_name": "Cyd"}])
    result = world.refresh()
    assert (result["rows"]["inserted"], result["rows"]["updated"], result["rows"]["deleted"]) == (0, 1, 0)
    # an insert and the partner it joins, in one refresh: inserted once
    world.upsert("business", [{"business_id": 4, "name": "Pub", "city": "SF"}])
    world.upsert("review", [{"review_id": 16, "biz_id": 4, "stars": 2, "text": "meh"}])
    world.upsert("owner", [{"owner_id": 104, "business_id": 4, "owner_name": "Ed"}])
    result = world.refresh()
    assert (result["rows"]["inserted"], result["rows"]["updated"], result["rows"]["deleted"]) == (1, 0, 0)
    # a delete and its partner's update in one refresh: deleted once
    world.delete("business", [4])
    world.upsert("review", [{"review_id": 16, "biz_id": 4, "stars": 4, "text": "better"}])
    result = world.refresh()
    assert (result["rows"]["inserted"], result["rows"]["updated"], result["rows"]["deleted"]) == (0, 0, 1)


def test_update_to_the_same_values_rewrites_nothing(spark: SparkSession, tmp_path: Path) -> None:
    world = yelp_world(spark, tmp_path)
    world.refresh()
    world.upsert("business", [{"business_id": 1, "name": "Cafe", "city": "SF"}])
    world.upsert("review", [{"review_id": 10, "biz_id": 1, "stars": 5, "text": "changed but excluded"}])
    result = world.refresh()
    assert (result["rows"]["inserted"], result["rows"]["updated"], result["rows"]["deleted"]) == (0, 0, 0)


def test_two_inputs_and_four_inputs(spark: SparkSession, tmp_path: Path) -> None:
    rows = {
        "a": [{"a_id": i, "k": i % 3, "x": i} for i in range(6)],
        "b": [{"b_id": i, "k": i % 2, "y": i} for i in range(4)],
        "c": [{"c_id": i, "k": i % 3, "z": i} for i in range(5)],
        "d": [{"d_id": i, "k": i % 2, "w": i} for i in range(3)],
    }
    schemas = {n: f"{n}_id INT, k INT, {c} INT" for n, c in zip("abcd", "xyzw", strict=True)}
    inputs = [{"name": n, "key": [f"{n}_id"], "join_keys": ["k"]} for n in "abcd"]
    four = World.create(spark, tmp_path / "four", inputs, schemas, rows)
    four.refresh()
    four.upsert("b", [{"b_id": 9, "k": 0, "y": 9}])
    four.upsert("d", [{"d_id": 0, "k": 1, "w": 0}])
    four.delete("a", [0])
    four.upsert("c", [{"c_id": 1, "k": 0, "z": 10}])
    four.refresh()
    two = World.create(spark, tmp_path / "two", inputs[:2], {n: schemas[n] for n in "ab"}, rows)
    two.refresh()
    two.upsert("a", [{"a_id": 1, "k": 0, "x": 7}])
    two.delete("b", [1])
    two.refresh()


def test_composite_join_keys(spark: SparkSession, tmp_path: Path) -> None:
    schemas = {"s": "s_id INT, region STRING, day INT, v INT", "t": "t_id INT, reg STRING, d INT, u INT"}
    rows = {
        "s": [{"s_id": 1, "region": "eu", "day": 1, "v": 1}, {"s_id": 2, "region": "us", "day": 1, "v": 2}],
        "t": [{"t_id": 1, "reg": "eu", "d": 1, "u": 5}, {"t_id": 2, "reg": "eu", "d": 2, "u": 6}],
    }
    inputs = [
        {"name": "s", "key": ["s_id"], "join_keys": ["region", "day"]},
        {"name": "t", "key": ["t_id"], "join_keys": ["reg", "d"]},
    ]
    world = World.create(spark, tmp_path, inputs, schemas, rows)
    world.refresh()
    world.upsert("t", [{"t_id": 2, "reg": "us", "d": 1, "u": 7}])
    world.refresh()


def test_pkey_enforced_names_the_input_that_repeats_it(spark: SparkSession, tmp_path: Path) -> None:
    world = yelp_world(spark, tmp_path, output={"path": str(tmp_path / "out"), "pkey": ["review_id"]})
    with pytest.raises(InputDataError, match=r"review_id=10.*'owner'"):
        run_spec(world.spec, spark=spark)
    assert not (tmp_path / "out").exists()
    world.delete("owner", [101])
    world.refresh()
    world.upsert("owner", [{"owner_id": 105, "business_id": 2, "owner_name": "Flo"}])
    with pytest.raises(InputDataError, match=r"review_id=12.*'owner'"):
        run_spec(world.spec, spark=spark)
    world.delete("owner", [105])
    world.spec["enforce_pkey"] = False
    world.upsert("owner", [{"owner_id": 106, "business_id": 1, "owner_name": "Gus"}])
    result = world.refresh()
    assert result["rows"]["pkey_duplicates"] == 2 and any("not unique" in w for w in result["warnings"])


def test_pkey_repeated_by_an_update_or_beside_a_kept_row(spark: SparkSession, tmp_path: Path) -> None:
    """An update that changes a row's pkey to another row's, and an insert whose pkey a row updated in the
    same refresh keeps, are both repeats; updates keeping their pkey alone are not."""
    world = yelp_world(
        spark, tmp_path, output={"path": str(tmp_path / "out"), "pkey": ["review_id", "owner_name"]}
    )
    world.refresh()
    world.upsert("owner", [{"owner_id": 101, "business_id": 1, "owner_name": "Ann"}])  # Bob becomes Ann
    with pytest.raises(InputDataError, match=r"review_id=1[01], owner_name='Ann'.*'owner'"):
        run_spec(world.spec, spark=spark)
    world.upsert("owner", [{"owner_id": 101, "business_id": 1, "owner_name": "Bob"}])
    world.upsert("business", [{"business_id": 1, "name": "Cafe Nova", "city": "SF"}])  # keeps pkeys
    assert world.refresh()["rows"]["updated"] == 4
    world.upsert("business", [{"business_id": 1, "name": "Cafe", "city": "SF"}])
    world.upsert("owner", [{"owner_id": 104, "business_id": 1, "owner_name": "Ann"}])  # beside owner 100
    with pytest.raises(InputDataError, match=r"review_id=1[01], owner_name='Ann'.*'owner'"):
        run_spec(world.spec, spark=spark)


def test_a_key_repeated_by_an_append_fails_the_refresh(spark: SparkSession, tmp_path: Path) -> None:
    """An append of an existing key (on another join key) leaves the input repeating it: the refresh
    fails as a full run would, naming the input's key, and writes nothing."""
    world = yelp_world(spark, tmp_path)
    world.refresh()
    before = table_version(spark, str(tmp_path / "out"))
    repeat = spark.createDataFrame([(100, 2, "Ann again")], OWNER)
    repeat.write.format("delta").mode("append").save(world.path("owner"))
    with pytest.raises(InputDataError, match=r"owner.*duplicate keys.*\['owner_id'\].*owner_id=100"):
        run_spec(world.spec, spark=spark)
    assert table_version(spark, str(tmp_path / "out")) == before


def test_many_to_many_guard(spark: SparkSession, tmp_path: Path) -> None:
    world = yelp_world(spark, tmp_path, max_rows_per_join_key=4)
    world.refresh()
    world.upsert("owner", [{"owner_id": 107, "business_id": 1, "owner_name": "Hal"}])  # 1 x 2 x 3 = 6 > 4
    with pytest.raises(InputDataError, match=r"biz_id=1\).*6 output rows.*business 1 x review 2 x owner 3"):
        run_spec(world.spec, spark=spark)
    world.spec["max_rows_per_join_key"] = 6  # a tuning field: the output continues, incrementally
    world.tables["owner"][(107,)] = {"owner_id": 107, "business_id": 1, "owner_name": "Hal"}
    assert world.refresh()["mode"] == "incremental"


def test_joinery_format(spark: SparkSession, tmp_path: Path) -> None:
    world = yelp_world(spark, tmp_path)
    joinery = {
        "format": "joinery",
        "schemas": {
            56789: {"path": world.path("business"), "key": ["business_id"], "name": "business"},
            12345: {"path": world.path("review"), "key": ["review_id"], "name": "review"},
        },
        "join": [
            {
                "schema_id": 56789,
                "join_keys": ["business_id"],
                "aliases": [{"from": "business_id", "to": "biz_id"}],
            },
            {"schema_id": 12345, "join_keys": ["biz_id"], "exclude_fields": ["text"]},
        ],
        "output": {
            "namespace": "yelp",
            "source": "business_reviews",
            "doc": "reviews with their business",
            "pkey": "business_id",
            "path": str(tmp_path / "out"),
        },
    }
    result = run_spec(joinery, spark=spark)
    assert result["rows"]["inserted"] == 3 and result["rows"]["pkey_duplicates"] == 1
    assert any("renamed to 'biz_id'" in w for w in result["warnings"])
    assert list(result["inputs"]) == ["business", "review"]


#: Joinery's configuration as Yelp published it (the business/review example), key for key and spelling for
#: spelling (``Doc`` with a capital D), followed by what a user adds here: the ``schemas:`` map that resolves
#: each schema id (Joinery asks Yelp's schema registry) and the output's location.
JOINERY_PUBLISHED = """\
join:
  - schema_id: 56789
    join_keys:
      - business_id
    aliases:
      - from: business_id
        to: biz_id
  - schema_id: 12345
    join_keys:
      - biz_id
    exclude_fields:
      - text
output:
  namespace: 'joinery'
  source: 'business_reviews'
  Doc: 'Joined stream of businesses and their reviews'
  pkey: 'business_id'
"""


def test_joinery_published_example_runs_verbatim(spark: SparkSession, tmp_path: Path) -> None:
    world = yelp_world(spark, tmp_path)
    config = JOINERY_PUBLISHED.replace(
        "  pkey: 'business_id'\n", f"  pkey: 'business_id'\n  path: '{tmp_path / 'out'}'\n"
    ) + (
        "schemas:\n"
        f"  56789: {{name: business, path: '{world.path('business')}', key: [business_id]}}\n"
        f"  12345: {{name: review, path: '{world.path('review')}', key: [review_id]}}\n"
    )
    spec_file = tmp_path / "business_reviews.yaml"
    spec_file.write_text(config)
    result = run_spec(str(spec_file), spark=spark)
    assert result["mode"] == "full" and list(result["inputs"]) == ["business", "review"]
    got = sorted(
        tuple(r[c] for c in ("biz_id", "name", "review_id", "stars"))
        for r in read_rows(spark, str(tmp_path / "out"))
    )
    assert got == [(1, "Cafe", 10, 5), (1, "Cafe", 11, 3), (2, "Deli", 12, 4)]
    assert "text" not in read_rows(spark, str(tmp_path / "out"))[0]
    assert result["rows"]["pkey_duplicates"] == 1  # business_id (biz_id) repeats across a business's reviews

    unknown = config.replace("  Doc:", "  Docs:")
    spec_file.write_text(unknown)
    with pytest.raises(SpecError, match=r"output: \['Docs'\] not known in a Joinery config"):
        run_spec(str(spec_file), spark=spark)
    twice = config.replace("  Doc:", "  doc: 'x'\n  Doc:")
    spec_file.write_text(twice)
    with pytest.raises(SpecError, match=r"output: 'doc' and 'Doc' are the same field"):
        run_spec(str(spec_file), spark=spark)


def test_spec_errors_name_the_input(spark: SparkSession, tmp_path: Path) -> None:
    world = yelp_world(spark, tmp_path)
    renamed = {**world.spec["inputs"][2], "aliases": [{"from": "owner_name", "to": "name"}]}
    clash = {**world.spec, "inputs": [world.spec["inputs"][0], renamed]}
    with pytest.raises(
        SpecError, match=r"'name' of input 'owner' clashes with the same name from input 'business'"
    ):
        run_spec(clash, spark=spark)
    types = {
        **world.spec,
        "inputs": [world.spec["inputs"][0], {**world.spec["inputs"][1], "join_keys": ["text"]}],
    }
    with pytest.raises(
        SpecError, match=r"inputs\[1\].join_keys\[0\]: review.text is string but business.business_id is int"
    ):
        run_spec(types, spark=spark)
    pkey = {**world.spec, "output": {"path": str(tmp_path / "out"), "pkey": ["business_id"]}}
    with pytest.raises(SpecError, match=r"output.pkey: \['business_id'\] are not output columns"):
        run_spec(pkey, spark=spark)
    assert not (tmp_path / "out").exists()


CHANGELOG = "business_id INT, op STRING, lsn BIGINT, name STRING, city STRING"


def test_changelog_input_with_out_of_order_events(spark: SparkSession, tmp_path: Path) -> None:
    """A business changelog (CDC events, latest by lsn) joined to reviews: late events change nothing, a
    delete retracts, and a vacuumed log falls back to recomputing the changed identities."""
    from helpers import append_rows

    events = str(tmp_path / "business_cdc")
    create_table(
        spark,
        events,
        [
            {"business_id": 1, "op": "c", "lsn": 10, "name": "Cafe", "city": "SF"},
            {"business_id": 2, "op": "c", "lsn": 11, "name": "Deli", "city": "NY"},
        ],
        CHANGELOG,
    )
    reviews = str(tmp_path / "review")
    create_table(
        spark,
        reviews,
        [
            {"review_id": 10, "biz_id": 1, "stars": 5, "text": "a"},
            {"review_id": 11, "biz_id": 2, "stars": 3, "text": "b"},
        ],
        REVIEW,
    )
    spec = {
        "kind": "multiway_join",
        "inputs": [
            {
                "name": "business",
                "path": events,
                "key": ["business_id"],
                "changelog": {"op_column": "op", "order_by": ["lsn"]},
                "join_keys": ["business_id"],
                "aliases": [{"from": "business_id", "to": "biz_id"}],
            },
            {"name": "review", "path": reviews, "key": ["review_id"], "join_keys": ["biz_id"]},
        ],
        "output": {"path": str(tmp_path / "out")},
    }
    model = MultiWayModel(
        [
            ModelInput("business", ["business_id"], ["business_id"], aliases={"business_id": "biz_id"}),
            ModelInput("review", ["review_id"], ["biz_id"]),
        ]
    )
    schemas = {
        "business": ["business_id", "name", "city"],
        "review": ["review_id", "biz_id", "stars", "text"],
    }
    review_rows = [
        {"review_id": 10, "biz_id": 1, "stars": 5, "text": "a"},
        {"review_id": 11, "biz_id": 2, "stars": 3, "text": "b"},
    ]

    def check(business: list[Row]) -> dict[str, Any]:
        result = run_spec(spec, spark=spark)
        assert output_by_identity(spark, str(tmp_path / "out"), spec) == model.join(
            {"business": business, "review": review_rows}, schemas
        )
        return result

    check(
        [{"business_id": 1, "name": "Cafe", "city": "SF"}, {"business_id": 2, "name": "Deli", "city": "NY"}]
    )
    append_rows(
        spark,
        events,
        [
            {"business_id": 1, "op": "u", "lsn": 30, "name": "Cafe Nova", "city": "SF"},
            {"business_id": 1, "op": "u", "lsn": 20, "name": "late", "city": "SF"},  # older than lsn 30
            {"business_id": 2, "op": "d", "lsn": 31, "name": None, "city": None},
        ],
    )
    result = check([{"business_id": 1, "name": "Cafe Nova", "city": "SF"}])
    assert result["mode"] == "incremental"
    assert (result["rows"]["updated"], result["rows"]["deleted"]) == (1, 1)
    append_rows(
        spark, events, [{"business_id": 1, "op": "u", "lsn": 25, "name": "later but old", "city": "SF"}]
    )
    result = check([{"business_id": 1, "name": "Cafe Nova", "city": "SF"}])
    assert (result["rows"]["inserted"], result["rows"]["updated"], result["rows"]["deleted"]) == (0, 0, 0)

    # compact and vacuum the log: its consumed version can no longer be read, the feed still can
    spark.sql(f"OPTIMIZE delta.`{events}`")
    with_retention = "spark.databricks.delta.retentionDurationCheck.enabled"
    spark.conf.set(with_retention, "false")
    try:
        spark.sql(f"VACUUM delta.`{events}` RETAIN 0 HOURS")
    finally:
        spark.conf.unset(with_retention)
    append_rows(spark, events, [{"business_id": 2, "op": "c", "lsn": 40, "name": "Deli again", "city": "NY"}])
    result = check(
        [
            {"business_id": 1, "name": "Cafe Nova", "city": "SF"},
            {"business_id": 2, "name": "Deli again", "city": "NY"},
        ]
    )
    assert result["mode"] == "incremental" and "cannot be read as of the consumed version" in result["reason"]
    assert result["rows"]["inserted"] == 1
