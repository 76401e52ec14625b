"""Extra links (the Spark UI of the running application, the output's and the refresh's pages in the Joins
view) and table-location helpers.

Links in Airflow 3 are read from XCom by the API server: an operator pushes the URL under the link's
``xcom_key`` while it runs (:func:`push_link`), the task runner pushes every link's ``get_link`` when the
task ends, and the UI shows each as a button on the task.

    >>> joins_view_url("output", dag_id="orders", task_id="enrich")
    '/fkjoin/output?dag_id=orders&task_id=enrich'

    >>> table_uri("/warehouse/./orders_enriched/")
    'file:///warehouse/orders_enriched'
    >>> spark_ui_url("spark://master:7077", app_id="app-20250101-0001")
    'http://master:8080/app/?appId=app-20250101-0001'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote, urlencode, urlsplit

from airflow.sdk import BaseOperatorLink

from airflow_provider_fkjoin.engine import TABLE_SCHEMES, normalise_location

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

__all__ = [
    "JOINS_VIEW_PREFIX",
    "JOIN_REFRESH_XCOM_KEY",
    "OUTPUT_TABLE_XCOM_KEY",
    "SPARK_UI_XCOM_KEY",
    "TABLE_SCHEMES",
    "JoinRefreshLink",
    "OutputTableLink",
    "SparkApplicationLink",
    "check_location",
    "joins_view_url",
    "push_link",
    "spark_ui_url",
    "table_browser_url",
    "table_uri",
]

SPARK_UI_XCOM_KEY = "fkjoin_spark_ui"
OUTPUT_TABLE_XCOM_KEY = "fkjoin_output_table"
JOIN_REFRESH_XCOM_KEY = "fkjoin_join_refresh"
#: Where the api-server mounts the Joins view (under ``[api] base_url``'s path).
JOINS_VIEW_PREFIX = "/fkjoin"
_STANDALONE_UI_PORT = 8080


def check_location(location: str) -> str:
    """The table location the engine will use (the engine's ``normalise_location``).

    The Airflow layer checks locations with the engine's own function, so a path refused (or two
    spellings judged the same table) by the engine is refused (or judged the same) here too, before any
    Spark job starts. ``file:`` URIs, ``//``, ``.``, ``..`` and a trailing ``/`` are normalised; a relative
    path (it would depend on the worker's directory), an unknown scheme and credentials in a URL raise
    ``ValueError`` saying what to write instead.

    >>> check_location("s3://bucket/tables/./orders/")
    's3://bucket/tables/orders'
    >>> check_location("file:///w/x/../orders")
    '/w/orders'
    >>> check_location("orders")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: table location 'orders' is relative; give an absolute path ...
    """
    return normalise_location(location)


def table_uri(location: str) -> str:
    """The Asset URI of a table: ``file:///abs/path`` for a local path, the normalised URL otherwise.

    Normalising first means every spelling of one table (``/w/t/``, ``file:/w/./t``) is one Asset, so a
    DAG scheduled on it is triggered whichever spelling the producing task used.

    >>> table_uri("file:/w//orders/"), table_uri("S3A://lake/orders")
    ('file:///w/orders', 's3a://lake/orders')
    """
    location = check_location(location)
    if location.startswith("/"):
        return "file://" + quote(location)
    return location


def table_browser_url(location: str) -> str:
    """A URL where a person can look at the table: the cloud console for S3 and GCS, else the URI.

    >>> table_browser_url("s3a://lake/tables/orders")
    'https://s3.console.aws.amazon.com/s3/buckets/lake?prefix=tables/orders/'
    """
    location = check_location(location)
    if location.startswith("/"):
        return table_uri(location)
    parts = urlsplit(location)
    scheme = parts.scheme.lower()
    prefix = parts.path.lstrip("/")
    if scheme in {"s3", "s3a", "s3n"}:
        return f"https://s3.console.aws.amazon.com/s3/buckets/{parts.netloc}?prefix={quote(prefix)}/"
    if scheme in {"gs", "gcs"}:
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


def joins_view_url(page: str, **query: Any) -> str:
    """A page of the Joins view, relative to the api-server's root (``[api] base_url``'s path first), so
    the link works from the Airflow UI whatever host name the browser uses."""
    from airflow.sdk import conf

    root = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    shown = {name: value for name, value in query.items() if value is not None}
    return f"{root}{JOINS_VIEW_PREFIX}/{page}?{urlencode(shown)}"


class OutputTableLink(_XComLink):
    """The output's page in the Joins view: its freshness, lag and refresh history (the table's path,
    and the cloud console for S3 and GCS, are on that page)."""

    name = "Output table"
    key = OUTPUT_TABLE_XCOM_KEY

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return joins_view_url("output", dag_id=ti_key.dag_id, task_id=ti_key.task_id)


class JoinRefreshLink(_XComLink):
    """What this task instance's refresh did (versions, rows, phases), in the Joins view: on join tasks
    only, where Airflow's "Join refresh" tab is on every task."""

    name = "Join refresh"
    key = JOIN_REFRESH_XCOM_KEY

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        map_index = getattr(ti_key, "map_index", -1)
        return joins_view_url(
            "refresh",
            dag_id=ti_key.dag_id,
            run_id=ti_key.run_id,
            task_id=ti_key.task_id,
            map_index=map_index if map_index is not None and map_index >= 0 else None,
        )
