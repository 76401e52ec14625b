"""The spark-submit application: start a Delta-enabled session from spark-submit's conf, run the CLI.

    spark-submit --master local[2] --jars ... fkjoin_job.py run --spec-json '{"kind": ...}'

It prints one ``FKJOIN_APP {json}`` line as soon as the session is up (application id, driver UI URL,
master), so the hook can show a link to the running application, then runs ``fkjoin`` with the given
arguments: the result JSON is the last stdout line. The exit code is the CLI's, except that a bad spec or
bad data exits :data:`EXIT_JOB_BAD_INPUT` (65, ``EX_DATAERR``) instead of the CLI's 2: Python itself exits
2 when it cannot open the job file (a wrong ``local:///`` path in an image), and that must stay a plain
failure, not a "do not retry". 75 is retryable, 1 anything else. spark-submit passes the code on in
client mode; in cluster mode the hook reads it from the cluster's report (YARN's diagnostics, the
Kubernetes driver container's exit code).

Spark's redaction (``spark.redaction.regex``: which conf keys and values the UI, the event log and YARN's
logs show as ``*********(redacted)``) is widened to :data:`REDACTION_REGEX` unless the submitter set its
own, so ``fs.s3a.session.token`` or an Azure account key is hidden as well as ``...secret...``. The
driver UI stays off unless ``spark.ui.enabled=true`` was submitted, and then ``ui_url`` is reported.
"""

from __future__ import annotations

import json
import sys
from typing import Any

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

    from airflow_provider_fkjoin.engine import DEFAULT_CONF

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
    """Run ``fkjoin`` inside spark-submit; returns the CLI's exit code, 65 for its 2 (see the module)."""
    from airflow_provider_fkjoin import cli
    from airflow_provider_fkjoin.engine import APP_INFO_PREFIX, EXIT_BAD_INPUT, EXIT_JOB_BAD_INPUT

    args = list(sys.argv[1:] if argv is None else argv)
    spark = start_session()
    context = spark.sparkContext
    info = {"app_id": context.applicationId, "ui_url": context.uiWebUrl, "master": context.master}
    print(APP_INFO_PREFIX + json.dumps(info), flush=True)
    try:
        code = cli.main(args)
    finally:
        spark.stop()
    return EXIT_JOB_BAD_INPUT if code == EXIT_BAD_INPUT else code


if __name__ == "__main__":
    sys.exit(main())
