"""The MERGE's key-pruning predicate: a superset of the source's keys, or nothing when it can't be exact."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import types as T

from airflow_provider_fkjoin.engine import merge


def _source(spark, key_type: T.DataType, keys: list) -> object:
    schema = T.StructType([T.StructField("k", key_type), T.StructField("_fkjoin_present", T.BooleanType())])
    return spark.createDataFrame([(k, True) for k in keys], schema)


TRICKY_STRINGS = ["a", "it's", "back\\slash", 'quote"d', "new\nline", "", "ünï €", "x' OR '1'='1"]


@pytest.mark.parametrize(
    ("key_type", "keys", "others"),
    [
        (T.LongType(), [1, 5, 5, None, -(2**63)], [2, 6, 2**63 - 1]),
        (T.IntegerType(), [7, -(2**31)], [8]),
        (T.ShortType(), [3], [4]),
        (T.ByteType(), [-128], [127]),
        (T.StringType(), TRICKY_STRINGS, ["b", "it", "back\\\\slash", "A", " "]),
        (T.DateType(), [dt.date(2026, 1, 1)], [dt.date(2026, 1, 2)]),
    ],
)
def test_prune_condition_names_exactly_the_source_keys(spark, key_type, keys, others) -> None:
    condition = merge._key_prune_condition(_source(spark, key_type, keys), "k")
    assert condition is not None
    target = _source(spark, key_type, [*keys, *others, keys[0]]).alias("t")
    expected = {k for k in keys if k is not None}
    assert {row["k"] for row in target.where(condition).collect()} == expected


def test_prune_condition_is_folded_into_one_in_set(spark) -> None:
    condition = merge._key_prune_condition(_source(spark, T.StringType(), ["a", "b'c"]), "k")
    target = _source(spark, T.StringType(), ["a"]).alias("t")
    plan = target.where(condition)._jdf.queryExecution().optimizedPlan().toString()
    assert "INSET" in plan.upper() or " IN (" in plan.upper(), plan
    assert "CAST" not in plan.upper().split("FILTER", 1)[1].split("\n", 1)[0], plan


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


def test_prune_condition_is_false_for_an_empty_source(spark) -> None:
    condition = merge._key_prune_condition(_source(spark, T.LongType(), [None]), "k")
    assert str(condition) == str(merge.F.lit(False))


def test_prune_condition_skips_inexact_types_and_large_sources(spark, monkeypatch) -> None:
    assert merge._key_prune_condition(_source(spark, T.DoubleType(), [1.5]), "k") is None
    monkeypatch.setattr(merge, "KEY_PRUNE_LIMIT", 2)
    assert merge._key_prune_condition(_source(spark, T.LongType(), [1, 2, 3]), "k") is None
