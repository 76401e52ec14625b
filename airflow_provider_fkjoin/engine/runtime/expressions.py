"""Spec expressions are pure row-level SQL: refused before a refresh if not, explained if a row fails.

Why: a refresh recomputes only the output rows its input changes touch, and promises that the output then
equals a join computed from scratch (``docs/concepts/semantics.md``: consistent snapshots, safe by
construction). That holds only if every spec expression (``columns``, ``foreign_key.expr``,
``key_mapper.expr``...) is a function of the joined row alone. So :func:`check_expressions` parses and
analyses each one against the join's schemas (analysis only: no job runs) and refuses, with a
:class:`SpecError` naming the field, the expression, the construct and what to do, any expression whose
analysed plan holds one of these constructs. Everything else is allowed: arithmetic, ``CASE``, casts,
string/date/map/array/struct functions, lambdas (``transform``, ``filter``, ``aggregate`` over a row's own
array)...

=================================  ========================================================================
construct: found by                why it is refused
=================================  ========================================================================
``_metadata`` column:              file path, row index... change when the table is compacted or
the name outside string literals   rewritten, not when the row does
script (``TRANSFORM ... USING``):  runs an operating-system command on the workers
``*ScriptTransformation*``, text
JVM reflection: ``*Reflect*``      ``reflect``/``java_method``/``try_reflect`` call any Java method
(``CallMethodViaReflection``...)   (environment, files, network) on the workers
user-defined function:             its code lives outside the spec: it can change between refreshes and
``*UDF``, ``*UDAF``, ``*UDTF``,    do anything (Python, Scala, Hive UDFs; SQL functions; catalog
``SQL*Function*``, ...             functions)
table or file read: a relation     reads data outside the join's inputs, whose changes never trigger a
the probe lacks (``*Relation``,    refresh
``Range``, ``LogicalRDD``...)
subquery: ``*Subquery*`` (not      reads beyond the current row (other rows, tables, files), which an
``SubqueryAlias``), ``Exists``,    incremental refresh does not see; refused from the text (``SELECT``,
``ListQuery``; text: ``SELECT``    ``(TABLE``, ``(VALUES``, ``(WITH``) before Spark resolves the tables
                                   it names
generator: ``Generate``,           turns one row into several or none, and the output holds one row per
``Explode``, ``Stack``...          key
window function: ``Window``,       an incremental refresh computes it over the affected rows only, so the
``WindowExpression``               output drifts from a recompute
aggregate: ``Aggregate``,          the same: computed over the affected rows only
``AggregateExpression``
non-deterministic function:        a recomputed row changes although its inputs did not: ``rand``,
``Rand*``, ``Uuid``, ``Shuffle``,  ``uuid``, ``shuffle``, ``monotonically_increasing_id``,
``InputFileName``...               ``spark_partition_id``, ``input_file_name``...
time or session dependent:         depends on when, where or by whom the refresh runs, not on the row:
``Current*`` (not ``CurrentRow``), ``current_timestamp``, ``now``, ``current_date``, ``current_user``,
``Now``, ``LocalTimestamp``,       ``current_database``, ``version``, session variables...
``VariableReference``...
row filter: a ``Filter``,          drops or duplicates rows (``window()`` drops rows whose time is null),
``Expand``, ``Sample`` the probe   so output rows silently vanish
lacks
=================================  ========================================================================

The deny list is on class *names* (:func:`refused_construct`, a pure function) so it is testable without
Spark and survives Catalyst reshuffling its class hierarchy; the probe's own classes are the baseline for
the constructs that only count when the expression adds them (reads, filters). On classic Spark the names
come from the analysed plan itself (:func:`.internals.analysed_node_classes`, through py4j). Spark Connect
has no py4j and no plan in JSON, so there (:func:`plan_text_classes`) they come from the analysed plan's
text (its nodes: ``Project``, ``Window``, ``Generate``, ``Aggregate``, subqueries) and from the function
registry (``spark.catalog.listFunctions``: the class of every function the expression's text calls, string
literals and comments left out; a function not built into Spark counts as a user-defined one).

Per-row failures are the other half: an ANSI cast or division can fail on one bad value deep inside a
refresh. :func:`row_errors` turns Spark's runtime error into an :class:`InputDataError` naming the spec field
whose expression failed, the error condition, a sample value and the fix (``try_cast``, ``try_divide``...).

    >>> probe = schema_probe(spark, {"l": orders.schema, "r": customers.schema})
    >>> columns = check_expressions(probe, {"columns.total": "l.qty * l.price"})
    >>> check_expressions(probe, {"columns.rk": "rank() OVER (ORDER BY l.amount)"})
    SpecError: columns.rk: expression 'rank() OVER (ORDER BY l.amount)' uses a window function ...
    >>> with row_errors({"columns.n": "CAST(l.s AS INT)"}):
    ...     frame.write.format("delta").save(path)
    InputDataError: columns.n (expression 'CAST(l.s AS INT)'): a row failed with CAST_INVALID_INPUT (sample
    value: 'abc'): The value 'abc' of the type "STRING" cannot be cast to "INT" ...; fix the data, or use
    try_cast(... AS <type>) in the expression to turn bad values into null
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException, ParseException, PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..core.errors import InputDataError, SpecError
from .internals import analysed_node_classes
from .session import is_connect


def analysed(what: str, build: Any) -> Any:
    """Run Spark analysis of user SQL and turn its failure into a SpecError naming the field."""
    try:
        return build()
    except (AnalysisException, ParseException) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError(f"{what}: {first[:300]}") from None


# --------------------------------------------------------------------------------------------------------
# Refused constructs: a deny list on Catalyst class names (allow by default)
# --------------------------------------------------------------------------------------------------------

_SUBQUERIES = frozenset(
    {
        "Subquery",
        "ScalarSubquery",
        "Exists",
        "ListQuery",
        "InSubquery",
        "LateralSubquery",
        "DynamicPruningSubquery",
    }
)
_GENERATORS = frozenset(
    {"Generate", "Explode", "PosExplode", "Inline", "Stack", "JsonTuple", "VariantExplode", "ReplicateRows"}
)
_WINDOWS = frozenset({"Window", "WindowExpression", "WindowSpecDefinition", "WindowGroupLimit"})
_AGGREGATES = frozenset({"Aggregate", "AggregateExpression", "Pivot", "GroupingSets"})
_NON_DETERMINISTIC = frozenset(
    {
        "Rand",
        "Randn",
        "RandStr",
        "Uniform",
        "Uuid",
        "Shuffle",
        "MonotonicallyIncreasingID",
        "SparkPartitionID",
        "InputFileName",
        "InputFileBlockStart",
        "InputFileBlockLength",
        "CurrentBatchTimestamp",
    }
)
_SESSION_DEPENDENT = frozenset(
    {"Now", "LocalTimestamp", "SparkVersion", "VariableReference", "VariableValue"}
)
_RELATIONS = frozenset(
    {"Range", "LogicalRDD", "ExternalRDD", "UnresolvedRelation", "UnresolvedTableValuedFunction", "View"}
)
_ROW_FILTERS = frozenset({"Filter", "Expand", "Sample"})


def _is_udf(name: str) -> bool:
    return (
        name.endswith(("UDF", "UDAF", "UDTF"))
        or "UserDefined" in name
        or (name.startswith("Hive") and ("UDF" in name or "UDAF" in name or "UDTF" in name))
        or (name.startswith("SQL") and "Function" in name)
        or name in {"ApplyFunctionExpression", "ScalaAggregator"}
    )


def _is_relation(name: str) -> bool:
    return name in _RELATIONS or (name.endswith("Relation") and name != "OneRowRelation")


@dataclass(frozen=True)
class Construct:
    """One refused construct: how to spot it in an analysed plan's class names, why it is refused, the fix.

    ``added_only`` constructs count only when the expression adds them to the probe's own plan (a read or a
    filter the probe already has is the join's input, not the expression's doing).
    """

    name: str
    why: str
    fix: str
    matches: Callable[[str], bool]
    added_only: bool = False


_DRIFTS = (
    "an incremental refresh computes it over the affected rows only, so the output drifts from a recompute"
)

#: The refused constructs, most specific first: the first one an expression holds is the one reported.
CONSTRUCTS: tuple[Construct, ...] = (
    Construct(
        "a script (TRANSFORM ... USING)",
        "it runs an operating-system command on the workers",
        "compute the value in SQL, or in a job downstream of the output",
        lambda n: "ScriptTransformation" in n,
    ),
    Construct(
        "a JVM reflection call (reflect/java_method/try_reflect)",
        "it can call any Java method on the workers (environment, files, network)",
        "use built-in SQL functions",
        lambda n: "Reflect" in n,
    ),
    Construct(
        "a user-defined function",
        "its code lives outside the spec, so it can change between refreshes and do anything",
        "write its logic with built-in SQL functions in the expression",
        _is_udf,
    ),
    Construct(
        "a table or file read",
        "it reads data outside the join's inputs, whose changes never trigger a refresh",
        "make that table an input of a join, or compute the value in a query downstream of the output",
        _is_relation,
        added_only=True,
    ),
    Construct(
        "a subquery",
        "it reads beyond the current row (other rows, tables or files), which an incremental refresh "
        "does not see",
        "use a row-level expression over the join's columns, or compute the value in a downstream query",
        lambda n: n in _SUBQUERIES or ("Subquery" in n and n != "SubqueryAlias"),
    ),
    Construct(
        "a generator",
        "explode, posexplode, inline, stack, json_tuple... turn one row into several or none, and the output "
        "holds one row per key",
        "keep the array in one column (transform(), filter()), or explode it in a downstream query",
        lambda n: n in _GENERATORS or n.endswith("Generator"),
    ),
    Construct(
        "a window function",
        _DRIFTS,
        "compute it in a downstream query over the output",
        lambda n: n in _WINDOWS,
    ),
    Construct(
        "an aggregate function",
        _DRIFTS,
        "aggregate a row's own arrays with aggregate(...), or compute it in a downstream query",
        lambda n: n in _AGGREGATES,
    ),
    Construct(
        "a non-deterministic function",
        "a recomputed row would change although its inputs did not, and a recompute would differ",
        "use a deterministic expression, e.g. xxhash64(...) or sha2(...) of the key instead of rand()/uuid()",
        lambda n: n in _NON_DETERMINISTIC or n.startswith("Rand") or "Random" in n,
    ),
    Construct(
        "a time- or session-dependent function",
        "current_timestamp(), now(), current_date(), current_user(), session variables... depend on when, "
        "where or by whom the refresh runs, not on the row",
        "take the time from a column of the inputs (e.g. updated_at) or write it as a literal",
        lambda n: (n.startswith("Current") and n != "CurrentRow") or n in _SESSION_DEPENDENT,
    ),
    Construct(
        "a row filter",
        "it drops or duplicates rows (window() and session_window() drop rows whose time is null), so output "
        "rows would silently vanish",
        "use date_trunc(...) or a CASE expression to bucket times",
        lambda n: n in _ROW_FILTERS,
        added_only=True,
    ),
)

_METADATA = Construct(
    "the _metadata column",
    "its file path, row index... change when the table is compacted or rewritten, not when the row does",
    "use data columns only (a table column named _metadata must be renamed)",
    lambda n: False,
)
_SCRIPT, _SUBQUERY = CONSTRUCTS[0], CONSTRUCTS[4]

_LITERAL_OR_COMMENT = re.compile(
    r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`]|``)*`|--[^\n]*|/\*.*?\*/", re.DOTALL
)
_METADATA_NAME = re.compile(r"(?<![\w$])_metadata(?![\w$])", re.IGNORECASE)
#: A query inside an expression: SELECT anywhere, or a parenthesis opening TABLE t, VALUES ..., WITH ...
_QUERY = re.compile(r"(?<!\.)\bSELECT\b|\(\s*(?:TABLE|VALUES|WITH)\b", re.IGNORECASE)
_SCRIPT_TEXT = re.compile(r"\b(?:TRANSFORM|MAP|REDUCE)\s*\((?:[^()]|\([^()]*\))*\)\s*USING\b", re.IGNORECASE)


def _code(text: str, *, keep_identifiers: bool) -> str:
    """``text`` without string literals and comments; backquoted identifiers unquoted, or blanked."""

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("`"):
            return f" {token[1:-1].replace('``', '`')} " if keep_identifiers else " _ "
        return " "

    return _LITERAL_OR_COMMENT.sub(replace, text)


def _describe(construct: Construct, found: str) -> str:
    return f"{construct.name} ({found}): {construct.why}; {construct.fix}"


def _text_construct(text: str) -> str | None:
    """Constructs visible in the text itself, checked before Spark analyses anything.

    A subquery is refused from its text so Spark never resolves (and so never touches) the tables it names.
    """
    if _METADATA_NAME.search(_code(text, keep_identifiers=True)):
        return _describe(_METADATA, "_metadata")
    code = _code(text, keep_identifiers=False)
    query = _QUERY.search(code)
    if query:
        if _SCRIPT_TEXT.search(code):
            return _describe(_SCRIPT, "TRANSFORM ... USING")
        return _describe(_SUBQUERY, " ".join(query.group(0).lstrip("(").split()).upper())
    return None


def refused_construct(node_classes: set[str], baseline: set[str], text: str) -> str | None:
    """Which refused construct, if any, an expression holds: ``None`` when it is pure row-level SQL.

    ``node_classes`` are the simple class names of the analysed plan of ``probe.select(expression)``;
    ``baseline`` those of the probe alone (reads and filters it has are the join's inputs); ``text`` the
    expression as written (for what analysis cannot show, such as ``_metadata``). Pure: no Spark.
    Returns "<construct> (<class names>): <why>; <what to do>".

    >>> refused_construct({"Project", "Alias", "Rand"}, {"LogicalRDD"}, "rand()")
    'a non-deterministic function (Rand): a recomputed row would change ...; use a deterministic ...'
    >>> refused_construct({"Project", "Alias", "Add"}, set(), "l.a + 1") is None
    True
    """
    from_text = _text_construct(text)
    if from_text is not None:
        return from_text
    added = node_classes - baseline
    for construct in CONSTRUCTS:
        found = sorted(n for n in (added if construct.added_only else node_classes) if construct.matches(n))
        if found:
            return _describe(construct, ", ".join(found))
    return None


def _baseline_constructs(baseline: set[str]) -> list[str]:
    """Class names in the probe itself that the deny list would refuse in any expression."""
    return sorted(n for n in baseline for c in CONSTRUCTS if not c.added_only and c.matches(n))


# --------------------------------------------------------------------------------------------------------
# Checking a spec's expressions against the join's schemas
# --------------------------------------------------------------------------------------------------------


def schema_probe(spark: SparkSession, sides: Mapping[str, StructType]) -> DataFrame:
    """An empty frame with each side's columns under its alias, joined as a refresh joins them.

    Expressions are analysed against it: it has the live schemas and nothing else (no read, filter or
    aggregation of its own), so whatever Catalyst nodes an expression adds are the expression's. Build
    it from the inputs' schemas rather than from the frames a refresh reads: a changelog source's rows
    are an aggregation, which would hide an aggregate in an expression. Creating it runs no job.

    >>> probe = schema_probe(spark, {"l": left_df.schema, "r": right_df.schema})
    >>> probe.columns
    ['order_id', 'customer_id', ..., 'customer_id', 'tier']
    """
    if not sides:
        raise ValueError("schema_probe needs at least one side")
    frames = [spark.createDataFrame([], schema).alias(alias) for alias, schema in sides.items()]
    probe = frames[0]
    for frame in frames[1:]:
        probe = probe.join(frame, F.lit(False), "left")
    return probe


def _refusal(field: str, text: str, construct: str) -> SpecError:
    return SpecError(f"{field}: expression {text!r} uses {construct}")


_TREE_NODE = re.compile(r"^[\s:|+\-]*([A-Z][A-Za-z0-9]*)\b")
#: How subquery expressions print in a plan's text, and their classes.
_PLAN_MARKERS = {
    "scalar-subquery#": "ScalarSubquery",
    "lateral-subquery#": "LateralSubquery",
    "exists#": "Exists",
    "list#": "ListQuery",
    "dynamicpruning#": "DynamicPruningSubquery",
}
_CALL = re.compile(r"(?<![\w.$#])([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)\s*\(")
_STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_BUILTIN_PACKAGE = "org.apache.spark.sql.catalyst."
_registries: dict[int, dict[str, str]] = {}


def _function_classes(spark: SparkSession) -> dict[str, str]:
    """Function name (lower case) -> the simple class name of its implementation, or
    ``UserDefinedFunction`` for anything not built into Spark (a temporary or catalog function). One
    registry listing per session."""
    found = _registries.get(id(spark))
    if found is None:
        found = {}
        for function in spark.catalog.listFunctions():
            name = function.className or ""
            builtin = function.catalog is None and not function.namespace
            if builtin and (not name or name.startswith(_BUILTIN_PACKAGE)):
                simple = name.rsplit(".", 1)[-1].removesuffix("ExpressionBuilder").removesuffix("Builder")
                found[function.name.lower()] = simple
            else:
                found[function.name.lower()] = "UserDefinedFunction"
        _registries[id(spark)] = found
    return found


def plan_text_classes(frame: DataFrame, text: str = "") -> set[str]:
    """What :func:`.internals.analysed_node_classes` finds, from public APIs only (Spark Connect):
    the node names of ``frame``'s analysed plan, read from its text, and the classes of the functions
    ``text`` calls (see the module docstring). A name that calls nothing in the registry is a keyword
    (``THEN (``, ``OVER (``) and adds nothing; a qualified call (``db.fn(...)``) is a catalog function.

    >>> plan_text_classes(probe.select(F.expr("rank() OVER (ORDER BY l.amount)")), "rank() OVER ...")
    {'Project', 'Window', 'Join', 'SubqueryAlias', 'LocalRelation', 'Rank', ...}
    """
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        frame.explain(extended=True)
    plan = buffer.getvalue()
    analysed_plan = plan.split("== Analyzed Logical Plan ==", 1)[-1]
    analysed_plan = analysed_plan.split("== Optimized Logical Plan ==", 1)[0]
    lines = analysed_plan.strip("\n").splitlines()[1:]  # the first line is the plan's output schema
    names = {match.group(1) for line in lines if (match := _TREE_NODE.match(line))}
    names |= {name for marker, name in _PLAN_MARKERS.items() if marker in analysed_plan}
    # Calls the expression makes, and those its analysis added (unix_timestamp() calls current_timestamp()),
    # which the plan prints by name. The plan prints string literals unquoted, so a call that appears
    # only inside the expression's literals ('rand()' in a concat) is not one.
    in_literals = {c.lower() for lit in _STRING_LITERAL.findall(text) for c in _CALL.findall(lit)}
    calls = {c.lower() for c in _CALL.findall(_code(text, keep_identifiers=False))}
    calls |= {c.lower() for c in _CALL.findall(analysed_plan)} - in_literals
    registry = _function_classes(frame.sparkSession)
    for call in calls:
        if "." in call:
            names.add("UserDefinedFunction")
        elif (found := registry.get(call)) is not None:
            names.add(found)
    return names


def node_classes(frame: DataFrame, text: str = "") -> set[str]:
    """The class names an expression's analysis shows: the analysed plan's own on classic Spark, the
    text-and-registry reading over Spark Connect (:func:`plan_text_classes`)."""
    if is_connect(frame.sparkSession):
        return plan_text_classes(frame, text)
    return analysed_node_classes(frame)


def _analyse(probe: DataFrame, field: str, text: str) -> tuple[Column, set[str]]:
    column = analysed(field, lambda: F.expr(text))
    # Unaliased, so a multi-column generator (inline, posexplode) analyses and is reported as a generator.
    # The schema forces analysis here: over Spark Connect a select is only sent to the server when used.
    frame = analysed(
        field, lambda: probe.select(column).alias("checked") if probe.select(column).schema else None
    )
    return column, node_classes(frame, text)


def check_expressions(probe: DataFrame, expressions: Mapping[str, str]) -> dict[str, Column]:
    """Parse and analyse every spec expression against ``probe``; refuse any that is not pure row-level SQL.

    ``expressions`` maps a spec field path to its SQL text, e.g. ``{"columns.rank": "...",
    "foreign_key.expr[0]": "..."}``. ``probe`` is the join's columns under its aliases with no plan of its
    own: build it with :func:`schema_probe`. Analysis only, no job. A parse or analysis failure is a
    :class:`SpecError` "<field>: <Spark's first line>"; a refused construct (see the module's table) is a
    :class:`SpecError` naming the field, quoting the expression, naming the construct and the fix.

    Returns the parsed columns (``F.expr(text)``, unaliased) by field path, for the caller to reuse.

    >>> check_expressions(probe, {"columns.total": "l.qty * l.price"})
    {'columns.total': Column<'(l.qty * l.price)'>}
    >>> check_expressions(probe, {"columns.id": "uuid()"})
    SpecError: columns.id: expression 'uuid()' uses a non-deterministic function (Uuid): ...
    """
    baseline = node_classes(probe)
    inherited = _baseline_constructs(baseline)
    if inherited:
        raise ValueError(
            f"check_expressions needs a probe with no plan of its own, but this one holds {inherited}, which "
            f"would hide the same constructs in expressions; build it with schema_probe(spark, "
            f'{{"l": left_df.schema, "r": right_df.schema}})'
        )
    columns: dict[str, Column] = {}
    for field, text in expressions.items():
        from_text = _text_construct(text)
        if from_text is not None:
            raise _refusal(field, text, from_text)
        column, found = _analyse(probe, field, text)
        construct = refused_construct(found, baseline, text)
        if construct is not None:
            raise _refusal(field, text, construct)
        columns[field] = column
    return columns


# --------------------------------------------------------------------------------------------------------
# Per-row runtime failures
# --------------------------------------------------------------------------------------------------------

#: Error conditions (before any ".SUBCLASS") raised by one bad value in one row. Any condition whose
#: SQLSTATE is in class 22 ("data exception") counts as well.
ROW_CONDITIONS = frozenset(
    {
        "CAST_INVALID_INPUT",
        "CAST_OVERFLOW",
        "CAST_OVERFLOW_IN_TABLE_INSERT",
        "CONVERSION_INVALID_INPUT",
        "DIVIDE_BY_ZERO",
        "INTERVAL_DIVIDED_BY_ZERO",
        "ARITHMETIC_OVERFLOW",
        "BINARY_ARITHMETIC_OVERFLOW",
        "INTERVAL_ARITHMETIC_OVERFLOW",
        "INVALID_ARRAY_INDEX",
        "INVALID_ARRAY_INDEX_IN_ELEMENT_AT",
        "INVALID_INDEX_OF_ZERO",
        "NUMERIC_VALUE_OUT_OF_RANGE",
        "NUMERIC_OUT_OF_SUPPORTED_RANGE",
        "DATETIME_OVERFLOW",
        "DATETIME_FIELD_OUT_OF_BOUNDS",
        "INVALID_FRACTION_OF_SECOND",
        "CANNOT_PARSE_TIMESTAMP",
        "CANNOT_PARSE_DECIMAL",
        "INVALID_UTF8_STRING",
        "INVALID_URL",
        "USER_RAISED_EXCEPTION",
        "DELTA_CAST_OVERFLOW_IN_TABLE_WRITE",
    }
)

_FIXES: dict[str, str] = {
    "CAST": "try_cast(... AS <type>)",
    "CONVERSION_INVALID_INPUT": "try_cast(... AS <type>) or a try_to_* function",
    "NUMERIC_VALUE_OUT_OF_RANGE": "try_cast(... AS <wider type>)",
    "DIVIDE_BY_ZERO": "try_divide(a, b) (or nullif(b, 0) as the divisor)",
    "INTERVAL_DIVIDED_BY_ZERO": "try_divide(a, b)",
    "ARITHMETIC_OVERFLOW": "try_add / try_subtract / try_multiply, or a wider type",
    "INVALID_ARRAY_INDEX": "get(array, index)",
    "INVALID_ARRAY_INDEX_IN_ELEMENT_AT": "try_element_at(array, index)",
    "CANNOT_PARSE_TIMESTAMP": "try_to_timestamp(...)",
}

#: Spark's error conditions: ``[CAST_INVALID_INPUT]``, ``[NUMERIC_VALUE_OUT_OF_RANGE.WITH_SUGGESTION]``...
_CONDITION = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\]")
_SQLSTATE = re.compile(r"SQLSTATE: ([0-9A-Z]{5})")
_SQL_CONTEXT = re.compile(r"== SQL[^\n]*\(line \d+, position \d+\) ==\n([^\n]*)\n( *)(\^+)")
_SAMPLES = (
    re.compile(r"The value (.+?) of the type "),
    re.compile(r"Text '(.*?)' could not be parsed"),
    re.compile(r"The index (-?\d+) is out of bounds"),
    re.compile(r"(\S+) cannot be represented as Decimal"),
)
_SAMPLE_PARAMETERS = ("expression", "value", "indexValue", "errorMessage")
#: Without a SQL fragment, which expressions can raise a condition: (condition prefix, operation in the text).
_OPERATION_HINTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("CAST", re.compile(r"\bcast\b|::", re.IGNORECASE)),
    ("DIVIDE_BY_ZERO", re.compile(r"/|%|\b(?:div|mod|pmod)\b", re.IGNORECASE)),
    ("INVALID_ARRAY_INDEX", re.compile(r"\[|\belement_at\b", re.IGNORECASE)),
    ("ARITHMETIC_OVERFLOW", re.compile(r"[-+*]|\b(?:abs|pow|power)\b", re.IGNORECASE)),
)
_NOISE = re.compile(r"^\[[A-Z0-9_.]+\]\s*|\s*SQLSTATE: [0-9A-Z]{5}\.?\s*$")
_MAX_SAMPLE = 200


@dataclass(frozen=True)
class RowFailure:
    """What Spark said about one row that failed: condition, SQLSTATE, SQL fragments and a sample value."""

    condition: str
    sqlstate: str | None
    fragments: tuple[str, ...]
    sample: str | None
    summary: str


def _is_row_condition(condition: str | None, sqlstate: str | None) -> bool:
    if not condition:
        return False
    return condition.split(".")[0] in ROW_CONDITIONS or (sqlstate or "").startswith("22")


def _sample(condition: str, parameters: Mapping[str, str], message: str) -> str | None:
    if condition.startswith("DIVIDE_BY_ZERO") or condition.startswith("INTERVAL_DIVIDED_BY_ZERO"):
        return "0 (the divisor)"
    for key in _SAMPLE_PARAMETERS:
        if parameters.get(key):
            return parameters[key][:_MAX_SAMPLE]
    for pattern in _SAMPLES:
        found = pattern.search(message)
        if found:
            return (f"'{found.group(1)}'" if pattern is _SAMPLES[1] else found.group(1))[:_MAX_SAMPLE]
    return None


def _first_line(message: str) -> str:
    """Spark's first line without the ``[CONDITION]`` prefix and the ``SQLSTATE`` suffix (shown elsewhere)."""
    line = message.strip().splitlines()[0] if message.strip() else ""
    return _NOISE.sub("", line)[:300]


def parse_row_failure(message: str) -> RowFailure | None:
    """Read a per-row failure out of Spark's error text (for errors that reach Python only as text).

    A ``Py4JJavaError`` or a "Job aborted due to stage failure" message carries the original error as text:
    the first ``[CONDITION]`` that is a per-row condition is the one, with its SQL fragment and sample value.
    Pure: no Spark.

    >>> parse_row_failure("... [DIVIDE_BY_ZERO] Division by zero. ... SQLSTATE: 22012\\n== SQL (line 1, "
    ...                   "position 1) ==\\nl.a / l.b\\n^^^^^^^^^\\n").fragments
    ('l.a / l.b',)
    """
    matches = list(_CONDITION.finditer(message))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(message)
        section = message[match.start() : end]
        state = _SQLSTATE.search(section)
        condition = match.group(1)
        if not _is_row_condition(condition, state.group(1) if state else None):
            continue
        fragments = tuple(
            line[len(indent) : len(indent) + len(carets)].strip()
            for line, indent, carets in _SQL_CONTEXT.findall(section)
        )
        return RowFailure(
            condition=condition,
            sqlstate=state.group(1) if state else None,
            fragments=tuple(f for f in fragments if f),
            sample=_sample(condition, {}, section),
            summary=_first_line(section),
        )
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it: Python causes and pyspark's converted JVM causes."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen or len(seen) > 20:
            continue
        seen.add(id(current))
        yield current
        captured_cause = getattr(current, "_cause", None)
        pending.extend(
            [current.__cause__, captured_cause if isinstance(captured_cause, BaseException) else None]
        )


def _from_pyspark(exc: PySparkException) -> RowFailure | None:
    condition, sqlstate = exc.getCondition(), exc.getSqlState()
    if condition is None or not _is_row_condition(condition, sqlstate):
        return None
    parameters = exc.getMessageParameters() or {}
    fragments = tuple(
        context.fragment().strip()
        for context in exc.getQueryContext()
        if context.contextType().name == "SQL" and context.fragment().strip()
    )
    message = str(exc)
    return RowFailure(
        condition=condition,
        sqlstate=sqlstate,
        fragments=fragments,
        sample=_sample(condition, parameters, message),
        summary=_first_line(message),
    )


def row_failure(exc: BaseException) -> RowFailure | None:
    """The per-row failure ``exc`` is (or wraps), or ``None`` when it is some other error."""
    for current in _chain(exc):
        if isinstance(current, PySparkException):
            found = _from_pyspark(current)
            if found is not None:
                return found
        elif type(current).__module__.split(".")[0] in {"py4j", "pyspark"}:
            found = parse_row_failure(str(current))
            if found is not None:
                return found
    return None


def _normalised(text: str) -> str:
    return " ".join(text.split()).casefold()


def _blame(failure: RowFailure, expressions: Mapping[str, str]) -> tuple[list[str], bool]:
    """The fields whose expression holds the failing fragment (True), else the candidate fields (False).

    Without a fragment, the candidates are the expressions that use the kind of operation that failed
    (a cast for CAST_*, a division for DIVIDE_BY_ZERO...), or all of them when none does.
    """
    fragments = [_normalised(f) for f in failure.fragments]
    exact = [f for f, text in expressions.items() if any(frag in _normalised(text) for frag in fragments)]
    if exact:
        return exact, True
    base = failure.condition.split(".")[0]
    hint = next((pattern for prefix, pattern in _OPERATION_HINTS if base.startswith(prefix)), None)
    if hint is not None:
        likely = [f for f, text in expressions.items() if hint.search(_code(text, keep_identifiers=False))]
        if likely:
            return likely, False
    return list(expressions), False


def _fix(condition: str) -> str:
    base = condition.split(".")[0]
    if base == "USER_RAISED_EXCEPTION":
        return "fix the data, or the check (raise_error/assert_true) in the expression"
    hint = _FIXES.get(base) or (
        _FIXES["CAST"] if base.startswith("CAST") else "try_cast(...) / try_divide(...)"
    )
    return f"fix the data, or use {hint} in the expression to turn bad values into null"


def input_data_error(exc: BaseException, expressions: Mapping[str, str]) -> InputDataError | None:
    """The :class:`InputDataError` that explains ``exc`` if it is a per-row failure, else ``None``.

    The message names the spec field whose expression failed (every candidate field when Spark's message
    does not show which), quotes the expression, and gives the error condition, a sample value and the fix.
    """
    failure = row_failure(exc)
    if failure is None:
        return None
    fields, exact = _blame(failure, expressions)
    if not fields:
        where = "an input row"
    elif exact or len(fields) == 1:
        where = "; ".join(f"{f} (expression {expressions[f]!r})" for f in fields)
    else:
        where = "one of " + ", ".join(f"{f} ({expressions[f]!r})" for f in fields)
    sample = failure.sample if failure.sample is not None else "not shown by Spark"
    return InputDataError(
        f"{where}: a row failed with {failure.condition} (sample value: {sample}): {failure.summary}; "
        f"{_fix(failure.condition)}"
    )


@contextmanager
def row_errors(expressions: Mapping[str, str]) -> Iterator[None]:
    """Turn a per-row Spark failure inside the block into an :class:`InputDataError` naming the spec field.

    Wrap the jobs of a refresh that compute spec expressions (collect, write, MERGE). ``expressions`` maps
    field paths to SQL text as for :func:`check_expressions`. Per-row failures are ANSI errors such as
    CAST_INVALID_INPUT, DIVIDE_BY_ZERO or ARITHMETIC_OVERFLOW (see :data:`ROW_CONDITIONS`), whether pyspark
    raises them as its own exceptions or as text inside a ``Py4JJavaError``. Anything else passes through
    unchanged.

    >>> with row_errors({"columns.n": "CAST(l.s AS INT)"}):
    ...     frame.collect()
    InputDataError: columns.n (expression 'CAST(l.s AS INT)'): a row failed with CAST_INVALID_INPUT
    (sample value: 'abc'): ...; fix the data, or use try_cast(... AS <type>) in the expression ...
    """
    try:
        yield
    except Exception as exc:
        error = input_data_error(exc, expressions)
        if error is None:
            raise
        raise error from exc
