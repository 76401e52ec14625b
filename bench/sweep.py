"""Benchmark: does ``refresh_strategy: auto`` pick the faster plan? Every keyed kind x sizes x change ratios,
each refreshed with ``incremental``, ``recompute`` and ``auto`` from the same state and the same change.

A cell is one kind at one size and one change ratio. Its inputs are generated once (the other benchmarks'
generators: ``datagen`` for the foreign-key join and the global table, ``bench.windowed_table`` and
``bench.multiway`` for theirs) and copied once per strategy; each copy's output gets its first (full)
refresh with that strategy's spec, so the three start from identical inputs and equal outputs. Then
``--rounds`` times: the same change of that ratio is applied to every copy (deterministic, so the copies
stay identical) and each copy is refreshed with its own strategy, the order rotated by round. ``auto`` thus
sees its own output's history, as the engine's cost model expects, and after every refresh the output is
audited (``run_spec(..., audit=True)``: the join recomputed from scratch at the consumed versions and
compared row by row). A difference is an error of the cell, printed and recorded.

Per cell the report gives each strategy's median seconds over the rounds, what ``auto`` chose each round
(and the estimate it weighed), and ``auto / min(incremental, recompute)``: 1.0 means auto was as fast as
the better forced plan, above 1.15 it is marked. A kind whose engine has no recompute plan records
``"n/a"`` for it, and auto is compared with the incremental plan alone. The heatmap (``--png-out``) shows
that ratio, one panel per kind, sizes by ratios.

    python -m bench.sweep --sizes 1K,100K --json-out bench/results/sweep_small.json
    python -m bench.sweep                                  # 1K..10M x 0.01%..50%: hours on two cores
    python -m bench.sweep --quick                          # three 1K cells; report in bench/data/
    python -m bench.sweep --from-json bench/results/sweep_small.json   # its table and heatmap again
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import datagen
from bench.common import (
    BENCH_DIR,
    DATA_DIR,
    RESULTS_DIR,
    command_line,
    conf_pairs,
    spark_session,
    write_json,
)

STRATEGIES = ("incremental", "recompute", "auto")
FORCED = ("incremental", "recompute")
#: A cell whose auto / best forced plan is above this is marked: auto chose (or estimated) wrong.
MARK_ABOVE = 1.15
#: The engine's SpecError when a kind has no recompute plan (``refresh/skeleton.py``).
NO_RECOMPUTE = "recompute is not available"
DEFAULT_SIZES = "1K,100K,1M,10M"
DEFAULT_RATIOS = "0.01%,0.1%,1%,10%,50%"
#: ``--quick``: three cells small enough for a test.
QUICK_CELLS = (("foreign_key_join", 1_000, 0.01), ("foreign_key_join", 1_000, 0.5),
               ("global_table_bootstrap", 1_000, 0.1))  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# the workloads: one per keyed kind


Tables = dict[str, Path]


@dataclass(frozen=True)
class Workload:
    """One keyed kind's data, spec and change, at any size.

    ``generate(spark, base_dir, size)`` writes (or reuses) the pristine input tables and returns them by
    name; ``spec(tables, out, size)`` is the kind's spec over a copy of them; ``change(spark, tables, size,
    ratio, round)`` applies that round's change (deterministic: the same call on two identical copies
    leaves them identical) and returns the rows asked to change per input.

    >>> WORKLOADS["global_table_bootstrap"].spec({"customers": Path("/w/c")}, Path("/w/out"), 1000)["kind"]
    'global_table_bootstrap'
    """

    kind: str
    label: str
    generate: Callable[[Any, Path, int], Tables]
    spec: Callable[[Tables, Path, int], dict[str, Any]]
    change: Callable[[Any, Tables, int, float, int], dict[str, int]]


def _rows(size: int, ratio: float) -> int:
    """Rows a change of ``ratio`` touches in a table of ``size`` rows: at least one (0.01% of 1K is 0.1)."""
    return max(1, round(size * ratio))


def _modulus(ratio: float) -> int:
    """``ratio`` as "1 in N rows" for the generators that pick every N-th key."""
    return max(1, round(1 / ratio))


def _every_nth(keys: int, modulus: int, index: int) -> int:
    """How many of the keys 0..keys-1 are ``index`` modulo ``modulus``: the rows such a change picks."""
    return len(range(index % modulus, keys, modulus))


def _fk_right_rows(size: int) -> int:
    return max(size // 10, 10)


def _fk_generate(spark, base_dir: Path, size: int) -> Tables:
    base = datagen.ensure_base_tables(spark, base_dir, size, _fk_right_rows(size))
    return {"orders": base.left, "customers": base.right}


def _fk_spec(tables: Tables, out: Path, size: int) -> dict[str, Any]:
    from bench.fk_join import make_spec

    return make_spec(tables["orders"], tables["customers"], out)


def _fk_change(spark, tables: Tables, size: int, ratio: float, index: int) -> dict[str, int]:
    right_rows = _fk_right_rows(size)
    n_left, n_right = _rows(size, ratio), _rows(right_rows, ratio)
    datagen.apply_right_changes(spark, tables["customers"], right_rows, n_right, index, reuse_keys=True)
    datagen.apply_left_changes(
        spark, tables["orders"], size, right_rows, n_left, n_right, index, reuse_keys=True
    )
    return {"orders": n_left, "customers": n_right}


def _global_generate(spark, base_dir: Path, size: int) -> Tables:
    return {"customers": datagen.ensure_customers(spark, base_dir, size)[0]}


def _global_spec(tables: Tables, out: Path, size: int) -> dict[str, Any]:
    from bench.global_table import bootstrap_spec

    return bootstrap_spec(tables["customers"], out)


def _global_change(spark, tables: Tables, size: int, ratio: float, index: int) -> dict[str, int]:
    n = _rows(size, ratio)
    datagen.apply_right_changes(spark, tables["customers"], size, n, index, reuse_keys=True)
    return {"customers": n}


def _windowed_shape(size: int) -> tuple[int, int]:
    """(services, minutes per service) of a ``size``-row windowed table: 50 services as in
    ``bench.windowed_table`` from 5,000 rows, fewer below so each has 100 windows."""
    services = 50 if size >= 5_000 else max(1, size // 100)
    return services, max(size // services, 2)


def _windowed_generate(spark, base_dir: Path, size: int) -> Tables:
    from bench.windowed_table import write_table

    path = base_dir / "base" / f"windowed_{size}" / "errors_per_min"
    if not (path / "_delta_log").is_dir():
        shutil.rmtree(path, ignore_errors=True)
        write_table(spark, str(path), *_windowed_shape(size))
    return {"errors_per_min": path}


def _windowed_spec(tables: Tables, out: Path, size: int) -> dict[str, Any]:
    """Each window with the same service's window half the table's span earlier (``bench.windowed_table``'s
    join, whose 14 days are offset by 7), so half the windows find a partner at every size."""
    from bench.windowed_table import make_spec

    minutes = _windowed_shape(size)[1]
    return make_spec(str(tables["errors_per_min"]), str(out), offset=f"-{minutes // 2}m")


def _windowed_change(spark, tables: Tables, size: int, ratio: float, index: int) -> dict[str, int]:
    from bench.windowed_table import change_table

    services, minutes = _windowed_shape(size)
    modulus = _modulus(ratio)
    change_table(spark, str(tables["errors_per_min"]), modulus, index, services=services)
    return {"errors_per_min": _every_nth(services * minutes, modulus, index)}


def _multiway_generate(spark, base_dir: Path, size: int) -> Tables:
    from bench.multiway import write_inputs

    root = base_dir / "base" / f"multiway_{size}"
    tables = {name: root / name for name in ("review", "business", "owner")}
    if not all((path / "_delta_log").is_dir() for path in tables.values()):
        shutil.rmtree(root, ignore_errors=True)
        write_inputs(spark, {name: str(path) for name, path in tables.items()}, size)
    return tables


def _multiway_spec(tables: Tables, out: Path, size: int) -> dict[str, Any]:
    from bench.multiway import make_spec

    return make_spec({**{name: str(path) for name, path in tables.items()}, "out": str(out)})


def _multiway_change(spark, tables: Tables, size: int, ratio: float, index: int) -> dict[str, int]:
    from bench.multiway import change_inputs

    modulus = _modulus(ratio)
    change_inputs(spark, {name: str(path) for name, path in tables.items()}, modulus, index, exact=True)
    businesses = max(size // 10, 1)
    return {
        "review": _every_nth(size, modulus, index),
        "business": _every_nth(businesses, modulus, index),
        "owner": _every_nth(businesses, modulus, index),
    }


WORKLOADS: dict[str, Workload] = {
    w.kind: w
    for w in (
        Workload("foreign_key_join", "foreign_key_join (orders x customers/10, inner)", _fk_generate,
                 _fk_spec, _fk_change),
        Workload("global_table_bootstrap", "global_table_bootstrap (customers)", _global_generate,
                 _global_spec, _global_change),
        Workload("windowed_join", "windowed_join, mode table (left, shifted window)", _windowed_generate,
                 _windowed_spec, _windowed_change),
        Workload("multiway_join", "multiway_join (reviews x businesses x owners)", _multiway_generate,
                 _multiway_spec, _multiway_change),
    )
}  # fmt: skip
KIND_ALIASES = {"fk": "foreign_key_join", "global": "global_table_bootstrap", "windowed": "windowed_join",
                "multiway": "multiway_join"}  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# flags


def parse_size(text: str) -> int:
    """``1K`` -> 1000, ``10M`` -> 10000000, ``2500`` -> 2500.

    >>> [parse_size(s) for s in ("1K", "100k", "10M", "2500")]
    [1000, 100000, 10000000, 2500]
    """
    text = text.strip().upper().replace("_", "")
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    number = float(text[:-1] if scale > 1 else text)
    if number <= 0 or number * scale != int(number * scale):
        raise argparse.ArgumentTypeError(f"size {text!r}: give a positive number of rows (1K, 100K, 1M)")
    return int(number * scale)


def parse_ratio(text: str) -> float:
    """``1%`` -> 0.01; ``0.5`` -> 0.5 (a fraction without ``%``).

    >>> [parse_ratio(s) for s in ("0.01%", "50%", "0.1")]
    [0.0001, 0.5, 0.1]
    """
    text = text.strip()
    value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"ratio {text!r}: give a share in (0, 100%]")
    return round(value, 10)


def size_label(rows: int) -> str:
    """``1000000`` -> ``1M``; ``100000`` -> ``100K``; ``2500`` -> ``2500``."""
    for scale, suffix in ((1_000_000, "M"), (1_000, "K")):
        if rows >= scale and rows % scale == 0:
            return f"{rows // scale}{suffix}"
    return str(rows)


def ratio_label(ratio: float) -> str:
    """``0.0001`` -> ``0.01%``."""
    return f"{ratio * 100:g}%"


def _listed(text: str, parse: Callable[[str], Any]) -> list[Any]:
    return [parse(item) for item in text.split(",") if item.strip()]


def parse_kinds(text: str) -> list[str]:
    """Kind names or their short forms (fk, global, windowed, multiway), in the sweep's order."""
    wanted = {KIND_ALIASES.get(item.strip(), item.strip()) for item in text.split(",") if item.strip()}
    unknown = wanted - set(WORKLOADS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"kinds {sorted(unknown)}: choose from {', '.join([*KIND_ALIASES, *WORKLOADS])}"
        )
    return [kind for kind in WORKLOADS if kind in wanted]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--kinds",
        type=parse_kinds,
        default=list(WORKLOADS),
        help="comma list: fk, global, windowed, multiway (default: all four)",
    )
    p.add_argument(
        "--sizes",
        type=lambda text: _listed(text, parse_size),
        default=_listed(DEFAULT_SIZES, parse_size),
        help=f"rows of each kind's main input, comma list (default {DEFAULT_SIZES})",
    )
    p.add_argument(
        "--ratios",
        type=lambda text: _listed(text, parse_ratio),
        default=_listed(DEFAULT_RATIOS, parse_ratio),
        help=f"share of rows changed per round, comma list (default {DEFAULT_RATIOS})".replace("%", "%%"),
    )
    p.add_argument(
        "--rounds",
        "--repeat",
        dest="rounds",
        type=int,
        default=3,
        help="change + refresh rounds per strategy and cell, reported as their median (default 3)",
    )
    p.add_argument(
        "--verify",
        choices=["each", "last"],
        default="each",
        help="audit every refresh (each), or each strategy's first and last only (last: for 10M)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="three 1K cells (FK at 1%% and 50%%, global at 10%%); report in bench/data/",
    )
    p.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="skip the untimed 1K pass of each kind that warms the JVM first",
    )
    p.add_argument("--keep", action="store_true", help="keep each cell's tables (default: deleted after it)")
    p.add_argument("--workdir", type=Path, default=DATA_DIR / "sweep", help="data folder (bench/data/sweep)")
    p.add_argument("--master", default="local[2]")
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeatable)"
    )
    p.add_argument(
        "--json-out",
        type=Path,
        default=None,
        help="the JSON report (default bench/results/sweep.json; '-': print the table only)",
    )
    p.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="REPORT",
        help="run nothing: print the table of an earlier report and draw its heatmap (to --png-out, default "
        "the report's path with .png)",
    )
    p.add_argument(
        "--png-out",
        type=Path,
        default=None,
        help="the heatmap (default: the JSON report's path with .png; '-': none)",
    )
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds: at least 1")
    name = "sweep_quick" if args.quick else "sweep"
    folder = DATA_DIR if args.quick else RESULTS_DIR
    if args.json_out is None:
        args.json_out = folder / f"{name}.json"
    elif str(args.json_out) == "-":
        args.json_out = None
    if args.png_out is None:
        args.png_out = (args.from_json or args.json_out or folder / f"{name}.json").with_suffix(".png")
    elif str(args.png_out) == "-":
        args.png_out = None
    return args


