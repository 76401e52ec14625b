"""``fkjoin``: run a join spec, show an output's progress, or run the demo.

    fkjoin run spec.yaml                 # refresh once; the result JSON is the last line of stdout
    fkjoin run --full-refresh spec.yaml  # rebuild the output from its inputs instead of applying changes
    fkjoin run --write-path merge spec.yaml  # write with Delta's MERGE instead of net-change commits
    fkjoin run --spec-json '{...}'       # the spec inline (how the Airflow hook submits it)
    fkjoin run --origin '{"dag_id": ...}' spec.yaml  # record who ran the refresh in its commit
    fkjoin status spec.yaml              # versions consumed, lag behind each input, last refresh
    fkjoin audit spec.yaml               # recompute at the consumed versions, compare; writes nothing
    fkjoin demo                          # a small incremental foreign-key join on local Spark
    fkjoin connect-server --port 15002   # a Spark Connect server with Delta, for --master sc://...
    fkjoin jvm-archive                   # once per machine: a class archive for faster driver starts

Exit code 0 on success, and 3 for an ``audit`` that found the output differing from the recompute. On
failure the first stderr line is ``error: <Type>: <message>`` (the Airflow hook reads it), and the exit
code says what to do: 2 for a bad spec or bad input data (fix it; a retry cannot help), 75 for a
retryable error such as a concurrent refresh, 1 for anything else. An unexpected
error is followed by its root cause, which a Spark failure buries under a Py4J wrapper::

    error: Py4JJavaError: An error occurred while calling o87.save.
    cause: java.nio.file.AccessDeniedException: /warehouse/orders_enriched/_delta_log

``-v`` also logs the engine's phases and prints the Python traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

from airflow_provider_fkjoin.engine import (
    ERROR_PREFIX,
    EXIT_AUDIT_DIFFERS,
    EXIT_BAD_INPUT,
    EXIT_ERROR,
    EXIT_RETRY,
)

#: Lines of a Spark error message shown (a Spark message often has its useful part after line 1).
MESSAGE_LINES = 20
#: Lines of the deepest JVM cause's message shown.
CAUSE_LINES = 5
_MAX_CAUSE_DEPTH = 64


_connect_sessions: list[Any] = []


def _spark(args: argparse.Namespace) -> Any:
    from airflow_provider_fkjoin.engine import get_spark, is_connect

    conf = dict(item.split("=", 1) for item in args.conf or [])
    spark = get_spark(args.master, conf=conf)
    if is_connect(spark):
        _connect_sessions.append(spark)
    return spark


def _release_connect_sessions() -> None:
    """End this run's Spark Connect sessions: the server frees them now, not at its idle timeout."""
    while _connect_sessions:
        try:
            _connect_sessions.pop().stop()
        except Exception as error:  # the server may be gone: the run's own outcome is what matters
            print(f"warning: could not release the Spark Connect session: {error}", file=sys.stderr)


def _cmd_connect_server(args: argparse.Namespace) -> dict[str, Any]:
    """Exec a Spark Connect server with Delta (never returns)."""
    from airflow_provider_fkjoin.engine import connect_server_argv

    conf = dict(item.split("=", 1) for item in args.conf or [])
    beside = Path(sys.executable).parent / "spark-submit"  # pip's pyspark, in this environment
    spark_submit = shutil.which("spark-submit") or (str(beside) if beside.exists() else "spark-submit")
    argv = connect_server_argv(
        host=args.host, port=args.port, master=args.master or "local[*]", conf=conf, spark_submit=spark_submit
    )
    import pyspark

    env = dict(os.environ)
    # pip's spark-submit finds Spark through a Python of its own choosing unless told: tell it.
    env.setdefault("SPARK_HOME", str(Path(pyspark.__file__).resolve().parent))
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.stdout.flush()
    os.execvpe(argv[0], argv, env)  # noqa: S606 - an argv list, no shell
    raise AssertionError("unreachable")


