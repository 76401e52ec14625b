"""The ``fkjoin`` CLI in-process (no Spark): exit codes, ``--full-refresh``, and errors that show their cause.

``run_spec`` and the session are replaced at the CLI's boundary where a test needs a refresh to "run";
the root-cause formatter is tested with small stand-ins for py4j's JVM throwables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_fkjoin import cli, engine
from airflow_provider_fkjoin.cli import CAUSE_LINES, MESSAGE_LINES, root_cause_lines
from airflow_provider_fkjoin.engine import ConcurrentRefreshError, InputDataError

SPEC: dict[str, Any] = {
    "kind": "foreign_key_join",
    "left": {"path": "/w/orders", "key": ["order_id"]},
    "right": {"path": "/w/customers", "key": ["customer_id"]},
    "foreign_key": ["customer_id"],
    "output": {"path": "/w/orders_customers"},
}


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    """``cli.main(argv)``: exit code, stdout and the stderr lines."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


class Throwable:
    """What py4j hands back for a JVM throwable: getCause(), getMessage(), getClass().getName()."""

    def __init__(self, name: str, message: str | None, cause: Throwable | None = None) -> None:
        self.name, self.message, self.cause = name, message, cause

    def getCause(self) -> Throwable | None:
        return self.cause

    def getMessage(self) -> str | None:
        return self.message

    def getClass(self) -> Throwable:
        return self

    def getName(self) -> str:
        return self.name


class FakePy4JJavaError(Exception):
    """Like py4j's Py4JJavaError: a useless message, the JVM exception in ``java_exception``."""

    def __init__(self, java_exception: Throwable) -> None:
        super().__init__("An error occurred while calling o87.save.\n")
        self.java_exception = java_exception


def py4j_error() -> FakePy4JJavaError:
    return FakePy4JJavaError(
        Throwable(
            "org.apache.spark.SparkException",
            "Job aborted due to stage failure",
            Throwable(
                "org.apache.spark.SparkException",
                "Task failed while writing rows",
                Throwable("java.io.IOException", "No space left on device\n\tat a.b.C(C.java:1)"),
            ),
        )
    )


