"""What every benchmark script here shares: the common flags, a Spark session sized for this machine with
a fresh work folder, and the JSON report.

    args = parse_with_common(parser, "windowed")    # --repeat, --workdir, --master, --json-out
    spark = bench_spark(args)                        # local[2], 8 shuffle partitions, empty args.workdir
    write_report(report, args.json_out)              # printed, and saved when --json-out is given
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def parse_with_common(
    parser: argparse.ArgumentParser, workdir: str, argv: list[str] | None = None, repeat: int = 3
) -> argparse.Namespace:
    """Add ``--repeat``, ``--workdir`` (default ``bench/data/<workdir>``), ``--master`` and ``--json-out``,
    then parse."""
    parser.add_argument("--repeat", type=int, default=repeat)
    parser.add_argument("--workdir", type=Path, default=HERE / "data" / workdir)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json-out", type=Path, default=None)
    return parser.parse_args(argv)


def bench_spark(args: argparse.Namespace, conf: dict[str, str] | None = None):
    """The engine's SparkSession for a benchmark (8 shuffle partitions, 8 GB driver, plus ``conf``), and an
    empty ``args.workdir``."""
    from airflow_provider_fkjoin.engine import get_spark

    settings = {"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "8g", **(conf or {})}
    spark = get_spark(args.master, settings)
    spark.sparkContext.setLogLevel("ERROR")
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    return spark


def write_report(report: dict[str, Any], json_out: Path | None) -> None:
    """Print the report as JSON, and write it to ``json_out`` when given."""
    text = json.dumps(report, indent=1, default=str)
    print(text)
    if json_out:
        json_out.write_text(text + "\n")
