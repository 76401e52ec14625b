"""Per-test durations: every run records them, the next run reads them to start the longest files first,
and the committed table ``tests/durations.json`` is what the slow tier is derived from (``tests/tiers.py``).

What a run records, per test id: its setup, call and teardown seconds, and how much of its setup went to
fixtures shared with other tests (module, package or session scope: a world of tables built once, a
server). A test's *own* cost is the rest: what running it costs once the shared fixtures exist. The run's
record goes to ``test-artifacts/durations.json`` (beside ``junit.xml`` and the ``--durations=0`` report
that ``scripts/test.sh`` asks for) and to the machine's store, ``$FKJOIN_TEST_DURATIONS_DIR`` or
``~/.cache/airflow-provider-fkjoin/test-durations/``, where a later run in another clone (CI clones
afresh) finds it::

    .venv/bin/python tests/support/durations.py update   # the newest stored full run -> tests/durations.json
    .venv/bin/python tests/support/durations.py split    # the tiers' measured split, for docs/development.md

Ordering: files run longest first (their measured total), so that the two workers of ``--dist loadfile``
do not end with one long file running alone; a file never measured counts as long.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
ARTIFACTS = REPO / "test-artifacts"
TABLE = TESTS / "durations.json"
#: Seconds assumed for a file no run has measured: long enough to start early.
UNMEASURED_FILE_S = 120.0
_SHARED = "fkjoin_shared_fixture_s"
_EXAMPLES = "fkjoin_hypothesis_examples"


def store_dir() -> Path:
    """Where every run keeps its record for later runs on this machine."""
    default = Path.home() / ".cache" / "airflow-provider-fkjoin" / "test-durations"
    return Path(os.environ.get("FKJOIN_TEST_DURATIONS_DIR", default))


def own_seconds(record: Mapping[str, Any], examples: int | None = None) -> float:
    """A test's own cost: setup (less the shared fixtures it happened to build first), call, teardown;
    for a property test measured at ``record["examples"]`` examples, scaled to ``examples`` if given."""
    setup = record.get("setup", 0.0) - record.get("shared_setup", 0.0)
    own = max(setup, 0.0) + record.get("call", 0.0) + record.get("teardown", 0.0)
    if examples is not None and record.get("examples"):
        own *= min(examples / record["examples"], 1.0)
    return own


def total_seconds(record: Mapping[str, Any]) -> float:
    return record.get("setup", 0.0) + record.get("call", 0.0) + record.get("teardown", 0.0)


def load_table(path: Path = TABLE) -> dict[str, dict[str, Any]]:
    """The committed table (or a stored run): test id -> its record; empty when there is none."""
    try:
        return dict(json.loads(path.read_text())["tests"])
    except (FileNotFoundError, KeyError, ValueError):
        return {}


def latest_stored() -> Path | None:
    runs = sorted(store_dir().glob("run-*.json"))
    return runs[-1] if runs else None


def file_costs(records: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Test file (``tests/...py``) -> the seconds its tests took in all, shared fixtures included."""
    costs: dict[str, float] = defaultdict(float)
    for test_id, record in records.items():
        costs[test_id.split("::", 1)[0]] += total_seconds(record)
    return dict(costs)


def longest_files_first(items: list[pytest.Item], costs: Mapping[str, float]) -> list[pytest.Item]:
    """``items`` grouped by file, files by measured cost (longest first), each file's own order kept."""
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    order = sorted(by_file, key=lambda f: -costs.get(f, UNMEASURED_FILE_S))
    return [item for f in order for item in by_file[f]]


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


