"""Operators that refresh one join's output table per run: they build a spec, submit it, report the result.

Each takes its spec fields as arguments, or a YAML/JSON file (``spec_file``) whose values are rendered
with Jinja like templated fields; explicit arguments win over the file. The result dict is the XCom
return value; the inputs are inlets. The outlet is an :class:`~airflow.sdk.AssetAlias` named
``fkjoin:<dag_id>.<task_id>`` through which a run emits an event for the output table's
:class:`~airflow.sdk.Asset` (``file:///abs/path`` or the object-store URL) only when the refresh changed
the output, with the version reached, the mode and the row counts as its extra: a ``noop`` run emits
nothing, so a DAG scheduled on the output does not run for nothing, and a templated output path (known
only at run time) gets its event all the same.

Example::

    ForeignKeyJoinOperator(
        task_id="orders_customers",
        left={"path": "/w/orders", "key": ["order_id"]},
        right={"path": "/w/customers", "key": ["customer_id"]},
        foreign_key=["customer_id"],
        how="left",
        output="/w/orders_customers",
    )

Every operator also takes ``full_refresh`` (templated: a bool, or a string such as
``"{{ params.full_refresh }}"`` rendering to ``true``/``false``), which rebuilds the output from its
inputs instead of applying their changes, ``write_path`` (``auto``, or ``merge`` to write every refresh
with Delta's MERGE), and ``spark_ui`` (default off) to start the driver's web UI.
A run consumes every change its inputs hold when it starts, not a slice of its logical date, and two
refreshes of one output cannot overlap (the engine refuses the second): each operator therefore defaults
to ``max_active_tis_per_dag=1``, so a second run's refresh waits for the first instead of failing. Give
``max_active_tis_per_dag`` (or put it in ``default_args``) to change it, e.g. for a mapped task whose map
indexes write different outputs. ``freshness`` sets how stale the output may get
(:mod:`airflow_provider_fkjoin.operators.freshness`).
Table paths are normalised as the engine does and must be absolute paths or object-store URLs: a
relative ``output: "out"`` fails the task with ``output.path: table location 'out' is relative; ...``.
A relative ``spec_file`` is fine: it is a file next to the DAG, not a table.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import yaml
from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk import conf as airflow_conf

from airflow_provider_fkjoin.credentials import resolve_storage_options
from airflow_provider_fkjoin.hooks.fkjoin import FkJoinBadInputError, FkJoinHook, parse_write_path
from airflow_provider_fkjoin.lineage import ol_dataset
from airflow_provider_fkjoin.links import (
    JOIN_REFRESH_XCOM_KEY,
    OUTPUT_TABLE_XCOM_KEY,
    SPARK_UI_XCOM_KEY,
    JoinRefreshLink,
    OutputTableLink,
    SparkApplicationLink,
    check_location,
    push_link,
    table_uri,
)
from airflow_provider_fkjoin.operators.freshness import freshness_policy

if TYPE_CHECKING:
    from airflow.sdk import Context

TableArg = str | Mapping[str, Any]
_TRUE = frozenset({"true", "1", "yes", "y", "on"})
_FALSE = frozenset({"false", "0", "no", "n", "off", "", "none"})
#: Template fields every operator has besides its spec fields (subclasses list them after their own).
COMMON_TEMPLATE_FIELDS: tuple[str, ...] = (
    "spec_file",
    "conn_id",
    "conf",
    "env_vars",
    "full_refresh",
    "write_path",
    "noop_check",
    "storage_conn_id",
    "freshness",
)
#: The task state store key of the output version a task instance last reported (see ``execute``).
REPORTED_VERSION_KEY = "fkjoin_reported_output_version"


def task_origin(context: Context) -> dict[str, Any]:
    """The task instance running a refresh, recorded in the refresh's commit: what a retry looks for.

    >>> from types import SimpleNamespace
    >>> ti = SimpleNamespace(dag_id="orders", run_id="scheduled__2025-01-01T00:00:00+00:00", task_id="join",
    ...                      map_index=-1, try_number=2)
    >>> task_origin({"ti": ti})
    {'dag_id': 'orders', 'run_id': 'scheduled__2025-01-01T00:00:00+00:00', 'task_id': 'join', 'map_index': -1,
     'try_number': 2}
    """
    ti = context["ti"]
    return {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "task_id": ti.task_id,
        "map_index": ti.map_index,
        "try_number": ti.try_number,
    }


def _read_spec_file(path: str | Path) -> dict[str, Any]:
    """The engine's spec-file reader, its error a task failure that no retry repeats."""
    from airflow_provider_fkjoin.engine import SpecError, read_spec_file

    try:
        return read_spec_file(path)
    except SpecError as error:
        raise FkJoinBadInputError(str(error)) from error


def _table_path(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("path"), str):
        return value["path"]
    return None


def _attr(field: str) -> str:
    """The operator attribute holding a spec field (``output`` is taken by BaseOperator's XComArg)."""
    return "output_table" if field == "output" else field


def _is_templated(value: str) -> bool:
    return "{{" in value or "{%" in value


def parse_flag(value: Any, field: str) -> bool:
    """A rendered boolean argument: a bool, 0/1, or a string such as ``"True"``, ``"false"``, ``"1"``.

    Jinja renders to strings unless the DAG renders native objects, so ``"{{ params.full }}"`` arrives as
    ``"True"`` or ``"False"``; anything else is a bad input that names the argument, never a silent False.

    >>> parse_flag("True", "full_refresh"), parse_flag(" false ", "full_refresh"), parse_flag(1, "x")
    (True, False, True)
    """
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise FkJoinBadInputError(f"{field}: expected true or false, got {value!r}")


