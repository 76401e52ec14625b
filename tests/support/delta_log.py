"""An output's refresh commits read from its ``_delta_log`` files themselves, with no engine code: the
independent source tests compare what the engine reports (``fkjoin status``, the Joins view) against."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def plans_in_log(output: Path) -> dict[int, dict[str, Any] | None]:
    """Each commit's plan by version: what its commitInfo's userMetadata recorded (``chosen``, ``basis``,
    ``estimate``) and its seconds from the plan's start to the commitInfo's timestamp (``actual_s``);
    None for a commit that recorded no plan.

    >>> plans_in_log(Path("/w/out"))[1]["chosen"]  # doctest: +SKIP
    'recompute'
    """
    plans: dict[int, dict[str, Any] | None] = {}
    for commit in sorted((output / "_delta_log").glob("*.json")):
        lines = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        [info] = [line["commitInfo"] for line in lines if "commitInfo" in line]
        payload = json.loads(info["userMetadata"])["fkjoin"]
        record = payload.get("strategy")
        if record is None:
            plans[int(commit.stem)] = None
            continue
        committed = datetime.fromtimestamp(info["timestamp"] / 1000, tz=UTC)
        started = datetime.fromisoformat(payload["started_at"])
        plans[int(commit.stem)] = {
            "chosen": record["chosen"],
            "basis": record.get("basis"),
            "estimate": record.get("estimate"),
            "actual_s": (committed - started).total_seconds() - record["plan_start_s"],
        }
    return plans