class Refresh:
    """A stand-in for ``engine.run_spec``: records each call, raises ``error`` when a test set one."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def run_spec(
        self,
        spec: Any,
        spark: Any = None,
        *,
        full_refresh: bool = False,
        write_path: str = "auto",
        origin: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self.calls.append(
            {"spec": spec, "spark": spark, "full_refresh": full_refresh, "write_path": write_path}
            | ({"origin": origin} if origin else {})
        )
        if self.error is not None:
            raise self.error
        return {"kind": spec.kind, "mode": "full" if full_refresh else "incremental"}


@pytest.fixture
def refresh(monkeypatch: pytest.MonkeyPatch) -> Refresh:
    """Replace ``run_spec`` and the session (the CLI imports both from the engine when it runs)."""
    fake = Refresh()
    monkeypatch.setattr(engine, "run_spec", fake.run_spec, raising=False)
    monkeypatch.setattr(cli, "_spark", lambda args: "spark-session")
    return fake


# -- exit codes and messages ----------------------------------------------------------------------
def test_a_spec_that_fails_validation_exits_2_naming_the_field(capsys):
    spec = {**SPEC, "foreign_key": ["customer_id", "region"]}
    code, out, err = run_cli(capsys, "run", "--spec-json", json.dumps(spec))
    assert code == cli.EXIT_BAD_INPUT == 2
    assert out == ""
    assert err[0].startswith("error: SpecError: ")
    assert "foreign_key has 2 part(s) but right.key ['customer_id'] has 1" in err[0]


def test_a_relative_output_path_exits_2_naming_the_field(capsys, tmp_path: Path):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({**SPEC, "output": {"path": "out"}}))
    code, _, err = run_cli(capsys, "status", str(spec_file))
    assert code == 2
    assert "output.path: table location 'out' is relative" in err[0]


def test_invalid_spec_json_exits_2(capsys):
    code, _, err = run_cli(capsys, "run", "--spec-json", "{not json")
    assert code == 2
    assert err[0].startswith("error: SpecError: --spec-json: not valid JSON")


def test_run_prints_the_result_json_last(capsys, refresh):
    code, out, _ = run_cli(capsys, "run", "--spec-json", json.dumps(SPEC))
    assert code == 0
    assert json.loads(out.splitlines()[-1]) == {"kind": "foreign_key_join", "mode": "incremental"}
    assert [call["full_refresh"] for call in refresh.calls] == [False]
    assert refresh.calls[0]["spark"] == "spark-session"


def test_write_path_flag_reaches_run_spec(capsys, refresh):
    code, _, _ = run_cli(capsys, "run", "--write-path", "merge", "--spec-json", json.dumps(SPEC))
    assert code == 0
    assert [call["write_path"] for call in refresh.calls] == ["merge"]
    code, _, _ = run_cli(capsys, "run", "--spec-json", json.dumps(SPEC))
    assert [call["write_path"] for call in refresh.calls] == ["merge", "auto"]


def test_origin_reaches_run_spec_and_must_be_an_object_of_plain_values(capsys, refresh):
    origin = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 2}
    code, _, _ = run_cli(capsys, "run", "--origin", json.dumps(origin), "--spec-json", json.dumps(SPEC))
    assert code == 0 and refresh.calls[0]["origin"] == origin
    for bad in ("[1]", '{"a": {"b": 1}}', "not json"):
        code, _, err = run_cli(capsys, "run", "--origin", bad, "--spec-json", json.dumps(SPEC))
        assert code == 2 and err[0].startswith("error: SpecError: --origin: "), err
    assert len(refresh.calls) == 1


def test_full_refresh_flag_reaches_run_spec(capsys, refresh):
    code, out, _ = run_cli(capsys, "run", "--full-refresh", "--spec-json", json.dumps(SPEC))
    assert code == 0
    assert [call["full_refresh"] for call in refresh.calls] == [True]
    assert json.loads(out.splitlines()[-1])["mode"] == "full"


def test_status_has_no_full_refresh_flag(capsys):
    with pytest.raises(SystemExit):
        cli.main(["status", "--full-refresh", "--spec-json", json.dumps(SPEC)])
    assert "unrecognized arguments: --full-refresh" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ConcurrentRefreshError("another refresh of /w/orders_customers committed first"), 75),
        (InputDataError("right /w/customers has duplicate keys: customer_id=7 (2 rows)"), 2),
        (RuntimeError("something else"), 1),
    ],
)
def test_exit_codes(capsys, refresh, error, code):
    refresh.error = error
    exit_code, out, err = run_cli(capsys, "run", "--spec-json", json.dumps(SPEC))
    assert exit_code == code
    assert out == ""
    assert err[0] == f"error: {type(error).__name__}: {error}"


def test_an_unexpected_spark_error_prints_its_root_cause_after_the_error_line(capsys, refresh):
    refresh.error = py4j_error()
    code, _, err = run_cli(capsys, "run", "--spec-json", json.dumps(SPEC))
    assert code == 1
    assert err == [
        "error: FakePy4JJavaError: An error occurred while calling o87.save.",
        "cause: java.io.IOException: No space left on device",
        "  \tat a.b.C(C.java:1)",
        "(run with -v for the Python traceback)",
    ]


def test_an_unexpected_error_prints_what_the_engine_was_doing(capsys, refresh):
    error = py4j_error()
    error.add_note("while committing the net changes of output /w/orders_customers")
    refresh.error = error
    code, _, err = run_cli(capsys, "run", "--spec-json", json.dumps(SPEC))
    assert code == 1
    assert err[-2:] == [
        "note: while committing the net changes of output /w/orders_customers",
        "(run with -v for the Python traceback)",
    ]


@pytest.mark.parametrize("argv", [["-v", "run"], ["run", "-v"]])
def test_verbose_prints_the_traceback(capsys, refresh, argv):
    refresh.error = py4j_error()
    code, _, err = run_cli(capsys, *argv, "--spec-json", json.dumps(SPEC))
    assert code == 1
    assert err[0].startswith("error: FakePy4JJavaError: ")
    assert err[1] == "cause: java.io.IOException: No space left on device"
    assert "Traceback (most recent call last):" in err
    assert any("in run_spec" in line for line in err)


# -- root_cause_lines -----------------------------------------------------------------------------
def test_root_cause_of_a_py4j_error_is_the_deepest_jvm_cause():
    assert root_cause_lines(py4j_error()) == [
        "cause: java.io.IOException: No space left on device",
        "  \tat a.b.C(C.java:1)",
    ]


def test_a_py4j_error_without_a_cause_shows_itself():
    error = FakePy4JJavaError(Throwable("java.lang.IllegalStateException", None))
    assert root_cause_lines(error) == ["cause: java.lang.IllegalStateException: "]


def test_a_long_jvm_message_is_cut():
    message = "\n".join(f"line {n}" for n in range(CAUSE_LINES + 3))
    lines = root_cause_lines(FakePy4JJavaError(Throwable("java.lang.Error", message)))
    assert lines[0] == "cause: java.lang.Error: line 0"
    assert lines[1:] == [*(f"  line {n}" for n in range(1, CAUSE_LINES)), "  ... (3 more lines)"]


def test_a_spark_error_raised_from_inside_another_is_found():
    try:
        try:
            raise py4j_error()
        except FakePy4JJavaError as inner:
            raise RuntimeError("refresh of /w/orders_customers failed") from inner
    except RuntimeError as outer:
        assert root_cause_lines(outer) == [
            "cause: java.io.IOException: No space left on device",
            "  \tat a.b.C(C.java:1)",
        ]


def test_a_pyspark_error_shows_its_class_and_full_message():
    from pyspark.errors import PySparkException

    message = "\n".join(["The merge cannot resolve column `tier`."] + [f"detail {n}" for n in range(30)])
    error = PySparkException(message=message, errorClass="DELTA_MERGE_UNRESOLVED_EXPRESSION")
    lines = root_cause_lines(error)
    assert lines[0] == "error class: DELTA_MERGE_UNRESOLVED_EXPRESSION"
    assert lines[1] == "  [DELTA_MERGE_UNRESOLVED_EXPRESSION] The merge cannot resolve column `tier`."
    assert lines[2 : MESSAGE_LINES + 1] == [f"  detail {n}" for n in range(MESSAGE_LINES - 1)]
    assert lines[-1] == f"  ... ({31 - MESSAGE_LINES} more lines)"


def test_a_captured_jvm_error_shows_its_deeper_cause_only_when_there_is_one():
    from pyspark.errors import PySparkException

    class Captured(PySparkException):  # like CapturedException: the JVM throwable is in _origin
        def __init__(self, origin: Throwable) -> None:
            super().__init__(message=origin.getMessage(), errorClass="TASK_WRITE_FAILED")
            self._origin = origin

    root = Throwable("java.io.FileNotFoundException", "/w/orders_customers/part-0001.parquet")
    deep = root_cause_lines(Captured(Throwable("org.apache.spark.SparkException", "write failed", root)))
    assert deep == [
        "error class: TASK_WRITE_FAILED",
        "  [TASK_WRITE_FAILED] write failed",
        "cause: java.io.FileNotFoundException: /w/orders_customers/part-0001.parquet",
    ]
    shallow = root_cause_lines(Captured(Throwable("org.apache.spark.SparkException", "write failed")))
    assert shallow == ["error class: TASK_WRITE_FAILED", "  [TASK_WRITE_FAILED] write failed"]


def test_plain_python_errors():
    assert root_cause_lines(ValueError("bad")) == []  # the error line already says it all
    try:
        try:
            raise OSError("disk full")
        except OSError:
            raise RuntimeError("could not write") from None
    except RuntimeError as suppressed:
        assert root_cause_lines(suppressed) == []  # `from None`: the cause was hidden on purpose
    try:
        try:
            raise OSError("disk full")
        except OSError as inner:
            raise RuntimeError("could not write") from inner
    except RuntimeError as chained:
        assert root_cause_lines(chained) == ["cause: OSError: disk full"]


def test_a_dead_jvm_never_hides_the_error():
    class Gone(Throwable):
        def getCause(self) -> Throwable | None:
            raise ConnectionError("Answer from Java side is empty")

    assert root_cause_lines(FakePy4JJavaError(Gone("x", "y"))) == [
        "cause: not available (ConnectionError: Answer from Java side is empty)"
    ]


# -- options before or after the subcommand, named errors, --version, --help ------------------------
def test_global_options_go_before_or_after_the_subcommand():
    after = cli.parse_args(["run", "s.yaml", "--master", "local[2]", "--conf", "a=1", "--conf", "b=x=y"])
    before = cli.parse_args(["--master", "local[2]", "--conf", "a=1", "--conf", "b=x=y", "run", "s.yaml"])
    for args in (after, before):
        assert (args.master, args.conf, args.spec) == ("local[2]", {"a": "1", "b": "x=y"}, "s.yaml")
    mixed = cli.parse_args(["--master", "local[1]", "--conf", "a=1", "connect-server", "--master", "yarn"])
    assert (mixed.master, mixed.conf) == ("yarn", {"a": "1"})  # after the subcommand wins
    assert cli.parse_args(["--conf", "a=1", "status", "s.yaml", "--conf", "a=2"]).conf == {"a": "2"}
    assert cli.parse_args(["status", "s.yaml"]).master is None


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["run", "s.yaml", "--conf", "spark.foo"], "argument --conf: 'spark.foo' is not KEY=VALUE"),
        (["--conf", "=2g", "run", "s.yaml"], "argument --conf: '=2g' is not KEY=VALUE"),
        (["validate", "s.yaml", "--storage-option", "AWS_REGION"], "argument --storage-option: 'AWS_REGION'"),
        (["audit", "s.yaml", "--examples", "-1"], "argument --examples: '-1' is not a whole number"),
        (["connect-server", "--port", "x"], "argument --port: invalid int value: 'x'"),
    ],
)
def test_a_malformed_option_is_named_with_its_form(capsys, argv, named):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert named in err and "ValueError" not in err and "Traceback" not in err
    if "--conf" in named:
        assert "give it as --conf spark.executor.memory=2g" in err


def test_run_without_a_spec_exits_2_saying_what_to_give(capsys):
    code, out, err = run_cli(capsys, "run")
    assert (code, out) == (2, "")
    assert err == ["error: SpecError: fkjoin run: give a spec file (YAML or JSON) or --spec-json"]


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"fkjoin {version('airflow-provider-fkjoin')} (airflow-provider-fkjoin; ")
    assert f"pyspark {version('pyspark')}" in out and f"delta-spark {version('delta-spark')}" in out


@pytest.mark.parametrize("command", [None, "validate", "run", "status", "audit", "demo", "connect-server"])
def test_help_shows_examples_and_exit_codes(capsys, command):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"] if command else ["--help"])
    out = capsys.readouterr().out
    assert "examples:\n  fkjoin " in out
    assert "exit codes:\n  0   success" in out and "\n  75  a retryable error" in out
    if command:
        assert all(
            f"  fkjoin {command}" in line
            for line in out.split("examples:\n")[1].split("\n\n")[0].splitlines()
        )


# -- validate and status from the Delta logs (no JVM) ---------------------------------------------
@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Spark session the CLI asks for fails the test: these commands must answer from the logs."""

    def refuse(args: Any) -> Any:
        raise AssertionError("started a Spark session")

    monkeypatch.setattr(cli, "_spark", refuse)


