"""Benchmark: incremental foreign-key join refresh vs a Spark full recompute.

For each left size (orders) against one right size (customers):

  (a) full recompute: read both inputs, inner join on the foreign key, overwrite a Delta table (timed);
  (b) ``run_spec`` initial full build of the join's output (timed);
  then ``--repeat`` times:
  (c) apply a change batch to the inputs as separate Delta commits (not timed): right updates, deletes,
      inserts; left FK changes, deletes, inserts, amount updates;
  (d) ``run_spec`` incremental refresh (timed; must report mode == "incremental");
  (e) full recompute again at the same input versions (timed), whose row count must equal the output's
      (``--verify checksum`` also compares an order-independent hash of every row).

The report's ``targets`` compare the largest size's incremental / full ratio with 0.2x and its growth
from the smallest size (same change size) with 1.5x. Run it in a fresh process (driver memory only
applies to a new JVM), from the repository's root:

    python -m bench.fk_join --left-rows 1000000,10000000 --right-rows 1000000 \\
        --change-rows-left 10000 --change-rows-right 1000 --repeat 3 --verify checksum --trace \\
        --json-out bench/results/fk_net_changes.json
    python -m bench.fk_join --quick        # smoke test on small tables

``--trace`` sets FKJOIN_TRACE=1 and turns the engine's ``FKJOIN_PHASE <name>`` stderr lines into the
time between markers for each refresh; ``--profile`` runs each incremental refresh under cProfile and
prints where the driver waited, by engine function; ``--event-log`` has Spark write its event log and
breaks each timed run_spec down by SQL execution and Delta step, with each step's join strategy.
Figures and the machine are in bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import itertools
import json
import os
import platform
import pstats
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import datagen
from bench.common import (
    BENCH_DIR,
    DATA_DIR,
    PhaseTee,
    add_common,
    command_line,
    conf_pairs,
    delta_history,
    json_out,
    median,
    spark_session,
    trace_phases,
    write_json,
)

#: The 10M and 50M runs need the larger heap.
SPARK_CONF = {"spark.driver.memory": "16g", "spark.sql.shuffle.partitions": "8"}


# --------------------------------------------------------------------------------------------------------
# arguments


def _int_list(text: str) -> list[int]:
    return [int(float(part)) for part in text.replace("_", "").split(",") if part.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.fk_join",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument("--left-rows", type=_int_list, default=None, help="comma list (default 1000000,10000000)")
    p.add_argument("--right-rows", type=int, default=None, help="default 1000000")
    p.add_argument(
        "--change-rows-left", type=int, default=None, help="left rows changed per batch (default 10000)"
    )
    p.add_argument(
        "--change-rows-right", type=int, default=None, help="right rows changed per batch (default 1000)"
    )
    p.add_argument(
        "--left-newest",
        type=float,
        default=None,
        help="change only the newest share of existing orders (e.g. 0.01); default: spread over all",
    )
    add_common(p, DATA_DIR, repeat=None, repeat_help="change batches + refreshes per left size (default 3)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: left 50K,200K; right 20K; 200/20 changes; no warm-up; report in bench/data/",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark conf for the session (repeatable), e.g. spark.sql.join.preferSortMergeJoin=false",
    )
    p.add_argument("--verify", choices=["count", "checksum"], default="count")
    p.add_argument("--trace", action="store_true", help="set FKJOIN_TRACE=1 and report the engine's phases")
    p.add_argument("--profile", action="store_true", help="cProfile each incremental refresh")
    p.add_argument(
        "--event-log",
        action="store_true",
        help="write Spark's event log under <workdir>/eventlog and break each refresh down by Spark job",
    )
    p.add_argument(
        "--write-path", choices=["auto", "merge"], default="auto", help="run_spec's write_path (default auto)"
    )
    p.add_argument("--baseline-only", action="store_true", help="data generation + full recompute only")
    p.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a small untimed end-to-end pass first (default: on, off with --quick)",
    )
    args = p.parse_args(argv)
    if args.quick:
        defaults = {
            "left_rows": [50_000, 200_000],
            "right_rows": 20_000,
            "change_rows_left": 200,
            "change_rows_right": 20,
            "repeat": 1,
        }
    else:
        defaults = {
            "left_rows": [1_000_000, 10_000_000],
            "right_rows": 1_000_000,
            "change_rows_left": 10_000,
            "change_rows_right": 1_000,
            "repeat": 3,
        }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.warmup is None:
        args.warmup = not args.quick
    args.left_rows = sorted(args.left_rows)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    if args.quick and args.json_out is None:
        args.json_out = DATA_DIR / "fk_join_quick.json"
    args.json_out = json_out(args.json_out, "fk_join")
    return args


# --------------------------------------------------------------------------------------------------------
# the engine's phases and profile


def phase_breakdown(events, started: float, ended: float) -> list[dict]:
    """Intervals between the engine's markers: ``start->pinned``, ``pinned->changes_read``, ...

    A marker says a phase was *reached* (pinned, changes_read, merge_started, committed), so the time
    between two markers is the work done between them; ``committed->end`` is what run_spec did after its
    commit (reading the commit back from history).
    """
    marks = [("start", started)]
    marks += [(name, t) for t, name, _extra in events if started - 1 <= t <= ended + 1]
    marks.append(("end", ended))
    return [
        {
            "phase": f"{a}->{b}",
            "start_s": round(ta - started, 3),
            "duration_s": round(tb - ta, 3),
        }
        for (a, ta), (b, tb) in itertools.pairwise(marks)
    ]


def profile_summary(prof: cProfile.Profile, limit: int = 30) -> list[dict]:
    """Cumulative time per engine function (where the driver waits for Spark), largest first."""
    stats = pstats.Stats(prof)
    rows = []
    for (filename, line, func), (_cc, ncalls, _tt, ct, _callers) in stats.stats.items():
        if "airflow_provider_fkjoin" in filename or ("delta/tables.py" in filename):
            short = (
                filename.split("airflow_provider_fkjoin/")[-1]
                if "airflow_provider_fkjoin" in filename
                else filename
            )
            rows.append(
                {"function": f"{short}:{line}({func})", "calls": ncalls, "cumulative_s": round(ct, 3)}
            )
    rows.sort(key=lambda r: -r["cumulative_s"])
    return rows[:limit]


# --------------------------------------------------------------------------------------------------------
# measurements


def full_recompute(spark, left: Path, right: Path, out: Path, lv: int, rv: int) -> float:
    """The Spark baseline: read both inputs at the given versions, inner join, overwrite a Delta table."""
    started = time.perf_counter()
    ldf = spark.read.format("delta").option("versionAsOf", lv).load(str(left))
    rdf = spark.read.format("delta").option("versionAsOf", rv).load(str(right))
    joined = ldf.join(rdf, ldf[datagen.FOREIGN_KEY] == rdf[datagen.RIGHT_KEY], "inner").select(
        *[ldf[c] for c in ldf.columns], *[rdf[c] for c in rdf.columns if c != datagen.RIGHT_KEY]
    )
    (
        joined.write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .option("delta.enableChangeDataFeed", "true")
        .save(str(out))
    )
    return time.perf_counter() - started


METRICS_SHOWN = (
    "operation",
    "executionTimeMs",
    "materializeSourceTimeMs",
    "scanTimeMs",
    "rewriteTimeMs",
    "numSourceRows",
    "numTargetFilesRemoved",
    "numTargetFilesAdded",
    "numTargetDeletionVectorsAdded",
    "numTargetRowsCopied",
    "numTargetRowsUpdated",
    "numTargetRowsInserted",
    "numTargetRowsDeleted",
    "numTargetBytesRemoved",
    "numTargetBytesAdded",
)

OUTPUT_COLUMNS = datagen.LEFT_COLUMNS + [c for c in datagen.RIGHT_COLUMNS if c != datagen.RIGHT_KEY]


def table_fingerprint(spark, path: Path, version: int | None, checksum: bool) -> dict:
    from pyspark.sql import functions as F

    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    df = reader.load(str(path))
    if not checksum:
        return {"rows": df.count()}
    cols = [c for c in OUTPUT_COLUMNS if c in df.columns]
    row = df.select(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.xxhash64(*[F.col(c) for c in cols]).cast("decimal(38,0)")).alias("h"),
    ).first()
    return {"rows": row["n"], "checksum": str(row["h"]), "columns": cols}


def make_spec(left: Path, right: Path, out: Path) -> dict:
    return {
        "kind": "foreign_key_join",
        "left": {"path": str(left), "key": [datagen.LEFT_KEY]},
        "right": {"path": str(right), "key": [datagen.RIGHT_KEY]},
        "foreign_key": [datagen.FOREIGN_KEY],
        "how": "inner",
        "output": {"path": str(out)},
    }


class Runner:
    def __init__(self, args, spark, run_spec, tee: PhaseTee | None):
        self.args, self.spark, self.run_spec, self.tee = args, spark, run_spec, tee
        self.windows: list[dict] = []  # each timed run_spec: label, epoch start/end (for the event log)
        self.label = ""

    def log(self, msg: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def timed_run_spec(self, spec: dict, profile: bool) -> tuple[dict, float, list[dict], list[dict]]:
        if self.tee:
            self.tee.take()
        prof = cProfile.Profile() if profile else None
        epoch_started = time.time()
        started = time.perf_counter()
        if prof:
            prof.enable()
        try:
            result = self.run_spec(spec, spark=self.spark, write_path=self.args.write_path)
        finally:
            if prof:
                prof.disable()
        ended = time.perf_counter()
        self.windows.append(
            {"label": self.label, "start_ms": epoch_started * 1000, "end_ms": time.time() * 1000}
        )
        phases = phase_breakdown(self.tee.take(), started, ended) if self.tee else []
        prof_rows = profile_summary(prof) if prof else []
        if prof:
            # The whole profile too, for pstats: python -m pstats <workdir>/profile-<label>.pstats
            prof.dump_stats(str(Path(self.args.workdir) / f"profile-{self.label.replace(':', '_')}.pstats"))
        return result, ended - started, phases, prof_rows

    def commit_metrics(self, out: Path, version: int | None) -> dict:
        """The output commit's Delta operation metrics (MERGE: scan/rewrite/source times, files touched),
        from ``DESCRIBE HISTORY`` (SQL: the same in a classic and a Spark Connect session)."""
        if version is None:
            return {}
        rows = (
            delta_history(self.spark, out, 5)
            .where(f"version = {int(version)}")
            .select("operation", "operationMetrics")
            .collect()
        )
        if not rows:
            return {}
        return {"operation": rows[0]["operation"], **dict(rows[0]["operationMetrics"] or {})}

    def verify(self, out: Path, out_version: int | None, baseline: Path, what: str) -> dict:
        checksum = self.args.verify == "checksum"
        got = table_fingerprint(self.spark, out, out_version, checksum)
        want = table_fingerprint(self.spark, baseline, None, checksum)
        ok = got["rows"] == want["rows"] and got.get("checksum") == want.get("checksum")
        if not ok:
            self.log(f"VERIFY FAILED ({what}): output {got} != baseline {want}")
        return {"ok": ok, "output": got, "baseline": want}

    def run_size(self, left_rows: int) -> dict:
        a, spark = self.args, self.spark
        rec: dict = {"left_rows": left_rows, "right_rows": a.right_rows}
        self.log(
            f"=== |left| = {left_rows:,}  |right| = {a.right_rows:,} ===  (load average {os.getloadavg()})"
        )
        base = datagen.ensure_base_tables(spark, a.workdir, left_rows, a.right_rows)
        rec["generate_s"] = base.generated
        if any(base.generated.values()):
            self.log(f"generated base tables in {base.generated}")
        run_dir = a.workdir / "run" / f"L{left_rows}_R{a.right_rows}"
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        left, right = run_dir / "orders", run_dir / "customers"
        out, baseline = run_dir / "orders_enriched", run_dir / "baseline_join"
        t0 = time.perf_counter()
        datagen.copy_table(base.left, left)
        datagen.copy_table(base.right, right)
        rec["copy_inputs_s"] = round(time.perf_counter() - t0, 2)
        rec["left_bytes"] = _dir_bytes(left)
        rec["right_bytes"] = _dir_bytes(right)

        lv, rv = datagen.latest_version(left), datagen.latest_version(right)
        spark.catalog.clearCache()
        t = full_recompute(spark, left, right, baseline, lv, rv)
        rec["full_recompute_s"] = [round(t, 3)]
        rows0 = table_fingerprint(spark, baseline, None, False)["rows"]
        self.log(f"(a) full recompute at v{lv}/v{rv}: {t:.2f}s, {rows0:,} rows")

        rec["refreshes"] = []
        if a.baseline_only:
            for r in range(a.repeat):
                self._apply_changes(rec, left, right, left_rows, r)
                lv, rv = datagen.latest_version(left), datagen.latest_version(right)
                t = full_recompute(spark, left, right, baseline, lv, rv)
                rec["full_recompute_s"].append(round(t, 3))
                rows = table_fingerprint(spark, baseline, None, False)["rows"]
                self.log(f"(e) full recompute at v{lv}/v{rv}: {t:.2f}s, {rows:,} rows")
            return rec

        spec = make_spec(left, right, out)
        self.label = f"L{left_rows}:initial"
        result, t, phases, prof = self.timed_run_spec(spec, False)
        rec["initial_build"] = {"wall_s": round(t, 3), "result": result, "phases": phases}
        if result.get("mode") != "full":
            self.log(f"WARNING: initial build reported mode {result.get('mode')!r}")
        rec["initial_build"]["verify"] = self.verify(out, _out_version(result), baseline, "initial build")
        self.log(f"(b) run_spec initial build: {t:.2f}s mode={result.get('mode')} rows={result.get('rows')}")

        for r in range(a.repeat):
            changes = self._apply_changes(rec, left, right, left_rows, r)
            lv, rv = datagen.latest_version(left), datagen.latest_version(right)
            spark.catalog.clearCache()
            self.label = f"L{left_rows}:incremental#{r + 1}"
            result, t, phases, prof = self.timed_run_spec(spec, a.profile)
            mode = result.get("mode")
            self.log(f"(d) run_spec refresh #{r + 1}: {t:.2f}s mode={mode} rows={result.get('rows')}")
            metrics = self.commit_metrics(out, _out_version(result))
            self.log(
                "      output commit: "
                + ", ".join(f"{k}={metrics[k]}" for k in METRICS_SHOWN if k in metrics)
            )
            for ph in phases:
                self.log(f"      phase {ph['phase']:<32} {ph['duration_s']:8.3f}s")
            for row in prof[:15]:
                self.log(f"      prof {row['cumulative_s']:8.3f}s  x{row['calls']:<4} {row['function']}")
            t_full = full_recompute(spark, left, right, baseline, lv, rv)
            rec["full_recompute_s"].append(round(t_full, 3))
            self.log(f"(e) full recompute at v{lv}/v{rv}: {t_full:.2f}s")
            check = self.verify(out, _out_version(result), baseline, f"refresh #{r + 1}")
            inputs = result.get("inputs", {})
            pinned_ok = inputs.get("left", {}).get("to_version") in (None, lv) and inputs.get(
                "right", {}
            ).get("to_version") in (None, rv)
            rec["refreshes"].append(
                {
                    "batch": r,
                    "changes": changes,
                    "wall_s": round(t, 3),
                    "result": result,
                    "phases": phases,
                    "profile": prof,
                    "output_commit_metrics": metrics,
                    "full_recompute_s": round(t_full, 3),
                    "input_versions": {"left": lv, "right": rv},
                    "verify": check,
                    "pinned_versions_ok": pinned_ok,
                    "loadavg_1m": os.getloadavg()[0],
                }
            )
            if mode != "incremental":
                raise SystemExit(
                    f"refresh #{r + 1} at |left|={left_rows}: mode {mode!r}, expected 'incremental' "
                    f"(reason: {result.get('reason')!r})"
                )
            if not check["ok"]:
                raise SystemExit(
                    f"refresh #{r + 1} at |left|={left_rows}: output differs from the baseline join"
                )
            if not pinned_ok:
                self.log(f"WARNING: refresh consumed {inputs}, inputs were at left v{lv} / right v{rv}")
        return rec

    def _apply_changes(self, rec, left: Path, right: Path, left_rows: int, batch: int) -> dict:
        a = self.args
        t0 = time.perf_counter()
        rc = datagen.apply_right_changes(self.spark, right, a.right_rows, a.change_rows_right, batch)
        lc = datagen.apply_left_changes(
            self.spark,
            left,
            left_rows,
            a.right_rows,
            a.change_rows_left,
            a.change_rows_right,
            batch,
            newest=a.left_newest,
        )
        secs = time.perf_counter() - t0
        self.log(f"(c) change batch #{batch + 1} applied in {secs:.1f}s (not timed): right {rc} left {lc}")
        return {"right": rc, "left": lc, "apply_s": round(secs, 2)}


def _out_version(result: dict) -> int | None:
    return (result.get("output") or {}).get("version")


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --------------------------------------------------------------------------------------------------------
# warm-up, machine info, summary


def warmup(runner: Runner) -> None:
    """A tiny end-to-end pass so the first timed step does not pay for JVM class loading and JIT."""
    spark, a = runner.spark, runner.args
    wd = a.workdir / "warmup"
    if wd.exists():
        shutil.rmtree(wd)
    t0 = time.perf_counter()
    right, left = wd / "customers", wd / "orders"
    datagen._write_new(datagen.customers_df(spark, spark.range(0, 2000, 1, 2)), right)
    datagen._write_new(datagen.orders_df(spark.range(0, 20000, 1, 2), 2000), left)
    full_recompute(spark, left, right, wd / "baseline", 0, 0)
    if not a.baseline_only:
        spec = make_spec(left, right, wd / "out")
        runner.run_spec(spec, spark=spark)
        datagen.apply_right_changes(spark, right, 2000, 20, 0)
        datagen.apply_left_changes(spark, left, 20000, 2000, 200, 20, 0)
        runner.run_spec(spec, spark=spark)
    shutil.rmtree(wd, ignore_errors=True)
    runner.log(f"warm-up done in {time.perf_counter() - t0:.1f}s")


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for a, b in sorted(intervals):
        if cur_e is None or a > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


JOIN_RE = re.compile(
    r"\b(BroadcastHashJoin|SortMergeJoin|ShuffledHashJoin|BroadcastNestedLoopJoin)"
    r" (\w+)(?: (Build\w+))? \(\d+\)"
)


def analyse_event_log(path: Path, windows: list[dict]) -> list[dict]:
    """Break each timed run_spec down with Spark's event log (written by Spark; no listener of ours).

    Per run: its top-level SQL executions grouped by description (a Python call site such as
    ``collect at .../changes.py:58``, or a Delta command such as a MERGE), the Delta sub-steps inside them
    (``MERGE operation - scanning files for matches``, ...), the time covered by Spark jobs, and the time
    when no SQL execution was running at all (Python, py4j, Delta API calls that run no query).
    """
    execs: dict[int, dict] = {}
    jobs: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if '"Event":"SparkListenerTask' in line or '"Event":"SparkListenerStage' in line:
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        kind = ev.get("Event", "")
        if kind.endswith("SparkListenerSQLExecutionStart"):
            eid = ev["executionId"]
            plan = ev.get("physicalPlanDescription", "")
            execs[eid] = {
                "root": ev.get("rootExecutionId", eid),
                "what": ev.get("description", "?"),
                "start": ev["time"],
                "joins": sorted({" ".join(filter(None, m.groups())) for m in JOIN_RE.finditer(plan)}),
            }
        elif kind.endswith("SparkListenerSQLExecutionEnd") and ev["executionId"] in execs:
            execs[ev["executionId"]]["end"] = ev["time"]
        elif kind == "SparkListenerJobStart":
            jobs[ev["Job ID"]] = {"start": ev["Submission Time"]}
        elif kind == "SparkListenerJobEnd" and ev["Job ID"] in jobs:
            jobs[ev["Job ID"]]["end"] = ev["Completion Time"]
    out = []
    for w in windows:
        lo, hi = w["start_ms"], w["end_ms"]
        inside = {i: e for i, e in execs.items() if "end" in e and lo <= e["start"] <= hi}
        roots = [e for i, e in inside.items() if e["root"] == i or e["root"] not in inside]
        top: dict[str, dict] = {}
        for e in roots:
            g = top.setdefault(e["what"], {"what": e["what"], "count": 0, "_iv": []})
            g["count"] += 1
            g["_iv"].append((e["start"], e["end"]))
        sub: dict[str, dict] = {}
        for i, e in inside.items():
            if e["root"] != i and e["root"] in inside and e["what"] != inside[e["root"]]["what"]:
                g = sub.setdefault(e["what"], {"what": e["what"], "count": 0, "_iv": [], "joins": set()})
                g["count"] += 1
                g["_iv"].append((e["start"], e["end"]))
                g["joins"].update(e["joins"])

        def finish(groups):
            rows = [
                {
                    "what": g["what"],
                    "count": g["count"],
                    "s": round(_union_ms(g["_iv"]) / 1000, 3),
                    **({"joins": sorted(g["joins"])} if g.get("joins") else {}),
                }
                for g in groups.values()
            ]
            return sorted(rows, key=lambda r: -r["s"])

        job_iv = [(j["start"], j["end"]) for j in jobs.values() if "end" in j and lo <= j["start"] <= hi]
        wall = (hi - lo) / 1000
        in_sql = _union_ms([(e["start"], e["end"]) for e in roots]) / 1000
        out.append(
            {
                "label": w["label"],
                "wall_s": round(wall, 3),
                "sql_executions": len(roots),
                "jobs": len(job_iv),
                "jobs_busy_s": round(_union_ms(job_iv) / 1000, 3),
                "outside_sql_s": round(wall - in_sql, 3),
                "top_level": finish(top),
                "delta_steps": finish(sub),
            }
        )
    return out


def machine_info(spark) -> dict:
    info = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "spark": spark.version,
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_total_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(Exception):
        jvm = spark.sparkContext._jvm
        info["java"] = f"{jvm.System.getProperty('java.vendor')} {jvm.System.getProperty('java.version')}"
        info["driver_max_heap_gib"] = round(jvm.java.lang.Runtime.getRuntime().maxMemory() / 2**30, 1)
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        info["delta_spark_python"] = version("delta-spark")
        info["pyspark"] = version("pyspark")
    jars = spark.conf.get("spark.jars", "") or ""
    info["delta_jars"] = sorted({Path(j).name for j in jars.split(",") if "delta-spark" in j})
    info["spark_conf"] = {
        k: spark.conf.get(k, None)
        for k in (
            "spark.master",
            "spark.driver.memory",
            "spark.sql.shuffle.partitions",
            "spark.default.parallelism",
            "spark.sql.adaptive.enabled",
        )
    }
    with contextlib.suppress(Exception):
        info["git_head"] = (
            subprocess.run(
                ["git", "-C", str(BENCH_DIR), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
            or None
        )
    return info


def summarize(records: list[dict]) -> list[dict]:
    rows = []
    smallest_inc = None
    for rec in records:
        incs = [r["wall_s"] for r in rec.get("refreshes", [])]
        full = median(rec["full_recompute_s"])
        inc = median(incs)
        row = {
            "left_rows": rec["left_rows"],
            "right_rows": rec["right_rows"],
            "full_recompute_s": full,
            "full_recompute_all_s": rec["full_recompute_s"],
            "initial_build_s": rec.get("initial_build", {}).get("wall_s"),
            "incremental_s": inc,
            "incremental_all_s": incs,
            "ratio_incremental_full": round(inc / full, 3) if inc and full else None,
        }
        if smallest_inc is None and inc:
            smallest_inc = inc
        row["growth_vs_smallest"] = round(inc / smallest_inc, 2) if inc and smallest_inc else None
        rows.append(row)
    return rows


def _fmt(x, spec="{:.2f}"):
    return "-" if x is None else spec.format(x)


def print_table(rows: list[dict]) -> str:
    head = (
        f"{'|left|':>12} {'|right|':>10} {'full recompute s':>17} {'initial build s':>16} "
        f"{'incremental s':>14} {'incr/full':>10} {'growth vs smallest':>19}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['left_rows']:>12,} {r['right_rows']:>10,} {_fmt(r['full_recompute_s']):>17} "
            f"{_fmt(r['initial_build_s']):>16} {_fmt(r['incremental_s']):>14} "
            f"{_fmt(r['ratio_incremental_full'], '{:.3f}'):>10} "
            f"{_fmt(r['growth_vs_smallest'], '{:.2f}x'):>19}"
        )
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def print_job_breakdown(runs: list[dict], top: int = 12) -> None:
    for run in runs:
        print(
            f"\n{run['label']}: wall {run['wall_s']:.2f}s; {run['sql_executions']} top-level SQL executions, "
            f"{run['jobs']} Spark jobs (busy {run['jobs_busy_s']:.2f}s); "
            f"outside any SQL execution {run['outside_sql_s']:.2f}s"
        )
        for g in run["top_level"][:top]:
            print(f"   {g['s']:8.3f}s  x{g['count']:<3d} {g['what'][:100]}")
        for g in run["delta_steps"][:top]:
            joins = f"  joins: {', '.join(g['joins'])}" if g.get("joins") else ""
            print(f"      {g['s']:8.3f}s  x{g['count']:<3d} {g['what'][:90]}{joins}")


def targets(rows: list[dict]) -> dict:
    if not rows or rows[-1]["incremental_s"] is None:
        return {}
    largest = rows[-1]
    out = {
        "ratio_at_largest": largest["ratio_incremental_full"],
        "ratio_target": 0.2,
        "ratio_met": largest["ratio_incremental_full"] is not None
        and largest["ratio_incremental_full"] <= 0.2,
    }
    if len(rows) > 1:
        out.update(
            {
                "growth_smallest_to_largest": largest["growth_vs_smallest"],
                "growth_target": 1.5,
                "growth_met": largest["growth_vs_smallest"] <= 1.5,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.event_log and args.master.startswith("sc://"):
        raise SystemExit("--event-log needs a classic session: a Spark Connect server's event log is its own")
    args.workdir = args.workdir.resolve()
    args.workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    tee = trace_phases() if args.trace else None

    from pyspark.sql import SparkSession

    from airflow_provider_fkjoin.engine import run_spec

    if SparkSession.getActiveSession() is not None:
        print(
            "[bench] WARNING: reusing an active SparkSession; spark.driver.memory=16g may not apply",
            flush=True,
        )
    t_start = time.perf_counter()
    conf = dict(SPARK_CONF)
    # Spark's scratch space (shuffle, spills, cached blocks) in the bench's own folder, not a shared /tmp
    local_dir = args.workdir / "spark-local"
    local_dir.mkdir(parents=True, exist_ok=True)
    conf["spark.local.dir"] = str(local_dir)
    conf.update(conf_pairs(args.conf))
    if args.event_log:
        log_dir = args.workdir / "eventlog"
        log_dir.mkdir(parents=True, exist_ok=True)
        conf.update(
            {
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": log_dir.as_uri(),
                "spark.eventLog.compress": "false",
            }
        )
    spark = spark_session(args.master, conf)
    info = machine_info(spark)
    runner = Runner(args, spark, run_spec, tee)
    runner.log(f"machine: {json.dumps(info)}")
    command = command_line("bench.fk_join") if argv is None else " ".join(argv)
    runner.log(
        f"config: left={args.left_rows} right={args.right_rows} changes left={args.change_rows_left} "
        f"right={args.change_rows_right} repeat={args.repeat} workdir={args.workdir}"
    )
    if args.warmup:
        warmup(runner)

    records = []
    results = {
        "command": command,
        "machine": info,
        "config": {
            "left_rows": args.left_rows,
            "right_rows": args.right_rows,
            "change_rows_left": args.change_rows_left,
            "change_rows_right": args.change_rows_right,
            "repeat": args.repeat,
            "verify": args.verify,
            "spark_conf": conf,
            "master": args.master,
        },
        "sizes": records,
    }
    try:
        for left_rows in args.left_rows:
            records.append(runner.run_size(left_rows))
            if args.json_out:
                write_json(args.json_out, results)
    finally:
        rows = summarize(records)
        results["summary"] = rows
        results["targets"] = targets(rows)
        results["total_s"] = round(time.perf_counter() - t_start, 1)
        results["timed_windows"] = runner.windows
        print()
        results["table"] = print_table(rows)
        if results["targets"]:
            print(f"targets: {json.dumps(results['targets'])}")
        print(f"total {results['total_s']}s", flush=True)
        if args.event_log:
            app_id = spark.sparkContext.applicationId
            spark.stop()
            logs = [p for p in (args.workdir / "eventlog").rglob(f"*{app_id}*") if p.is_file()]
            logs = [p for p in logs if not p.name.startswith((".", "appstatus"))]
            if logs:
                merged = args.workdir / "eventlog" / f"{app_id}.merged.json"
                with merged.open("w") as fh:
                    for part in sorted(logs, key=lambda p: (len(p.name), p.name)):
                        fh.write(part.read_text())
                results["spark_jobs"] = analyse_event_log(merged, runner.windows)
                print_job_breakdown(results["spark_jobs"])
        if args.json_out:
            write_json(args.json_out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