def _normalised(ref: Any, field: str) -> Any:
    """A table reference with its path normalised as the engine does; a string becomes ``{"path": ...}``.

    A path the engine would refuse fails here, naming the field, before any Spark job::

        _normalised("/w/x/../orders/", "output")   # {"path": "/w/orders"}
        _normalised({"path": "w/r"}, "inputs[1]")  # FkJoinBadInputError: inputs[1].path: ... is relative
    """
    if isinstance(ref, str):
        ref = {"path": ref}
    if isinstance(ref, Mapping) and isinstance(ref.get("path"), str):
        try:
            return {**ref, "path": check_location(ref["path"])}
        except ValueError as error:
            raise FkJoinBadInputError(f"{field}.path: {error}") from error
    return ref


def _with_parent_job_info(conf: dict[str, Any], context: Context) -> dict[str, Any]:
    """``conf`` naming the task of ``context`` as the parent job of the Spark application's OpenLineage
    events (``spark.openlineage.parent*``). Imports OpenLineage: called only when Spark is to run."""
    from airflow.providers.common.compat.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
    )

    return inject_parent_job_information_into_spark_properties(conf, context)


#: The ``:param:`` lines of the arguments every join operator takes, appended to each one's docstring.
SHARED_PARAMS = """
    Arguments every join operator takes (besides BaseOperator's):

    :param spec_file: a YAML/JSON spec (relative to the DAG file's folder) whose fields are rendered with
        Jinja at run time; the operator's own arguments win over the file's fields.
    :param conn_id: the ``spark`` connection (spark-submit: local, standalone, YARN, Kubernetes) or a
        ``spark_connect`` one (``sc://host:15002``: a long-lived Spark Connect server, no JVM per task);
        default ``spark_default`` (templated).
    :param conf: Spark conf for the job, e.g. ``{"spark.executor.memory": "4g"}``; wins over the
        defaults the hook adds (templated).
    :param env_vars: environment of the driver (spark-submit's process in client mode; the driver pod or
        application master on Kubernetes and YARN), templated.
    :param jars: comma-separated jars the job needs besides the engine's, e.g. ``"/opt/hadoop-aws.jar"``:
        added after Delta's jars and the engine's jar, never instead of them.
    :param packages: comma-separated Maven coordinates the job needs, added to what the engine needs.
    :param application: the job file to submit (default: the one in this package; on Kubernetes, its path
        inside the image, e.g. ``local:///opt/fkjoin/fkjoin_job.py``).
    :param deploy_mode: ``client`` or ``cluster``; overrides the connection's ``deploy-mode`` extra.
    :param storage_options: ``deltalake`` options for reading Delta logs without a JVM (the noop check, a
        retry's look for an earlier commit); prefer ``storage_conn_id`` for credentials.
    :param storage_conn_id: an AWS, Google Cloud or Azure connection for object-store tables (templated):
        the job's ``spark.hadoop.*`` settings and the ``deltalake`` options of the logs read without a JVM
        (:mod:`airflow_provider_fkjoin.credentials`), so no credential is written in the DAG.
    :param spark_submit_kwargs: more SparkSubmitHook arguments (``executor_memory``, ``num_executors``...).
    :param full_refresh: rebuild the output in full this run instead of applying its inputs' changes
        (templated: a bool, or ``"{{ params.full_refresh }}"`` rendering to true/false).
    :param write_path: ``auto`` (default: the engine commits net changes where it can prove them right,
        else MERGE) or ``merge`` (always Delta's MERGE; an escape hatch, templated).
    :param spark_ui: start the Spark driver's web UI (off by default: it exposes the job's conf).
    :param noop_check: before starting Spark, read the Delta logs (no JVM) and finish at once with the
        ``noop`` result when no input moved since the last refresh (default on; templated).
    :param openlineage_inject_parent_job_info: name this task as the parent job in the Spark application's
        own OpenLineage events (default ``[openlineage] spark_inject_parent_job_info``).
    :param fast_driver_start: start a spark-submit driver on this machine (client mode) with the class
        archive of ``fkjoin jvm-archive`` and the client compiler only, after your own
        ``spark.driver.extraJavaOptions``; default ``[fkjoin] fast_driver_start`` (on). Nothing is added
        while no archive was built for this JVM and Spark (the task log says so).
    :param freshness: how stale the output may get, ``{"warn_after": ..., "error_after": ...}`` (either
        or both; a timedelta or pendulum duration, seconds, ``"30m"``, ``"2h"``, ``"1d"``): shown as a state
        in the Joins view and its API, and the interval of
        :func:`~airflow_provider_fkjoin.operators.freshness.freshness_deadline`.
    :param max_active_tis_per_dag: BaseOperator's limit on this task's running instances across the DAG's
        runs, here 1 unless given (or set in ``default_args``): two refreshes of one output never overlap.
"""


