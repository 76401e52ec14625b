"""Exactly once under crashes for ``multiway_join``: ``fkjoin run`` is SIGKILLed at each traced phase of an
incremental refresh of a three-input join (business / review / owner, as
``support.multiway_worlds.yelp_world``) whose batch changes all three inputs, rows and their partners
together.

As in ``test_fk_crash`` (with the subprocess runner of ``support.crash``), the data is prepared in-process
once per module and put back at the same paths before each phase, the refresh runs as a subprocess with
``FKJOIN_TRACE=1``, and its process group is killed the moment its stderr shows ``FKJOIN_PHASE <phase>``.
Afterwards the output, read as a multiset of its rows (it holds the user's columns only), must be exactly
the old state (the model at the input versions the output consumed) or exactly the new one (the model at
the inputs' latest versions), never a mix; and a rerun must reach the new state through one clean commit
over the old state.
"""

from __future__ import annotations

import copy
import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import table_version
from multiway_model import Row
from pyspark.sql import SparkSession
from support.crash import Run, SavedFolder, run_fkjoin
from support.multiway_worlds import (
    World,
    as_rows,
    assert_clean_output_changes,
    model_at,
    output_rows,
    yelp_world,
)

#: The phases a multiway refresh traces, in order (``committing`` on the net-change write path only).
PHASES = ["pinned", "changes_read", "merge_started", "committing", "committed"]
INPUTS = ["business", "review", "owner"]


def versions(spark: SparkSession, world: World) -> dict[str, int]:
    return {name: table_version(spark, world.path(name)) for name in INPUTS}


def change_all_three(world: World) -> None:
    """One refresh's changes to every input (four input commits): a fan-out update, partners changing
    together, an insert with its partners, a join-key move, a null join key that starts to match, and a
    delete. Against ``yelp_world``'s first output this nets 3 inserts, 2 updates and 3 deletes."""
    world.upsert(
        "business",
        [
            {"business_id": 1, "name": "Cafe Nova", "city": "SF"},  # fans out to its rows
            {"business_id": 2, "name": "Deli II", "city": "NY"},  # changes with review 12 and owner 102
            {"business_id": 4, "name": "Pub", "city": "SF"},  # inserted with review 16 and owner 104
        ],
    )
    world.upsert(
        "review",
        [
            {"review_id": 11, "biz_id": 2, "stars": 3, "text": "ok"},  # moves from business 1 to 2
            {"review_id": 12, "biz_id": 2, "stars": 1, "text": "worse"},
            {"review_id": 13, "biz_id": 1, "stars": 1, "text": "found"},  # null join key -> business 1
            {"review_id": 16, "biz_id": 4, "stars": 2, "text": "meh"},
        ],
    )
    world.delete("owner", [101])
    world.upsert(
        "owner",
        [
            {"owner_id": 102, "business_id": 2, "owner_name": "Cyd"},
            {"owner_id": 104, "business_id": 4, "owner_name": "Ed"},
        ],
    )


def seen_phases(run: Run) -> list[str]:
    """The refresh phases the run traced, in order (``compacting`` and any other marker left out)."""
    return [p for p in run.phases if p in PHASES]


def phases_up_to(phase: str, run: Run) -> list[str]:
    """The phases a run killed at ``phase`` must have traced: every one before it, ``committing`` only if
    the run took the net-change write path (it did if it traced ``committing``)."""
    wanted = PHASES[: PHASES.index(phase) + 1]
    return [p for p in wanted if p != "committing" or "committing" in run.phases]


def last_result(run: Run) -> dict[str, Any]:
    lines = run.stdout.strip().splitlines()
    assert lines, "no result on stdout; stderr:\n" + "\n".join(run.stderr_tail)
    return json.loads(lines[-1])


#: The saved states of the module's world: the inputs as first written (no output yet), and the inputs
#: changed by :func:`change_all_three` after a first refresh.
FIRST_RUN, CHANGED = "first_run", "changed"


@dataclass(frozen=True)
class Saved:
    """``yelp_world`` prepared once at fixed paths and saved in two states, with what each state's checks
    need (the model's joins of the inputs as Delta holds them, computed once)."""

    #: The world as the changes left it (its Python mirror of the inputs, the output versions it saw).
    world: World
    spec_path: Path
    folder: SavedFolder
    #: :data:`FIRST_RUN`: the model at the inputs' first versions.
    first_expected: dict[tuple, Row]
    #: :data:`CHANGED`: the output's version after the first refresh, the model at the inputs' versions
    #: it consumed (the old state), the inputs' versions after the changes and the model at them (the new).
    base_version: int
    old: dict[tuple, Row]
    new_versions: dict[str, int]
    new: dict[tuple, Row]

    def restore(self, state: str) -> None:
        """Put the tables back as ``state`` left them; for :data:`CHANGED`, check their versions."""
        self.folder.restore(state)
        if state == CHANGED:
            spark, out = self.world.spark, self.world.spec["output"]["path"]
            found = {"out": table_version(spark, out), **versions(spark, self.world)}
            assert found == {"out": self.base_version, **self.new_versions}, found

    def changed_world(self) -> World:
        """A fresh copy of :attr:`world`'s Python side, for the :data:`CHANGED` tables (a refresh appends to
        its versions)."""
        world = copy.copy(self.world)
        world.tables = {name: dict(rows) for name, rows in self.world.tables.items()}
        world.versions = list(self.world.versions)
        return world


