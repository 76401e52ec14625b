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