class _FkJoinOperator(BaseOperator):
    """Shared machinery of the join operators; subclasses name the kind, fields and input sides.

    A subclass lists ``template_fields`` as ``(*map(_attr, spec_fields), *COMMON_TEMPLATE_FIELDS)`` so the
    arguments every operator takes (``full_refresh``, ``conf``...) are templated in all of them, and its
    docstring gets :data:`SHARED_PARAMS` appended, so ``help()`` and IDEs show every argument.
    """

    kind: ClassVar[str] = ""
    spec_fields: ClassVar[tuple[str, ...]] = ()
    input_sides: ClassVar[tuple[str, ...]] = ()
    #: Other kinds a spec file may hold, with their input sides (the self-join takes a windowed join).
    other_kinds: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: Aliases of ``columns`` other than ``l`` and ``r`` (a stream-table join's ``s`` and ``t``).
    column_aliases: ClassVar[dict[str, str]] = {}
    operator_extra_links = (SparkApplicationLink(), OutputTableLink(), JoinRefreshLink())
    template_ext: Sequence[str] = ()
    ui_color = "#e8f0fe"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__doc__ and "Arguments every join operator takes" not in cls.__doc__:
            cls.__doc__ = cls.__doc__.rstrip() + "\n" + SHARED_PARAMS

    def __init__(
        self,
        *,
        spec_args: Mapping[str, Any],
        spec_file: str | None = None,
        conn_id: str = FkJoinHook.default_conn_name,
        conf: Mapping[str, Any] | None = None,
        env_vars: Mapping[str, str] | None = None,
        jars: str | None = None,
        packages: str | None = None,
        application: str | None = None,
        deploy_mode: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        storage_conn_id: str | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        full_refresh: bool | str = False,
        write_path: str = "auto",
        spark_ui: bool = False,
        noop_check: bool | str = True,
        openlineage_inject_parent_job_info: bool = airflow_conf.getboolean(
            "openlineage", "spark_inject_parent_job_info", fallback=False
        ),
        fast_driver_start: bool | None = None,
        freshness: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if "max_active_tis_per_dag" not in kwargs and "max_active_tis_per_dag" not in (
            kwargs.get("default_args") or {}
        ):
            kwargs["max_active_tis_per_dag"] = 1
        super().__init__(**kwargs)
        for name in self.spec_fields:
            setattr(self, _attr(name), spec_args.get(name))
        self.spec_file = spec_file
        self.conn_id = conn_id
        self.conf = dict(conf or {})
        self.env_vars = dict(env_vars or {})
        self.jars = jars
        self.packages = packages
        self.application = application
        self.deploy_mode = deploy_mode
        self.storage_options = dict(storage_options) if storage_options else None
        self.storage_conn_id = storage_conn_id
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.full_refresh = full_refresh
        self.write_path = write_path
        self.spark_ui = spark_ui
        self.noop_check = noop_check
        self.openlineage_inject_parent_job_info = openlineage_inject_parent_job_info
        self.fast_driver_start = fast_driver_start
        try:
            self.freshness = freshness_policy(freshness)
        except ValueError as error:
            raise FkJoinBadInputError(f"{self.task_id}: {error}") from error
        self._hook: FkJoinHook | None = None
        self._spec: dict[str, Any] | None = None
        self._result: dict[str, Any] | None = None
        self._declare_assets()

    # -- spec -------------------------------------------------------------------------------------
    def _spec_file_path(self) -> Path | None:
        if not self.spec_file:
            return None
        path = Path(self.spec_file)
        if not path.is_absolute():
            fileloc = getattr(getattr(self, "dag", None), "fileloc", None) if self.has_dag() else None
            path = (Path(fileloc).parent if fileloc else Path.cwd()) / path
        return path

    def build_spec(self, context: Context | None = None) -> dict[str, Any]:
        """The spec this task submits: the file's fields (rendered with ``context``), then the arguments.

        Table paths are normalised with the engine's rules (absolute path or known object-store URL;
        ``..``, ``//`` and ``file:`` folded) and a string ``output`` becomes ``{"path": ...}``. A path
        the engine would refuse fails here, naming the field::

            FkJoinBadInputError: output.path: table location 'out' is relative; give an absolute path ...

        The output's ``owner`` is this task (``dag_id.task_id``) unless the spec names one: a second DAG
        pointed at the same output by mistake is refused, while editing this task's spec rebuilds.
        """
        data: dict[str, Any] = {}
        path = self._spec_file_path()
        if path is not None:
            data = _read_spec_file(path)
            if context is not None:
                data = self.render_template(data, context)
        for name in self.spec_fields:
            value = getattr(self, _attr(name))
            if value is not None:
                data[name] = value
        kind = data.setdefault("kind", self.kind)
        if kind != self.kind and kind not in self.other_kinds:
            raise FkJoinBadInputError(
                f"spec kind {kind!r} does not match {type(self).__name__} ({self.kind})"
            )
        for side in (*self.sides_of(data), "output"):
            if side in data:
                data[side] = _normalised(data[side], side)
        if isinstance(data.get("output"), dict) and self.has_dag():
            data["output"] = {"owner": f"{self.dag_id}.{self.task_id}", **data["output"]}
        return data

    def sides_of(self, spec: Mapping[str, Any]) -> tuple[str, ...]:
        """The input sides of ``spec``: this operator's, or those of another kind it takes."""
        return self.other_kinds.get(spec.get("kind", self.kind), self.input_sides)

    def input_refs(self, spec: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """The input tables of ``spec`` as ``(field, reference)``, for inlets and lineage.

        One per input side (``[("left", {...}), ("right", {...})]``); a kind whose inputs are a list says
        where each one sits (``("inputs[1]", {...})``).
        """
        return [(side, spec.get(side)) for side in self.sides_of(spec)]

    def _static_spec(self) -> dict[str, Any]:
        """What is known at parse time (no rendering): for inlets and outlets."""
        data: dict[str, Any] = {}
        path = self._spec_file_path()
        if path is not None and path.is_file():
            try:
                data = yaml.safe_load(path.read_text()) or {}
            except (OSError, yaml.YAMLError):
                data = {}
        for name in self.spec_fields:
            value = getattr(self, _attr(name))
            if value is not None:
                data[name] = value
        return data if isinstance(data, dict) else {}

    @property
    def output_alias(self) -> AssetAlias:
        """The outlet through which a run that changed the output emits the output table's asset event:
        named after the producing task, as alias names are global across DAGs."""
        return AssetAlias(name=f"fkjoin:{self.dag_id}.{self.task_id}")

    def _declare_assets(self) -> None:
        def asset(ref: Any) -> Asset | None:
            location = _table_path(ref)
            if not location or _is_templated(location):
                return None
            try:
                return Asset(uri=table_uri(location))
            except ValueError:
                return None

        if self.output_alias not in self.outlets:
            self.outlets = [*self.outlets, self.output_alias]
        for _field, ref in self.input_refs(self._static_spec()):
            source = asset(ref)
            if source is not None and source not in self.inlets:
                self.inlets = [*self.inlets, source]

    def validate_spec(self, spec: Mapping[str, Any]) -> None:
        """Check the spec with the engine's own validation before any Spark job starts."""
        from airflow_provider_fkjoin.engine import SpecError, load_spec

        try:
            load_spec(dict(spec))
        except SpecError as error:
            raise FkJoinBadInputError(str(error)) from error

    # -- execution --------------------------------------------------------------------------------
    def make_hook(self, context: Context | None = None) -> FkJoinHook:
        """The hook for this run (built in ``execute``, never at parse time). With
        ``openlineage_inject_parent_job_info``, the job's conf names this task as the parent job of the
        Spark application's own OpenLineage events (``spark.openlineage.parent*``), as the Spark
        provider's SparkSubmitOperator does: added when Spark is to run (the hook's ``finish_conf``), so a
        noop does not import OpenLineage for a conf it never submits."""
        finish_conf = None
        if self.openlineage_inject_parent_job_info and context is not None:
            finish_conf = functools.partial(_with_parent_job_info, context=context)
        return FkJoinHook(
            self.conn_id,
            conf=dict(self.conf),
            finish_conf=finish_conf,
            env_vars=self.env_vars,
            jars=self.jars,
            packages=self.packages,
            application=self.application,
            deploy_mode=self.deploy_mode,
            storage_options=self.storage_options,
            storage_conn_id=self.storage_conn_id,
            spark_submit_kwargs=self.spark_submit_kwargs,
            spark_ui=self.spark_ui,
            noop_check=parse_flag(self.noop_check, "noop_check"),
            fast_driver_start=self.fast_driver_start,
        )

    def execute(self, context: Context) -> dict[str, Any]:
        spec = self.build_spec(context)
        self.validate_spec(spec)
        full_refresh = parse_flag(self.full_refresh, "full_refresh")
        write_path = parse_write_path(self.write_path)
        self._spec = spec
        output = _table_path(spec.get("output"))
        ti = context["ti"]
        push_link(context, OUTPUT_TABLE_XCOM_KEY, OutputTableLink().get_link(self, ti_key=ti))
        push_link(context, JOIN_REFRESH_XCOM_KEY, JoinRefreshLink().get_link(self, ti_key=ti))
        origin = task_origin(context)
        spark_ui: list[str] = []

        def show_spark_ui(url: str) -> None:
            spark_ui.append(url)
            push_link(context, SPARK_UI_XCOM_KEY, url)

        result = self._earlier_try(context, output, origin)
        if result is None:
            self._hook = self.make_hook(context)
            if full_refresh:
                self.log.info("%s: full refresh requested: the output is rebuilt from its inputs", self.kind)
            result = self._hook.run(
                spec,
                on_spark_ui=show_spark_ui,
                full_refresh=full_refresh,
                write_path=write_path,
                origin=origin,
            )
        if not spark_ui:
            # no Spark UI (a noop, Spark Connect): an empty link, so Airflow's link lookup after the task
            # finds a value instead of logging "XCom not found" as an error
            context["ti"].xcom_push(key=SPARK_UI_XCOM_KEY, value="")
        self.log.info(
            "%s: mode=%s (%s) output version=%s rows=%s",
            self.kind,
            result.get("mode"),
            result.get("reason"),
            (result.get("output") or {}).get("version"),
            result.get("rows"),
        )
        self._result = result
        if output:
            self._record_asset_event(context, output, result)
            if result.get("mode") != "noop":
                context["task_state_store"].set(REPORTED_VERSION_KEY, result["output"]["version"])
        return result

    def _earlier_try(
        self, context: Context, output: str | None, origin: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The refresh an earlier try of this task instance committed but never reported, or None.

        A try can die after its commit (a lost worker, spark-submit killed during teardown); its retry
        would find nothing to do and report a ``noop``. Instead it reports that commit (rows, versions,
        an asset event). A commit this task instance already reported (it succeeded and was cleared to
        run again) is not reported twice: the task state store holds the version reported last.
        """
        if not output or int(origin.get("try_number") or 1) <= 1:
            return None
        from airflow_provider_fkjoin.engine import refresh_by_origin

        try:
            options = resolve_storage_options(self.storage_options, self.storage_conn_id)
            found = refresh_by_origin(output, origin, options)
        except Exception as error:  # the refresh runs, and its own checks decide
            self.log.warning(
                "could not look for an earlier try's commit: %s: %s", type(error).__name__, error
            )
            return None
        if found is None:
            return None
        if found["output"]["version"] == context["task_state_store"].get(REPORTED_VERSION_KEY):
            return None
        self.log.info(
            "try %s of this task committed output version %s and did not report it: reporting that refresh",
            found.get("origin", {}).get("try_number"),
            found["output"]["version"],
        )
        return {**found, "reason": f"{found['reason']} (committed by try {found['origin']['try_number']})"}

    def _record_asset_event(self, context: Context, output: str, result: Mapping[str, Any]) -> None:
        if not output_changed(result):
            self.log.info(
                "%s: the output did not change: no asset event for %s", self.kind, table_uri(output)
            )
            return
        context["outlet_events"][self.output_alias].add(
            Asset(uri=table_uri(output)), extra=asset_event_extra(result)
        )

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()

    # -- lineage ----------------------------------------------------------------------------------
    def lineage_tables(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """OpenLineage (namespace, name) of the inputs and the output of the spec last run."""
        spec = self._spec or self._static_spec()
        inputs = [ol_dataset(p) for _field, ref in self.input_refs(spec) if (p := _table_path(ref))]
        output = _table_path(spec.get("output"))
        return inputs, ([ol_dataset(output)] if output else [])

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage inputs and output with the Delta versions the refresh consumed and produced, and
        column lineage from ``columns`` (needs the ``[openlineage]`` extra; None without it)."""
        try:
            from airflow_provider_fkjoin.lineage import operator_lineage
        except ImportError:
            return None
        spec = self._spec or self._static_spec()
        inputs = [(field, p) for field, ref in self.input_refs(spec) if (p := _table_path(ref))]
        columns = spec.get("columns") if isinstance(spec.get("columns"), Mapping) else None
        try:
            return operator_lineage(
                inputs,
                _table_path(spec.get("output")),
                result=self._result,
                columns=columns,
                aliases=self.column_aliases_of(spec),
            )
        except ImportError:
            return None

    def column_aliases_of(self, spec: Mapping[str, Any]) -> dict[str, str]:
        """Which input each alias of ``columns`` names: ``{"l": "left", "r": "right"}`` for most kinds."""
        sides = self.sides_of(spec)
        if len(sides) == 2:
            return {"l": sides[0], "r": sides[1], **self.column_aliases}
        if len(sides) == 1:
            return {"l": sides[0], "r": sides[0]}
        return {}


def output_changed(result: Mapping[str, Any]) -> bool:
    """Whether a refresh changed its output, so consumers of the output's asset have something new: a
    full rebuild (a new table, or one rebuilt in full), or any row inserted, updated or deleted. A
    ``noop``, or an incremental refresh whose changes all cancelled out, changed nothing.

    >>> output_changed({"mode": "noop", "rows": {}}), output_changed({"mode": "full", "rows": {}})
    (False, True)
    >>> output_changed({"mode": "incremental", "rows": {"inserted": 0, "updated": 2, "deleted": 0}})
    True
    """
    if result.get("mode") == "noop":
        return False
    if result.get("mode") == "full":
        return True
    rows = result.get("rows") or {}
    return any(
        isinstance(rows.get(name), int) and rows[name] > 0 for name in ("inserted", "updated", "deleted")
    )


def asset_event_extra(result: Mapping[str, Any]) -> dict[str, Any]:
    """The outlet asset event's extra: version reached, mode, row counts and input versions consumed."""
    rows = result.get("rows") or {}
    return {
        "kind": result.get("kind"),
        "version": (result.get("output") or {}).get("version"),
        "mode": result.get("mode"),
        "rows": {k: v for k, v in rows.items() if isinstance(v, int | float | str | bool)},
        "inputs": {
            side: info.get("to_version")
            for side, info in (result.get("inputs") or {}).items()
            if isinstance(info, Mapping)
        },
    }


class ForeignKeyJoinOperator(_FkJoinOperator):
    """Refresh a KIP-213 foreign-key table-table join (``kind: foreign_key_join``).

    :param left: ``{"path": ..., "key": [...]}`` the many side (templated); a CDC changelog with
        ``"changelog": {...}`` as for a global table's source.
    :param right: ``{"path": ..., "key": [...]}`` the referenced table (templated), or a changelog.
    :param foreign_key: left columns matched in order to ``right.key``, or ``{"expr": "..."}``.
    :param how: ``inner`` or ``left``.
    :param columns: optional projection ``{output_column: Spark SQL over l and r}``.
    :param output: the output table's path (or ``{"path": ...}``).

    Example::

        ForeignKeyJoinOperator(task_id="enrich", spec_file="specs/orders_customers.yaml")
    """

    kind = "foreign_key_join"
    spec_fields = ("left", "right", "foreign_key", "how", "columns", "output")
    input_sides = ("left", "right")
    template_fields: Sequence[str] = (*map(_attr, spec_fields), *COMMON_TEMPLATE_FIELDS)
    template_fields_renderers = {"left": "json", "right": "json", "columns": "json", "conf": "json"}

    def __init__(
        self,
        *,
        left: TableArg | None = None,
        right: TableArg | None = None,
        foreign_key: list[str] | Mapping[str, Any] | None = None,
        how: str | None = None,
        columns: Mapping[str, str] | None = None,
        output: TableArg | None = None,
        **kwargs: Any,
    ) -> None:
        spec_args = {
            "left": left,
            "right": right,
            "foreign_key": foreign_key,
            "how": how,
            "columns": columns,
            "output": output,
        }
        super().__init__(spec_args=spec_args, **kwargs)


class GlobalTableBootstrapOperator(_FkJoinOperator):
    """Bootstrap or refresh a KIP-99 global table from a table or a CDC changelog.

    :param source: ``{"path": ..., "key": [...], "changelog": {...}}`` (``changelog`` optional).
    :param output: the global table's path (or ``{"path": ...}``).

    Example::

        GlobalTableBootstrapOperator(
            task_id="products_global",
            source={"path": "/w/products_cdc", "key": ["product_id"],
                    "changelog": {"op_column": "op", "order_by": ["lsn"]}},
            output="/w/products_global",
        )
    """

    kind = "global_table_bootstrap"
    spec_fields = ("source", "output")
    input_sides = ("source",)
    template_fields: Sequence[str] = (*map(_attr, spec_fields), *COMMON_TEMPLATE_FIELDS)
    template_fields_renderers = {"source": "json", "conf": "json"}

    def __init__(
        self, *, source: TableArg | None = None, output: TableArg | None = None, **kwargs: Any
    ) -> None:
        super().__init__(spec_args={"source": source, "output": output}, **kwargs)


class StreamTableJoinOperator(_FkJoinOperator):
    """Enrich an append-only stream by lookup into a (global) table (``kind: stream_table_join``).

    :param stream: ``{"path": ...}`` append-only Delta table of events.
    :param table: ``{"path": ..., "key": [...]}`` the lookup table (e.g. a bootstrapped global table).
    :param key_mapper: stream columns matched to ``table.key``, or ``{"expr": "..."}``.
    :param how: ``inner`` or ``left``.
    :param columns: optional projection over ``s`` (stream) and ``t`` (table).
    :param allow_unbootstrapped_table: join even if the table was never bootstrapped.
    :param output: the output table's path (or ``{"path": ...}``).

    Example::

        StreamTableJoinOperator(
            task_id="enrich_orders",
            stream={"path": "/w/orders_stream"},
            table={"path": "/w/products_global", "key": ["product_id"]},
            key_mapper=["product_id"],
            how="left",
            output="/w/orders_enriched",
        )
    """

    kind = "stream_table_join"
    spec_fields = ("stream", "table", "key_mapper", "how", "columns", "allow_unbootstrapped_table", "output")
    input_sides = ("stream", "table")
    column_aliases = {"s": "stream", "t": "table"}
    template_fields: Sequence[str] = (*map(_attr, spec_fields), *COMMON_TEMPLATE_FIELDS)
    template_fields_renderers = {"stream": "json", "table": "json", "columns": "json", "conf": "json"}

    def __init__(
        self,
        *,
        stream: TableArg | None = None,
        table: TableArg | None = None,
        key_mapper: list[str] | Mapping[str, Any] | None = None,
        how: str | None = None,
        columns: Mapping[str, str] | None = None,
        allow_unbootstrapped_table: bool | None = None,
        output: TableArg | None = None,
        **kwargs: Any,
    ) -> None:
        spec_args = {
            "stream": stream,
            "table": table,
            "key_mapper": key_mapper,
            "how": how,
            "columns": columns,
            "allow_unbootstrapped_table": allow_unbootstrapped_table,
            "output": output,
        }
        super().__init__(spec_args=spec_args, **kwargs)


class WindowedJoinOperator(_FkJoinOperator):
    """A windowed join (``kind: windowed_join``): Kafka's KStream-KStream join of two event streams inside a
    time window (``mode: stream``), or a KTable-KTable join of keyed, possibly windowed tables with a
    shifted window (``mode: table``).

    :param mode: ``stream`` (two append-only event tables; the output is append-only) or ``table``.
    :param left: stream mode: ``{"path": ..., "key": [...], "time": ..., "order_by": [...]}``; table
        mode: ``{"path": ..., "key": [...], "window": {"start": ..., "end": ...}}`` (window optional).
    :param right: the right side, keyed like the left (table mode: ``window.offset`` shifts it).
    :param window: stream mode: ``{"before": ..., "after": ..., "grace": ...}``, ms or ``"10s"``, ``"5m"``...
    :param how: ``inner``, ``left`` or ``outer``.
    :param late_unmatched: stream mode: ``respect_grace`` (default) or ``emit_immediately``.
    :param columns: optional projection over ``l`` and ``r``; the output also has ``event_time``.
    :param allow_full_replace: stream mode: let a refresh replace the append-only output when it must
        rebuild it.
    :param optimize: stream mode: run an inner join of one table with itself as a self-join (the default;
        see :class:`SelfJoinOptimizeOperator`); ``False`` keeps the two-sided join.
    :param output: the output table's path (or ``{"path": ...}``).

    Example::

        WindowedJoinOperator(
            task_id="clicks_per_impression",
            mode="stream",
            left={"path": "/w/impressions", "key": ["ad_id"], "time": "shown_at", "order_by": ["offset"]},
            right={"path": "/w/clicks", "key": ["ad_id"], "time": "clicked_at"},
            window={"before": "1h", "after": "1h", "grace": "10m"},
            how="left",
            output="/w/ad_clicks",
        )
    """

    kind = "windowed_join"
    spec_fields = (
        "mode",
        "left",
        "right",
        "window",
        "how",
        "late_unmatched",
        "columns",
        "allow_full_replace",
        "optimize",
        "output",
    )
    input_sides = ("left", "right")
    template_fields: Sequence[str] = (*map(_attr, spec_fields), *COMMON_TEMPLATE_FIELDS)
    template_fields_renderers = {
        "left": "json",
        "right": "json",
        "window": "json",
        "columns": "json",
        "conf": "json",
    }

    def __init__(
        self,
        *,
        mode: str | None = None,
        left: TableArg | None = None,
        right: TableArg | None = None,
        window: Mapping[str, Any] | None = None,
        how: str | None = None,
        late_unmatched: str | None = None,
        columns: Mapping[str, str] | None = None,
        allow_full_replace: bool | None = None,
        optimize: bool | None = None,
        output: TableArg | None = None,
        **kwargs: Any,
    ) -> None:
        spec_args = {
            "mode": mode,
            "left": left,
            "right": right,
            "window": window,
            "how": how,
            "late_unmatched": late_unmatched,
            "columns": columns,
            "allow_full_replace": allow_full_replace,
            "optimize": optimize,
            "output": output,
        }
        super().__init__(spec_args=spec_args, **kwargs)


class SelfJoinOptimizeOperator(_FkJoinOperator):
    """A stream joined with itself inside a time window, read once (``kind: self_join``, Kafka's KIP-862):
    two withdrawals on one card within ten minutes, a user's page views within a session. The output
    equals the stream-mode ``windowed_join`` with the input on both sides (inner), row for row, at about
    half its reading and shuffling.

    Give the self-join's fields, or a ``spec_file`` holding a ``self_join`` or a stream-mode
    ``windowed_join`` of one table with itself. A windowed join is checked (after the arguments are
    applied) and submitted as it is, so the engine runs it as a self-join and its output keeps its
    identity and progress; one the rewrite does not fit (two tables, different key, time or order
    columns, an outer join, ``optimize: false``) fails the task before any Spark job, naming every reason.

    :param input: ``{"path": ..., "key": [...], "time": ..., "order_by": [...]}``, an append-only table.
    :param window: ``{"before": ..., "after": ..., "grace": ...}``, ms or ``"10s"``, ``"5m"``...
    :param columns: the output's columns over ``l`` and ``r``, a pair's left and right rows (required:
        both have the input's columns); the output also has ``event_time``.
    :param allow_full_replace: let a refresh replace the append-only output when it must rebuild it.
    :param output: the output table's path (or ``{"path": ...}``).

    Example::

        SelfJoinOptimizeOperator(
            task_id="card_txn_pairs",
            input={"path": "/w/card_txns", "key": ["card_id"], "time": "txn_at", "order_by": ["offset"]},
            window={"before": "10m", "after": "10m", "grace": "1m"},
            columns={"card_id": "l.card_id", "txn_id": "l.txn_id", "paired_txn_id": "r.txn_id"},
            output="/w/card_txn_pairs",
        )
    """

    kind = "self_join"
    spec_fields = ("input", "window", "columns", "allow_full_replace", "output")
    input_sides = ("input",)
    other_kinds = {"windowed_join": ("left", "right")}
    template_fields: Sequence[str] = (*map(_attr, spec_fields), *COMMON_TEMPLATE_FIELDS)
    template_fields_renderers = {"input": "json", "window": "json", "columns": "json", "conf": "json"}

    def __init__(
        self,
        *,
        input: TableArg | None = None,
        window: Mapping[str, Any] | None = None,
        columns: Mapping[str, str] | None = None,
        allow_full_replace: bool | None = None,
        output: TableArg | None = None,
        **kwargs: Any,
    ) -> None:
        spec_args = {
            "input": input,
            "window": window,
            "columns": columns,
            "allow_full_replace": allow_full_replace,
            "output": output,
        }
        super().__init__(spec_args=spec_args, **kwargs)

    def validate_spec(self, spec: Mapping[str, Any]) -> None:
        """A ``self_join`` as every spec; a ``windowed_join`` must also be one the self-join rewrite fits."""
        if spec.get("kind") != "windowed_join":
            super().validate_spec(spec)
            return
        from airflow_provider_fkjoin.engine import SpecError, as_self_join

        if "input" in spec:
            raise FkJoinBadInputError(
                "input: the spec file holds a windowed_join, whose table is left and right; drop the "
                "input argument, or give a self_join spec"
            )
        try:
            as_self_join(dict(spec))
        except SpecError as error:
            raise FkJoinBadInputError(str(error)) from error


def _is_joinery(spec: Mapping[str, Any]) -> bool:
    """Whether a multiway spec is Joinery's format: ``format: joinery``, or ``join:`` without ``inputs:``.

    The engine's own test (``engine.joinery.is_joinery``) also asks for no ``kind``; the operator adds
    ``kind: multiway_join`` to every spec it builds, so it goes by ``inputs`` instead.

    >>> _is_joinery({"join": [], "schemas": {}}), _is_joinery({"inputs": []})
    (True, False)
    """
    return spec.get("format") == "joinery" or ("join" in spec and "inputs" not in spec)


def _joinery_schema(spec: Mapping[str, Any], schema_id: Any) -> Any:
    """The ``schemas:`` entry of a Joinery ``schema_id`` (ids compare as strings, as the engine does:
    YAML reads ``56789`` as an int, JSON object keys are strings)."""
    schemas = spec.get("schemas")
    if not isinstance(schemas, Mapping):
        return None
    return {str(key): value for key, value in schemas.items()}.get(str(schema_id))


class MultiWayJoinOperator(_FkJoinOperator):
    """Refresh an N-way un-windowed inner join (``kind: multiway_join``, Yelp Joinery): 2 to 8 keyed tables
    or changelogs joined on their ``join_keys`` (matched by position), 1:1, 1:N or N:M, where a change to
    any input updates every output row it reaches (a renamed business, all its reviews), incrementally.

    Give the native fields (``inputs``), Joinery's own (``join`` with ``schemas`` resolving each
    ``schema_id`` to a table, and ``format="joinery"``), or a ``spec_file`` of either format. A Joinery
    spec is submitted as it is (the engine converts it, resolving a ``pkey`` renamed by an alias and
    counting rather than refusing a ``pkey`` that repeats); mixing ``inputs`` with ``join`` fails the task
    before any Spark job. Every input table is an inlet (Joinery: the tables its ``join`` entries name).

    :param inputs: ``[{"name": ..., "path": ..., "key": [...], "join_keys": [...], "exclude_fields": [...],
        "aliases": [{"from": ..., "to": ...}]}, ...]``; ``table:`` instead of ``path`` for a catalog table,
        ``changelog: {...}`` for a CDC source. Join-key columns that end up with one name are one column.
    :param join: Joinery's ``join:`` list (``schema_id``, ``join_keys``, ``exclude_fields``, ``aliases``).
    :param schemas: Joinery: ``{schema_id: {"path": ..., "key": [...], "name": ...}}``.
    :param format: ``joinery`` for ``join``/``schemas`` (set for you when ``join`` is given), or ``native``.
    :param output: the output's path, or ``{"path": ..., "pkey": [...]}``; Joinery's output also takes
        ``namespace``, ``source`` and ``doc``. An ``output`` argument replaces the spec file's whole output.
    :param enforce_pkey: fail a refresh whose ``output.pkey`` repeats (native default), or only count the
        repeats (``False``, Joinery's default). Templated: ``"false"`` is read as ``False``.
    :param max_rows_per_join_key: the most output rows one join key may produce (an N:M guard; templated:
        ``"5000"`` is read as ``5000``).

    Example::

        MultiWayJoinOperator(
            task_id="business_reviews",
            inputs=[
                {"name": "review", "path": "/w/reviews", "key": ["review_id"], "join_keys": ["biz_id"],
                 "exclude_fields": ["text"]},
                {"name": "business", "path": "/w/business", "key": ["business_id"],
                 "join_keys": ["business_id"], "aliases": [{"from": "business_id", "to": "biz_id"}]},
            ],
            output={"path": "/w/business_reviews", "pkey": ["review_id"]},
        )
    """

    kind = "multiway_join"
    spec_fields = (
        "inputs",
        "join",
        "schemas",
        "format",
        "output",
        "enforce_pkey",
        "max_rows_per_join_key",
    )
    template_fields: Sequence[str] = (*map(_attr, spec_fields), *COMMON_TEMPLATE_FIELDS)
    template_fields_renderers = {"inputs": "json", "join": "json", "schemas": "json", "conf": "json"}

    def __init__(
        self,
        *,
        inputs: Sequence[Mapping[str, Any]] | None = None,
        join: Sequence[Mapping[str, Any]] | None = None,
        schemas: Mapping[Any, Mapping[str, Any]] | None = None,
        format: str | None = None,
        output: TableArg | None = None,
        enforce_pkey: bool | str | None = None,
        max_rows_per_join_key: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        spec_args = {
            "inputs": inputs,
            "join": join,
            "schemas": schemas,
            "format": format,
            "output": output,
            "enforce_pkey": enforce_pkey,
            "max_rows_per_join_key": max_rows_per_join_key,
        }
        super().__init__(spec_args=spec_args, **kwargs)

    def input_refs(self, spec: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """The input tables in join order: ``inputs[i]``, or the ``schemas`` entry of Joinery's ``join[i]``.

        >>> op = MultiWayJoinOperator(task_id="t")
        >>> op.input_refs({"join": [{"schema_id": 7}], "schemas": {7: {"path": "/w/b"}}})
        [('schemas.7', {'path': '/w/b'})]
        """
        refs: list[tuple[str, Any]] = []
        if _is_joinery(spec):
            join = spec.get("join")
            for item in join if isinstance(join, list) else []:
                if isinstance(item, Mapping) and "schema_id" in item:
                    schema_id = item["schema_id"]
                    refs.append((f"schemas.{schema_id}", _joinery_schema(spec, schema_id)))
            return refs
        inputs = spec.get("inputs")
        for index, item in enumerate(inputs if isinstance(inputs, list) else []):
            refs.append((f"inputs[{index}]", item))
        return refs

    def build_spec(self, context: Context | None = None) -> dict[str, Any]:
        """The spec as every operator builds it, plus: each input's path normalised (naming
        ``inputs[i].path`` or ``schemas.<id>.path``), ``format: joinery`` when ``join`` is given without
        it, and rendered ``enforce_pkey``/``max_rows_per_join_key`` strings read as a bool and an int."""
        data = super().build_spec(context)
        if "join" in data and "inputs" not in data:
            data.setdefault("format", "joinery")
        inputs = data.get("inputs")
        if isinstance(inputs, list):
            data["inputs"] = [
                _normalised(item, f"inputs[{index}]") if isinstance(item, Mapping) else item
                for index, item in enumerate(inputs)
            ]
        schemas = data.get("schemas")
        if isinstance(schemas, Mapping):
            data["schemas"] = {
                key: _normalised(entry, f"schemas.{key}") if isinstance(entry, Mapping) else entry
                for key, entry in schemas.items()
            }
        if isinstance(data.get("enforce_pkey"), str):
            data["enforce_pkey"] = parse_flag(data["enforce_pkey"], "enforce_pkey")
        limit = data.get("max_rows_per_join_key")
        if isinstance(limit, str):
            try:
                data["max_rows_per_join_key"] = int(limit.strip())
            except ValueError:
                raise FkJoinBadInputError(
                    f"max_rows_per_join_key: expected a whole number of rows, got {limit!r}"
                ) from None
        return data

    def validate_spec(self, spec: Mapping[str, Any]) -> None:
        """One format per spec (native ``inputs``, or Joinery's ``join`` and ``schemas``), then the engine's
        own validation, which converts a Joinery spec first."""
        joinery = sorted(field for field in ("join", "schemas") if field in spec)
        if "inputs" in spec and (joinery or spec.get("format") == "joinery"):
            found = ", ".join(joinery) if joinery else "format: joinery"
            raise FkJoinBadInputError(
                f"inputs: the spec has both native inputs and Joinery's {found}; give the inputs one way: "
                "inputs (native), or join with schemas (format: joinery)"
            )
        super().validate_spec(spec)