def planned_cells(args: argparse.Namespace) -> list[tuple[str, int, float]]:
    """The (kind, size, ratio) cells the flags ask for, smallest sizes first."""
    if args.quick:
        return list(QUICK_CELLS)
    return [(kind, size, ratio) for size in args.sizes for kind in args.kinds for ratio in args.ratios]


# --------------------------------------------------------------------------------------------------------
# one cell


@dataclass
class Copy:
    """One strategy's copy of a cell: its tables, spec and rounds (None when it cannot run)."""

    strategy: str
    tables: Tables
    spec: dict[str, Any]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    unavailable: str | None = None
    failed: str | None = None

    @property
    def live(self) -> bool:
        return self.unavailable is None and self.failed is None


def _strategy_fields(result: dict[str, Any]) -> dict[str, Any]:
    """What a refresh result says about its plan: ``chosen`` (None when the kind has a single plan and
    the result carries no ``strategy``), ``estimate``, any ``fallback``, and the whole ``strategy`` as
    the engine gave it (its fields grow with the cost model).

    >>> _strategy_fields({"strategy": {"chosen": "recompute", "estimate": None}})["chosen"]
    'recompute'
    """
    strategy = result.get("strategy") or {}
    return {
        "chosen": strategy.get("chosen"),
        "estimate": strategy.get("estimate"),
        "fallback": strategy.get("fallback"),
        "strategy": strategy or None,
    }


