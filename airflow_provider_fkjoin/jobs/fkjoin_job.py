"""The spark-submit application: start a Delta-enabled session from spark-submit's conf, run the CLI.

    spark-submit --master local[2] --jars ... fkjoin_job.py run --spec-json '{"kind": ...}'

It prints one ``FKJOIN_APP {json}`` line as soon as the session is up (application id, driver UI URL,
master), so the hook can show a link to the running application, then runs ``fkjoin`` with the given
arguments: the result JSON is the last stdout line; the exit code is the CLI's (2 bad spec or data,
75 retryable, 1 other), which spark-submit passes on.

Spark's redaction (``spark.redaction.regex``: which conf keys and values the UI, the event log and YARN's
logs show as ``*********(redacted)``) is widened to :data:`REDACTION_REGEX` unless the submitter set its
own, so ``fs.s3a.session.token`` or an Azure account key is hidden as well as ``...secret...``. The
driver UI stays off unless ``spark.ui.enabled=true`` was submitted, and then ``ui_url`` is reported.
"""

from __future__ import annotations

import json
import sys
from typing import Any

APP_INFO_PREFIX = "FKJOIN_APP "
REDACTION_CONF = "spark.redaction.regex"
#: Spark's default is ``(?i)secret|password|token|access[.]?key``: too narrow for SAS tokens, account
#: keys, session tokens, credential files and private keys.
REDACTION_REGEX = (
    "(?i)secret|password|passwd|token|access.?key|account.?key|sas|credential|private.?key|session"
)
#: Settings the job applies when spark-submit did not set them (on top of the engine's defaults).
JOB_DEFAULT_CONF: dict[str, str] = {REDACTION_CONF: REDACTION_REGEX}


def start_session() -> Any:
    """The session with the engine's (and the job's) defaults for every setting spark-submit did not set.

    A user who runs ``spark-submit fkjoin_job.py run spec.yaml`` by hand gets the same redaction as the
    Airflow hook would give; ``--conf spark.redaction.regex=...`` on their command wins.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    from airflow_provider_fkjoin.engine.session import DEFAULT_CONF

    SparkContext._ensure_initialized()  # attach to spark-submit's JVM so SparkConf sees its settings
    submitted = SparkConf()
    builder = SparkSession.builder
    for key, value in {**DEFAULT_CONF, **JOB_DEFAULT_CONF}.items():
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