def _cmd_jvm_archive(args: argparse.Namespace) -> dict[str, Any]:
    """Build the driver's class archive for this JVM and Spark (a set-up step; see ``jvm_start``)."""
    from airflow_provider_fkjoin import jvm_start

    env = dict(os.environ)
    if args.dir:
        env[jvm_start.ARCHIVE_DIR_ENV] = str(Path(args.dir).resolve())

    def building(archive: Path) -> None:
        print(f"fkjoin: building {archive} (a small refresh on local Spark, about a minute)", file=sys.stderr)

    return jvm_start.build_report(env, force=args.force, on_build=building)


def _spec_arg(args: argparse.Namespace) -> Any:
    if args.spec_json:
        from airflow_provider_fkjoin.engine import SpecError

        try:
            return json.loads(args.spec_json)
        except ValueError as error:
            raise SpecError(f"--spec-json: not valid JSON: {error}") from error
    if not args.spec:
        raise SystemExit("fkjoin: give a spec file or --spec-json")
    return Path(args.spec)


def _origin_arg(text: str | None) -> dict[str, Any] | None:
    """``--origin``: a JSON object of plain values naming who runs the refresh (recorded in its commit)."""
    if not text:
        return None
    from airflow_provider_fkjoin.engine import SpecError

    try:
        origin = json.loads(text)
    except ValueError as error:
        raise SpecError(f"--origin: not valid JSON: {error}") from error
    if not isinstance(origin, dict) or not all(
        isinstance(value, str | int | float | bool) or value is None for value in origin.values()
    ):
        raise SpecError(
            '--origin: expected a JSON object of plain values, e.g. {"dag_id": "d", "try_number": 1}'
        )
    return origin


def _cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    from airflow_provider_fkjoin.engine import load_spec, run_spec

    spec = load_spec(_spec_arg(args))
    origin = _origin_arg(args.origin)
    return run_spec(
        spec, spark=_spark(args), full_refresh=args.full_refresh, write_path=args.write_path, origin=origin
    )


def _cmd_status(args: argparse.Namespace) -> dict[str, Any]:
    from airflow_provider_fkjoin.engine import load_spec, refresh_status

    spec = load_spec(_spec_arg(args))
    return refresh_status(spec, spark=_spark(args))


def _cmd_audit(args: argparse.Namespace) -> dict[str, Any]:
    from airflow_provider_fkjoin.engine import load_spec, run_spec

    spec = load_spec(_spec_arg(args))
    return run_spec(spec, spark=_spark(args), audit=True, audit_examples=args.examples)


def _cmd_demo(args: argparse.Namespace) -> dict[str, Any]:
    from airflow_provider_fkjoin.demo import run_demo

    return run_demo(Path(args.warehouse).resolve(), spark=_spark(args))


