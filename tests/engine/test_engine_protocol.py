"""The engine's two sides speak one protocol: the Python side's typed requests (``engine_protocol.py``)
name the same actions, fields, statuses and shared columns as the JVM side's ``EngineProtocol.java``, as
its ``describe`` answer lists them; and each side refuses what the protocol does not define."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from airflow_provider_fkjoin.engine.runtime import engine_procedure
from airflow_provider_fkjoin.engine.runtime import engine_protocol as protocol


def _flat(columns: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for value in columns.values():
        names.update(value if isinstance(value, list) else [value])
    return names


def test_both_sides_list_the_same_actions_fields_statuses_and_columns(spark) -> None:
    described = engine_procedure.call(spark, protocol.Describe())
    assert described.status == protocol.Status.READY
    assert set(described.actions.split(",")) == set(protocol.REQUESTS)
    assert described.requests == protocol.request_fields()
    assert sorted(described.statuses) == sorted(status.value for status in protocol.Status)
    python_columns = {
        protocol.FILE_COLUMN,
        protocol.ROW_COLUMN,
        protocol.CHANGE_COLUMN,
        protocol.EXPECTED_COLUMN,
        *protocol.HASH_COLUMNS,
        protocol.NET_COLUMN,
    }
    assert _flat(described.columns) == python_columns, described.columns


def test_the_procedure_answers_under_its_first_name_too(spark) -> None:
    """``net_change``, the procedure's name before ``engine``, still answers (a DAG's own SQL may call it)."""
    engine_procedure.unavailable_reason(spark)  # registers the catalog in the session
    literal = '{"protocol": 1, "action": "describe"}'
    for name in ("engine", "net_change"):
        (answer,) = spark.sql(
            f"CALL {engine_procedure.CATALOG}.system.{name}(request => '{literal}')"
        ).collect()
        assert protocol.Describe().answer(json.loads(answer[0])).status == protocol.Status.READY


def test_this_side_refuses_a_field_the_protocol_does_not_define() -> None:
    with pytest.raises(ValidationError, match="force"):
        protocol.Commit(token="t", force=True)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="token"):
        protocol.Commit()  # type: ignore[call-arg]


def test_an_answer_this_side_cannot_read_is_an_engine_procedure_error(monkeypatch) -> None:
    """A jar whose answer lacks a field this side needs (a jar of another build) is named as such."""

    class _Session:
        def sql(self, text: str) -> Any:
            class _Rows:
                def collect(self) -> list[tuple[str]]:
                    return [('{"protocol": 1, "status": "committed"}',)]

            return _Rows()

    monkeypatch.setattr(engine_procedure, "_register", lambda session: None)
    with pytest.raises(engine_procedure.EngineProcedureError, match="does not fit this side"):
        engine_procedure.call(_Session(), protocol.Commit(token="t"))  # type: ignore[arg-type]


def test_a_request_is_sent_with_its_protocol_and_action_and_no_unset_fields() -> None:
    assert protocol.WarmAdvance(state="s", token="t", output="o", version=3, added=[]).wire() == {
        "protocol": 1,
        "action": "warm_advance",
        "state": "s",
        "token": "t",
        "output": "o",
        "version": 3,
        "added": [],
    }
