"""The Joins view: every join output of the deployment's DAGs, how fresh it is, and what its refreshes did.

An Airflow plugin (registered by the package's ``airflow.plugins`` entry point; no extra server) that
mounts a small FastAPI app in the api-server at :data:`URL_PREFIX` and adds three views:

* **Joins**, in the navigation: every output a join operator of the deployment's DAGs writes, with its
  kind, links to its DAG, task, latest run and Airflow asset, the state of the task's last instance, its
  freshness (the lag in time and the state its ``freshness`` policy gives it, with the versions behind per
  input as the detail), and its last refresh (when, mode, reason, rows, duration); the stalest output
  first, every column sortable. Below it, the lineage graph: which joins feed which, from the inputs and
  outputs the tasks declare. Times are in the timezone chosen in Airflow's UI (else ``[core]
  default_timezone``).
* **An output's history** (``output?dag_id=...&task_id=...``): its last refreshes as a chart (duration
  and rows changed; full rebuilds marked) and a table, each row linking to the task instance that made it
  and saying which plan it ran (the ``strategy`` its commit recorded: the plan, what chose it, its actual
  seconds and both plans' estimates, e.g. "recompute (history) 3.0 s; estimated 6.0 s incremental / 3.5 s
  recompute"; a plan that took more than 1.5x the other plan's estimate is marked, as the engine warns).
* **A refresh**, on each task instance (Airflow puts the tab on every task; a join task also has a
  "Join refresh" link): the versions it consumed and produced, its rows, the plan it ran (as above, with
  the reason), its phases and the write path it took (the task's result, as its XCom holds it). On any
  other task it says so, with a link to the list.

The plan's text and the 1.5x rule are in ``static/plan.js`` (pure functions, tested with node).

Every read goes to Delta logs through ``deltalake`` (:func:`airflow_provider_fkjoin.engine.output_freshness`):
no JVM in the api-server. A table that cannot be read within :data:`READ_TIMEOUT_S` shows as unreadable.
Every endpoint authenticates through Airflow's auth manager (401 without a login) and shows only the
outputs of DAGs the user may read (403 for a DAG they may not).

The decisions are pure functions (:func:`join_tasks`, :func:`output_row`, :func:`by_lag`,
:func:`lineage_graph`); the I/O is in :func:`read_freshness`, :func:`last_task_instances`,
:func:`asset_ids` and the routes.
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
from airflow_provider_fkjoin.links import JOINS_VIEW_PREFIX, table_browser_url, table_uri
from airflow_provider_fkjoin.operators.freshness import freshness_state
from airflow_provider_fkjoin.operators.joins import _table_path

#: Where the api-server mounts the plugin's app.
URL_PREFIX = JOINS_VIEW_PREFIX
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
    and ``problem`` then says why. ``inputs`` are the asset URIs the task declares as inlets (its input
    tables); ``freshness`` its policy in seconds (``{"warn_after": s, "error_after": s}``), or None.
    """

    dag_id: str
    task_id: str
    kind: str
    output: str | None
    storage_conn_id: str | None = None
    problem: str | None = None
    inputs: tuple[str, ...] = ()
    freshness: Mapping[str, float] | None = None

    @property
    def output_uri(self) -> str | None:
        """The output's asset URI (as the operator's asset events name it), or None."""
        try:
            return table_uri(self.output) if self.output else None
        except ValueError:
            return None


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
    inlets = getattr(task, "inlets", None) or []
    inputs = tuple(str(asset.uri) for asset in inlets if getattr(asset, "uri", None))
    policy = getattr(task, "freshness", None)
    extra = {"inputs": inputs, "freshness": dict(policy) if isinstance(policy, Mapping) else None}
    value = getattr(task, "output_table", None)
    spec_file = getattr(task, "spec_file", None)
    if value is None and isinstance(spec_file, str):
        from airflow_provider_fkjoin.engine import read_spec_file

        try:
            spec = read_spec_file(_spec_file(spec_file, dag))
        except Exception as error:
            return JoinTask(
                dag_id, task.task_id, kind, None, storage_conn_id, f"spec file unreadable: {error}", **extra
            )
        kind, value = spec.get("kind", kind), spec.get("output")
    location = _table_path(value)  # a catalog table (``name``) has none: only a JVM resolves it
    problem = None
    if location is None:
        problem = "the output is a catalog table or not set; the view reads tables by path"
    elif "{{" in location or "{%" in location:
        location, problem = None, "the output path is templated; it is known only when the task runs"
    return JoinTask(dag_id, task.task_id, kind, location, storage_conn_id, problem, **extra)