def build_parser() -> argparse.ArgumentParser:
    from airflow_provider_fkjoin.engine import WRITE_PATHS

    parser = argparse.ArgumentParser(
        prog="fkjoin", description="Run an incremental join spec, show its progress, or run the demo."
    )
    parser.add_argument("--master", help="Spark master (default: FKJOIN_SPARK_MASTER or local[*])")
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE", help="extra Spark conf (repeatable)")
    verbose_help = "log the engine's phases; print the traceback of an error"
    parser.add_argument("-v", "--verbose", action="store_true", help=verbose_help)
    commands = parser.add_subparsers(dest="command", required=True)
    subs: list[argparse.ArgumentParser] = []
    for name, handler, helptext in (
        ("run", _cmd_run, "refresh a spec's output once"),
        ("status", _cmd_status, "show an output's progress and lag"),
        ("audit", _cmd_audit, "recompute the output at its consumed versions and compare; writes nothing"),
    ):
        sub = commands.add_parser(name, help=helptext)
        sub.add_argument("spec", nargs="?", help="spec file (YAML or JSON)")
        sub.add_argument("--spec-json", help="the spec as a JSON string instead of a file")
        sub.set_defaults(handler=handler)
        subs.append(sub)
    subs[0].add_argument(
        "--full-refresh",
        action="store_true",
        help="rebuild the output from its inputs instead of applying their changes since the last refresh",
    )
    subs[0].add_argument(
        "--write-path",
        choices=WRITE_PATHS,
        default="auto",
        help="auto: commit net changes without MERGE where the engine can prove them (default); "
        "merge: always write with Delta's MERGE",
    )
    subs[0].add_argument(
        "--origin",
        metavar="JSON",
        help="who runs this refresh, recorded in its commit (the Airflow hook passes the task instance)",
    )
    subs[2].add_argument(
        "--examples",
        type=int,
        default=0,
        help="list up to this many keys of each kind of difference (key values; default 0)",
    )
    server = commands.add_parser(
        "connect-server",
        help="run a Spark Connect server with Delta (clients then use --master sc://HOST:PORT)",
    )
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    server.add_argument("--port", type=int, default=15002, help="port to listen on (default 15002)")
    server.set_defaults(handler=_cmd_connect_server)
    subs.append(server)
    archive = commands.add_parser(
        "jvm-archive",
        help="build a class-data-sharing archive of a refresh's classes for this JVM and Spark (once per "
        "machine or image, about a minute): spark-submit tasks' drivers then start faster",
    )
    archive.add_argument(
        "--dir",
        help="folder for the archive (default FKJOIN_JVM_ARCHIVE_DIR, else the checkout's .jars/cds, else "
        "~/.cache/fkjoin/cds); tasks find it there when FKJOIN_JVM_ARCHIVE_DIR names the same folder",
    )
    archive.add_argument("--force", action="store_true", help="build again even if it exists")
    archive.set_defaults(handler=_cmd_jvm_archive)
    subs.append(archive)
    demo = commands.add_parser("demo", help="run a small incremental foreign-key join")
    demo.add_argument("--warehouse", default="demo-warehouse", help="folder for the demo's Delta tables")
    demo.set_defaults(handler=_cmd_demo)
    subs.append(demo)
    for sub in subs:  # `fkjoin run -v spec.yaml` works as well as `fkjoin -v run spec.yaml`
        sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose_help)
    return parser


def _first_lines(text: str, limit: int) -> list[str]:
    lines = [line.rstrip() for line in str(text).strip().splitlines()]
    if len(lines) > limit:
        return [*lines[:limit], f"... ({len(lines) - limit} more lines)"]
    return lines


def _java_root_cause(throwable: Any) -> Any:
    """The deepest ``getCause()`` of a JVM throwable (a py4j ``JavaObject``, or anything alike)."""
    current = throwable
    for _ in range(_MAX_CAUSE_DEPTH):
        cause = current.getCause()
        if cause is None or cause is current:
            break
        current = cause
    return current


def _java_cause_lines(throwable: Any, *, skip_self: bool = False) -> list[str]:
    root = _java_root_cause(throwable)
    if skip_self and root is throwable:
        return []  # no deeper cause than the error already shown
    message = _first_lines(root.getMessage() or "", CAUSE_LINES) or [""]
    return [f"cause: {root.getClass().getName()}: {message[0]}", *(f"  {line}" for line in message[1:])]


def _is_pyspark_error(exc: BaseException) -> bool:
    """A ``pyspark.errors.PySparkException`` (captured JVM errors included), without importing pyspark."""
    return any(
        cls.__name__ == "PySparkException" and cls.__module__.startswith("pyspark.errors")
        for cls in type(exc).__mro__
    )


def _is_spark_error(exc: BaseException) -> bool:
    return getattr(exc, "java_exception", None) is not None or _is_pyspark_error(exc)


def _error_class(exc: BaseException) -> str | None:
    for getter in ("getCondition", "getErrorClass"):
        method = getattr(exc, getter, None)
        if callable(method):
            value = method()
            if value:
                return str(value)
    return None


def _spark_error_lines(exc: BaseException) -> list[str]:
    lines: list[str] = []
    if _is_pyspark_error(exc):
        lines.append(f"error class: {_error_class(exc) or type(exc).__name__}")
        getter = getattr(exc, "getMessage", None)
        message = (getter() if callable(getter) else "") or str(exc)
        message = message.split("\n\nJVM stacktrace:", 1)[0]
        lines += [f"  {line}" for line in _first_lines(message, MESSAGE_LINES)]
    py4j_error = getattr(exc, "java_exception", None)
    throwable = py4j_error if py4j_error is not None else getattr(exc, "_origin", None)
    if throwable is not None:
        lines += _java_cause_lines(throwable, skip_self=py4j_error is None)
    return lines


