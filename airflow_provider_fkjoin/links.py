"""Extra links (the Spark UI of the running application, the output table) and table-location helpers.

Links in Airflow 3 are read from XCom by the API server: an operator pushes the URL under the link's
``xcom_key`` while it runs (:func:`push_link`), and the UI shows it as a button on the task.

    >>> table_uri("/warehouse/orders_enriched")
    'file:///warehouse/orders_enriched'
    >>> spark_ui_url("spark://master:7077", app_id="app-20250101-0001")
    'http://master:8080/app/?appId=app-20250101-0001'
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote, urlsplit

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

SPARK_UI_XCOM_KEY = "fkjoin_spark_ui"
OUTPUT_TABLE_XCOM_KEY = "fkjoin_output_table"

#: URL schemes a Delta table location may use (local paths need none).
TABLE_SCHEMES = frozenset({"file", "s3", "s3a", "gs", "abfs", "abfss", "hdfs", "dbfs", "az", "azure"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_STANDALONE_UI_PORT = 8080


def check_location(location: str) -> str:
    """A validated table location: an absolute local path, or a URL with a known object-store scheme.

    Relative paths are made absolute; control characters, ``..`` segments and unknown schemes are refused.

    >>> check_location("s3://bucket/tables/orders")
    's3://bucket/tables/orders'
    """
    if not isinstance(location, str) or not location.strip():
        raise ValueError(f"table location must be a non-empty string, got {location!r}")
    if _CONTROL.search(location):
        raise ValueError(f"table location {location!r} contains control characters")
    if "://" in location:
        scheme = location.split("://", 1)[0].lower()
        if scheme not in TABLE_SCHEMES:
            raise ValueError(
                f"table location {location!r}: scheme {scheme!r} is not one of {sorted(TABLE_SCHEMES)}"
            )
        path = urlsplit(location).path
    else:
        path = location
    if ".." in path.split("/"):
        raise ValueError(f"table location {location!r} must not contain '..' segments")
    if "://" not in location:
        return os.path.abspath(location)
    return location


def table_uri(location: str) -> str:
    """The Asset URI of a table: ``file:///abs/path`` for a local path, the URL itself for object stores."""
    location = check_location(location)
    if "://" in location:
        return location
    return "file://" + quote(location)


def table_browser_url(location: str) -> str:
    """A URL where a person can look at the table: the cloud console for S3 and GCS, else the URI."""
    location = check_location(location)
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    prefix = parts.path.lstrip("/")
    if scheme in {"s3", "s3a"}:
        return f"https://s3.console.aws.amazon.com/s3/buckets/{parts.netloc}?prefix={quote(prefix)}/"
    if scheme == "gs":
        return f"https://console.cloud.google.com/storage/browser/{parts.netloc}/{quote(prefix)}"
    return table_uri(location)


def spark_ui_url(
    master: str,
    *,
    app_id: str | None = None,
    driver_ui: str | None = None,
    conn_extra: dict[str, Any] | None = None,
) -> str | None:
    """The best Spark UI URL for an application, or None where the master exposes none.

    * the driver's own UI (``driver_ui``, e.g. ``http://host:4040``) when the driver reported it;
    * standalone (``spark://host:7077``): the master's web UI, on the application when its id is known;
    * YARN: the ResourceManager's application page, when the connection extra names the RM webapp;
    * Kubernetes and local without a reported driver UI: None.
    """
    if driver_ui:
        return driver_ui
    if master.startswith("spark://"):
        host = master.removeprefix("spark://").split(",")[0].rsplit(":", 1)[0]
        base = f"http://{host}:{_STANDALONE_UI_PORT}"
        return f"{base}/app/?appId={quote(app_id)}" if app_id else f"{base}/"
    if master.startswith("yarn"):
        rm = str((conn_extra or {}).get("yarn_resourcemanager_webapp_address") or "").strip()
        if not rm:
            return None
        rm = (rm if "://" in rm else f"http://{rm}").rstrip("/")
        return f"{rm}/cluster/app/{quote(app_id)}" if app_id else f"{rm}/cluster/apps"
    return None


def push_link(context: Any, key: str, url: str | None) -> None:
    """Push a link's URL under its XCom key, so the UI shows it while the task is still running."""
    if url:
        context["ti"].xcom_push(key=key, value=url)


class _XComLink(BaseOperatorLink):
    key: ClassVar[str] = ""

    @property
    def xcom_key(self) -> str:
        return self.key

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=self.key) or ""


class SparkApplicationLink(_XComLink):
    """The Spark UI of the join's application (the driver UI, the standalone master or YARN's RM)."""

    name = "Spark UI"
    key = SPARK_UI_XCOM_KEY


class OutputTableLink(_XComLink):
    """The join's output Delta table (cloud console for S3/GCS, else its URI)."""

    name = "Output table"
    key = OUTPUT_TABLE_XCOM_KEY
