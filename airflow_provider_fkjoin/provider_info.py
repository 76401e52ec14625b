"""What Airflow's providers manager shows for this package (``apache_airflow_provider`` entry point).

$ airflow providers get airflow-provider-fkjoin
"""

from __future__ import annotations

from typing import Any

from airflow_provider_fkjoin.version import __version__

INTEGRATION = "FkJoin"


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
                "external-doc-url": "https://github.com/airflow-provider-fkjoin/airflow-provider-fkjoin",
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
        ],
    }