def delta(path: Path, columns: dict[str, list[Any]], **properties: str) -> Path:
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(str(path), pa.table(columns), configuration=properties or None)
    return path


def set_property(path: Path, key: str, value: str) -> None:
    """Commit a table property as Spark's ``ALTER TABLE ... SET TBLPROPERTIES`` does: a new ``metaData``
    action in the next log file (deltalake's writer refuses properties outside Delta's own)."""
    log = path / "_delta_log"
    latest = max(log.glob("*.json"))
    actions = [json.loads(line) for line in latest.read_text().splitlines()]
    (meta,) = [action["metaData"] for action in actions if "metaData" in action]
    meta["configuration"] = {**meta.get("configuration", {}), key: value}
    commit = {"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES", "operationParameters": {}}}
    version = int(latest.stem) + 1
    (log / f"{version:020d}.json").write_text(
        json.dumps({"metaData": meta}) + "\n" + json.dumps(commit) + "\n"
    )


def fk_spec(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    return {
        "kind": "foreign_key_join",
        "left": {"path": str(tmp_path / "orders"), "key": ["order_id"]},
        "right": {"path": str(tmp_path / "customers"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": str(tmp_path / "out")},
        **changes,
    }


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    cdf = {"delta.enableChangeDataFeed": "true"}
    delta(tmp_path / "orders", {"order_id": [1, 2], "customer_id": [7, 8], "amount": [1.0, 2.0]}, **cdf)
    delta(tmp_path / "customers", {"customer_id": [7, 8], "name": ["a", "b"]}, **cdf)
    return tmp_path


def validate(
    capsys: pytest.CaptureFixture[str], spec: dict[str, Any]
) -> tuple[int, dict[str, Any], list[str]]:
    code, out, err = run_cli(capsys, "validate", "--spec-json", json.dumps(spec))
    return code, json.loads(out.splitlines()[-1]), err


def test_validate_passes_a_spec_whose_tables_fit_it(capsys, tables, no_spark):
    code, report, err = validate(capsys, fk_spec(tables))
    assert code == 0 and report["valid"] and report["problems"] == [] and report["warnings"] == []
    assert report["inputs"]["left"]["columns"] == ["order_id", "customer_id", "amount"]
    assert report["inputs"]["right"]["change_data_feed"] is True
    assert report["output"] == {"path": str(tables / "out"), "exists": False}
    assert err == ["fkjoin validate: --spec-json: valid"]


def test_validate_names_every_problem_and_exits_2(capsys, tmp_path, no_spark):
    delta(tmp_path / "orders", {"order_id": [1], "cust": [7]}, **{"delta.enableChangeDataFeed": "true"})
    delta(tmp_path / "customers", {"id": [7], "name": ["a"]})  # no change data feed
    delta(tmp_path / "out", {"x": [1]})  # somebody else's table
    code, report, err = validate(capsys, fk_spec(tmp_path))
    assert code == 2 and not report["valid"]
    orders, customers, out = (str(tmp_path / name) for name in ("orders", "customers", "out"))
    assert err == [
        f"problem: foreign_key[0]: column 'customer_id' is not in left table {orders} "
        "(columns: order_id, cust)",
        f"problem: right.key[0]: column 'customer_id' is not in right table {customers} (columns: id, name)",
        f"problem: output.path: {out} is a Delta table this engine did not create; a refresh would replace "
        "its rows. Choose a new location, or set adopt_existing_output: true to take it over (its first "
        "refresh rebuilds it from the inputs)",
        f"warning: change data feed is off on input right ({customers}): every refresh will be a full "
        "rebuild; enable it with ALTER TABLE ... SET TBLPROPERTIES (delta.enableChangeDataFeed = true)",
        "fkjoin validate: --spec-json: 3 problems",
    ]
    assert sorted(p["field"] for p in report["problems"]) == ["foreign_key[0]", "output.path", "right.key[0]"]


def test_validate_refuses_an_output_another_owner_holds(capsys, tables, no_spark):
    theirs = '{"kind": "foreign_key_join", "owner": "sales.orders", "spec": "3f1c"}'
    set_property(delta(tables / "out", {"order_id": [1]}), "fkjoin.owner", theirs)
    code, report, _ = validate(
        capsys, fk_spec(tables, output={"path": str(tables / "out"), "owner": "ops.x"})
    )
    assert code == 2
    (problem,) = report["problems"]
    assert problem["field"] == "output.path"
    assert problem["message"].startswith(
        f"{tables / 'out'} belongs to owner 'sales.orders' (a foreign_key_join)"
    )
    adopted = {"path": str(tables / "out"), "owner": "ops.x", "adopt_existing_output": True}
    code, report, _ = validate(capsys, fk_spec(tables, output=adopted))
    assert code == 0 and report["warnings"] == [
        f"output {tables / 'out'} will be taken over (adopt_existing_output): its first refresh rebuilds it"
    ]


def test_validate_names_a_missing_table_and_a_bad_spec(capsys, tables, no_spark):
    spec = fk_spec(tables, right={"path": str(tables / "nowhere"), "key": ["customer_id"]})
    code, report, _ = validate(capsys, spec)
    assert code == 2 and [p["field"] for p in report["problems"]] == ["right.path"]
    assert report["problems"][0]["message"].startswith(f"no readable Delta table at {tables / 'nowhere'}")
    code, report, err = validate(capsys, {**fk_spec(tables), "how": "sideways"})
    assert code == 2 and report["kind"] is None
    assert [p["field"] for p in report["problems"]] == ["spec"] and "how" in report["problems"][0]["message"]
    assert err[0].startswith("problem: spec: ")


def test_validate_checks_a_multiway_input_by_its_index(capsys, tables, no_spark):
    spec = {
        "kind": "multiway_join",
        "inputs": [
            {"name": "o", "path": str(tables / "orders"), "key": ["order_id"], "join_keys": ["customer_id"]},
            {"name": "c", "path": str(tables / "customers"), "key": ["customer_id"], "join_keys": ["cid"]},
        ],
        "output": {"path": str(tables / "out")},
    }
    code, report, _ = validate(capsys, spec)
    assert code == 2 and [p["field"] for p in report["problems"]] == ["inputs[1].join_keys[0]"]


def commit_refresh(
    output: Path,
    inputs: dict[str, tuple[Path, int]],
    fingerprint: str = "not-this-spec",
    **recorded: Any,
) -> None:
    """An fkjoin refresh commit on ``output`` (written with deltalake) that consumed ``inputs``; ``recorded``
    adds to its progress (``started_at``, ``strategy``, as a refresh records them)."""
    import deltalake
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake

    consumed = {
        side: {
            "location": str(path),
            "table_id": str(deltalake.DeltaTable(str(path)).metadata().id),
            "version": v,
        }
        for side, (path, v) in inputs.items()
    }
    progress = {
        "seq": 1,
        "kind": "foreign_key_join",
        "fingerprint": fingerprint,
        "mode": "full",
        "inputs": consumed,
        **recorded,
    }
    write_deltalake(
        str(output),
        pa.table({"order_id": [1]}),
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": json.dumps({"fkjoin": progress})}
        ),
    )


def test_status_reads_the_delta_logs_without_spark(capsys, tables, no_spark):
    import pyarrow as pa
    from deltalake import write_deltalake

    commit_refresh(tables / "out", {"left": (tables / "orders", 0), "right": (tables / "customers", 0)})
    for _ in range(2):  # two commits to orders since the refresh
        write_deltalake(
            str(tables / "orders"),
            pa.table({"order_id": [3], "customer_id": [7], "amount": [3.0]}),
            mode="append",
        )
    spec_file = tables / "spec.json"
    spec_file.write_text(json.dumps(fk_spec(tables)))
    code, out, _ = run_cli(capsys, "status", str(spec_file), "--master", "local[1]")
    assert code == 0
    status = json.loads(out.splitlines()[-1])
    assert status["source"] == "delta_log"
    assert status["inputs"]["left"] == {
        "path": str(tables / "orders"),
        "consumed_version": 0,
        "high_watermark": 2,
        "lag_versions": 2,
    }
    assert status["inputs"]["right"]["lag_versions"] == 0
    assert status["last_refresh"]["mode"] == "full" and status["last_refresh"]["output_version"] == 0
    assert status["last_refresh"]["spec_matches"] is False  # the commit's fingerprint is another spec's
    assert status["last_refresh"]["strategy"] is None, "a commit that recorded no plan shows none"


def _commit_info(table: Path, version: int) -> dict[str, Any]:
    """The commitInfo action of one commit, read from the table's ``_delta_log`` file itself."""
    lines = (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    [info] = [json.loads(line)["commitInfo"] for line in lines if "commitInfo" in line]
    return info


def test_status_shows_the_plan_the_last_refresh_ran(capsys, tables, no_spark):
    from datetime import UTC, datetime, timedelta

    started = datetime.now(UTC) - timedelta(seconds=30)
    plan = {
        "chosen": "recompute",
        "basis": "history",
        "plan_start_s": 1.25,
        "cluster": "0123456789ab",
        "features": {"feed_bytes": 900, "input_bytes": 2000, "output_bytes": 1500},
        "estimate": {"incremental_s": 6.0, "recompute_s": 3.5},
    }
    commit_refresh(
        tables / "out",
        {"left": (tables / "orders", 0), "right": (tables / "customers", 0)},
        started_at=started.isoformat(),
        strategy=plan,
        mode="incremental",
    )
    code, out, err = run_cli(capsys, "status", "--spec-json", json.dumps(fk_spec(tables)))
    assert code == 0 and err == []

    status = json.loads(out.splitlines()[-1])
    info = _commit_info(tables / "out", 0)
    recorded = json.loads(info["userMetadata"])["fkjoin"]["strategy"]
    committed = datetime.fromtimestamp(info["timestamp"] / 1000, tz=UTC)
    shown = status["last_refresh"]["strategy"]
    assert {k: shown[k] for k in ("chosen", "basis", "estimate")} == {
        "chosen": recorded["chosen"],
        "basis": recorded["basis"],
        "estimate": recorded["estimate"],
    }
    assert shown["actual_s"] == pytest.approx((committed - started).total_seconds() - 1.25, abs=2e-3)
    assert status["last_refresh"]["mode"] == "incremental"


def test_status_of_a_spec_with_catalog_tables_goes_through_spark(capsys, monkeypatch):
    seen: list[Any] = []
    monkeypatch.setattr(cli, "_spark", lambda args: "spark-session")
    monkeypatch.setattr(
        engine, "refresh_status", lambda spec, spark: seen.append(spark) or {"kind": spec.kind}, raising=False
    )
    spec = {**SPEC, "left": {"name": "db.orders", "key": ["order_id"]}}
    code, out, _ = run_cli(capsys, "status", "--spec-json", json.dumps(spec))
    assert code == 0 and seen == ["spark-session"] and json.loads(out) == {"kind": "foreign_key_join"}
    code, _, _ = run_cli(capsys, "status", "--spark", "--spec-json", json.dumps(SPEC))
    assert code == 0 and seen == ["spark-session", "spark-session"]


@pytest.mark.parametrize("command", ["validate", "status"])
def test_validate_and_status_never_import_pyspark(tables, command):
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from airflow_provider_fkjoin import cli\n"
        f"code = cli.main([{command!r}, '--spec-json', {json.dumps(json.dumps(fk_spec(tables)))}])\n"
        "assert 'pyspark' not in sys.modules and 'py4j' not in sys.modules, 'a JVM library was imported'\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
