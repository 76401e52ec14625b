"""multiway_join (Joinery's N-way un-windowed inner join), checked after every refresh against the pure-Python
model in ``multiway_model.py``, with a clean output change feed (one net change per changed identity)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from helpers import create_table, read_changes, read_rows, table_version
from multiway_model import ModelInput, MultiWayModel, Row
from pyspark.sql import SparkSession
from support.multiway_worlds import (
    BUSINESS,
    BUSINESS_INPUT,
    OWNER,
    OWNER_INPUT,
    REVIEW,
    REVIEW_INPUT,
    World,
    as_rows,
    output_rows,
    yelp_rows,
    yelp_world,
)

from airflow_provider_fkjoin.engine import InputDataError, SpecError, run_spec

# ------------------------------------------------------------------- the yelp scenarios, refreshed together

#: The yelp scenarios that share one world, each with its own copy of ``yelp_rows`` (ids moved up by the
#: offset, so no two scenarios share a join key): what each changes, phase by phase, is in
#: :func:`yelp_phases`. ``append`` changes nothing until the last step, which leaves its input repeating a
#: key (no refresh can follow).
OFFSETS = {"append": 0, "fan_out": 1000, "partners": 2000, "same_values": 3000}


class Counts(NamedTuple):
    """A refresh's net changes to one scenario's output rows, from the output's change feed."""

    inserted: int
    updated: int
    deleted: int