def join_tasks(dags: Iterable[Any]) -> list[JoinTask]:
    """Every join task of ``dags`` (deserialized DAGs), in DAG and task order."""
    found = []
    for dag in dags:
        for task in dag.tasks:
            joined = join_task(dag.dag_id, task, dag)
            if joined is not None:
                found.append(joined)
    return found


def output_row(
    task: JoinTask,
    freshness: Mapping[str, Any] | None,
    error: str | None,
    *,
    last_task: Mapping[str, Any] | None = None,
    asset_id: int | None = None,
) -> dict[str, Any]:
    """One row of the Joins view: the task, its output's last refresh and lag (or why it is unreadable),
    the freshness state its policy gives that lag, the task's last instance and the output's asset.

    ``freshness_state`` is ``ok``/``warn``/``error``/``unknown`` under a policy, None without one;
    ``lag_versions`` is the most versions any input is ahead of what the output consumed.
    """
    row: dict[str, Any] = {
        **{name: value for name, value in asdict(task).items() if name not in ("inputs", "freshness")},
        "error": error or task.problem,
        "freshness_policy": dict(task.freshness) if task.freshness else None,
        "last_task": dict(last_task) if last_task else None,
        "asset_uri": task.output_uri,
        "asset_id": asset_id,
        "browser_url": _browser_url(task.output),
    }
    if freshness is None:
        return {
            **row,
            "last_refresh": None,
            "inputs": {},
            "lag_s": None,
            "lag_versions": None,
            "version": None,
            "freshness_state": freshness_state(None, task.freshness),
        }
    inputs = freshness.get("inputs", {})
    behind = [info.get("lag_versions") for info in inputs.values() if isinstance(info, Mapping)]
    return {
        **row,
        "kind": freshness.get("kind") or task.kind,
        "version": freshness.get("version"),
        "last_refresh": freshness.get("last_refresh"),
        "inputs": inputs,
        "lag_s": freshness.get("lag_s"),
        "lag_versions": max((b for b in behind if isinstance(b, int)), default=None),
        "freshness_state": freshness_state(freshness.get("lag_s"), task.freshness),
    }


def _browser_url(location: str | None) -> str | None:
    """The object store's console page of an output, where there is one (S3, GCS); else None."""
    if not location:
        return None
    try:
        url = table_browser_url(location)
    except ValueError:
        return None
    return url if url.startswith("https://") else None


