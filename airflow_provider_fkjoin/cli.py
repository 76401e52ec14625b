"""``fkjoin``: check a spec, run it, show an output's progress, or run the demo.

    fkjoin validate spec.yaml            # check the spec and its tables from their Delta logs (no JVM)
    fkjoin run spec.yaml                 # refresh once; the result JSON is the last line of stdout
    fkjoin run --full-refresh spec.yaml  # rebuild the output from its inputs instead of applying changes
    fkjoin run --write-path merge spec.yaml  # write with Delta's MERGE instead of net-change commits
    fkjoin run --spec-json '{...}'       # the spec inline (how the Airflow hook submits it)
    fkjoin status spec.yaml              # versions consumed, lag behind each input, last refresh (no JVM)
    fkjoin audit spec.yaml               # recompute at the consumed versions, compare; writes nothing
    fkjoin demo                          # a small incremental foreign-key join on local Spark
    fkjoin connect-server --port 15002   # a Spark Connect server with Delta, for --master sc://...
    fkjoin jvm-archive                   # once per machine: a class archive for faster driver starts

``--master``, ``--conf KEY=VALUE`` and ``-v`` go before or after the subcommand. Exit codes are
:data:`EXIT_CODES`; on failure the first stderr line is ``error: <Type>: <message>`` (the Airflow hook reads
it). An unexpected error is followed by its root cause, which a Spark failure buries under a Py4J
wrapper::

    error: Py4JJavaError: An error occurred while calling o87.save.
    cause: java.nio.file.AccessDeniedException: /warehouse/orders_enriched/_delta_log

``-v`` also logs the engine's phases and prints the Python traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

from airflow_provider_fkjoin.engine import (
    ERROR_PREFIX,
    EXIT_AUDIT_DIFFERS,
    EXIT_BAD_INPUT,
    EXIT_ERROR,
    EXIT_RETRY,
)
from airflow_provider_fkjoin.version import __version__

#: Lines of a Spark error message shown (a Spark message often has its useful part after line 1).
MESSAGE_LINES = 20
#: Lines of the deepest JVM cause's message shown.
CAUSE_LINES = 5
_MAX_CAUSE_DEPTH = 64

#: What each exit code means, as ``--help`` shows it.
EXIT_CODES = f"""exit codes:
  0   success
  {EXIT_ERROR}   an unexpected error (see its cause; -v prints the traceback)
  {EXIT_BAD_INPUT}   a bad spec, option or input data, or problems validate found: a retry cannot help
  {EXIT_AUDIT_DIFFERS}   audit: the output differs from the recompute
  {EXIT_RETRY}  a retryable error, such as a concurrent refresh of the same output"""

_EPILOGS = {
    "": """examples:
  fkjoin validate orders_enriched.yaml
  fkjoin run orders_enriched.yaml
  fkjoin --master spark://host:7077 run orders_enriched.yaml --conf spark.executor.memory=2g
  fkjoin status orders_enriched.yaml
  fkjoin connect-server --master local[*] --port 15002""",
    "validate": """examples:
  fkjoin validate orders_enriched.yaml
  fkjoin validate --spec-json '{"kind": "foreign_key_join", ...}'
  fkjoin validate s3_spec.yaml --storage-option AWS_REGION=eu-west-1

Reads the Delta logs of the spec's tables (no JVM, nothing written): each input's columns against the
columns the spec names, its change data feed, and the output's owner. Each problem is printed on stderr
as "problem: <field>: <message>", warnings as "warning: ...", and the report as JSON on stdout's last line.
SQL expressions, column types and catalog tables are checked by the refresh itself.""",
    "run": """examples:
  fkjoin run orders_enriched.yaml
  fkjoin run orders_enriched.yaml --full-refresh
  fkjoin run orders_enriched.yaml --master sc://127.0.0.1:15002
  fkjoin run orders_enriched.yaml --conf spark.sql.shuffle.partitions=4 --write-path merge

The result is a JSON object on stdout's last line (docs: concepts/result).""",
    "status": """examples:
  fkjoin status orders_enriched.yaml
  fkjoin status orders_enriched.yaml --spark --master local[2]

Read from the Delta logs without a JVM; a spec with catalog tables (name:), or --spark, reads through
Spark instead. The JSON's last_refresh holds the plan that refresh ran, as its commit recorded it
(strategy: chosen, basis, estimate, actual_s; null when it recorded none).""",
    "audit": """examples:
  fkjoin audit orders_enriched.yaml
  fkjoin audit orders_enriched.yaml --examples 5""",
    "demo": """examples:
  fkjoin demo
  fkjoin demo --warehouse /tmp/fkjoin-demo""",
    "connect-server": """examples:
  fkjoin connect-server
  fkjoin connect-server --master spark://host:7077 --host 0.0.0.0 --port 15002
  fkjoin connect-server --conf spark.driver.memory=8g
  fkjoin connect-server --share-compiled-code   # sessions (one per task) reuse compiled code

Replaces this process with the server (stop it with Ctrl-C or a signal); clients use --master sc://HOST:PORT
or a spark_connect Airflow connection.""",
    "jvm-archive": """examples:
  fkjoin jvm-archive
  fkjoin jvm-archive --dir /opt/fkjoin/cds --force""",
}


