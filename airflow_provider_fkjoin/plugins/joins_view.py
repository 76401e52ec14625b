"""The Joins view: every join output of the deployment's DAGs, how fresh it is, and what its refreshes did.

An Airflow plugin (registered by the package's ``airflow.plugins`` entry point; no extra server) that
mounts a small FastAPI app in the api-server at :data:`URL_PREFIX` and adds three views:

* **Joins**, in the navigation: every output a join operator of the deployment's DAGs writes, with its
  kind, DAG and task, last refresh (when, mode, reason, rows, duration) and lag per input (the version
  consumed against the input's latest, and for how long the input has held commits the output has not
  consumed). The stalest output comes first.
* **An output's history** (``output?dag_id=...&task_id=...``): its last refreshes as a chart (duration
  and rows changed; full rebuilds marked) and a table, each row linking to the task instance that made it.
* **A refresh**, on each task instance: the versions it consumed and produced, its rows, its phases and
  the write path it took (the task's result, as its XCom holds it).

Every read goes to Delta logs through ``deltalake`` (:func:`airflow_provider_fkjoin.engine.output_freshness`):
no JVM in the api-server. A table that cannot be read within :data:`READ_TIMEOUT_S` shows as unreadable.
Every endpoint authenticates through Airflow's auth manager (401 without a login) and shows only the
outputs of DAGs the user may read (403 for a DAG they may not).

The decisions are pure functions (:func:`join_tasks`, :func:`output_row`, :func:`by_lag`); the I/O is in
:func:`read_freshness` and the routes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.configuration import conf
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, Response

from airflow_provider_fkjoin import operators
from airflow_provider_fkjoin.operators.joins import _table_path

#: Where the api-server mounts the plugin's app.
URL_PREFIX = "/fkjoin"
#: Seconds the view waits for all the Delta logs it reads; a table not read by then is "unreadable".
READ_TIMEOUT_S = conf.getfloat("fkjoin", "joins_view_timeout_s", fallback=10.0)
#: The threads that read Delta logs for every request: a table that never answers holds one of them, not
#: one more thread per page load.
_READS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fkjoin-view")
#: The join operators, by class name, and the kind each writes.
OPERATOR_KINDS = {name: getattr(operators, name).kind for name in operators.__all__}
_OPERATOR_MODULE = "airflow_provider_fkjoin.operators"


@dataclass(frozen=True)
class JoinTask:
    """A task of a deployed DAG that writes a join output: where, and with which storage connection.

    ``output`` is None when the DAG does not name it plainly (a templated path, an unreadable spec file),
    and ``problem`` then says why.
    """

    dag_id: str
    task_id: str
    kind: str
    output: str | None
    storage_conn_id: str | None = None
    problem: str | None = None


def _spec_file(path: str, dag: Any) -> Path:
    """A task's ``spec_file``, relative to its DAG file's folder as the operator reads it."""
    spec_file = Path(path)
    fileloc = getattr(dag, "fileloc", None)
    return spec_file if spec_file.is_absolute() or not fileloc else Path(fileloc).parent / spec_file


def join_task(dag_id: str, task: Any, dag: Any = None) -> JoinTask | None:
    """The join output a (deserialized) task writes, or None when the task is not a join operator.

    >>> join_task("orders", task)
    JoinTask(dag_id='orders', task_id='enrich', kind='foreign_key_join', output='/w/orders_enriched', ...)
    """
    kind = OPERATOR_KINDS.get(getattr(task, "task_type", ""))
    module = str(getattr(task, "_task_module", None) or type(task).__module__)
    if kind is None or not module.startswith(_OPERATOR_MODULE):
        return None
    storage_conn_id = getattr(task, "storage_conn_id", None)
    value = getattr(task, "output_table", None)
    spec_file = getattr(task, "spec_file", None)
    if value is None and isinstance(spec_file, str):
        from airflow_provider_fkjoin.engine import read_spec_file

        try:
            spec = read_spec_file(_spec_file(spec_file, dag))
        except Exception as error:
            return JoinTask(
                dag_id, task.task_id, kind, None, storage_conn_id, f"spec file unreadable: {error}"
            )
        kind, value = spec.get("kind", kind), spec.get("output")
    location = _table_path(value)  # a catalog table (``name``) has none: only a JVM resolves it
    problem = None
    if location is None:
        problem = "the output is a catalog table or not set; the view reads tables by path"
    elif "{{" in location or "{%" in location:
        location, problem = None, "the output path is templated; it is known only when the task runs"
    return JoinTask(dag_id, task.task_id, kind, location, storage_conn_id, problem)


def join_tasks(dags: Iterable[Any]) -> list[JoinTask]:
    """Every join task of ``dags`` (deserialized DAGs), in DAG and task order."""
    found = []
    for dag in dags:
        for task in dag.tasks:
            joined = join_task(dag.dag_id, task, dag)
            if joined is not None:
                found.append(joined)
    return found


def output_row(task: JoinTask, freshness: Mapping[str, Any] | None, error: str | None) -> dict[str, Any]:
    """One row of the Joins view: the task, its output's last refresh and lag, or why it is unreadable."""
    row: dict[str, Any] = {**asdict(task), "error": error or task.problem}
    if freshness is None:
        return {**row, "last_refresh": None, "inputs": {}, "lag_s": None, "version": None}
    return {
        **row,
        "kind": freshness.get("kind") or task.kind,
        "version": freshness.get("version"),
        "last_refresh": freshness.get("last_refresh"),
        "inputs": freshness.get("inputs", {}),
        "lag_s": freshness.get("lag_s"),
    }


