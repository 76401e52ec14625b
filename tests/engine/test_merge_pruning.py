"""The MERGE's key-pruning predicate: salted hashes of exactly the source's keys, never key values."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import types as T

from airflow_provider_fkjoin.engine.write import merge


def _source(spark, key_type: T.DataType, keys: list) -> object:
    schema = T.StructType([T.StructField("k", key_type), T.StructField("_fkjoin_present", T.BooleanType())])
    return spark.createDataFrame([(k, True) for k in keys], schema)


TRICKY_STRINGS = ["a", "it's", "back\\slash", 'quote"d', "new\nline", "", "ünï €", "x' OR '1'='1"]


@pytest.mark.parametrize(
    ("key_type", "keys", "others"),
    [
        (T.LongType(), [1, 5, 5, -(2**63)], [2, 6, 2**63 - 1]),
        (T.IntegerType(), [7, -(2**31)], [8]),
        (T.StringType(), TRICKY_STRINGS, ["b", "it", "back\\\\slash", "A", " "]),
        (T.DateType(), [dt.date(2026, 1, 1)], [dt.date(2026, 1, 2)]),
        (T.DoubleType(), [1.5, -0.25], [2.5]),
    ],
)
def test_prune_condition_keeps_exactly_the_source_keys(spark, key_type, keys, others) -> None:
    condition = merge._key_prune_condition(_source(spark, key_type, keys), ["k"])
    assert condition is not None
    target = _source(spark, key_type, [*keys, *others, keys[0]]).alias("t")
    assert {row["k"] for row in target.where(condition).collect()} == set(keys)


def test_prune_condition_holds_no_key_value(spark) -> None:
    keys = ["alice@example.com", "4111111111111111"]
    condition = merge._key_prune_condition(_source(spark, T.StringType(), keys), ["k"])
    text = str(condition)
    assert "xxhash64" in text
    for key in keys:
        assert key not in text
        assert key.encode().hex() not in text


def test_prune_condition_salt_differs_between_refreshes(spark) -> None:
    source = _source(spark, T.LongType(), [1])
    assert str(merge._key_prune_condition(source, ["k"])) != str(merge._key_prune_condition(source, ["k"]))


def test_prune_condition_is_false_for_an_empty_source(spark) -> None:
    condition = merge._key_prune_condition(_source(spark, T.LongType(), []), ["k"])
    assert condition == "FALSE"
    assert _source(spark, T.LongType(), [1, 2]).alias("t").where(condition).count() == 0


def test_prune_condition_skips_large_sources(spark, monkeypatch) -> None:
    monkeypatch.setattr(merge, "KEY_PRUNE_LIMIT", 2)
    assert merge._key_prune_condition(_source(spark, T.LongType(), [1, 2, 3]), ["k"]) is None


def test_sql_literal_rejects_values_that_do_not_fit_the_type() -> None:
    for value, data_type in (
        (True, T.LongType()),
        (1.5, T.LongType()),
        (dt.datetime(2026, 1, 1), T.DateType()),
        (1, T.StringType()),
        ("1", T.DoubleType()),
    ):
        with pytest.raises(TypeError):
            merge.sql_literal(value, data_type)
