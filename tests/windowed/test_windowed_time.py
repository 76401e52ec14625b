"""The stream-mode windowed join's time filter on the input's own column equals the rule on milliseconds.

``time_at_least`` lets Delta skip files when the join reads an input's retention window; it must keep
exactly the rows whose event time in epoch milliseconds is at or after the floor, for every time type.
The oracle is plain Python arithmetic on the same values, not the engine's ``epoch_ms``.
"""

from __future__ import annotations

import datetime as dt

from hypothesis import example, given
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_provider_fkjoin.engine.kinds.windowed.stream import epoch_ms, time_at_least

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
DAY_MS = 86_400_000

micros = st.integers(min_value=-(10**15), max_value=4 * 10**15)
days = st.integers(min_value=-20_000, max_value=40_000)
millis = st.integers(min_value=-(10**12), max_value=4 * 10**12)


def _timestamp_ms(value: dt.datetime) -> int:
    delta = value - EPOCH
    return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) // 1000


def _check(spark, data_type: T.DataType, values: list, oracle_ms: list[int], floors: list[int]) -> None:
    """``time_at_least`` per floor, and ``epoch_ms`` itself, against the Python milliseconds."""
    schema = T.StructType([T.StructField("i", T.IntegerType()), T.StructField("t", data_type)])
    frame = spark.createDataFrame(list(enumerate(values)), schema)
    kept = frame.select(
        "i",
        epoch_ms(F.col("t"), data_type).alias("ms"),
        *[time_at_least(F.col("t"), data_type, floor).alias(f"f{n}") for n, floor in enumerate(floors)],
    ).collect()
    by_index = {row["i"]: row for row in kept}
    for index, ms in enumerate(oracle_ms):
        row = by_index[index]
        assert row["ms"] == ms, (data_type, values[index])
        assert [row[f"f{n}"] for n in range(len(floors))] == [ms >= floor for floor in floors], (
            data_type,
            values[index],
            ms,
            floors,
        )


def _floors_near(ms_values: list[int], offsets: list[int]) -> list[int]:
    """Floors at, just above and just below the values themselves, plus arbitrary ones."""
    near = [ms + delta for ms in ms_values[:3] for delta in (-1, 0, 1)]
    return near + offsets


@given(values=st.lists(micros, min_size=1, max_size=12, unique=True), offsets=st.lists(millis, max_size=4))
@example(values=[0, -1000, -1, 1_700_000_000_123_000, 1_700_000_000_123_999], offsets=[])
@example(values=[2**44 * 1000 + 999, 2**50 + 999_999], offsets=[2**44])
def test_timestamp_floor_matches_milliseconds(spark, values, offsets):
    stamps = [EPOCH + dt.timedelta(microseconds=v) for v in values]
    oracle = [_timestamp_ms(s) for s in stamps]
    _check(spark, T.TimestampType(), stamps, oracle, _floors_near(oracle, offsets))


@given(values=st.lists(days, min_size=1, max_size=12, unique=True), offsets=st.lists(millis, max_size=4))
def test_date_floor_matches_milliseconds(spark, values, offsets):
    dates = [dt.date(1970, 1, 1) + dt.timedelta(days=d) for d in values]
    oracle = [d * DAY_MS for d in values]
    # floors inside a day: a date at midnight is before any floor later that day
    floors = [*_floors_near(oracle, offsets), oracle[0] + DAY_MS // 2, oracle[0] - DAY_MS // 2]
    _check(spark, T.DateType(), dates, oracle, floors)


@given(values=st.lists(millis, min_size=1, max_size=12, unique=True), offsets=st.lists(millis, max_size=4))
def test_epoch_ms_floor_matches_milliseconds(spark, values, offsets):
    _check(spark, T.LongType(), values, values, _floors_near(values, offsets))


def test_int_floor_beyond_int_range(spark):
    values = [-5, 0, 7, 2_147_483_647]
    _check(spark, T.IntegerType(), values, values, [-(2**40), -5, 8, 2_147_483_647, 2**40])