def _refresh(spark, copy: Copy, audit: bool, log: Callable[[str], None], label: str) -> dict[str, Any]:
    """One timed refresh of ``copy`` (and its audit, untimed): the round's record. A SpecError saying the
    kind has no recompute plan marks the copy unavailable; any other error marks it failed."""
    from airflow_provider_fkjoin.engine import SpecError, run_spec

    began = time.perf_counter()
    try:
        result = run_spec(copy.spec, spark=spark)
    except SpecError as error:
        if NO_RECOMPUTE in str(error):
            copy.unavailable = str(error)
            log(f"{label} {copy.strategy}: n/a ({NO_RECOMPUTE})")
            return {}
        copy.failed = f"{type(error).__name__}: {error}"
        log(f"!!! {label} {copy.strategy}: {copy.failed}")
        return {"error": copy.failed}
    except Exception as error:  # a failed refresh is the cell's error, the sweep goes on
        copy.failed = f"{type(error).__name__}: {str(error)[:2000]}"
        log(f"!!! {label} {copy.strategy}: {copy.failed}")
        return {"error": copy.failed}
    seconds = round(time.perf_counter() - began, 3)
    record: dict[str, Any] = {
        "seconds": seconds,
        "mode": result.get("mode"),
        **_strategy_fields(result),
        "rows": {k: v for k, v in (result.get("rows") or {}).items() if isinstance(v, int | float)},
        "write_path": result.get("write_path"),
        "phases": result.get("phases"),
    }
    if audit:
        record["consistent"], record["audit"] = _audit(spark, copy.spec)
    chose = f", chose {record['chosen']}" if record["chosen"] else ""
    checked = {True: ", equals the recompute", False: ", DIFFERS from the recompute", None: ""}
    log(f"{label} {copy.strategy}: {seconds:.2f}s {record['mode']}{chose}{checked[record.get('consistent')]}")
    return record


