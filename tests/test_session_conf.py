"""get_spark's configuration, checked without starting a JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_fkjoin.engine import SpecError
from airflow_provider_fkjoin.engine.runtime.session import (
    DELTA_MAVEN_COORDINATE,
    SMALL_REFRESH_BYTES,
    parse_conf,
    session_conf,
    small_refresh_settings,
)


def test_defaults_suit_a_small_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FKJOIN_SPARK_MASTER", raising=False)
    monkeypatch.delenv("FKJOIN_SPARK_CONF", raising=False)
    master, conf = session_conf()
    assert master == "local[*]"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert "log4j2.properties" in conf["spark.driver.extraJavaOptions"]


def test_env_and_arguments_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FKJOIN_SPARK_MASTER", "spark://127.0.0.1:7077")
    monkeypatch.setenv("FKJOIN_SPARK_CONF", "spark.sql.shuffle.partitions=3, spark.executor.memory=2g")
    master, conf = session_conf(conf={"spark.executor.memory": "1g"})
    assert master == "spark://127.0.0.1:7077"
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert conf["spark.executor.memory"] == "1g"
    assert session_conf("local[1]")[0] == "local[1]"


def test_jars_from_folder_else_maven(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "delta-spark.jar").write_text("")
    monkeypatch.setenv("FKJOIN_DELTA_JARS", str(tmp_path))
    monkeypatch.setenv("FKJOIN_ENGINE_JAR", "/opt/fkjoin/fkjoin-engine.jar")
    _, conf = session_conf()
    assert conf["spark.jars"] == f"{tmp_path / 'delta-spark.jar'},/opt/fkjoin/fkjoin-engine.jar"
    assert "spark.jars.packages" not in conf
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("FKJOIN_DELTA_JARS", str(empty))
    _, conf = session_conf()
    assert conf["spark.jars.packages"] == DELTA_MAVEN_COORDINATE
    assert conf["spark.jars"] == "/opt/fkjoin/fkjoin-engine.jar"


def test_parse_conf_forms() -> None:
    assert parse_conf('{"a": 1}') == {"a": "1"}
    assert parse_conf("a=1\nb=x=y") == {"a": "1", "b": "x=y"}
    assert parse_conf("  ") == {}
    with pytest.raises(ValueError, match="not key=value"):
        parse_conf("novalue")


def test_the_connect_servers_exact_argv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What ``fkjoin connect-server`` execs: pyspark's Connect server class with Delta's jars, the
    engine's settings, the address to listen on, and the caller's conf last."""
    from airflow_provider_fkjoin.engine.runtime.session import ENGINE_LOG4J, connect_server_argv

    (tmp_path / "delta-spark.jar").write_text("")
    monkeypatch.setenv("FKJOIN_DELTA_JARS", str(tmp_path))
    monkeypatch.setenv("FKJOIN_ENGINE_JAR", "/opt/fkjoin/fkjoin-engine.jar")
    monkeypatch.delenv("FKJOIN_SPARK_CONF", raising=False)
    argv = connect_server_argv(
        port=15099,
        master="local[2]",
        conf={"spark.driver.memory": "8g"},
        spark_submit="/venv/bin/spark-submit",
    )
    assert argv == [
        "/venv/bin/spark-submit",
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--name", "fkjoin-connect",
        "--jars", f"{tmp_path / 'delta-spark.jar'},/opt/fkjoin/fkjoin-engine.jar",
        "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
        "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "--conf", "spark.sql.shuffle.partitions=8",
        "--conf", "spark.default.parallelism=4",
        "--conf", "spark.sql.adaptive.enabled=true",
        "--conf", "spark.databricks.delta.snapshotPartitions=1",
        "--conf", "spark.sql.codegen.cache.maxEntries=2000",
        "--conf", "spark.databricks.delta.properties.defaults.enableChangeDataFeed=false",
        "--conf", "spark.ui.showConsoleProgress=false",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.driver.memory=8g",
        "--conf", "spark.sql.session.timeZone=UTC",
        "--conf", f"spark.driver.extraJavaOptions=-Dlog4j.configurationFile=file:{ENGINE_LOG4J}",
        "--conf", "spark.ui.retainedJobs=200",
        "--conf", "spark.ui.retainedStages=200",
        "--conf", "spark.ui.retainedTasks=2000",
        "--conf", "spark.sql.ui.retainedExecutions=200",
        "--conf", "spark.sql.connect.ui.retainedSessions=50",
        "--conf", "spark.sql.connect.ui.retainedStatements=200",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.connect.grpc.binding.port=15099",
        "spark-internal",
    ]  # fmt: skip


def test_delta_jar_version_is_named_once_and_fits_the_pinned_package():
    """The jar the engine asks Maven for is the one setup fetches, and fits the installed delta-spark."""
    import re
    from importlib.metadata import version
    from pathlib import Path

    from airflow_provider_fkjoin.engine import DELTA_JAR_VERSION, DELTA_MAVEN_COORDINATE

    pom = (Path(__file__).resolve().parents[1] / "scripts" / "delta-jars.pom.xml").read_text()
    fetched = re.search(r"<delta.version>([^<]+)</delta.version>", pom)
    assert fetched is not None and fetched.group(1) == DELTA_JAR_VERSION
    assert DELTA_MAVEN_COORDINATE.endswith(":" + DELTA_JAR_VERSION)
    package = version("delta-spark").split(".")
    assert DELTA_JAR_VERSION.split(".")[:2] == package[:2]


ADAPTIVE = {"spark.sql.adaptive.enabled": "true", "spark.sql.shuffle.partitions": "200"}
SMALL = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "4"}


@pytest.mark.parametrize(
    ("read_bytes", "current", "settings"),
    [
        (0, ADAPTIVE, SMALL),  # a first run: no output yet, empty inputs
        (SMALL_REFRESH_BYTES, ADAPTIVE, SMALL),
        (SMALL_REFRESH_BYTES + 1, ADAPTIVE, {}),
        (None, ADAPTIVE, {}),  # a table whose size is unknown
        (10, {}, SMALL),  # Spark's defaults: adaptive on, 200 partitions
        (
            10,
            {**ADAPTIVE, "spark.sql.shuffle.partitions": "2"},
            {**SMALL, "spark.sql.shuffle.partitions": "2"},
        ),
        (10, {**ADAPTIVE, "spark.sql.adaptive.enabled": "false"}, {}),  # the session's own choice stands
        (10, {**ADAPTIVE, "spark.fkjoin.smallRefreshBytes": "0"}, {}),  # turned off
        (2**30, {**ADAPTIVE, "spark.fkjoin.smallRefreshBytes": str(2**31)}, SMALL),
    ],
)
def test_a_small_refresh_runs_without_adaptive_execution(
    read_bytes: int | None, current: dict[str, str], settings: dict[str, str]
) -> None:
    assert small_refresh_settings(read_bytes, current) == settings


def test_a_small_refresh_bound_must_be_bytes() -> None:
    with pytest.raises(SpecError, match=r"spark\.fkjoin\.smallRefreshBytes='1g': give a number of bytes"):
        small_refresh_settings(10, {"spark.fkjoin.smallRefreshBytes": "1g"})
