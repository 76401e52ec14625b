"""``fkjoin``: run a join spec, show an output's progress, or run the demo.

    fkjoin run spec.yaml            # refresh once; the result JSON is the last line of stdout
    fkjoin run --spec-json '{...}'  # the spec inline (how the Airflow hook submits it)
    fkjoin status spec.yaml         # versions consumed, lag behind each input, last refresh
    fkjoin demo                     # a small incremental foreign-key join on local Spark

Exit code 0 on success; on failure a one-line ``error: ...`` on stderr and exit code 1 (2 for a bad
spec or bad input data, 75 for a concurrent refresh, which is safe to retry).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_RETRY = 75


def _spark(args: argparse.Namespace) -> Any:
    from airflow_provider_fkjoin.engine import get_spark

    conf = dict(item.split("=", 1) for item in args.conf or [])
    return get_spark(args.master, conf=conf)


def _spec_arg(args: argparse.Namespace) -> Any:
    if args.spec_json:
        return json.loads(args.spec_json)
    if not args.spec:
        raise SystemExit("fkjoin: give a spec file or --spec-json")
    return Path(args.spec)


def _cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    from airflow_provider_fkjoin.engine import load_spec, run_spec

    spec = load_spec(_spec_arg(args))
    return run_spec(spec, spark=_spark(args))


def _cmd_status(args: argparse.Namespace) -> dict[str, Any]:
    from airflow_provider_fkjoin.engine import load_spec, refresh_status

    spec = load_spec(_spec_arg(args))
    return refresh_status(spec, spark=_spark(args))


def _cmd_demo(args: argparse.Namespace) -> dict[str, Any]:
    from airflow_provider_fkjoin.demo import run_demo

    return run_demo(Path(args.warehouse), spark=_spark(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fkjoin", description="Run an incremental join spec, show its progress, or run the demo."
    )
    parser.add_argument("--master", help="Spark master (default: FKJOIN_SPARK_MASTER or local[*])")
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE", help="extra Spark conf (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log the engine's phases")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, handler, helptext in (
        ("run", _cmd_run, "refresh a spec's output once"),
        ("status", _cmd_status, "show an output's progress and lag"),
    ):
        sub = commands.add_parser(name, help=helptext)
        sub.add_argument("spec", nargs="?", help="spec file (YAML or JSON)")
        sub.add_argument("--spec-json", help="the spec as a JSON string instead of a file")
        sub.set_defaults(handler=handler)
    demo = commands.add_parser("demo", help="run a small incremental foreign-key join")
    demo.add_argument("--warehouse", default="demo-warehouse", help="folder for the demo's Delta tables")
    demo.set_defaults(handler=_cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    from airflow_provider_fkjoin.engine.errors import FkJoinError

    try:
        result = args.handler(args)
    except FkJoinError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_RETRY if exc.retryable else EXIT_BAD_INPUT
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"error: {type(exc).__name__}: {first[:500]}", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