@pytest.fixture(scope="module")
def saved(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Saved:
    """The module's world: built, refreshed once and changed once, here and nowhere else."""
    base = tmp_path_factory.mktemp("multiway_crash")
    world = yelp_world(spark, base / "world")
    spec = world.spec
    spec_path = base / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    folder = SavedFolder(spark, world.root, base / "saved")
    first_expected: dict[tuple, Row] = model_at(spark, world, versions(spark, world))
    assert len(first_expected) == 5
    folder.save(FIRST_RUN)

    first = world.refresh()
    assert first["mode"] == "full", first
    out = spec["output"]["path"]
    base_version = table_version(spark, out)
    old_versions = versions(spark, world)
    old = model_at(spark, world, old_versions)
    assert output_rows(spark, out) == as_rows(old)

    change_all_three(world)
    new_versions = versions(spark, world)
    assert all(new_versions[n] > old_versions[n] for n in INPUTS), "the batch must change every input"
    new = model_at(spark, world, new_versions)
    assert new == world.expected()
    assert new != old, "the changes must change the output, or the test proves nothing"
    folder.save(CHANGED)
    return Saved(world, spec_path, folder, first_expected, base_version, old, new_versions, new)


@pytest.mark.parametrize("phase", PHASES)
def test_kill_during_incremental_refresh(
    spark: SparkSession, saved: Saved, tmp_path: Path, phase: str
) -> None:
    saved.restore(CHANGED)
    world = saved.changed_world()
    spec, spec_path = world.spec, saved.spec_path
    out = spec["output"]["path"]
    base_version, old, new, new_versions = saved.base_version, saved.old, saved.new, saved.new_versions

    run = run_fkjoin(spec_path, tmp_path, kill_at=phase)
    tail = "\n".join(run.stderr_tail)
    if run.killed_at is None:
        # the phase was never traced: the run went to its end, which must be the new state, exactly once
        assert run.returncode == 0, f"run failed before phase {phase} (saw {run.phases}):\n{tail}"
        result = last_result(run)
        assert output_rows(spark, out) == as_rows(new)
        assert_clean_output_changes(spark, out, spec, base_version, result["output"]["version"])
        if phase == "committing" and result.get("write_path") != "net_changes":
            pytest.skip(
                f"the refresh was written by {result.get('write_path')!r}, which has no 'committing' phase "
                f"(warnings: {result.get('warnings')})"
            )
        pytest.fail(f"phase {phase} never traced (saw {run.phases}); stderr:\n{tail}")
    assert run.killed_at == phase
    assert seen_phases(run) == phases_up_to(phase, run), run.phases
    assert run.returncode == -signal.SIGKILL

    # old state or new state, never a mix
    version = table_version(spark, out)
    now = output_rows(spark, out)
    old_rows, new_rows = as_rows(old), as_rows(new)
    if phase in ("pinned", "changes_read") and not run.went_on_to_write():
        assert version == base_version, "nothing may be committed before merge_started"
        assert now == old_rows
    elif phase == "committed":
        assert version == base_version + 1, "the refresh committed before tracing 'committed'"
        assert now == new_rows
    else:
        assert version in (base_version, base_version + 1), (base_version, version)
        assert now == (old_rows if version == base_version else new_rows), "output is a mix of old and new"

    # rerun to completion in-process: the new state (World.refresh checks it against the model), reached
    # by exactly one clean commit over the old state (its change feed is read from base_version + 1)
    result = world.refresh()
    assert result["mode"] == ("noop" if version == base_version + 1 else "incremental"), result
    assert result["output"]["version"] == base_version + 1 == table_version(spark, out), result
    assert {n: result["inputs"][n]["to_version"] for n in INPUTS} == new_versions
    if result["mode"] == "incremental":
        counts = tuple(result["rows"][k] for k in ("inserted", "updated", "deleted"))
        assert counts == (3, 2, 3), result["rows"]
    assert_clean_output_changes(spark, out, spec, base_version, base_version + 1)


def test_kill_during_first_run_then_rerun(spark: SparkSession, saved: Saved, tmp_path: Path) -> None:
    """A first (full) run killed as its write begins leaves no output, or a complete one; the CLI's rerun
    completes it once."""
    saved.restore(FIRST_RUN)
    spec, spec_path = saved.world.spec, saved.spec_path
    out = Path(spec["output"]["path"])
    assert not out.exists(), "the first-run state has no output yet"
    expected = saved.first_expected

    run = run_fkjoin(spec_path, tmp_path, kill_at="merge_started")
    assert run.killed_at == "merge_started", f"saw {run.phases}; stderr:\n" + "\n".join(run.stderr_tail)
    committed = (out / "_delta_log").exists() and any((out / "_delta_log").glob("*.json"))
    if committed:
        assert output_rows(spark, str(out)) == as_rows(expected)

    rerun = run_fkjoin(spec_path, tmp_path)
    assert rerun.returncode == 0, "\n".join(rerun.stderr_tail)
    result = last_result(rerun)
    assert result["mode"] == ("noop" if committed else "full"), result
    assert result["output"]["version"] == table_version(spark, str(out))
    assert output_rows(spark, str(out)) == as_rows(expected)
    assert_clean_output_changes(spark, str(out), spec, None, result["output"]["version"])