_connect_sessions: list[Any] = []


def _key_value(option: str, example: str) -> Any:
    """An argparse ``type`` for ``KEY=VALUE`` options: a malformed one is refused naming it and the form."""

    def parse(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE; give it as {option} {example}")
        return key.strip(), value

    parse.__name__ = f"{option} KEY=VALUE"
    return parse


_conf_item = _key_value("--conf", "spark.executor.memory=2g")
_storage_item = _key_value("--storage-option", "AWS_REGION=eu-west-1")


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return value


def _version_text() -> str:
    """``fkjoin --version``: this package's version and the pinned Spark, Delta and Python beside it."""

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return (
        f"fkjoin {__version__} (airflow-provider-fkjoin; pyspark {installed('pyspark')}, "
        f"delta-spark {installed('delta-spark')}, Python {platform.python_version()})"
    )


def _spark(args: argparse.Namespace) -> Any:
    from airflow_provider_fkjoin.engine import get_spark, is_connect

    spark = get_spark(args.master, conf=args.conf)
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

    beside = Path(sys.executable).parent / "spark-submit"  # pip's pyspark, in this environment
    spark_submit = shutil.which("spark-submit") or (str(beside) if beside.exists() else "spark-submit")
    argv = connect_server_argv(
        host=args.host,
        port=args.port,
        master=args.master or "local[*]",
        conf=args.conf,
        spark_submit=spark_submit,
        share_compiled_code=args.share_compiled_code,
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
    from airflow_provider_fkjoin.engine import SpecError

    if args.spec_json:
        if args.spec:
            raise SpecError(f"give a spec file ({args.spec}) or --spec-json, not both")
        try:
            return json.loads(args.spec_json)
        except ValueError as error:
            raise SpecError(f"--spec-json: not valid JSON: {error}") from error
    if not args.spec:
        raise SpecError(f"fkjoin {args.command}: give a spec file (YAML or JSON) or --spec-json")
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
    from airflow_provider_fkjoin.engine import is_connect, load_spec, run_spec

    spec = load_spec(_spec_arg(args))
    origin = _origin_arg(args.origin)
    spark = _spark(args)
    if getattr(spec, "warm_state", False) and not is_connect(spark):
        # this driver ends with the process: its join state is kept only if its durable copy is written
        # (a Spark Connect server keeps the state open, and writes the copy in the background)
        spark.conf.set("spark.fkjoin.state.settle", "true")
    return run_spec(
        spec, spark=spark, full_refresh=args.full_refresh, write_path=args.write_path, origin=origin
    )


def _cmd_validate(args: argparse.Namespace) -> dict[str, Any]:
    """Check the spec and its tables from their Delta logs; problems and warnings also go to stderr."""
    from airflow_provider_fkjoin.engine import validate_spec

    report = validate_spec(_spec_arg(args), storage_options=args.storage_options)
    for problem in report["problems"]:
        print(f"problem: {problem['field']}: {problem['message']}", file=sys.stderr)
    for warning in report["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    count = len(report["problems"])
    verdict = "valid" if report["valid"] else f"{count} problem{'s' if count != 1 else ''}"
    print(f"fkjoin validate: {args.spec or '--spec-json'}: {verdict}", file=sys.stderr)
    return report


def _cmd_status(args: argparse.Namespace) -> dict[str, Any]:
    from airflow_provider_fkjoin.engine import load_spec, refresh_status_from_logs, uses_catalog_tables

    spec = load_spec(_spec_arg(args))
    if args.spark or uses_catalog_tables(spec):
        from airflow_provider_fkjoin.engine import refresh_status  # imports pyspark: only when asked

        return refresh_status(spec, spark=_spark(args))
    return refresh_status_from_logs(spec, storage_options=args.storage_options)


def _cmd_audit(args: argparse.Namespace) -> dict[str, Any]:
    from airflow_provider_fkjoin.engine import load_spec, run_spec

    spec = load_spec(_spec_arg(args))
    return run_spec(spec, spark=_spark(args), audit=True, audit_examples=args.examples)


def _cmd_demo(args: argparse.Namespace) -> dict[str, Any]:
    from airflow_provider_fkjoin.demo import run_demo

    return run_demo(Path(args.warehouse).resolve(), spark=_spark(args))


def _global_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """``--master``, ``--conf`` and ``-v``: on the main parser, and again on each subcommand, where a value
    given overrides (``--master``) or adds to (``--conf``) the one given before the subcommand."""
    unset = {"default": argparse.SUPPRESS} if after_command else {}
    parser.add_argument(
        "--master",
        help="Spark master: local[*], spark://HOST:PORT, sc://HOST:PORT, yarn, k8s://... "
        "(default: FKJOIN_SPARK_MASTER, else local[*])",
        **unset,
    )
    parser.add_argument(
        "--conf",
        action="append",
        type=_conf_item,
        dest="conf_after" if after_command else "conf",
        metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.executor.memory=2g (repeatable)",
        **unset,
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log the engine's phases; print an error's traceback",
        **unset,
    )


def _spec_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("spec", nargs="?", help="spec file (YAML or JSON)")
    sub.add_argument("--spec-json", metavar="JSON", help="the spec as a JSON string instead of a file")


def _storage_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--storage-option",
        action="append",
        type=_storage_item,
        dest="storage_options",
        metavar="KEY=VALUE",
        help="an object-store setting for reading Delta logs without a JVM, as the deltalake package "
        "takes it (AWS_REGION=..., AZURE_STORAGE_ACCOUNT_NAME=...; repeatable; default: the environment's)",
    )


def build_parser() -> argparse.ArgumentParser:
    from airflow_provider_fkjoin.engine import WRITE_PATHS

    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="fkjoin",
        description="Check an incremental join spec, run it, show its progress, or run the demo.",
        epilog=f"{_EPILOGS['']}\n\n{EXIT_CODES}",
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=_version_text())
    _global_options(parser, after_command=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Any, helptext: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=helptext,
            description=helptext[0].upper() + helptext[1:] + ".",
            epilog=f"{_EPILOGS[name]}\n\n{EXIT_CODES}",
            formatter_class=formatter,
        )
        sub.set_defaults(handler=handler)
        _global_options(sub, after_command=True)
        return sub

    validate = command(
        "validate",
        _cmd_validate,
        "check a spec and its tables from their Delta logs, without a JVM; names every problem",
    )
    _spec_options(validate)
    _storage_options(validate)

    run = command("run", _cmd_run, "refresh a spec's output once")
    _spec_options(run)
    run.add_argument(
        "--full-refresh",
        action="store_true",
        help="rebuild the output from its inputs instead of applying their changes since the last refresh",
    )
    run.add_argument(
        "--write-path",
        choices=WRITE_PATHS,
        default="auto",
        help="auto: commit net changes without MERGE where the engine can prove them (default); "
        "merge: always write with Delta's MERGE",
    )
    # who runs the refresh, recorded in its commit: the Airflow hook passes the task instance
    run.add_argument("--origin", metavar="JSON", help=argparse.SUPPRESS)

    status = command("status", _cmd_status, "show an output's progress and lag, from the Delta logs")
    _spec_options(status)
    _storage_options(status)
    status.add_argument(
        "--spark", action="store_true", help="read through Spark (--master, --conf) instead of the logs"
    )

    audit = command(
        "audit", _cmd_audit, "recompute the output at its consumed versions and compare; writes nothing"
    )
    _spec_options(audit)
    audit.add_argument(
        "--examples",
        type=_non_negative,
        default=0,
        help="list up to this many keys of each kind of difference (key values; default 0)",
    )

    server = command(
        "connect-server",
        _cmd_connect_server,
        "run a Spark Connect server with Delta (clients then use --master sc://HOST:PORT)",
    )
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    server.add_argument("--port", type=int, default=15002, help="port to listen on (default 15002)")
    server.add_argument(
        "--share-compiled-code",
        action="store_true",
        help="let every session reuse the code earlier sessions compiled (a task through the hook opens a "
        "session of its own): artifacts a client adds to its session are then visible to all sessions",
    )

    archive = command(
        "jvm-archive",
        _cmd_jvm_archive,
        "build a class-data-sharing archive of a refresh's classes for this JVM and Spark (once per "
        "machine or image, about a minute): spark-submit tasks' drivers then start faster",
    )
    archive.add_argument(
        "--dir",
        help="folder for the archive (default FKJOIN_JVM_ARCHIVE_DIR, else the checkout's .jars/cds, else "
        "~/.cache/fkjoin/cds); tasks find it there when FKJOIN_JVM_ARCHIVE_DIR names the same folder",
    )
    archive.add_argument("--force", action="store_true", help="build again even if it exists")

    demo = command("demo", _cmd_demo, "run a small incremental foreign-key join on local Spark")
    demo.add_argument("--warehouse", default="demo-warehouse", help="folder for the demo's Delta tables")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line parsed, with the options given before and after the subcommand merged: ``conf`` is
    a dict (a later ``KEY`` wins), ``storage_options`` a dict or None.

    >>> args = parse_args(["--conf", "a=1", "run", "s.yaml", "--master", "local[2]", "--conf", "a=2"])
    >>> args.master, args.conf
    ('local[2]', {'a': '2'})
    """
    args = build_parser().parse_args(argv)
    args.conf = dict([*(args.conf or []), *(getattr(args, "conf_after", None) or [])])
    if hasattr(args, "storage_options"):
        args.storage_options = dict(args.storage_options) if args.storage_options else None
    return args


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
    """Run the ``fkjoin`` command line; returns the exit code (:data:`EXIT_CODES`).

    >>> main(["run", "--spec-json", '{"kind": "foreign_key_join"}'])  # doctest: +SKIP
    2
    """
    args = parse_args(argv)
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
    if args.command == "validate" and not result["valid"]:
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
