"""Spec expressions: refused constructs (SpecError naming field and construct) and per-row failures.

The deny list itself (``refused_construct``, ``parse_row_failure``) is tested without Spark; the rest
analyses expressions against a tiny empty probe (no job) and runs a handful of one-row jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_fkjoin.engine.core.errors import InputDataError, SpecError
from airflow_provider_fkjoin.engine.runtime.expressions import (
    CONSTRUCTS,
    _text_construct,
    check_expressions,
    input_data_error,
    parse_row_failure,
    plan_text_classes,
    refused_construct,
    row_errors,
    schema_probe,
)
from airflow_provider_fkjoin.engine.runtime.expressions import (
    _registries as _function_classes_cache,
)
from airflow_provider_fkjoin.engine.runtime.internals import analysed_node_classes

LEFT_SCHEMA = "id INT, s STRING, z INT, d DATE, ts TIMESTAMP, xs ARRAY<INT>"
RIGHT_SCHEMA = "id INT, v STRING, m MAP<STRING, INT>"


@pytest.fixture(scope="module")
def probe(spark: SparkSession) -> DataFrame:
    left = spark.createDataFrame([], LEFT_SCHEMA)
    right = spark.createDataFrame([], RIGHT_SCHEMA)
    return schema_probe(spark, {"l": left.schema, "r": right.schema})


@pytest.fixture(scope="module")
def rows(spark: SparkSession) -> DataFrame:
    """One left row whose string does not parse as a number and whose divisor is zero.

    Built in the JVM (no Python worker to start) and not foldable, so the failure happens in a task.
    """
    return (
        spark.range(1)
        .selectExpr(
            "CAST(id + 1 AS INT) AS id",
            "IF(id = 0, 'abc', NULL) AS s",
            "CAST(id AS INT) AS z",
            "CAST(NULL AS DATE) AS d",
            "CAST(NULL AS TIMESTAMP) AS ts",
            "array(1, 2) AS xs",
        )
        .alias("l")
    )


@pytest.fixture(scope="module")
def session_functions(spark: SparkSession) -> Iterator[None]:
    """A Python UDF, a SQL function and a session variable, as a user could define them in the session."""
    spark.udf.register("fkjoin_test_py_udf", lambda x: x, "int")
    spark.sql("CREATE OR REPLACE TEMPORARY FUNCTION fkjoin_test_sql_fn(x INT) RETURNS INT RETURN x + 1")
    spark.sql("DECLARE OR REPLACE VARIABLE fkjoin_test_var INT DEFAULT 1")
    yield
    spark.sql("DROP TEMPORARY FUNCTION IF EXISTS fkjoin_test_py_udf")
    spark.sql("DROP TEMPORARY FUNCTION IF EXISTS fkjoin_test_sql_fn")
    spark.sql("DROP TEMPORARY VARIABLE IF EXISTS fkjoin_test_var")


# --------------------------------------------------------------------------------------------------------
# refused_construct: the deny list on class names, no Spark
# --------------------------------------------------------------------------------------------------------

ROW_LEVEL = {"Project", "Alias", "AttributeReference", "Literal"}


@pytest.mark.parametrize(
    ("classes", "word"),
    [
        ({"ScalarSubquery", "Subquery"}, "subquery"),
        ({"InSubquery", "ListQuery", "Subquery"}, "subquery"),
        ({"Exists", "Subquery"}, "subquery"),
        ({"LateralSubquery"}, "subquery"),
        ({"LogicalRelation", "ScalarSubquery", "Subquery"}, "table or file read"),
        ({"DataSourceV2Relation"}, "table or file read"),
        ({"UnresolvedRelation"}, "table or file read"),
        ({"Range"}, "table or file read"),
        ({"CallMethodViaReflection"}, "reflection"),
        ({"CallMethodViaReflection", "TryReflect"}, "reflection"),
        ({"ScriptTransformation", "ScalarSubquery", "Subquery"}, "script"),
        ({"HiveScriptTransformation"}, "script"),
        ({"Generate", "Explode"}, "generator"),
        ({"Generate", "Stack"}, "generator"),
        ({"Generate", "JsonTuple"}, "generator"),
        ({"UserDefinedGenerator"}, "user-defined function"),
        ({"Window", "WindowExpression", "Rank"}, "window function"),
        ({"Aggregate", "AggregateExpression", "Sum"}, "aggregate"),
        ({"Rand"}, "non-deterministic"),
        ({"Randn"}, "non-deterministic"),
        ({"Uuid"}, "non-deterministic"),
        ({"Shuffle"}, "non-deterministic"),
        ({"MonotonicallyIncreasingID"}, "non-deterministic"),
        ({"SparkPartitionID"}, "non-deterministic"),
        ({"InputFileName"}, "non-deterministic"),
        ({"InputFileBlockStart"}, "non-deterministic"),
        ({"InputFileBlockLength"}, "non-deterministic"),
        ({"RandomSomethingNew"}, "non-deterministic"),
        ({"CurrentTimestamp"}, "time- or session-dependent"),
        ({"Now"}, "time- or session-dependent"),
        ({"CurrentDate"}, "time- or session-dependent"),
        ({"LocalTimestamp"}, "time- or session-dependent"),
        ({"CurrentTimeZone"}, "time- or session-dependent"),
        ({"CurrentUser"}, "time- or session-dependent"),
        ({"CurrentDatabase"}, "time- or session-dependent"),
        ({"CurrentCatalog"}, "time- or session-dependent"),
        ({"CurrentBatchTimestamp"}, "non-deterministic"),
        ({"VariableReference"}, "time- or session-dependent"),
        ({"PythonUDF"}, "user-defined function"),
        ({"ScalaUDF"}, "user-defined function"),
        ({"PythonUDAF", "AggregateExpression", "Aggregate"}, "user-defined function"),
        ({"HiveGenericUDF"}, "user-defined function"),
        ({"HiveSimpleUDF"}, "user-defined function"),
        ({"SQLScalarFunction"}, "user-defined function"),
        ({"SQLFunctionExpression"}, "user-defined function"),
        ({"Filter", "PreciseTimestampConversion"}, "row filter"),
    ],
)
def test_refused_construct_names_it(classes: set[str], word: str) -> None:
    found = refused_construct(ROW_LEVEL | classes, {"LogicalRDD", "SubqueryAlias", "Join"}, "expr")
    assert found is not None
    assert word in found
    # The class that gave it away is named, for whoever has to read Spark's plan.
    assert any(name in found for name in classes)


@pytest.mark.parametrize(
    "classes",
    [
        {"Add", "Multiply", "Cast", "CaseWhen", "Coalesce", "Concat"},
        {"ArrayTransform", "LambdaFunction", "NamedLambdaVariable"},
        {"ArrayAggregate", "ArrayExists", "ArrayFilter"},  # names overlap the deny list, but not the rule
        {"SubqueryAlias"},  # the join's own aliases, not a subquery
        {"CurrentRow", "Murmur3Hash", "XxHash64", "Sha2"},
        {"CreateMap", "CreateNamedStruct", "CreateArray", "GetStructField"},
        {"StaticInvoke", "Invoke"},  # how Spark implements some built-in functions
        {"SomeCatalystClassOfTomorrow"},  # allow by default
    ],
)
def test_refused_construct_allows_row_level_classes(classes: set[str]) -> None:
    assert refused_construct(ROW_LEVEL | classes, {"LogicalRDD"}, "expr") is None


def test_reads_and_filters_count_only_when_the_expression_adds_them() -> None:
    assert refused_construct(ROW_LEVEL | {"Range"}, {"Range", "Join"}, "l.id") is None
    assert refused_construct(ROW_LEVEL | {"Filter"}, {"Filter", "LogicalRelation"}, "l.id") is None
    assert refused_construct(ROW_LEVEL | {"LogicalRelation"}, {"LogicalRDD"}, "l.id") is not None
    # Everything else counts wherever it is: a probe's aggregate would hide an expression's.
    assert refused_construct(ROW_LEVEL | {"Aggregate"}, {"Aggregate"}, "l.id") is not None


def test_most_specific_construct_wins() -> None:
    found = refused_construct({"ScriptTransformation", "ScalarSubquery", "Subquery", "Aggregate"}, set(), "e")
    assert found is not None and found.startswith("a script")
    found = refused_construct({"PythonUDF", "Rand"}, set(), "e")
    assert found is not None and found.startswith("a user-defined function")


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("l._metadata.file_path", "_metadata"),
        ("l.`_metadata`.row_index", "_metadata"),
        ("upper(_METADATA.file_name)", "_metadata"),
        ("(select 1)", "subquery"),
        ("l.id IN (SELECT id FROM t)", "subquery"),
        ("(SELECT max(a) FROM (SELECT TRANSFORM(id) USING 'cat' AS (a) FROM range(1)))", "script"),
        ("(SELECT MAP(id, concat(id, 'x')) USING '/bin/sh' FROM range(1))", "script"),
        ("(SELECT map('a', 1) FROM t JOIN u USING (k))", "subquery"),
    ],
)
def test_refused_construct_reads_the_text(text: str, word: str) -> None:
    found = refused_construct(ROW_LEVEL, ROW_LEVEL, text)
    assert found is not None and word in found


@pytest.mark.parametrize(
    "text",
    [
        "concat(l.s, '_metadata')",
        'concat(l.s, "SELECT")',
        "l.`select` + 1",
        "l.my_metadata",
        "transform(l.xs, x -> x + 1)",
        "trim(BOTH 'x' FROM l.s)",
        "l.select + 1",
        "l.a -- SELECT 1 in a comment",
    ],
)
def test_refused_construct_ignores_literals_and_identifiers(text: str) -> None:
    assert refused_construct(ROW_LEVEL, ROW_LEVEL, text) is None


def test_every_construct_says_why_and_what_to_do() -> None:
    for construct in CONSTRUCTS:
        assert construct.name and construct.why and construct.fix


# --------------------------------------------------------------------------------------------------------
# check_expressions: analysed against the live schemas, no job
# --------------------------------------------------------------------------------------------------------

REFUSED = [
    ("(SELECT max(id) FROM range(3))", "subquery"),
    ("l.id IN (SELECT id FROM range(3))", "subquery"),
    ("EXISTS (SELECT 1)", "subquery"),
    ("(SELECT count(*) FROM delta.`/tmp/x`)", "subquery"),
    ("(SELECT count(*) FROM read_files('/etc'))", "subquery"),
    ("l.id IN (TABLE some_table)", "subquery"),
    ("EXISTS (VALUES (1))", "subquery"),
    ("(WITH x AS (SELECT 1 AS a) TABLE x)", "subquery"),
    ("l.id IN (FROM range(3))", "table or file read"),
    ("reflect('java.lang.System', 'getenv', 'HOME')", "reflection"),
    ("java_method('java.lang.System', 'getenv', 'HOME')", "reflection"),
    ("try_reflect('java.lang.System', 'getenv', 'HOME')", "reflection"),
    ("(SELECT max(a) FROM (SELECT TRANSFORM(id) USING 'cat' AS (a) FROM range(1)))", "script"),
    ("explode(l.xs)", "generator"),
    ("explode_outer(array(1, 2))", "generator"),
    ("posexplode(l.xs)", "generator"),
    ("inline(array(struct(l.id, r.v)))", "generator"),
    ("stack(2, l.id, r.id)", "generator"),
    ("json_tuple(l.s, 'a')", "generator"),
    ("rank() OVER (PARTITION BY l.s ORDER BY l.id)", "window function"),
    ("lag(l.id) OVER (ORDER BY l.id)", "window function"),
    ("sum(l.id)", "aggregate"),
    ("count(*)", "aggregate"),
    ("rand()", "non-deterministic"),
    ("randn(7)", "non-deterministic"),
    ("uuid()", "non-deterministic"),
    ("shuffle(l.xs)", "non-deterministic"),
    ("input_file_name()", "non-deterministic"),
    ("monotonically_increasing_id()", "non-deterministic"),
    ("spark_partition_id()", "non-deterministic"),
    ("current_timestamp()", "time- or session-dependent"),
    ("now()", "time- or session-dependent"),
    ("current_date()", "time- or session-dependent"),
    ("date_add(current_date(), 1)", "time- or session-dependent"),
    ("unix_timestamp()", "time- or session-dependent"),
    ("current_user()", "time- or session-dependent"),
    ("current_database()", "time- or session-dependent"),
    ("l._metadata.file_path", "_metadata"),
    ("window(l.ts, '1 hour')", "row filter"),
]


@pytest.mark.parametrize(("text", "word"), REFUSED)
def test_refused_expression_is_a_spec_error(probe: DataFrame, text: str, word: str) -> None:
    with pytest.raises(SpecError) as info:
        check_expressions(probe, {"columns.fine": "l.id + 1", "columns.bad": text})
    message = str(info.value)
    assert message.startswith("columns.bad: ")
    assert repr(text) in message
    assert word in message
    assert "columns.fine" not in message


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("fkjoin_test_py_udf(l.id)", "user-defined function"),
        ("fkjoin_test_sql_fn(l.id)", "user-defined function"),
        ("l.id + fkjoin_test_var", "session-dependent"),
    ],
)
@pytest.mark.usefixtures("session_functions")
def test_session_defined_functions_are_refused(probe: DataFrame, text: str, word: str) -> None:
    with pytest.raises(SpecError, match=r"^foreign_key\.expr\[0\]: ") as info:
        check_expressions(probe, {"foreign_key.expr[0]": text})
    assert word in str(info.value)


ALLOWED = [
    "l.id * 2 + r.id",
    "CASE WHEN l.z > 0 THEN 'pos' ELSE 'neg' END",
    "CAST(l.id AS STRING)",
    "try_cast(l.s AS INT)",
    "coalesce(r.v, l.s, 'none')",
    "concat(l.s, '-', r.v)",
    "upper(l.s)",
    "lower(r.v)",
    "regexp_replace(l.s, '[0-9]+', '#')",
    "transform(array(l.id, r.id), x -> x + 1)",
    "filter(l.xs, x -> x > 1)",
    "aggregate(l.xs, 0, (acc, x) -> acc + x)",
    "map('a', l.id, 'b', r.id)",
    "r.m['a']",
    "struct(l.id AS id, r.v AS v)",
    "named_struct('id', l.id)",
    "date_add(l.d, 7)",
    "l.ts + INTERVAL 1 DAY",
    "date_trunc('hour', l.ts)",
    "datediff(l.d, DATE'2024-01-01')",
    "xxhash64(l.id, r.id)",
    "sha2(concat_ws('|', l.s, r.v), 256)",
    "l.id IN (1, 2, 3)",
    "concat(l.s, ' SELECT _metadata')",
]


def test_allowed_expressions_return_their_columns(probe: DataFrame) -> None:
    expressions = {f"columns.c{i}": text for i, text in enumerate(ALLOWED)}
    columns = check_expressions(probe, expressions)
    assert list(columns) == list(expressions)
    assert all(isinstance(column, Column) for column in columns.values())
    # The columns are the parsed expressions, ready for the caller's projection.
    named = probe.select(*[column.alias(field) for field, column in columns.items()])
    assert named.columns == list(expressions)


def test_parse_and_analysis_failures_name_the_field(probe: DataFrame) -> None:
    with pytest.raises(SpecError, match=r"^columns\.broken: \[PARSE_SYNTAX_ERROR\]"):
        check_expressions(probe, {"columns.broken": "l.id +"})
    with pytest.raises(SpecError, match=r"^key_mapper\.expr\[1\]: \[UNRESOLVED_COLUMN"):
        check_expressions(probe, {"key_mapper.expr[1]": "l.nope"})


def test_reads_of_the_probe_itself_are_its_baseline(spark: SparkSession) -> None:
    # A probe over a relation (as a Delta read is) does not make every expression a "table read".
    probe = spark.range(0).alias("l")
    assert set(check_expressions(probe, {"columns.x": "l.id + 1"})) == {"columns.x"}


def test_a_probe_with_a_plan_of_its_own_is_refused(spark: SparkSession) -> None:
    # A changelog source's rows are an aggregation: analysed against them, an aggregate would go unseen.
    rows = spark.createDataFrame([], LEFT_SCHEMA).groupBy("id").agg(F.max("s").alias("s")).alias("l")
    with pytest.raises(ValueError, match="schema_probe"):
        check_expressions(rows, {"columns.x": "l.s"})


def test_schema_probe_has_the_sides_columns_under_their_aliases(probe: DataFrame) -> None:
    assert probe.columns == ["id", "s", "z", "d", "ts", "xs", "id", "v", "m"]
    assert probe.select("l.id", "r.id", "r.m").columns == ["id", "id", "m"]


# --------------------------------------------------------------------------------------------------------
# Per-row failures
# --------------------------------------------------------------------------------------------------------


def test_bad_cast_names_the_field_and_the_value(rows: DataFrame) -> None:
    with pytest.raises(InputDataError) as info, row_errors({"columns.n": "CAST(l.s AS INT)"}):
        rows.select(F.expr("CAST(l.s AS INT)").alias("n")).collect()
    message = str(info.value)
    assert message.startswith("columns.n ")
    assert "'abc'" in message
    assert "CAST_INVALID_INPUT" in message
    assert "try_cast" in message


def test_divide_by_zero_names_the_field(rows: DataFrame) -> None:
    expressions = {"columns.ok": "l.id + 1", "columns.ratio": "l.id / l.z"}
    with pytest.raises(InputDataError) as info, row_errors(expressions):
        rows.select(*[F.expr(text).alias(field) for field, text in expressions.items()]).collect()
    message = str(info.value)
    assert message.startswith("columns.ratio ")
    assert "columns.ok" not in message
    assert "DIVIDE_BY_ZERO" in message
    assert "try_divide" in message


def test_the_failing_part_of_a_larger_expression_finds_its_field(rows: DataFrame) -> None:
    expressions = {"columns.a": "upper(l.s)", "columns.n": "coalesce(CAST(l.s AS INT), 0) * 2"}
    with pytest.raises(InputDataError, match=r"^columns\.n \(expression") as info, row_errors(expressions):
        rows.select(*[F.expr(text).alias(field) for field, text in expressions.items()]).collect()
    assert "columns.a" not in str(info.value)


def test_bad_value_in_a_delta_write_is_an_input_data_error(rows: DataFrame, tmp_path: Path) -> None:
    expressions = {"columns.n": "CAST(l.s AS INT)"}
    frame = rows.select(F.expr("CAST(l.s AS INT)").alias("n"))
    with pytest.raises(InputDataError, match=r"^columns\.n .*'abc'"), row_errors(expressions):
        frame.write.format("delta").save(str(tmp_path / "out"))


def test_other_errors_pass_through_unchanged(rows: DataFrame) -> None:
    original = ValueError("not a row")
    with pytest.raises(ValueError) as info, row_errors({"columns.n": "CAST(l.s AS INT)"}):
        raise original
    assert info.value is original
    with pytest.raises(Exception, match="UNRESOLVED_COLUMN") as spark_info, row_errors({"columns.n": "l.x"}):
        rows.select(F.expr("l.x")).collect()
    assert not isinstance(spark_info.value, InputDataError)


JOB_ABORTED = (
    "An error occurred while calling o123.save.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 "
    "times, most recent failure: Lost task 0.0 (TID 3): org.apache.spark.SparkException: "
    "[TASK_WRITE_FAILED] Task failed while writing rows to file:/w/out. SQLSTATE: 58030\n"
    "Caused by: org.apache.spark.SparkNumberFormatException: [CAST_INVALID_INPUT] The value 'x17' of the "
    'type "STRING" cannot be cast to "BIGINT" because it is malformed. SQLSTATE: 22018\n'
    "== SQL (line 1, position 10) ==\n"
    "coalesce(CAST(l.code AS BIGINT), 0)\n"
    "         ^^^^^^^^^^^^^^^^^^^^^^\n"
    "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.invalidInputInCastToNumberError(...)\n"
)


def test_parse_row_failure_reads_a_wrapped_error() -> None:
    failure = parse_row_failure(JOB_ABORTED)
    assert failure is not None
    assert failure.condition == "CAST_INVALID_INPUT"
    assert failure.sqlstate == "22018"
    assert failure.fragments == ("CAST(l.code AS BIGINT)",)
    assert failure.sample == "'x17'"
    assert failure.summary.startswith("The value 'x17'")


@pytest.mark.parametrize(
    ("text", "condition", "sample"),
    [
        ("[DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012", "DIVIDE_BY_ZERO", "0 (the divisor)"),
        ("[ARITHMETIC_OVERFLOW] overflow. SQLSTATE: 22003", "ARITHMETIC_OVERFLOW", None),
        (
            "[INVALID_ARRAY_INDEX] The index 6 is out of bounds. The array has 2 elements. SQLSTATE: 22003",
            "INVALID_ARRAY_INDEX",
            "6",
        ),
        (
            "[CANNOT_PARSE_TIMESTAMP] Text 'abc' could not be parsed at index 0. SQLSTATE: 22007",
            "CANNOT_PARSE_TIMESTAMP",
            "'abc'",
        ),
        (
            "[NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION]  1000 cannot be represented as Decimal(3, 1).",
            "NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION",
            "1000",
        ),
        ("[SOME_FUTURE_DATA_ERROR] Bad. SQLSTATE: 22999", "SOME_FUTURE_DATA_ERROR", None),
    ],
)
def test_parse_row_failure_conditions(text: str, condition: str, sample: str | None) -> None:
    failure = parse_row_failure(text)
    assert failure is not None
    assert (failure.condition, failure.sample) == (condition, sample)


@pytest.mark.parametrize(
    "text",
    [
        "[TABLE_OR_VIEW_NOT_FOUND] The table cannot be found. SQLSTATE: 42P01",
        "[DELTA_CONCURRENT_APPEND] Files were added. SQLSTATE: 2D521",
        "java.io.IOException: disk full",
    ],
)
def test_parse_row_failure_ignores_other_errors(text: str) -> None:
    assert parse_row_failure(text) is None


class FakePy4JJavaError(Exception):
    """Stands for py4j's error, which reaches Python as text only (its module is what row_errors checks)."""