def _audit(spark, spec: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Whether the output equals its join recomputed from scratch (the engine's audit), and its counts."""
    from airflow_provider_fkjoin.engine import run_spec

    try:
        report = run_spec(spec, spark=spark, audit=True)
    except Exception as error:
        return False, {"error": f"{type(error).__name__}: {str(error)[:2000]}"}
    return bool(report.get("consistent")), {
        "rows": report.get("rows"),
        "columns": report.get("columns"),
        "duration_s": report.get("duration_s"),
    }


def say(message: str) -> None:
    """Print a progress line at once (a benchmark's stdout is often a file, block-buffered)."""
    print(message, flush=True)


def _median(values: Iterable[float]) -> float | None:
    values = list(values)
    return round(statistics.median(values), 3) if values else None


def run_cell(
    spark,
    kind: str,
    size: int,
    ratio: float,
    rounds: int,
    workdir: Path,
    verify: str = "each",
    keep: bool = False,
    log: Callable[[str], None] = say,
) -> dict[str, Any]:
    """One cell: inputs generated (or reused) under ``workdir/base``, a copy per strategy under
    ``workdir/cells``, the first refresh of each, then ``rounds`` of change + refresh of every copy.

    >>> cell = run_cell(spark, "foreign_key_join", 1_000, 0.01, 3, Path("/tmp/sweep"))  # doctest: +SKIP
    >>> cell["seconds"], cell["auto_chose"], cell["auto_over_best"]  # doctest: +SKIP
    ({'incremental': 2.71, 'recompute': 2.02, 'auto': 2.05}, ['recompute', 'recompute', 'recompute'], 1.015)
    """
    workload = WORKLOADS[kind]
    label = f"[sweep] {kind} {size_label(size)} {ratio_label(ratio)}"
    started = time.perf_counter()
    base = workload.generate(spark, workdir, size)
    generate_s = round(time.perf_counter() - started, 2)
    root = workdir / "cells" / f"{kind}_{size}_{ratio_label(ratio).replace('%', 'pct')}"
    shutil.rmtree(root, ignore_errors=True)
    copies: dict[str, Copy] = {}
    first: dict[str, Any] = {}
    for strategy in STRATEGIES:
        tables = {name: root / strategy / name for name in base}
        for name, source in base.items():
            datagen.copy_table(source, tables[name])
        spec = {**workload.spec(tables, root / strategy / "out", size), "refresh_strategy": strategy}
        copies[strategy] = copy = Copy(strategy, tables, spec)
        first[strategy] = _refresh(spark, copy, audit=True, log=log, label=f"{label} first")
    changed: list[dict[str, int]] = []
    for index in range(rounds):
        live = [copy for copy in copies.values() if copy.live]
        if not live:
            break
        asked = {}
        for copy in live:
            asked = workload.change(spark, copy.tables, size, ratio, index)
        changed.append(asked)
        order = [live[(index + i) % len(live)] for i in range(len(live))]  # a different one first each round
        for copy in order:
            audit = verify == "each" or index == rounds - 1
            record = _refresh(spark, copy, audit=audit, log=log, label=f"{label} round {index + 1}")
            if record:
                copy.rounds.append(record)
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return summarize_cell(kind, size, ratio, rounds, copies, first, changed, generate_s)


def summarize_cell(
    kind: str,
    size: int,
    ratio: float,
    rounds: int,
    copies: dict[str, Copy],
    first: dict[str, Any],
    changed: list[dict[str, int]],
    generate_s: float,
) -> dict[str, Any]:
    """A cell's record: medians, auto's choices, auto / best forced plan, whether every output was
    verified, and its errors (a failed refresh, an output that differs from the recompute, a round missing).

    >>> copies = {s: Copy(s, {}, {}, [{"seconds": t, "chosen": s, "consistent": True}]) for s, t in
    ...           (("incremental", 2.0), ("recompute", 3.0), ("auto", 2.2))}
    >>> summarize_cell("foreign_key_join", 1000, 0.01, 1, copies, {}, [], 0.0)["auto_over_best"]
    1.1
    """
    errors: list[str] = []
    seconds: dict[str, float | str | None] = {}
    for strategy, copy in copies.items():
        if copy.unavailable is not None:
            seconds[strategy] = "n/a"
            continue
        if copy.failed is not None:
            errors.append(f"{strategy}: {copy.failed}")
        if len(copy.rounds) < rounds and copy.failed is None:
            errors.append(f"{strategy}: {len(copy.rounds)} of {rounds} rounds ran")
        differs = [i + 1 for i, r in enumerate(copy.rounds) if r.get("consistent") is False]
        if first.get(strategy, {}).get("consistent") is False:
            errors.append(f"{strategy}: the first refresh's output differs from the recompute")
        if differs:
            errors.append(f"{strategy}: the output differs from the recompute after round(s) {differs}")
        seconds[strategy] = _median(r["seconds"] for r in copy.rounds if "seconds" in r)
    forced = {s: v for s, v in seconds.items() if s in FORCED and isinstance(v, float | int)}
    best = min(forced, key=lambda s: forced[s]) if forced else None
    auto = seconds.get("auto")
    ratio_to_best = None
    if best is not None and isinstance(auto, float | int) and forced[best]:
        ratio_to_best = round(auto / forced[best], 3)
    auto_rounds = copies["auto"].rounds if "auto" in copies else []
    audited = [
        r.get("consistent") for copy in copies.values() for r in [first.get(copy.strategy, {}), *copy.rounds]
    ]
    return {
        "kind": kind,
        "size": size,
        "ratio": ratio,
        "label": f"{kind} {size_label(size)} {ratio_label(ratio)}",
        "rows_changed_per_round": changed,
        "generate_s": generate_s,
        "first_refresh_s": {s: r.get("seconds") for s, r in first.items() if r.get("seconds") is not None},
        "seconds": seconds,
        "best_forced": best,
        "auto_over_best": ratio_to_best,
        "marked": ratio_to_best is not None and ratio_to_best > MARK_ABOVE,
        "auto_chose": [r.get("chosen") for r in auto_rounds],
        # rounds in which auto took the plan that was faster forced: where it did every round, a ratio
        # above 1 is the machine's noise between copies, not a wrong choice
        "auto_chose_best": sum(r.get("chosen") == best for r in auto_rounds) if best else None,
        "auto_estimate": [r.get("estimate") for r in auto_rounds],
        "recompute": "n/a" if copies.get("recompute") and copies["recompute"].unavailable else "available",
        # a plan the engine could not take ran the other (a forced recompute that fell back times the
        # incremental plan): read such a cell's seconds with that in mind
        "fallbacks": {
            s: n for s, copy in copies.items() if (n := sum(bool(r.get("fallback")) for r in copy.rounds))
        },
        "modes": {
            s: sorted({r.get("mode") for r in copy.rounds if r.get("mode")}) for s, copy in copies.items()
        },
        "verified": not errors and any(a is True for a in audited),
        "errors": errors,
        "first": first,
        "rounds": {s: copy.rounds for s, copy in copies.items()},
    }


# --------------------------------------------------------------------------------------------------------
# the sweep


def run(
    spark,
    cells: Sequence[tuple[str, int, float]],
    rounds: int,
    workdir: Path,
    json_out: Path | None,
    png_out: Path | None,
    *,
    verify: str = "each",
    warmup: bool = True,
    keep: bool = False,
    command: str | None = None,
    log: Callable[[str], None] = say,
) -> dict[str, Any]:
    """Run ``cells`` on ``spark`` (one session for all), then write the report and the heatmap and print
    the table. The report is returned; no assertion on timings anywhere.

    >>> cells = [("foreign_key_join", 1_000, 0.5)]
    >>> report = run(spark, cells, 2, Path("/tmp/sweep"), None, None)  # doctest: +SKIP
    >>> report["cells"][0]["verified"]  # doctest: +SKIP
    True
    """
    workdir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": command,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rounds": rounds,
        "verify": verify,
        "mark_above": MARK_ABOVE,
        "load_avg_start": os.getloadavg(),
        "machine": _machine(spark),
        "cells": [],
    }
    if warmup:
        for kind in dict.fromkeys(kind for kind, _, _ in cells):
            log(f"[sweep] warm-up: {kind} 1K, not recorded")
            run_cell(spark, kind, 1_000, 0.01, 1, workdir / "warmup", verify="last", log=lambda _: None)
        shutil.rmtree(workdir / "warmup", ignore_errors=True)
    for kind, size, ratio in cells:
        cell = run_cell(spark, kind, size, ratio, rounds, workdir, verify=verify, keep=keep, log=log)
        for error in cell["errors"]:
            log(f"!!! {cell['label']}: {error}")
        report["cells"].append(cell)
        if json_out is not None:  # a partial report survives a sweep stopped halfway
            write_json(json_out, {**report, "summary": summarize(report["cells"])})
    report["load_avg_end"] = os.getloadavg()
    report["summary"] = summarize(report["cells"])
    print(format_table(report["cells"]), flush=True)
    if json_out is not None:
        write_json(json_out, report)
        log(f"[sweep] report written to {json_out}")
    if png_out is not None:
        plot_heatmap(report, png_out)
        log(f"[sweep] heatmap written to {png_out}")
    return report


def _machine(spark) -> dict[str, Any]:
    """``bench.fk_join``'s machine record, and whether the engine's code differs from ``git_head`` (a
    sweep run on uncommitted engine changes measured those, not the commit)."""
    from bench.fk_join import machine_info

    try:
        info = machine_info(spark)
    except Exception as error:  # a Spark Connect session has no JVM to ask
        info = {"nproc": os.cpu_count(), "error": str(error)[:200]}
    with contextlib.suppress(Exception):
        status = subprocess.run(
            ["git", "-C", str(BENCH_DIR.parent), "status", "--porcelain", "--", "airflow_provider_fkjoin"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        info["engine_uncommitted_changes"] = bool(status.strip())
    return info


def summarize(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep in a few numbers: cells run, verified, with errors, marked (auto / best above
    :data:`MARK_ABOVE`), and the median and worst auto / best."""
    ratios = [c["auto_over_best"] for c in cells if c["auto_over_best"] is not None]
    return {
        "cells": len(cells),
        "verified": sum(c["verified"] for c in cells),
        "with_errors": [c["label"] for c in cells if c["errors"]],
        "marked": [c["label"] for c in cells if c["marked"]],
        "auto_over_best_median": _median(ratios),
        "auto_over_best_max": max(ratios) if ratios else None,
    }


def choices(chosen: Iterable[str | None]) -> str:
    """Auto's plan each round in one letter: ``i`` incremental, ``r`` recompute, ``-`` none reported (a
    kind with a single plan).

    >>> choices(["recompute", "incremental", None])
    'ri-'
    """
    return "".join({"incremental": "i", "recompute": "r"}.get(x or "", "-") for x in chosen)


def format_table(cells: list[dict[str, Any]]) -> str:
    """The cells as a fixed-width table: each strategy's median seconds, auto's choices (``i``
    incremental, ``r`` recompute, ``-`` the kind's only plan), the faster forced plan, auto / best, and the
    verdict."""

    def secs(value: Any) -> str:
        return f"{value:.2f}" if isinstance(value, float | int) else str(value or "-")

    head = ("kind", "size", "ratio", "incremental s", "recompute s", "auto s", "auto chose", "best",
            "auto/best", "")  # fmt: skip
    rows = [head]
    for c in cells:
        chose = choices(c["auto_chose"])
        verdict = "ERROR" if c["errors"] else ("verified" if c["verified"] else "unverified")
        ratio = c["auto_over_best"]
        rows.append((
            c["kind"], size_label(c["size"]), ratio_label(c["ratio"]),
            *(secs(c["seconds"].get(s)) for s in STRATEGIES), chose or "-", choices([c["best_forced"]]),
            "-" if ratio is None else f"{ratio:.2f}" + (" *" if c["marked"] else ""), verdict,
        ))  # fmt: skip
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join([*lines, f"(* auto / best forced plan > {MARK_ABOVE})"])


# --------------------------------------------------------------------------------------------------------
# the heatmap


def plot_heatmap(report: dict[str, Any], path: Path) -> None:
    """One panel per kind (two a row), sizes (rows) by ratios (columns), coloured by auto / best forced
    plan (green at or under 1, red above) and annotated with it and auto's plan each round; cells above
    :data:`MARK_ABOVE` boxed, a cell with an error grey and marked ``error``. Headless (the Agg backend),
    so it draws on a machine without a display.

    >>> report = json.loads(Path("bench/results/sweep.json").read_text())  # doctest: +SKIP
    >>> plot_heatmap(report, Path("/tmp/sweep.png"))  # doctest: +SKIP
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.patches import Rectangle

    cells = report["cells"]
    kinds = list(dict.fromkeys(c["kind"] for c in cells))
    sizes = sorted({c["size"] for c in cells})
    ratios = sorted({c["ratio"] for c in cells})
    values = [c["auto_over_best"] for c in cells if c["auto_over_best"] is not None]
    norm = TwoSlopeNorm(vmin=min([0.75, *values]) - 0.01, vcenter=1.0, vmax=max([1.5, *values]) + 0.01)
    cmap = plt.get_cmap("RdYlGn_r").with_extremes(bad="#d9d9d9")
    columns = min(2, len(kinds))
    rows = math.ceil(len(kinds) / columns)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(columns * (1.25 * len(ratios) + 1.6) + 1.0, rows * (0.8 * len(sizes) + 1.5) + 0.9),
        squeeze=False,
        layout="constrained",
    )
    image = None
    for ax, kind in zip(axes.flat, kinds, strict=False):
        by_place = {(c["size"], c["ratio"]): c for c in cells if c["kind"] == kind}
        grid = [[_shown(by_place.get((s, r))) for r in ratios] for s in sizes]
        image = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto")
        for i, s in enumerate(sizes):
            for j, r in enumerate(ratios):
                cell = by_place.get((s, r))
                if cell is None:
                    ax.text(j, i, "not run", ha="center", va="center", fontsize=7, color="#666666")
                    continue
                value = cell["auto_over_best"]
                text = "error" if cell["errors"] else ("-" if value is None else f"{value:.2f}")
                weight = "bold" if cell["marked"] or cell["errors"] else "normal"
                ax.text(j, i - 0.13, text, ha="center", va="center", fontsize=9, fontweight=weight)
                plans = f"auto {choices(cell['auto_chose']) or '-'}, best {choices([cell['best_forced']])}"
                ax.text(j, i + 0.23, plans, ha="center", va="center", fontsize=6.5)
                if cell["marked"]:
                    ax.add_patch(Rectangle((j - 0.46, i - 0.46), 0.92, 0.92, fill=False, lw=2.2, ec="black"))
        ax.set_xticks(range(len(ratios)), [ratio_label(r) for r in ratios], fontsize=8)
        ax.set_yticks(range(len(sizes)), [size_label(s) for s in sizes], fontsize=8)
        ax.set_xlabel("rows changed per round", fontsize=8)
        ax.set_ylabel("rows", fontsize=8)
        title = WORKLOADS[kind].label if kind in WORKLOADS else kind
        if any(c["recompute"] == "n/a" for c in by_place.values()):
            title += "\nno recompute plan: auto / incremental"
        ax.set_title(title, fontsize=8.5)
    for ax in list(axes.flat)[len(kinds) :]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="auto / best forced plan")
    fig.suptitle(
        f"refresh_strategy: auto against the faster forced plan, median of {report['rounds']} rounds\n"
        f"boxed: > {MARK_ABOVE}; auto: its plan each round, best: the faster forced plan (i incremental, "
        "r recompute); "
        f"{report.get('started', '')}, commit {report.get('machine', {}).get('git_head', '?')}",
        fontsize=9,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _shown(cell: dict[str, Any] | None) -> float:
    """The colour value of a heatmap cell: auto / best, or NaN (grey) when not run, failed or unknown."""
    if cell is None or cell["errors"] or cell["auto_over_best"] is None:
        return math.nan
    return float(cell["auto_over_best"])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json is not None:
        report = json.loads(args.from_json.read_text())
        say(format_table(report["cells"]))
        if args.png_out is not None:
            plot_heatmap(report, args.png_out)
            say(f"[sweep] heatmap written to {args.png_out}")
        return 1 if report["summary"]["with_errors"] else 0
    spark = spark_session(args.master, conf_pairs(args.conf))
    shutil.rmtree(args.workdir, ignore_errors=True)
    report = run(
        spark,
        planned_cells(args),
        args.rounds,
        args.workdir,
        args.json_out,
        args.png_out,
        verify=args.verify,
        warmup=args.warmup,
        keep=args.keep,
        command=command_line("bench.sweep"),
    )
    return 1 if report["summary"]["with_errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
