"""HighWatermarkSensor and HighWatermarkTrigger on real Delta tables written with deltalake (no JVM).

Decisions are pure functions; the trigger is driven with ``run().asend(None)``; deferral is asserted
through ``TaskDeferred``."""

from __future__ import annotations

import asyncio
import datetime as dt
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)
from airflow_support import FakeStateStore, record_refresh, write_table

from airflow_provider_fkjoin.engine.deltalog.watermarks import TableMissingError
from airflow_provider_fkjoin.sensors import HighWatermarkSensor
from airflow_provider_fkjoin.sensors.high_watermark import GOAL_KEY
from airflow_provider_fkjoin.triggers import HighWatermarkTrigger
from airflow_provider_fkjoin.triggers.high_watermark import (
    Goal,
    SourceRecreatedError,
    check_source,
    classify_error,
    decide,
)


class FakeTI:
    def __init__(self, try_number: int = 1) -> None:
        self.try_number = try_number


def ctx(store: FakeStateStore | None = None, try_number: int = 1) -> dict[str, Any]:
    return {"ti": FakeTI(try_number), "task_state_store": store if store is not None else FakeStateStore()}


def recreate(path: Path, rows: list[list[int]]) -> None:
    """Drop the table at ``path`` and write a new one there (a new Delta table id, versions from 0)."""
    shutil.rmtree(path)
    for batch in rows:
        write_table(path, batch)


@pytest.fixture
def tables(tmp_path: Path) -> tuple[Path, Path]:
    """A source at version 2 and a target whose last refresh consumed source version 1."""
    source, target = tmp_path / "products_cdc", tmp_path / "products_global"
    for batch in ([1], [2], [3]):
        write_table(source, batch)
    record_refresh(target, {"source": (str(source), 1)}, kind="global_table_bootstrap")
    return source, target


def first_event(trigger: HighWatermarkTrigger) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        generator = trigger.run()
        event = await generator.asend(None)
        await generator.aclose()
        return event.payload

    return asyncio.run(go())


# -- pure decisions ----------------------------------------------------------------------------------
def test_decide():
    assert decide(3, 3, now=0, deadline=None).status == "done"
    assert decide(4, 3, now=0, deadline=None).status == "done"
    assert decide(2, 3, now=0, deadline=10).status == "wait"
    assert decide(None, 0, now=0, deadline=10).status == "wait"
    assert decide(2, 3, now=10, deadline=10).status == "timeout"
    assert decide(3, 3, now=99, deadline=10).status == "done"  # reached beats late
    same = decide(3, 3, now=0, deadline=None, reached_table_id="a", wanted_table_id="a")
    assert same.status == "done"
    other = decide(9, 3, now=0, deadline=None, reached_table_id="old", wanted_table_id="new")
    assert other.status == "wait" and "earlier table" in other.message


def test_check_source():
    check_source("/w/s", Goal(3, "a"), "a")
    check_source("/w/s", Goal(3, None), "b")  # a goal without a table id is not checked
    with pytest.raises(SourceRecreatedError, match=r"/w/s was recreated \(table id a -> b\)"):
        check_source("/w/s", Goal(3, "a"), "b")
    assert classify_error(SourceRecreatedError("x")) == "permanent"


def test_classify_error():
    assert classify_error(TableMissingError("gone")) == "permanent"
    assert classify_error(ValueError("bad")) == "permanent"
    assert classify_error(OSError("network")) == "transient"