def root_cause_lines(exc: BaseException) -> list[str]:
    """What to print after the ``error:`` line of an unexpected failure, so the real cause shows.

    * a Py4J ``Py4JJavaError`` (``java_exception`` set), whose message is only "An error occurred while
      calling o87.save.": the deepest JVM cause, found by walking ``getCause()``:
      ``cause: <java class>: <message>``;
    * a PySpark error (``PySparkException``, ``CapturedException`` such as ``AnalysisException``): its
      error class and the first :data:`MESSAGE_LINES` lines of its message, not only the first, then
      the deepest JVM cause when there is a deeper one;
    * any other error raised from another (``raise ... from``, or during handling): the same for the
      first Spark error down the chain, else the deepest exception's type and message.

    Never raises: if the JVM is gone, the last line says so.

    >>> class Throwable:
    ...     def __init__(self, name, message, cause=None):
    ...         self.name, self.message, self.cause = name, message, cause
    ...     def getCause(self): return self.cause
    ...     def getMessage(self): return self.message
    ...     def getClass(self): return self
    ...     def getName(self): return self.name
    >>> error = RuntimeError("An error occurred while calling o87.save.")
    >>> error.java_exception = Throwable("org.apache.spark.SparkException", "Job aborted.",
    ...     Throwable("java.io.IOException", "No space left on device"))
    >>> root_cause_lines(error)
    ['cause: java.io.IOException: No space left on device']
    """
    seen: set[int] = set()
    current = exc
    while not _is_spark_error(current) and id(current) not in seen:
        seen.add(id(current))
        nested = current.__cause__
        if nested is None and not current.__suppress_context__:
            nested = current.__context__
        if nested is None:
            break
        current = nested
    try:
        if _is_spark_error(current):
            return _spark_error_lines(current)
        if current is exc:
            return []
        message = _first_lines(str(current), CAUSE_LINES) or [""]
        return [f"cause: {type(current).__name__}: {message[0]}", *(f"  {line}" for line in message[1:])]
    except Exception as error:  # the JVM may be gone by now: say so rather than hide the error itself
        return [f"cause: not available ({type(error).__name__}: {error})"]


def _summary(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # str() of a Py4JJavaError asks the JVM, which may be gone
        text = repr(exc.args[0]) if exc.args else ""
    return (text.strip().splitlines() or [""])[0][:500]


def main(argv: list[str] | None = None) -> int:
    """Run the ``fkjoin`` command line; returns the exit code (see the module docstring).

    >>> main(["run", "--spec-json", '{"kind": "foreign_key_join"}'])  # doctest: +SKIP
    2
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    from airflow_provider_fkjoin.engine import FkJoinError

    try:
        result = args.handler(args)
    except FkJoinError as exc:
        _release_connect_sessions()
        print(f"{ERROR_PREFIX}{type(exc).__name__}: {exc}", file=sys.stderr)
        if args.verbose:
            traceback.print_exception(exc, file=sys.stderr)
        return EXIT_RETRY if exc.retryable else EXIT_BAD_INPUT
    except Exception as exc:
        _release_connect_sessions()
        print(f"{ERROR_PREFIX}{type(exc).__name__}: {_summary(exc)}", file=sys.stderr)
        for line in root_cause_lines(exc):
            print(line, file=sys.stderr)
        if args.verbose:
            traceback.print_exception(exc, file=sys.stderr)  # its notes included
        else:
            for note in getattr(exc, "__notes__", None) or []:
                print(f"note: {note}", file=sys.stderr)
            print("(run with -v for the Python traceback)", file=sys.stderr)
        sys.stderr.flush()
        return EXIT_ERROR
    _release_connect_sessions()
    print(json.dumps(result, default=str), flush=True)
    if result.get("mode") == "audit" and not result.get("consistent", True):
        return EXIT_AUDIT_DIFFERS
    return 0


if __name__ == "__main__":
    sys.exit(main())