def by_lag(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stalest output first; unreadable outputs (unknown lag) after the readable ones.

    >>> [r["task_id"] for r in by_lag([{"task_id": "a", "lag_s": 5}, {"task_id": "b", "lag_s": None},
    ...                                 {"task_id": "c", "lag_s": 60}])]
    ['c', 'a', 'b']
    """

    def key(row: dict[str, Any]) -> tuple[float, str, str]:
        lag = row.get("lag_s")
        return (-lag if isinstance(lag, int | float) else math.inf, row["dag_id"], row["task_id"])

    return sorted(rows, key=key)


def read_freshness(
    tasks: list[JoinTask], *, history: int = 1, timeout_s: float = READ_TIMEOUT_S
) -> list[tuple[dict[str, Any] | None, str | None]]:
    """Each task's output freshness (or the error that kept it unread), read in parallel within
    ``timeout_s``; a read still running then is reported as timed out."""
    from airflow_provider_fkjoin.credentials import resolve_storage_options
    from airflow_provider_fkjoin.engine import output_freshness

    def read(task: JoinTask) -> dict[str, Any]:
        assert task.output is not None
        options = resolve_storage_options(None, task.storage_conn_id) if task.storage_conn_id else None
        return output_freshness(task.output, options, history=history)

    results: list[tuple[dict[str, Any] | None, str | None]] = [(None, None)] * len(tasks)
    readable = [i for i, task in enumerate(tasks) if task.output is not None]
    if not readable:
        return results
    futures = {_READS.submit(read, tasks[i]): i for i in readable}
    done, _ = wait(futures, timeout=timeout_s)
    for future, i in futures.items():
        if future not in done:
            future.cancel()  # not started yet: never run; a read under way ends on its own
            results[i] = (None, f"unreadable: no answer within {timeout_s:g} s")
        elif future.exception() is not None:
            results[i] = (None, f"unreadable: {future.exception()}")
        else:
            results[i] = (future.result(), None)
    return results


# -- the app -------------------------------------------------------------------------------------------

app = FastAPI(title="fkjoin: Joins", docs_url=None, redoc_url=None, openapi_url=None)


def _readable_join_tasks(user: Any, session: Any) -> list[JoinTask]:
    from airflow.models.serialized_dag import SerializedDagModel

    dag_ids = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
    if not dag_ids:
        return []
    models = SerializedDagModel.get_latest_serialized_dags(dag_ids=sorted(dag_ids), session=session)
    return join_tasks(model.dag for model in models)


def _asset(name: str) -> bytes:
    return resources.files("airflow_provider_fkjoin.plugins").joinpath("static", name).read_bytes()


def _page(page: str, title: str) -> HTMLResponse:
    """One of the view's pages: the shared shell, which ``joins.js`` fills in for ``page``."""
    html = _asset("page.html").decode()
    for placeholder, value in (("{{PREFIX}}", URL_PREFIX), ("{{PAGE}}", page), ("{{TITLE}}", title)):
        html = html.replace(placeholder, value)
    return HTMLResponse(html)


@app.get("/joins", response_class=HTMLResponse)
def joins_page(user: GetUserDep) -> HTMLResponse:
    """The Joins view (nav)."""
    return _page("joins", "Joins")


@app.get("/output", response_class=HTMLResponse, dependencies=[Depends(requires_access_dag("GET"))])
def output_page(dag_id: str, task_id: str) -> HTMLResponse:
    """One output's refresh history."""
    return _page("output", "Join output")


@app.get("/refresh", response_class=HTMLResponse, dependencies=[Depends(requires_access_dag("GET"))])
def refresh_page(dag_id: str, run_id: str, task_id: str) -> HTMLResponse:
    """One task instance's refresh."""
    return _page("refresh", "Join refresh")


@app.get("/static/{name}")
def static_asset(name: str, user: GetUserDep) -> Response:
    """The view's script and the charting library shipped with the package (no CDN)."""
    types = {
        "joins.js": "text/javascript",
        "uPlot.iife.min.js": "text/javascript",
        "uPlot.min.css": "text/css",
    }
    if name not in types:
        raise HTTPException(404, f"no asset {name}")
    return Response(_asset(name), media_type=types[name], headers={"Cache-Control": "max-age=3600"})


@app.get("/api/outputs")
def list_outputs(user: GetUserDep, session: SessionDep) -> dict[str, Any]:
    """Every output the user may see, stalest first."""
    tasks = _readable_join_tasks(user, session)
    rows = [output_row(task, *read) for task, read in zip(tasks, read_freshness(tasks), strict=True)]
    return {"generated_at": datetime.now(UTC).isoformat(), "outputs": by_lag(rows)}


@app.get("/api/outputs/{dag_id}/{task_id}", dependencies=[Depends(requires_access_dag("GET"))])
def output_history(
    dag_id: str,
    task_id: str,
    user: GetUserDep,
    session: SessionDep,
    history: int = Query(50, ge=1, le=500),
) -> dict[str, Any]:
    """One output's last ``history`` refreshes and its lag."""
    task = next(
        (t for t in _readable_join_tasks(user, session) if (t.dag_id, t.task_id) == (dag_id, task_id)), None
    )
    if task is None:
        raise HTTPException(404, f"DAG {dag_id} has no join task {task_id}")
    freshness, error = read_freshness([task], history=history)[0]
    return {**output_row(task, freshness, error), "refreshes": (freshness or {}).get("refreshes", [])}


@app.get("/api/refresh", dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))])
def task_refresh(
    dag_id: str, run_id: str, task_id: str, session: SessionDep, map_index: int = -1
) -> dict[str, Any]:
    """What one task instance's refresh did: its result, as the task returned it (its XCom)."""
    from airflow.models.xcom import XComModel

    query = XComModel.get_many(
        run_id=run_id, key="return_value", dag_ids=dag_id, task_ids=task_id, map_indexes=map_index
    )
    found = session.scalars(query.limit(1)).first()
    if found is None:
        raise HTTPException(404, f"task {task_id} of run {run_id} returned no refresh result")
    result = XComModel.deserialize_value(found)
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except ValueError:
            result = None
    if not isinstance(result, dict) or "mode" not in result:
        raise HTTPException(404, f"task {task_id} is not a join task (its XCom holds no refresh result)")
    return {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index, "result": result}


class FkJoinViewsPlugin(AirflowPlugin):
    """Registers the Joins view's app and its entries in the navigation and on each task instance."""

    name = "fkjoin_joins_view"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "fkjoin Joins"}]
    external_views = [
        {
            "name": "Joins",
            "href": f"{URL_PREFIX}/joins",
            "destination": "nav",
            "url_route": "fkjoin-joins",
        },
        {
            "name": "Join refresh",
            "href": (
                f"{URL_PREFIX}/refresh?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}"
                "&map_index={MAP_INDEX}"
            ),
            "destination": "task_instance",
            "url_route": "fkjoin-refresh",
        },
    ]
