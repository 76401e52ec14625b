"""Refresh planning (full / incremental / noop): pure decisions, no Spark."""

from __future__ import annotations

from airflow_provider_fkjoin.engine.core.planning import InputState, plan_refresh
from airflow_provider_fkjoin.engine.core.progress import (
    InputProgress,
    new_progress_metadata,
    parse_progress,
    transaction_app_id,
)

FP = "abc123"


def progress(left: int = 3, right: int = 5, fingerprint: str = FP, left_id: str = "L"):
    metadata, _ = new_progress_metadata(
        seq=4,
        kind="foreign_key_join",
        fingerprint=fingerprint,
        mode="incremental",
        inputs={"left": InputProgress("/w/l", left_id, left), "right": InputProgress("/w/r", "R", right)},
    )
    return parse_progress(metadata, output_version=9, committed_at=None)


def current(left: int = 3, right: int = 5, cdf: bool = True, left_id: str = "L") -> dict[str, InputState]:
    return {"left": InputState("/w/l", left_id, left, cdf), "right": InputState("/w/r", "R", right, True)}


def plan(previous, state, fingerprint: str = FP):
    return plan_refresh(previous=previous, fingerprint=fingerprint, kind="foreign_key_join", current=state)


def test_progress_round_trip() -> None:
    found = progress()
    assert found is not None
    assert found.seq == 4
    assert found.inputs["left"] == InputProgress("/w/l", "L", 3)
    assert found.output_version == 9
    assert parse_progress('{"other": 1}', 1, None) is None
    assert parse_progress("not json", 1, None) is None
    assert parse_progress(None, 1, None) is None


def test_first_run_is_full() -> None:
    result = plan(None, current())
    assert (result.mode, result.from_versions) == ("full", {"left": None, "right": None})
    assert "first run" in result.reason


def test_nothing_new_is_noop() -> None:
    result = plan(progress(), current())
    assert result.mode == "noop"
    assert result.from_versions == {"left": 3, "right": 5}


def test_new_versions_are_incremental() -> None:
    result = plan(progress(), current(left=7))
    assert (result.mode, result.from_versions) == ("incremental", {"left": 3, "right": 5})


def test_spec_change_rebuilds() -> None:
    result = plan(progress(), current(left=7), fingerprint="other")
    assert result.mode == "full"
    assert "spec changed" in result.reason


def test_recreated_input_rebuilds() -> None:
    result = plan(progress(), current(left_id="L2"))
    assert result.mode == "full"
    assert "recreated" in result.reason


def test_input_behind_consumed_version_rebuilds() -> None:
    result = plan(progress(left=9), current(left=4))
    assert result.mode == "full"
    assert "behind the consumed version 9" in result.reason


def test_cdf_off_rebuilds_only_when_that_input_changed() -> None:
    assert plan(progress(), current(left=8, cdf=False)).mode == "full"
    assert "change data feed is off on input left" in plan(progress(), current(left=8, cdf=False)).reason
    assert plan(progress(), current(right=6, cdf=False)).mode == "incremental"


def test_transaction_app_id_is_stable_per_output() -> None:
    assert transaction_app_id("/w/out") == transaction_app_id("/w/out")
    assert transaction_app_id("/w/out") != transaction_app_id("/w/out2")
