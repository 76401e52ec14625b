"""The MERGE's key-pruning predicate: a superset of the source's keys, or nothing when it can't be exact."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import types as T

from airflow_provider_fkjoin.engine import merge


def _source(spark, key_type: T.DataType, keys: list) -> object:
    schema = T.StructType([T.StructField("k", key_type), T.StructField("_fkjoin_present", T.BooleanType())])
    return spark.createDataFrame([(k, True) for k in keys], schema)


@pytest.mark.parametrize(
    ("key_type", "keys"),
    [
        (T.LongType(), [1, 5, 5, None]),
        (T.StringType(), ["a", "b"]),
        (T.DateType(), [dt.date(2026, 1, 1)]),
    ],
)
def test_prune_condition_names_every_source_key(spark, key_type, keys) -> None:
    condition = merge._key_prune_condition(_source(spark, key_type, keys), "k")
    assert condition is not None
    target = _source(spark, key_type, [*keys, keys[0]]).alias("t")
    expected = {k for k in keys if k is not None}
    assert {row["k"] for row in target.where(condition).collect()} == expected


def test_prune_condition_is_false_for_an_empty_source(spark) -> None:
    condition = merge._key_prune_condition(_source(spark, T.LongType(), [None]), "k")
    assert str(condition) == str(merge.F.lit(False))


def test_prune_condition_skips_inexact_types_and_large_sources(spark, monkeypatch) -> None:
    assert merge._key_prune_condition(_source(spark, T.DoubleType(), [1.5]), "k") is None
    monkeypatch.setattr(merge, "KEY_PRUNE_LIMIT", 2)
    assert merge._key_prune_condition(_source(spark, T.LongType(), [1, 2, 3]), "k") is None