# -- trigger -----------------------------------------------------------------------------------------
def test_trigger_serialisation_round_trip():
    trigger = HighWatermarkTrigger(
        target="/w/t",
        source="/w/s",
        wanted_version=3,
        poll_interval=5,
        deadline=1.5e9,
        storage_options={"a": "b"},
        wanted_table_id="t-1",
        storage_conn_id="aws_lake",
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_fkjoin.triggers.high_watermark.HighWatermarkTrigger"
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(__import__(module, fromlist=[name]), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs == {
        "target": "/w/t",
        "wanted_version": 3,
        "source": "/w/s",
        "wanted_table_id": "t-1",
        "storage_options": {"a": "b"},
        "storage_conn_id": "aws_lake",
        "poll_interval": 5.0,
        "deadline": 1.5e9,
        "max_transient_errors": 5,
    }


def test_trigger_succeeds_when_the_target_consumed_the_source(tables):
    source, target = tables
    event = first_event(
        HighWatermarkTrigger(target=str(target), source=str(source), wanted_version=1, poll_interval=0)
    )
    assert event["status"] == "success"
    assert (event["wanted_version"], event["reached_version"]) == (1, 1)


def test_trigger_waits_then_succeeds_after_a_new_refresh(tables):
    source, target = tables
    trigger = HighWatermarkTrigger(target=str(target), source=str(source), wanted_version=2, poll_interval=0)
    observations: list[Any] = []
    saw_version_1 = threading.Event()
    observe = trigger.observe

    def observed() -> Any:
        seen = observe()
        observations.append(seen)
        if seen.reached == 1:
            saw_version_1.set()
        return seen

    trigger.observe = observed  # type: ignore[method-assign]

    async def go() -> dict[str, Any]:
        generator = trigger.run()
        pending = asyncio.ensure_future(generator.__anext__())
        # the trigger has seen version 1 (short of the wanted 2) and goes on waiting
        assert await asyncio.to_thread(saw_version_1.wait, 60), observations
        assert not pending.done()
        await asyncio.to_thread(record_refresh, target, {"source": (str(source), 2)})
        event = await pending
        await generator.aclose()
        return event.payload

    event = asyncio.run(go())
    assert (event["status"], event["reached_version"]) == ("success", 2)


def test_trigger_times_out_at_its_absolute_deadline(tables):
    source, target = tables
    event = first_event(
        HighWatermarkTrigger(
            target=str(target), source=str(source), wanted_version=2, deadline=time.time() - 1
        )
    )
    assert (event["status"], event["reached_version"]) == ("timeout", 1)


def test_trigger_fails_fast_on_a_missing_source(tables, tmp_path):
    _, target = tables
    event = first_event(
        HighWatermarkTrigger(
            target=str(target), source=str(tmp_path / "nope"), wanted_version=1, poll_interval=3600
        )
    )
    assert event["status"] == "error"
    assert "TableMissingError" in event["message"]


def test_trigger_waits_for_a_target_that_does_not_exist_yet(tables, tmp_path):
    source, _ = tables
    event = first_event(
        HighWatermarkTrigger(
            target=str(tmp_path / "not_yet"), source=str(source), wanted_version=1, deadline=time.time() - 1
        )
    )
    assert (event["status"], event["reached_version"]) == ("timeout", None)


def test_trigger_retries_transient_errors_then_gives_up(tables, monkeypatch):
    source, target = tables
    trigger = HighWatermarkTrigger(
        target=str(target), source=str(source), wanted_version=1, poll_interval=0, max_transient_errors=2
    )
    calls: list[int] = []

    def flaky() -> int:
        calls.append(1)
        raise OSError("connection reset")

    monkeypatch.setattr(trigger, "observe", flaky)
    event = first_event(trigger)
    assert event["status"] == "transient_error"  # not "error": the task's retries are still worth it
    assert len(calls) == 3


def test_trigger_recovers_from_a_transient_error(tables, monkeypatch):
    source, target = tables
    trigger = HighWatermarkTrigger(target=str(target), source=str(source), wanted_version=1, poll_interval=0)
    real = trigger.observe
    outcomes = iter([OSError("blip"), None])

    def flaky_once() -> int | None:
        error = next(outcomes)
        if error:
            raise error
        return real()

    monkeypatch.setattr(trigger, "observe", flaky_once)
    assert first_event(trigger)["status"] == "success"


def test_trigger_fails_when_the_source_was_recreated_after_the_goal(tables):
    source, target = tables
    goal_id = deltalake_id(source)
    recreate(source, [[1]])
    event = first_event(
        HighWatermarkTrigger(
            target=str(target), source=str(source), wanted_version=2, wanted_table_id=goal_id, poll_interval=0
        )
    )
    assert event["status"] == "error" and "was recreated" in event["message"]


def deltalake_id(path: Path) -> str:
    import deltalake

    return str(deltalake.DeltaTable(str(path)).metadata().id)


# -- sensor ------------------------------------------------------------------------------------------
def sensor(**kwargs: Any) -> HighWatermarkSensor:
    return HighWatermarkSensor(**{"task_id": "wait", "poke_interval": 1, "timeout": 60, **kwargs})


def test_sensor_captures_the_source_high_watermark_when_it_starts(tables):
    source, target = tables
    op = sensor(target=str(target), source=str(source))
    context = ctx()
    assert op.goal(context) == Goal(2, deltalake_id(source))
    assert not op.poke(context)  # consumed 1 < 2
    record_refresh(target, {"source": (str(source), 2)})
    write_table(source, [4])  # a newer source version after the start does not move the goal
    done = op.poke(context)
    assert done
    assert done.xcom_value == {
        "target": str(target),
        "source": str(source),
        "wanted_version": 2,
        "reached_version": 2,
    }


def test_the_goal_never_drifts_across_reschedules_and_is_new_on_the_next_try(tables):
    """Reschedule mode runs each poke in a new process: a new sensor object, the same state store."""
    source, target = tables
    store = FakeStateStore()
    assert sensor(target=str(target), source=str(source), mode="reschedule").goal(ctx(store)).version == 2
    for batch in range(300):  # a busy source: far more commits than any history window
        write_table(source, [batch])
    again = sensor(target=str(target), source=str(source), mode="reschedule")
    assert again.goal(ctx(store)).version == 2
    assert store.values[GOAL_KEY] == {"try_number": 1, "version": 2, "table_id": deltalake_id(source)}
    retry = sensor(target=str(target), source=str(source), mode="reschedule")
    assert retry.goal(ctx(store, try_number=2)).version == 302


def test_a_recreated_source_is_not_caught_up_by_the_old_tables_versions(tables):
    source, target = tables
    record_refresh(target, {"source": (str(source), 2)})  # the target consumed the old table up to 2
    recreate(source, [[1], [2]])  # new table at version 1
    op = sensor(target=str(target), source=str(source))
    assert op.goal(ctx()) == Goal(1, deltalake_id(source))
    waiting = op.poke(ctx())
    assert not waiting and waiting.xcom_value["reached_version"] == 2
    record_refresh(target, {"source": (str(source), 1)})  # the join rebuilt from the new table
    assert op.poke(ctx())


def test_a_source_recreated_while_waiting_fails_fast(tables):
    source, target = tables
    op = sensor(target=str(target), source=str(source))
    op.goal(ctx())
    recreate(source, [[1], [2], [3], [4]])
    with pytest.raises(AirflowFailException, match="was recreated"):
        op.poke(ctx())


def test_sensor_explicit_version_from_xcom_template(tables):
    source, target = tables
    op = sensor(target=str(target), source=str(source), version="1")
    assert op.goal(ctx()) == Goal(1, deltalake_id(source))
    assert op.poke(ctx())


def test_sensor_without_source_compares_the_tables_own_version(tables):
    source, _ = tables
    op = sensor(target=str(source), version=2)
    assert op.poke(ctx())
    assert not sensor(target=str(source), version=3).poke(ctx())


def test_sensor_needs_a_source_or_a_version():
    with pytest.raises(ValueError, match="needs a source"):
        HighWatermarkSensor(task_id="w", target="/w/t")


def test_sensor_fails_fast_on_a_missing_table(tables, tmp_path):
    source, target = tables
    op = sensor(target=str(target), source=str(tmp_path / "nope"), version=1)
    with pytest.raises(AirflowFailException, match="TableMissingError"):
        op.poke(ctx())
    assert sensor(target=str(tmp_path / "not_yet"), source=str(source)).poke(ctx()).is_done is False
    with pytest.raises(AirflowFailException, match="TableMissingError"):
        sensor(target=str(source), source=str(tmp_path / "nope")).goal(ctx())


def test_sensor_transient_errors_fail_the_try_retryably(tables, monkeypatch):
    source, target = tables
    op = sensor(target=str(target), source=str(source), max_transient_errors=1)
    op.goal(ctx())
    from airflow_provider_fkjoin.sensors import high_watermark as module

    def flaky(*args: Any) -> Any:
        raise OSError("connection reset")

    monkeypatch.setattr(module, "observe", flaky)
    assert not op.poke(ctx())
    with pytest.raises(OSError, match="connection reset"):
        op.poke(ctx())


def test_deferrable_sensor_defers_with_a_serialisable_trigger(tables):
    source, target = tables
    op = sensor(target=str(target), source=str(source), deferrable=True, timeout=600)
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx())
    trigger = deferred.value.trigger
    assert isinstance(trigger, HighWatermarkTrigger)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == dt.timedelta(seconds=600)
    _, kwargs = trigger.serialize()
    assert (kwargs["target"], kwargs["source"], kwargs["wanted_version"]) == (str(target), str(source), 2)
    assert kwargs["wanted_table_id"] == deltalake_id(source)
    assert before + 600 <= kwargs["deadline"] <= time.time() + 600


def test_deferrable_sensor_defers_even_when_already_done_and_its_trigger_fires_at_once(tables):
    source, target = tables
    op = sensor(target=str(target), source=str(source), version=1, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx())
    event = first_event(deferred.value.trigger)
    assert (event["status"], event["reached_version"]) == ("success", 1)
    assert op.execute_complete(ctx(), event)["reached_version"] == 1


def test_deferred_trigger_fires_when_the_target_catches_up(tables):
    source, target = tables
    op = sensor(target=str(target), source=str(source), deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx())
    record_refresh(target, {"source": (str(source), 2)})
    event = first_event(deferred.value.trigger)
    assert (event["status"], event["reached_version"]) == ("success", 2)
    assert op.execute_complete(ctx(), event)["reached_version"] == 2


def test_deferrable_defaults_to_the_operators_config(monkeypatch):
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "true")
    import importlib

    import airflow_provider_fkjoin.sensors.high_watermark as module

    reloaded = importlib.reload(module)
    try:
        assert reloaded.HighWatermarkSensor(task_id="w", target="/w/t", version=1).deferrable is True
    finally:
        monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE")
        importlib.reload(module)


def test_execute_complete():
    op = sensor(target="/w/t", version=1)
    event = {"status": "success", "target": "/w/t", "source": None, "wanted_version": 1, "reached_version": 1}
    assert op.execute_complete({}, event)["reached_version"] == 1
    with pytest.raises(AirflowSensorTimeout):
        op.execute_complete({}, {"status": "timeout", "message": "late"})
    with pytest.raises(AirflowSkipException):
        sensor(target="/w/t", version=1, soft_fail=True).execute_complete({}, {"status": "timeout"})
    with pytest.raises(AirflowFailException, match="gone"):
        op.execute_complete({}, {"status": "error", "message": "gone"})
    with pytest.raises(AirflowException, match="reset") as raised:
        op.execute_complete({}, {"status": "transient_error", "message": "reset"})
    assert not isinstance(raised.value, AirflowFailException)  # retries go on, as in poke mode
