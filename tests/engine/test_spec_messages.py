"""Spec errors in the user's words: a table of bad specs, each with the message a DAG author reads. The
message names the field as the spec writes it, the value given and what is accepted, with the field's own
description; no Python class name or pydantic phrase gets through. No Spark needed.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_fkjoin.engine.core.errors import SpecError, run_option
from airflow_provider_fkjoin.engine.core.spec import (
    ChangelogFormat,
    ForeignKeyJoinSpec,
    KeyedTableRef,
    load_spec,
    spec_model_classes,
)

FK: dict[str, Any] = {
    "kind": "foreign_key_join",
    "left": {"path": "/w/orders", "key": ["order_id"]},
    "right": {"path": "/w/customers", "key": ["customer_id"]},
    "foreign_key": ["customer_id"],
    "output": {"path": "/w/out"},
}
GLOBAL: dict[str, Any] = {
    "kind": "global_table_bootstrap",
    "source": {"path": "/w/products_cdc", "key": ["product_id"]},
    "output": {"path": "/w/products_global"},
}
LOOKUP: dict[str, Any] = {
    "kind": "stream_table_join",
    "stream": {"path": "/w/orders_stream"},
    "table": {"path": "/w/products", "key": ["product_id"]},
    "key_mapper": ["product_id"],
    "output": {"path": "/w/out"},
}
STREAM: dict[str, Any] = {
    "kind": "windowed_join",
    "mode": "stream",
    "left": {"path": "/w/impressions", "key": ["ad_id"], "time": "shown_at"},
    "right": {"path": "/w/clicks", "key": ["ad_id"], "time": "clicked_at"},
    "window": {"before": "1h", "after": "1h"},
    "output": {"path": "/w/out"},
}
TABLE: dict[str, Any] = {
    "kind": "windowed_join",
    "mode": "table",
    "left": {"path": "/w/a", "key": ["service"], "window": {"start": "ws", "end": "we"}},
    "right": {"path": "/w/b", "key": ["service"], "window": {"start": "ws", "end": "we"}},
    "output": {"path": "/w/out"},
}
SELF: dict[str, Any] = {
    "kind": "self_join",
    "input": {"path": "/w/txns", "key": ["card_id"], "time": "at"},
    "window": {"before": "10m", "after": "10m"},
    "columns": {"card_id": "l.card_id", "other": "r.txn_id"},
    "output": {"path": "/w/out"},
}
REVIEW = {"name": "review", "path": "/w/reviews", "key": ["review_id"], "join_keys": ["biz_id"]}
BUSINESS = {"name": "business", "path": "/w/business", "key": ["business_id"], "join_keys": ["business_id"]}
MULTI: dict[str, Any] = {"kind": "multiway_join", "inputs": [REVIEW, BUSINESS], "output": {"path": "/w/out"}}

#: What a message must never hold: pydantic's own wording, its type tags and locations.
PYDANTIC_WORDING = (
    "Input should",
    "Value error",
    "Field required",
    "Extra inputs",
    "valid dictionary",
    "instance of",
    "List should",
    "[type=",
    "pydantic",
    "function-after",
    "list[str]",
    "dict[",
    "NoneType",
)


def with_(spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**spec, **changes}


def error_of(spec: Any) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    return str(info.value)


BAD_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("no kind", {"output": {"path": "/w/o"}}, "invalid spec: kind: is required; one of foreign_key_join, "),
    ("unknown kind", with_(FK, kind="hash_join"), "kind: unknown kind 'hash_join'; expected one of "),
    (
        "a literal misspelt",
        with_(FK, how="lft"),
        "invalid spec: how: expected one of inner, left, got 'lft'. What happens to a left row whose "
        "foreign key matches no right row",
    ),
    (
        "a table given as a number",
        with_(FK, output=5),
        "invalid spec: output: expected a mapping, got 5. The output Delta table, created by the "
        "first refresh and owned by one spec from then on. Example: {path: '/warehouse/orders_enriched'}",
    ),
    (
        "a foreign key of neither form",
        with_(FK, foreign_key=5),
        "invalid spec: foreign_key: expected a list of names or a mapping with expr, got 5. How a left row "
        "names its right row",
    ),
    (
        "a foreign key expression misspelt",
        with_(FK, foreign_key={"exp": "CAST(c AS INT)"}),
        "invalid spec, 2 problems: (1) foreign_key.expr: is required. Spark SQL computing the key",
    ),
    (
        "a foreign key expression misspelt, the hint",
        with_(FK, foreign_key={"exp": "CAST(c AS INT)"}),
        "(2) foreign_key.exp: is not a known field here (check the spelling); did you mean expr? "
        "known fields: expr",
    ),
    (
        "a foreign key expression of a wrong type",
        with_(FK, foreign_key={"expr": 5}),
        "invalid spec: foreign_key.expr: expected text or a list of names, got 5.",
    ),
    (
        "an empty foreign key",
        with_(FK, foreign_key=[]),
        "foreign_key: needs at least one left column (got [])",
    ),
    (
        "a key given as a string",
        with_(FK, left={"path": "/w/orders", "key": "order_id"}),
        "invalid spec: left.key: expected a list of names (at least 1 item), got 'order_id'. The table's "
        "primary key",
    ),
    (
        "a column listed twice",
        with_(FK, left={"path": "/w/orders", "key": ["id", "id"]}),
        "invalid spec: left.key: lists a column twice (got ['id', 'id'])",
    ),
    (
        "a field misspelt",
        with_(FK, colums={"a": "l.a"}),
        "invalid spec: colums: is not a known field here (check the spelling); did you mean columns? "
        "known fields: adopt_existing_output, refresh_strategy, kind, left, right, foreign_key, how, "
        "columns, output",
    ),
    (
        "an expression that is not text",
        with_(FK, columns={"total": 5}),
        "invalid spec: columns.total: expected text, got 5. The output's columns",
    ),
    (
        "a changelog without an order",
        with_(
            FK,
            right={"path": "/w/c", "key": ["customer_id"], "changelog": {"op_column": "op", "order_by": []}},
        ),
        "invalid spec: right.changelog.order_by: expected a list of names (at least 1 item), got [].",
    ),
    (
        "an owner with spaces around",
        with_(FK, output={"path": "/w/out", "owner": " dag.task"}),
        "invalid spec: output.owner: ' dag.task' is not a usable owner",
    ),
    (
        "a negative size",
        with_(GLOBAL, broadcast_warn_bytes=-1),
        "invalid spec: broadcast_warn_bytes: expected a whole number (at least 0), got -1. Warn when the "
        "global table is larger than this many bytes on disk",
    ),
    (
        "a flag that is not a boolean",
        with_(LOOKUP, allow_unbootstrapped_table="maybe"),
        "invalid spec: allow_unbootstrapped_table: expected true or false, got 'maybe'.",
    ),
    (
        "a missing table",
        {k: v for k, v in LOOKUP.items() if k != "table"},
        "invalid spec: table: is required. The table records look up, as of the refresh",
    ),
    (
        "a duration without a unit",
        with_(STREAM, window={"before": "1 hour", "after": "1h"}),
        "invalid spec: window.before: '1 hour' is not a duration; give milliseconds (an integer) or a "
        "string like '250ms', '10s', '5m', '2h', '7d'",
    ),
    (
        "a missing window bound",
        with_(STREAM, window={"before": "1h"}),
        "invalid spec: window.after: is required. How far after a left row's time a right row may be",
    ),
    (
        "an unknown mode",
        with_(STREAM, mode="tabel"),
        "invalid spec: mode: expected one of stream, table, got 'tabel'",
    ),
    (
        "no mode",
        {k: v for k, v in STREAM.items() if k != "mode"},
        "invalid spec: mode: is required: stream (two event tables) or table (two keyed tables)",
    ),
    (
        "a table window without its end",
        with_(TABLE, right={"path": "/w/b", "key": ["service"], "window": {"start": "ws"}}),
        "invalid spec: right.window.end: is required. The column holding each window's end.",
    ),
    (
        "a self-join that is not inner",
        with_(SELF, how="left"),
        "invalid spec: how: a self_join is an inner join, not 'left'",
    ),
    (
        "one input is no join",
        with_(MULTI, inputs=[REVIEW]),
        "invalid spec: inputs: expected a list of mappings (at least 2 items, at most 8 items), got "
        "[{name: 'review', path: '/w/reviews', key: ['review_id'], join_keys: ['biz_id']}].",
    ),
    (
        "an alias misspelt",
        with_(MULTI, inputs=[REVIEW, {**BUSINESS, "aliases": [{"form": "business_id", "to": "biz_id"}]}]),
        "(1) inputs[1].aliases[0].from: is required. The input's field to rename",
    ),
    (
        "an alias misspelt, the hint",
        with_(MULTI, inputs=[REVIEW, {**BUSINESS, "aliases": [{"form": "business_id", "to": "biz_id"}]}]),
        "(2) inputs[1].aliases[0].form: is not a known field here (check the spelling); did you mean from?",
    ),
    (
        "an empty pkey",
        with_(MULTI, output={"path": "/w/out", "pkey": []}),
        "invalid spec: output.pkey: give at least one output column, or leave pkey out (got [])",
    ),
    (
        "a guard of zero",
        with_(MULTI, max_rows_per_join_key=0),
        "invalid spec: max_rows_per_join_key: expected a whole number (at least 1), got 0. The N:M guard",
    ),
]


@pytest.mark.parametrize(
    ("spec", "expected"), [row[1:] for row in BAD_SPECS], ids=[row[0] for row in BAD_SPECS]
)
def test_a_bad_spec_is_told_in_the_users_words(spec: dict[str, Any], expected: str) -> None:
    message = error_of(spec)
    assert expected in message
    leaked = [word for word in (*PYDANTIC_WORDING, *spec_model_classes()) if word in message]
    assert not leaked, f"{leaked} in {message!r}"
    assert "\n" not in message  # one line: the CLI prints it as `error: SpecError: <message>`


def test_a_type_error_carries_the_fields_own_description() -> None:
    """The message, the spec reference and the JSON Schema share one text: the field's description."""
    missing = error_of(with_(FK, left={"path": "/w/orders"}))
    assert KeyedTableRef.model_fields["key"].description.replace("`", "") in missing
    wrong = error_of(with_(FK, how="outer"))
    assert ForeignKeyJoinSpec.model_fields["how"].description.replace("`", "") in wrong
    order = error_of(
        with_(FK, left={"path": "/w/o", "key": ["k"], "changelog": {"op_column": "op", "order_by": 5}})
    )
    assert ChangelogFormat.model_fields["order_by"].description.replace("`", "") in order


def test_a_document_that_is_no_mapping_is_named_as_yaml_shows_it() -> None:
    message = error_of(["kind", "foreign_key_join"])
    assert (
        message
        == "a spec must be a mapping of fields (kind: ..., output: ...), not ['kind', 'foreign_key_join']"
    )


def test_the_full_refresh_is_named_for_airflow_the_command_line_and_python() -> None:
    """The append-only refusal is raised inside the Spark job an Airflow task runs through ``fkjoin run``,
    so the engine cannot tell its caller: the message names the option as each of them sets it."""
    text = run_option("full_refresh")
    assert "operator argument full_refresh=True" in text
    assert '"{{ params.full_refresh }}"' in text
    assert "fkjoin run --full-refresh" in text
    assert "run_spec(spec, full_refresh=True)" in text
