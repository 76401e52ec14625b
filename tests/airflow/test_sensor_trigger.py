"""HighWatermarkSensor and HighWatermarkTrigger on real Delta tables written with deltalake (no JVM).

Decisions are pure functions; the trigger is driven with ``run().asend(None)``; deferral is asserted
through ``TaskDeferred``."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)
from airflow_support import record_refresh, write_table

from airflow_provider_fkjoin.engine.watermarks import TableMissingError
from airflow_provider_fkjoin.sensors import HighWatermarkSensor
from airflow_provider_fkjoin.triggers import HighWatermarkTrigger
from airflow_provider_fkjoin.triggers.high_watermark import classify_error, decide, pick_version_at


class FakeTI:
    def __init__(self, first_reschedule: dt.datetime | None = None) -> None:
        self.first_reschedule = first_reschedule

    def get_first_reschedule_date(self, context: Any) -> dt.datetime | None:
        return self.first_reschedule


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


def test_classify_error():
    assert classify_error(TableMissingError("gone")) == "permanent"
    assert classify_error(ValueError("bad")) == "permanent"
    assert classify_error(OSError("network")) == "transient"


def test_pick_version_at():
    history = [
        {"version": 2, "timestamp": 300},
        {"version": 1, "timestamp": 200},
        {"version": 0, "timestamp": 100},
    ]
    assert pick_version_at(history, 250) == 1
    assert pick_version_at(history, 300) == 2
    assert pick_version_at(history, 50) is None


# -- trigger -----------------------------------------------------------------------------------------
def test_trigger_serialisation_round_trip():
    trigger = HighWatermarkTrigger(
        target="/w/t",
        source="/w/s",
        wanted_version=3,
        poll_interval=5,
        deadline=1.5e9,
        storage_options={"a": "b"},
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
        "storage_options": {"a": "b"},
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

    async def go() -> dict[str, Any]:
        generator = trigger.run()
        pending = asyncio.ensure_future(generator.__anext__())
        await asyncio.sleep(0)  # let it observe version 1 and go back to waiting
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
    assert event["status"] == "error"
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


# -- sensor ------------------------------------------------------------------------------------------
def sensor(**kwargs: Any) -> HighWatermarkSensor:
    return HighWatermarkSensor(**{"task_id": "wait", "poke_interval": 1, "timeout": 60, **kwargs})


def test_sensor_captures_the_source_high_watermark_when_it_starts(tables):
    source, target = tables
    op = sensor(target=str(target), source=str(source))
    ctx = {"ti": FakeTI()}
    assert op.wanted_version(ctx) == 2
    assert not op.poke(ctx)  # consumed 1 < 2
    record_refresh(target, {"source": (str(source), 2)})
    write_table(source, [4])  # a newer source version after the start does not move the goal
    done = op.poke(ctx)
    assert done
    assert done.xcom_value == {
        "target": str(target),
        "source": str(source),
        "wanted_version": 2,
        "reached_version": 2,
    }


def test_sensor_in_reschedule_mode_uses_the_version_as_of_its_first_start(tables):
    source, target = tables
    started = dt.datetime.now(dt.UTC)
    write_table(source, [4])  # version 3, committed after the sensor started
    op = sensor(target=str(target), source=str(source), mode="reschedule")
    assert op.wanted_version({"ti": FakeTI(first_reschedule=started)}) == 2
    assert op.wanted_version({"ti": FakeTI(first_reschedule=None)}) == 3


def test_sensor_explicit_version_from_xcom_template(tables):
    source, target = tables
    op = sensor(target=str(target), source=str(source), version="1")
    ctx = {"ti": FakeTI()}
    assert op.wanted_version(ctx) == 1
    assert op.poke(ctx)


def test_sensor_without_source_compares_the_tables_own_version(tables):
    source, _ = tables
    op = sensor(target=str(source), version=2)
    assert op.poke({"ti": FakeTI()})
    assert not sensor(target=str(source), version=3).poke({"ti": FakeTI()})


def test_sensor_needs_a_source_or_a_version():
    with pytest.raises(ValueError, match="needs a source"):
        HighWatermarkSensor(task_id="w", target="/w/t")


def test_sensor_fails_fast_on_a_missing_table(tables, tmp_path):
    source, target = tables
    op = sensor(target=str(target), source=str(tmp_path / "nope"), version=1)
    with pytest.raises(AirflowFailException, match="TableMissingError"):
        op.poke({"ti": FakeTI()})
    assert (
        sensor(target=str(tmp_path / "not_yet"), source=str(source)).poke({"ti": FakeTI()}).is_done is False
    )
    with pytest.raises(AirflowFailException, match="TableMissingError"):
        sensor(target=str(source), source=str(tmp_path / "nope")).wanted_version({"ti": FakeTI()})


def test_deferrable_sensor_defers_with_a_serialisable_trigger(tables):
    source, target = tables
    op = sensor(target=str(target), source=str(source), deferrable=True, timeout=600)
    before = time.time()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": FakeTI()})
    trigger = deferred.value.trigger
    assert isinstance(trigger, HighWatermarkTrigger)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == dt.timedelta(seconds=600)
    _, kwargs = trigger.serialize()
    assert (kwargs["target"], kwargs["source"], kwargs["wanted_version"]) == (str(target), str(source), 2)
    assert before + 600 <= kwargs["deadline"] <= time.time() + 600


def test_deferrable_sensor_defers_even_when_already_done_and_its_trigger_fires_at_once(tables):
    source, target = tables
    op = sensor(target=str(target), source=str(source), version=1, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": FakeTI()})
    event = first_event(deferred.value.trigger)
    assert (event["status"], event["reached_version"]) == ("success", 1)
    assert op.execute_complete({"ti": FakeTI()}, event)["reached_version"] == 1


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