class DurationsPlugin:
    """Times shared fixtures on the workers; collects every report's durations on the controller (or the
    single process) and writes the run's record at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        self.records: dict[str, dict[str, Any]] = {}
        self.current: pytest.Item | None = None
        self.stack: list[list[float]] = []
        self.started = time.time()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.current = item
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            from hypothesis import settings

            item.user_properties.append((_EXAMPLES, settings.default.max_examples))

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Generator[None, Any, Any]:
        """Each fixture's exclusive seconds (those of the fixtures it requested are theirs)."""
        frame = [time.perf_counter(), 0.0]
        self.stack.append(frame)
        try:
            return (yield)
        finally:
            self.stack.pop()
            elapsed = time.perf_counter() - frame[0]
            if self.stack:
                self.stack[-1][1] += elapsed
            item = self.current
            if fixturedef.scope != "function" and item is not None:
                item.user_properties.append((_SHARED, round(elapsed - frame[1], 3)))

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        measured = load_table()
        stored = latest_stored()
        if stored is not None:
            measured.update(load_table(stored))
        items[:] = longest_files_first(items, file_costs(measured))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:
            return
        record = self.records.setdefault(report.nodeid, {})
        record[report.when] = round(report.duration, 3)
        if report.when == "setup":
            shared = sum(v for k, v in report.user_properties if k == _SHARED)
            if shared:
                record["shared_setup"] = round(shared, 3)
            for key, value in report.user_properties:
                if key == _EXAMPLES:
                    record["examples"] = value
        if report.failed or report.when == "call" or (report.when == "setup" and report.skipped):
            record["outcome"] = report.outcome

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker or not self.records:
            return
        run = {
            "commit": _commit(),
            "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "wall_s": round(time.time() - self.started, 1),
            "args": self.config.invocation_params.args,
            "markexpr": self.config.option.markexpr,
            "hypothesis_profile": os.environ.get("HYPOTHESIS_PROFILE", "ci"),
            "exitstatus": int(exitstatus),
            "tests": dict(sorted(self.records.items())),
        }
        text = json.dumps(run, indent=1) + "\n"
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "durations.json").write_text(text)
        store = store_dir()
        try:
            store.mkdir(parents=True, exist_ok=True)
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
            (store / f"run-{stamp}-{run['commit']}.json").write_text(text)
        except OSError as error:  # a read-only home must not fail the run
            print(f"durations: not stored in {store}: {error}", file=sys.stderr)


def is_full_run(run: Mapping[str, Any]) -> bool:
    """Every tier, every test: no ``-m``, no ``-k``, no test paths picked by hand."""
    args = [str(a) for a in run.get("args", [])]
    picked = any(a in ("-k", "--lf", "--ff", "--deselect") or a.startswith("tests") for a in args)
    return not run.get("markexpr") and not picked and run.get("exitstatus") == 0


def _update(source: Path | None) -> int:
    """Rewrite the committed table from a stored run: the one named, else the newest full green one."""
    candidates = [source] if source else sorted(store_dir().glob("run-*.json"), reverse=True)
    runs = [(path, json.loads(path.read_text())) for path in candidates]
    full = [(path, run) for path, run in runs if source or is_full_run(run)]
    if not full:
        print(f"no full green run stored in {store_dir()}", file=sys.stderr)
        return 1
    path, run = full[0]
    table = {
        "measured": {
            "commit": run["commit"],
            "finished": run["finished"],
            "wall_s": run["wall_s"],
            "command": "./scripts/test.sh --all (2 pytest-xdist workers, 2 cores)",
        },
        "tests": {
            test_id: {k: v for k, v in record.items() if k != "outcome"}
            for test_id, record in run["tests"].items()
        },
    }
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{TABLE}: {len(table['tests'])} tests from {path.name}")
    return 0


def split_table(records: Mapping[str, Mapping[str, Any]], tier_of: Callable[[str], str]) -> str:
    """The measured split as a Markdown table (what ``docs/development.md`` shows): per tier, its tests and
    the minutes of one worker they took in the measured full run, shared fixtures included, and its
    longest files."""
    tiers: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, int] = defaultdict(int)
    for test_id, record in records.items():
        tier = tier_of(test_id)
        tiers[tier][test_id.split("::", 1)[0]] += total_seconds(record)
        counts[tier] += 1
    lines = ["| tier | tests | worker-minutes | longest files (minutes) |", "|---|---:|---:|---|"]
    for tier in ("fast", "slow", "e2e"):
        files = tiers.get(tier, {})
        longest = sorted(files.items(), key=lambda item: -item[1])[:4]
        names = ", ".join(f"`{f.removeprefix('tests/')}` ({s / 60:.1f})" for f, s in longest)
        lines.append(f"| {tier} | {counts.get(tier, 0)} | {sum(files.values()) / 60:.1f} | {names} |")
    return "\n".join(lines)


def _print_split() -> int:
    sys.path.insert(0, str(TESTS))
    from tiers import id_parts, tier_of

    table = json.loads(TABLE.read_text())
    print(split_table(table["tests"], lambda test_id: tier_of(*id_parts(test_id)) or "fast"))
    measured = table["measured"]
    when = f"{measured['commit']} ({measured['finished']})"
    print(f"\nMeasured at {when}: {measured['command']}; {measured['wall_s'] / 60:.0f} min of pytest.")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["update"]:
        raise SystemExit(_update(Path(args[1]) if len(args) > 1 else None))
    if args[:1] == ["split"]:
        raise SystemExit(_print_split())
    print(__doc__)
    raise SystemExit(2)