def lineage_graph(tasks: Iterable[JoinTask]) -> dict[str, list[dict[str, Any]]]:
    """Which joins feed which, from the inputs (inlets) and outputs the tasks declare.

    A node per join task (``id`` ``dag_id.task_id``) and per input table no join of these DAGs writes
    (``id`` its asset URI); an edge from the join writing a table, or from the table itself, to every
    join reading it, named by the table. ``depth`` is the node's column in a left-to-right drawing (the
    longest chain of joins before it).

    >>> a = JoinTask("d", "a", "foreign_key_join", "/w/ab", inputs=("file:///w/x", "file:///w/y"))
    >>> b = JoinTask("d", "b", "foreign_key_join", "/w/abc", inputs=("file:///w/ab", "file:///w/z"))
    >>> [(e["source"], e["target"]) for e in lineage_graph([a, b])["edges"]]
    [('file:///w/x', 'd.a'), ('file:///w/y', 'd.a'), ('d.a', 'd.b'), ('file:///w/z', 'd.b')]
    """
    tasks = list(tasks)
    writers = {task.output_uri: f"{task.dag_id}.{task.task_id}" for task in tasks if task.output_uri}
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []
    for task in tasks:
        node_id = f"{task.dag_id}.{task.task_id}"
        nodes[node_id] = {
            "id": node_id,
            "type": "join",
            "dag_id": task.dag_id,
            "task_id": task.task_id,
            "kind": task.kind,
            "output": task.output,
            "label": _table_name(task.output_uri) if task.output_uri else task.task_id,
        }
    for task in tasks:
        target = f"{task.dag_id}.{task.task_id}"
        for uri in task.inputs:
            source = writers.get(uri)
            if source is None:
                source = uri
                nodes.setdefault(uri, {"id": uri, "type": "table", "uri": uri, "label": _table_name(uri)})
            if source != target:
                edges.append({"source": source, "target": target, "table": uri})
    depth: dict[str, int] = {}

    def depth_of(node_id: str, seen: frozenset[str] = frozenset()) -> int:
        if node_id not in depth:
            parents = [e["source"] for e in edges if e["target"] == node_id and e["source"] not in seen]
            depth[node_id] = 1 + max((depth_of(p, seen | {node_id}) for p in parents), default=-1)
        return depth[node_id]

    for node_id, node in nodes.items():
        node["depth"] = depth_of(node_id)
    return {"nodes": list(nodes.values()), "edges": edges}


def _table_name(uri: str) -> str:
    """The last segment of a table's URI: what the graph labels it with (the full URI is its tooltip)."""
    return uri.rstrip("/").rsplit("/", 1)[-1] or uri


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