FakePy4JJavaError.__module__ = "py4j.protocol"


def test_an_error_wrapped_as_text_is_explained() -> None:
    expressions = {"columns.code": "coalesce(CAST(l.code AS BIGINT), 0)", "columns.other": "CAST(l.a AS INT)"}
    with pytest.raises(InputDataError) as info, row_errors(expressions):
        raise FakePy4JJavaError(JOB_ABORTED)
    message = str(info.value)
    assert message.startswith("columns.code ")
    assert "columns.other" not in message
    assert "'x17'" in message


def test_without_a_fragment_every_candidate_field_is_named() -> None:
    error = input_data_error(
        FakePy4JJavaError("[CAST_OVERFLOW] The value 10000000000L of the type ... SQLSTATE: 22003"),
        {"columns.a": "CAST(l.big AS INT)", "columns.b": "l.x::INT", "columns.c": "upper(l.s)"},
    )
    assert error is not None
    message = str(error)
    assert message.startswith("one of columns.a ")
    assert "columns.b" in message
    assert "columns.c" not in message  # no cast there
    assert "10000000000L" in message


# --------------------------------------------------------------------------------------------------------
# Spark Connect's reading (plan text and function registry) gives the same verdicts as the plan itself
# --------------------------------------------------------------------------------------------------------