def counts_by_scenario(spark: SparkSession, out: str, start: int, end: int) -> dict[str, Counts]:
    """Each scenario's net changes in the output's change feed over versions ``start`` .. ``end`` (the
    feed is clean: ``World.refresh`` checked one net change per changed identity)."""
    found: dict[str, Counter[str]] = {name: Counter() for name in OFFSETS}
    owner = {offset: name for name, offset in OFFSETS.items()}
    for change in read_changes(spark, out, start, end):
        name = owner[change["biz_id"] // 1000 * 1000]
        found[name][change["_change_type"]] += 1
    return {name: Counts(c["insert"], c["update_postimage"], c["delete"]) for name, c in found.items()}


@dataclass
class YelpPhases:
    """The shared yelp world after its phases: each refresh's result, each scenario's net changes per
    refresh, the output's visible columns, and the final refused refresh."""

    world: World
    results: list[dict[str, Any]]
    counts: list[dict[str, Counts]]
    columns: list[str]
    repeat_error: BaseException | None
    version_before_repeat: int
    version_after_repeat: int


@pytest.fixture(scope="module")
def yelp_phases(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> YelpPhases:
    """The yelp scenarios of ``OFFSETS`` in one world, refreshed by the incremental plan (the telescoping
    sum, whose traps they are; ``test_multiway_recompute.py`` has the recompute plan), every refresh checked
    by ``World.refresh`` (output = model, clean change feed, result counts = the feed's):

    0. the full refresh;
    1. fan_out: business 1 renamed (fans out to 4 rows), alone in its refresh;
    2. fan_out: a review moves business, an owner and a review make business 3 join;
       partners: a business, its review and its owner change together;
       same_values: a business upserted with its own values, a review in an excluded column only;
    3. fan_out: an owner and a business deleted, a review's null join key set;
       partners: a business inserted with its review and owner;
    4. partners: that business deleted, its review updated;
    5. nothing: a noop;
    then append: an owner's key appended again, and the refresh refused.
    """
    root = tmp_path_factory.mktemp("yelp_phases")
    rows: dict[str, list[Row]] = {"business": [], "review": [], "owner": []}
    for offset in OFFSETS.values():
        for name, table in yelp_rows(offset).items():
            rows[name] += table
    world = World.create(
        spark,
        root,
        [BUSINESS_INPUT, REVIEW_INPUT, OWNER_INPUT],
        {"business": BUSINESS, "review": REVIEW, "owner": OWNER},
        rows,
        refresh_strategy="incremental",
    )
    fan, two, same = OFFSETS["fan_out"], OFFSETS["partners"], OFFSETS["same_values"]

    def biz(i: int, name: str, city: str) -> Row:
        return {"business_id": i, "name": name, "city": city}

    def review(i: int, on: int, stars: int, text: str) -> Row:
        return {"review_id": i, "biz_id": on, "stars": stars, "text": text}

    def owner(i: int, on: int, name: str) -> Row:
        return {"owner_id": i, "business_id": on, "owner_name": name}

    def phase_2() -> None:
        world.upsert("review", [review(fan + 11, fan + 2, 3, "ok")])  # moves to business 2
        world.upsert("owner", [owner(fan + 103, fan + 3, "Di")])  # business 3 now joins
        world.upsert("review", [review(fan + 15, fan + 3, 5, "new")])
        # the double-count trap: a business and its review both change; each identity changes once
        world.upsert("business", [biz(two + 2, "Deli II", "NY")])
        world.upsert("review", [review(two + 12, two + 2, 1, "worse")])
        world.upsert("owner", [owner(two + 102, two + 2, "Cyd")])
        world.upsert("business", [biz(same + 1, "Cafe", "SF")])
        world.upsert("review", [review(same + 10, same + 1, 5, "changed but excluded")])

    def phase_3() -> None:
        world.delete("owner", [fan + 100])
        world.delete("business", [fan + 2])
        world.upsert("review", [review(fan + 13, fan + 1, 1, "found")])
        # an insert and the partner it joins, in one refresh: inserted once
        world.upsert("business", [biz(two + 4, "Pub", "SF")])
        world.upsert("review", [review(two + 16, two + 4, 2, "meh")])
        world.upsert("owner", [owner(two + 104, two + 4, "Ed")])

    def phase_4() -> None:
        # a delete and its partner's update in one refresh: deleted once
        world.delete("business", [two + 4])
        world.upsert("review", [review(two + 16, two + 4, 4, "better")])

    out = world.spec["output"]["path"]
    changes = [
        lambda: None,
        lambda: world.upsert("business", [biz(fan + 1, "Cafe Nova", "SF")]),
        phase_2,
        phase_3,
        phase_4,
        lambda: None,
    ]
    results, counts = [], []
    for change in changes:
        change()
        results.append(world.refresh())
        start = 0 if len(world.versions) == 1 else world.versions[-2] + 1
        end = world.versions[-1]
        counts.append(counts_by_scenario(spark, out, start, end) if end >= start else {})
    columns = list(read_rows(spark, out)[0])

    before = table_version(spark, out)
    repeat = spark.createDataFrame([(100, 2, "Ann again")], OWNER)
    repeat.write.format("delta").mode("append").save(world.path("owner"))
    repeat_error: BaseException | None = None
    try:
        run_spec(world.spec, spark=spark)
    except InputDataError as error:
        repeat_error = error
    return YelpPhases(world, results, counts, columns, repeat_error, before, table_version(spark, out))


def test_three_inputs_one_to_many_and_many_to_many(yelp_phases: YelpPhases) -> None:
    """Phases 0-3 and 5 of the fan_out scenario (see :func:`yelp_phases`)."""
    results, counts = yelp_phases.results, [c.get("fan_out") for c in yelp_phases.counts]
    assert results[0]["mode"] == "full"
    assert counts[0] == Counts(inserted=5, updated=0, deleted=0)  # 2 reviews x 2 owners + 1 x 1
    assert yelp_phases.columns == ["biz_id", "name", "city", "review_id", "stars", "owner_id", "owner_name"]

    assert results[1]["mode"] == "incremental"  # business 1 renamed: fans out to 4 rows
    assert results[1]["rows"]["updated"] == 4 and results[1]["rows"]["join_keys_affected"] == 1
    assert counts[1] == Counts(inserted=0, updated=4, deleted=0)

    # review 11 moves to business 2, business 3 joins with its new owner and review
    assert counts[2] == Counts(inserted=2, updated=0, deleted=2)
    assert results[5]["mode"] == "noop"


def test_a_row_and_its_partner_change_in_one_refresh(yelp_phases: YelpPhases) -> None:
    """The double-count trap: a business and its review both change; each identity changes once. An
    insert with its partners is inserted once; a delete with its partner's update is deleted once."""
    counts = [c.get("partners") for c in yelp_phases.counts]
    assert counts[2] == Counts(inserted=0, updated=1, deleted=0)
    assert counts[3] == Counts(inserted=1, updated=0, deleted=0)
    assert counts[4] == Counts(inserted=0, updated=0, deleted=1)


def test_update_to_the_same_values_rewrites_nothing(yelp_phases: YelpPhases) -> None:
    assert yelp_phases.results[2]["mode"] == "incremental"
    assert yelp_phases.counts[2]["same_values"] == Counts(inserted=0, updated=0, deleted=0)


def test_a_key_repeated_by_an_append_fails_the_refresh(yelp_phases: YelpPhases) -> None:
    """An append of an existing key (on another join key) leaves the input repeating it: the refresh
    fails as a full run would, naming the input's key, and writes nothing."""
    error = yelp_phases.repeat_error
    assert isinstance(error, InputDataError), error
    assert re.search(r"owner.*duplicate keys.*\['owner_id'\].*owner_id=100", str(error))
    assert yelp_phases.version_after_repeat == yelp_phases.version_before_repeat


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


#: The output forms the vacuumed-log fallback meets, by what the inputs exclude: keyed by the inputs' keys,
#: keyless but showing the business key (the fallback finds the rows to replace by it), or keyless without
#: it (rebuilt, with the reason). A pkey-keyed output takes the keyed path.
OUTPUT_FORMS = {
    "input_keys": ({}, [], [], True),
    "keyless": ({}, [], ["review_id"], False),
    "business_key_hidden": ({}, ["business_id"], ["biz_id"], False),
}


@pytest.mark.parametrize("form", list(OUTPUT_FORMS))
def test_changelog_input_with_out_of_order_events(spark: SparkSession, tmp_path: Path, form: str) -> None:
    """A business changelog (CDC events, latest by lsn) joined to reviews: late events change nothing, a
    delete retracts, and a vacuumed log falls back to recomputing the changed identities, or, when the
    output does not show the business key, to a full rebuild that says why (the incremental plan's
    fallback: a recompute of the whole join needs no old log)."""
    output, business_hidden, review_hidden, keyed = OUTPUT_FORMS[form]
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
                "aliases": [] if business_hidden else [{"from": "business_id", "to": "biz_id"}],
                "exclude_fields": business_hidden,
            },
            {
                "name": "review",
                "path": reviews,
                "key": ["review_id"],
                "join_keys": ["biz_id"],
                "exclude_fields": review_hidden,
            },
        ],
        "output": {"path": str(tmp_path / "out"), **output},
        "refresh_strategy": "incremental",
    }
    model = MultiWayModel(
        [
            ModelInput(
                "business",
                ["business_id"],
                ["business_id"],
                business_hidden,
                aliases={} if business_hidden else {"business_id": "biz_id"},
            ),
            ModelInput("review", ["review_id"], ["biz_id"], review_hidden),
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
        assert output_rows(spark, str(tmp_path / "out")) == as_rows(
            model.join({"business": business, "review": review_rows}, schemas)
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
    counts = tuple(result["rows"][k] for k in ("inserted", "updated", "deleted"))
    assert counts == ((0, 1, 1) if keyed else (1, 0, 2)), result["rows"]  # keyless: per copy of a row
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
    assert "cannot be read as of the consumed version" in result["reason"], result
    if form == "business_key_hidden":
        assert result["mode"] == "full" and "does not show the changed inputs' keys" in result["reason"]
        assert result["write_path"] == "net_changes", "equal rows kept: only the new copy is written"
    else:
        assert result["mode"] == "incremental"
    assert (result["rows"]["inserted"], result["rows"]["deleted"]) == (1, 0)


def test_an_output_with_an_earlier_versions_identity_columns_is_rebuilt_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An output as an earlier version of the engine wrote it (its rows carry ``_fkjoin_id__<input>__<key>``
    columns, its last commit the refresh's progress) is rebuilt by the next refresh that has changes to
    consume, in one commit that says why, and refreshed incrementally after that."""
    world = yelp_world(spark, tmp_path)
    world.refresh()
    out = world.spec["output"]["path"]
    progress = spark.sql(f"DESCRIBE HISTORY delta.`{out}`").orderBy("version", ascending=False).first()
    earlier = spark.read.format("delta").load(out)
    for name, column, shown in (
        ("business", "business_id", "biz_id"),
        ("review", "review_id", "review_id"),
        ("owner", "owner_id", "owner_id"),
    ):
        earlier = earlier.withColumn(f"_fkjoin_id__{name}__{column}", earlier[shown])
    (
        earlier.localCheckpoint()
        .write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .option("userMetadata", progress["userMetadata"])
        .save(out)
    )
    before = table_version(spark, out)
    assert run_spec(world.spec, spark=spark)["mode"] == "noop", "a noop writes nothing, even here"

    world.upsert("review", [{"review_id": 12, "biz_id": 2, "stars": 1, "text": "worse"}])
    rebuilt = run_spec(world.spec, spark=spark)
    assert rebuilt["mode"] == "full" and "row-identity columns" in rebuilt["reason"], rebuilt
    assert table_version(spark, out) == before + 1, "one commit"
    assert output_rows(spark, out) == as_rows(world.expected()), "the user's columns only, as the model"
    world.versions.append(before + 1)
    world.upsert("review", [{"review_id": 12, "biz_id": 2, "stars": 2, "text": "fine"}])
    assert world.refresh()["mode"] == "incremental"