def last_task_instances(session: Any, tasks: list[JoinTask]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each join task's instance in its DAG's latest run that has one: state, run, try, start and end.

    The view shows it next to the output's freshness: a join whose last tries failed is otherwise only
    "behind" in the Delta logs it reads.
    """
    if not tasks:
        return {}
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import and_, func, select

    rank = (
        func.row_number()
        .over(
            partition_by=(TaskInstance.dag_id, TaskInstance.task_id),
            order_by=(DagRun.run_after.desc(), DagRun.id.desc(), TaskInstance.map_index.desc()),
        )
        .label("rank")
    )
    ranked = (
        select(
            TaskInstance.dag_id,
            TaskInstance.task_id,
            TaskInstance.run_id,
            TaskInstance.map_index,
            TaskInstance.state,
            TaskInstance.try_number,
            TaskInstance.start_date,
            TaskInstance.end_date,
            rank,
        )
        .join(DagRun, and_(DagRun.dag_id == TaskInstance.dag_id, DagRun.run_id == TaskInstance.run_id))
        .where(
            TaskInstance.dag_id.in_(sorted({t.dag_id for t in tasks})),
            TaskInstance.task_id.in_(sorted({t.task_id for t in tasks})),
        )
        .subquery()
    )
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for row in session.execute(select(ranked).where(ranked.c.rank == 1)):
        found[(row.dag_id, row.task_id)] = {
            "run_id": row.run_id,
            "map_index": row.map_index,
            "state": str(row.state.value if hasattr(row.state, "value") else row.state)
            if row.state
            else None,
            "try_number": row.try_number,
            "start_date": row.start_date.isoformat() if row.start_date else None,
            "end_date": row.end_date.isoformat() if row.end_date else None,
        }
    return found


def asset_ids(session: Any, uris: Iterable[str]) -> dict[str, int]:
    """The Airflow asset id of each output URI known to Airflow (for a link to its asset page)."""
    wanted = sorted(set(uris))
    if not wanted:
        return {}
    from airflow.models.asset import AssetModel
    from sqlalchemy import select

    rows = session.execute(select(AssetModel.uri, AssetModel.id).where(AssetModel.uri.in_(wanted)))
    return {uri: asset_id for uri, asset_id in rows}


def ui_timezone() -> str:
    """``[core] default_timezone`` as the browser names it (``UTC`` for Airflow's ``utc``); the page
    prefers the timezone a user chose in Airflow's UI."""
    zone = conf.get("core", "default_timezone", fallback="utc") or "utc"
    return "UTC" if zone.lower() == "utc" else zone


def _rows(tasks: list[JoinTask], session: Any, history: int = 1) -> list[dict[str, Any]]:
    reads = read_freshness(tasks, history=history)
    last = last_task_instances(session, tasks)
    ids = asset_ids(session, (t.output_uri for t in tasks if t.output_uri))
    return [
        {
            **output_row(
                task,
                freshness,
                error,
                last_task=last.get((task.dag_id, task.task_id)),
                asset_id=ids.get(task.output_uri or ""),
            ),
            "refreshes": (freshness or {}).get("refreshes", []),
        }
        for task, (freshness, error) in zip(tasks, reads, strict=True)
    ]


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
        "plan.js": "text/javascript",
        "uPlot.iife.min.js": "text/javascript",
        "uPlot.min.css": "text/css",
    }
    if name not in types:
        raise HTTPException(404, f"no asset {name}")
    return Response(_asset(name), media_type=types[name], headers={"Cache-Control": "max-age=3600"})


@app.get("/api/outputs")
def list_outputs(user: GetUserDep, session: SessionDep) -> dict[str, Any]:
    """Every output the user may see, stalest first, with its freshness state (``freshness_state``:
    ``ok``/``warn``/``error``/``unknown`` under the task's ``freshness`` policy), its task's last instance
    and its asset; and the timezone the page shows times in."""
    tasks = _readable_join_tasks(user, session)
    rows = [{k: v for k, v in row.items() if k != "refreshes"} for row in _rows(tasks, session)]
    return {"generated_at": datetime.now(UTC).isoformat(), "timezone": ui_timezone(), "outputs": by_lag(rows)}


@app.get("/api/lineage")
def lineage(user: GetUserDep, session: SessionDep) -> dict[str, Any]:
    """The lineage graph of the outputs the user may see (:func:`lineage_graph`): nodes and edges."""
    return lineage_graph(_readable_join_tasks(user, session))


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
    [row] = _rows([task], session, history=history)
    return {**row, "timezone": ui_timezone()}


@app.get("/api/refresh", dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))])
def task_refresh(
    dag_id: str, run_id: str, task_id: str, session: SessionDep, map_index: int = -1
) -> dict[str, Any]:
    """What one task instance's refresh did: its result, as the task returned it (its XCom).

    Airflow shows the "Join refresh" tab on every task: for a task that is not a join the answer is
    ``{"join": false, "message": ...}`` (the page says so), and for a join task with no result yet
    ``"result": null`` with the reason; a 404 only for a DAG that is not deployed.
    """
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.models.xcom import XComModel

    base = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}
    model = SerializedDagModel.get_latest_serialized_dags(dag_ids=[dag_id], session=session)
    if not model:
        raise HTTPException(404, f"no deployed DAG {dag_id}")
    dag = model[0].dag
    task = dag.task_dict.get(task_id)
    if task is None or join_task(dag_id, task, dag) is None:
        return {
            **base,
            "join": False,
            "result": None,
            "message": f"{task_id} is not a join task: this tab shows what a join operator's refresh did",
        }

    query = XComModel.get_many(
        run_id=run_id, key="return_value", dag_ids=dag_id, task_ids=task_id, map_indexes=map_index
    )
    found = session.scalars(query.limit(1)).first()
    if found is None:
        message = "no refresh result yet: the task has not run, is running, or failed before it finished"
        return {**base, "join": True, "result": None, "message": message}
    result = XComModel.deserialize_value(found)
    if isinstance(result, str):
        try:
            result = json.loads(result)
        except ValueError:
            result = None
    if not isinstance(result, dict) or "mode" not in result:
        message = "the task's return value is no refresh result"
        return {**base, "join": True, "result": None, "message": message}
    return {**base, "join": True, "result": result}


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