def _verdict(probe: DataFrame, text: str, classes_of: Callable[[DataFrame, str], set[str]]) -> str | None:
    """The construct ``check_expressions`` would name for ``text`` (its first words), read one way."""
    frame = probe.select(F.expr(text))
    construct = refused_construct(classes_of(frame, text), classes_of(probe, ""), text)
    return None if construct is None else construct.split(" (", 1)[0]


def _from_the_plan(frame: DataFrame, _text: str) -> set[str]:
    return analysed_node_classes(frame)


@pytest.mark.parametrize(
    "text",
    [text for text, _ in REFUSED if _text_construct(text) is None]
    + ALLOWED
    + [
        "concat('rand()', l.s)",  # a call only inside a string literal
        "concat(l.s, 'current_timestamp()')",
        "transform(l.xs, user -> user + 1)",  # a lambda variable named like a function
        "unix_timestamp(l.ts)",
        "`rand`(1) IS NULL OR true",
    ],
)
def test_the_connect_reading_agrees_with_the_analysed_plan(probe: DataFrame, text: str) -> None:
    """``plan_text_classes`` (public APIs, what Spark Connect allows) against ``analysed_node_classes``
    (the analysed plan's own classes, through py4j), on every expression these tests refuse or allow."""
    try:
        probe.select(F.expr(text)).schema  # noqa: B018 - the expressions analysis rejects have no verdict
    except Exception:
        pytest.skip("fails analysis: a SpecError either way")
    assert _verdict(probe, text, plan_text_classes) == _verdict(probe, text, _from_the_plan)


@pytest.mark.parametrize("text", ["fkjoin_test_py_udf(l.id)", "fkjoin_test_sql_fn(l.id)"])
@pytest.mark.usefixtures("session_functions")
def test_the_connect_reading_refuses_session_functions(probe: DataFrame, text: str) -> None:
    _function_classes_cache.clear()  # the registry now holds the session's functions
    assert _verdict(probe, text, plan_text_classes) == "a user-defined function"
