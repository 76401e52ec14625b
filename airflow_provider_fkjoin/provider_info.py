"""What Airflow's providers manager shows for this package (``apache_airflow_provider`` entry point).

$ airflow providers get airflow-provider-fkjoin
$ airflow config list --section fkjoin     # the provider's options (:data:`CONFIG`) with their defaults
"""

from __future__ import annotations

from typing import Any

from airflow_provider_fkjoin.version import __version__

INTEGRATION = "FkJoin"
DOCS_URL = "https://github.com/airflow-provider-fkjoin/airflow-provider-fkjoin"

#: The ``[fkjoin]`` section of Airflow's configuration: every option the provider reads (a test checks the
#: code reads none that is missing here), as Airflow declares a provider's options. Set one in
#: ``airflow.cfg`` or as ``AIRFLOW__FKJOIN__<OPTION>``.
CONFIG: dict[str, Any] = {
    "fkjoin": {
        "description": "The fkjoin provider: its spark-submit tasks and the Joins view in the Airflow UI.",
        "options": {
            "fast_driver_start": {
                "description": (
                    "Start the driver of a spark-submit task on this machine (client mode) faster: with the "
                    "class archive that `fkjoin jvm-archive` builds and JVM flags for a short-lived process, "
                    "added after the task's own spark.driver.extraJavaOptions. An operator's "
                    "`fast_driver_start` argument overrides it for its task."
                ),
                "version_added": "0.1.0",
                "type": "boolean",
                "example": "False",
                "default": "True",
            },
            "joins_view_timeout_s": {
                "description": (
                    "Seconds the Joins view waits for the Delta logs it reads on one page load; a table "
                    "not read by then shows as unreadable, with the error."
                ),
                "version_added": "0.1.0",
                "type": "float",
                "example": "30",
                "default": "10.0",
            },
        },
    }
}


def get_provider_info() -> dict[str, Any]:
    """The provider's metadata, valid against Airflow's ``provider_info.schema.json``.

    >>> get_provider_info()["package-name"]
    'airflow-provider-fkjoin'
    """
    return {
        "package-name": "airflow-provider-fkjoin",
        "name": "FkJoin",
        "description": (
            "Kafka-Streams-grade incremental joins (foreign-key, global table, stream-table, windowed, "
            "self-join and N-way Joinery joins) on Spark and Delta Lake."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": DOCS_URL,
                "tags": ["apache", "software"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_fkjoin.operators.joins"],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_fkjoin.sensors.high_watermark"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_fkjoin.triggers.high_watermark"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_fkjoin.hooks.fkjoin"],
            }
        ],
        "extra-links": [
            "airflow_provider_fkjoin.links.SparkApplicationLink",
            "airflow_provider_fkjoin.links.OutputTableLink",
            "airflow_provider_fkjoin.links.JoinRefreshLink",
        ],
        "config": CONFIG,
    }
