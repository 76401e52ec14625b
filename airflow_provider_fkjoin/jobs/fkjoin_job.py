"""The spark-submit application: start a Delta-enabled session from spark-submit's conf, run the CLI.

    spark-submit --master local[2] --jars ... fkjoin_job.py run --spec-json '{"kind": ...}'

It prints one ``FKJOIN_APP {json}`` line as soon as the session is up (application id, driver UI URL,
master), so the hook can show a link to the running application, then runs ``fkjoin`` with the given
arguments: the result JSON is the last stdout line; the exit code is the CLI's (2 bad spec or data,
75 retryable, 1 other), which spark-submit passes on.
"""

from __future__ import annotations

import json
import sys

APP_INFO_PREFIX = "FKJOIN_APP "


def start_session():
    """The session with the engine's defaults for every setting spark-submit did not set itself."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    from airflow_provider_fkjoin.engine.session import DEFAULT_CONF

    SparkContext._ensure_initialized()  # attach to spark-submit's JVM so SparkConf sees its settings
    submitted = SparkConf()
    builder = SparkSession.builder
    for key, value in DEFAULT_CONF.items():
        if not submitted.contains(key):
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str] | None = None) -> int:
    """Run ``fkjoin`` inside spark-submit; returns the CLI's exit code."""
    from airflow_provider_fkjoin import cli

    args = list(sys.argv[1:] if argv is None else argv)
    spark = start_session()
    context = spark.sparkContext
    info = {"app_id": context.applicationId, "ui_url": context.uiWebUrl, "master": context.master}
    print(APP_INFO_PREFIX + json.dumps(info), flush=True)
    try:
        return cli.main(args)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
