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
        "--conf", "spark.ui.retainedTasks=1000",
        "--conf", "spark.sql.ui.retainedExecutions=200",
        "--conf", "spark.sql.connect.ui.retainedSessions=50",
        "--conf", "spark.sql.connect.ui.retainedStatements=200",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", "spark.connect.grpc.binding.port=15099",
        "spark-internal",
    ]  # fmt: skip


def test_a_connect_server_sharing_compiled_code_runs_connect_as_a_plugin_with_shared_class_loaders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--share-compiled-code``: no Connect server class (it would force a class loader per session
    on), Spark Connect's plugin in a plain driver, both session-isolation settings off, and a caller's
    own plugins kept."""
    from airflow_provider_fkjoin.cli import parse_args
    from airflow_provider_fkjoin.engine.runtime import connect_driver
    from airflow_provider_fkjoin.engine.runtime.session import connect_server_argv

    monkeypatch.delenv("FKJOIN_SPARK_CONF", raising=False)
    argv = connect_server_argv(
        port=15099, conf={"spark.plugins": "com.example.Plugin"}, share_compiled_code=True
    )
    settings = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "--conf")
    assert "--class" not in argv
    assert argv[-1] == connect_driver.__file__
    assert settings["spark.sql.artifact.isolation.enabled"] == "false"
    assert settings["spark.sql.artifact.isolation.alwaysApplyClassloader"] == "false"
    assert settings["spark.plugins"] == "com.example.Plugin,org.apache.spark.sql.connect.SparkConnectPlugin"
    assert settings["spark.connect.grpc.binding.port"] == "15099"
    assert parse_args(["connect-server", "--share-compiled-code"]).share_compiled_code
    assert not parse_args(["connect-server"]).share_compiled_code
    assert "spark.sql.artifact.isolation.enabled=false" not in connect_server_argv(port=15099)


def test_delta_jar_version_is_named_once_and_fits_the_pinned_package():
    """The jar the engine asks Maven for is the one setup fetches, and fits the installed delta-spark."""
    import re
    from importlib.metadata import version
    from pathlib import Path

    from airflow_provider_fkjoin.engine import DELTA_JAR_VERSION, DELTA_MAVEN_COORDINATE

    pom = (Path(__file__).resolve().parents[2] / "scripts" / "delta-jars.pom.xml").read_text()
    fetched = re.search(r"<delta.version>([^<]+)</delta.version>", pom)
    assert fetched is not None and fetched.group(1) == DELTA_JAR_VERSION
    assert DELTA_MAVEN_COORDINATE.endswith(":" + DELTA_JAR_VERSION)
    package = version("delta-spark").split(".")
    assert DELTA_JAR_VERSION.split(".")[:2] == package[:2]


ADAPTIVE = {"spark.sql.adaptive.enabled": "true", "spark.sql.shuffle.partitions": "200"}


def small(partitions: int) -> dict[str, str]:
    return {
        "spark.sql.adaptive.enabled": "false",
        # without adaptive execution each broadcast is a job of its own; a shuffled join's stages are not
        "spark.sql.autoBroadcastJoinThreshold": "-1",
        "spark.sql.shuffle.partitions": str(partitions),
        # Spark caches a plan in a clone of the session unless both are so (see CacheManager)
        "spark.sql.sources.bucketing.autoBucketedScan.enabled": "false",
        "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
    }


@pytest.mark.parametrize(
    ("table_bytes", "current", "settings"),
    [
        (0, ADAPTIVE, small(1)),  # a first run: no output yet, empty inputs
        (10, {}, small(1)),  # Spark's defaults: adaptive on, 200 partitions
        (SMALL_REFRESH_BYTES, ADAPTIVE, small(4)),  # a partition per 32 MiB
        (SMALL_REFRESH_BYTES + 1, ADAPTIVE, {}),
        (None, ADAPTIVE, {}),  # a table whose size is unknown
        (SMALL_REFRESH_BYTES, {**ADAPTIVE, "spark.sql.shuffle.partitions": "2"}, small(2)),  # never more
        (10, {**ADAPTIVE, "spark.sql.adaptive.enabled": "false"}, {}),  # the session's own choice stands
        (10, {**ADAPTIVE, "spark.fkjoin.smallRefreshBytes": "0"}, {}),  # turned off
        (0, {**ADAPTIVE, "spark.fkjoin.smallRefreshBytes": "0"}, {}),  # off even for empty tables
        (2**30, {**ADAPTIVE, "spark.fkjoin.smallRefreshBytes": str(2**31)}, small(32)),
    ],
)
def test_a_small_refresh_runs_without_adaptive_execution(
    table_bytes: int | None, current: dict[str, str], settings: dict[str, str]
) -> None:
    assert small_refresh_settings(table_bytes, current) == settings


def test_a_small_refresh_bound_must_be_bytes() -> None:
    with pytest.raises(SpecError, match=r"spark\.fkjoin\.smallRefreshBytes='1g': give a number of bytes"):
        small_refresh_settings(10, {"spark.fkjoin.smallRefreshBytes": "1g"})


class FakeConf:
    """A session's runtime conf: get, set, unset (what ``small_refresh`` uses)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class FakeSession:
    def __init__(self, values: dict[str, str]) -> None:
        self.conf = FakeConf(values)


def test_overlapping_refreshes_of_one_session_give_it_back_as_it_was() -> None:
    """Two refreshes sharing a session (threads): the second runs under the settings the first chose, and
    the session's own values come back when the last one ends, whatever order they end in."""
    from airflow_provider_fkjoin.engine.runtime.session import small_refresh

    session = FakeSession({"spark.sql.adaptive.enabled": "true", "spark.sql.shuffle.partitions": "16"})
    own = dict(session.conf.values)
    first = small_refresh(session, 10)  # type: ignore[arg-type]
    second = small_refresh(session, 10 * 2**30)  # type: ignore[arg-type]  # large: it chooses nothing
    assert first.__enter__() == small(1)
    assert second.__enter__() == small(1)  # the first one's settings hold the session
    first.__exit__(None, None, None)
    assert session.conf.values == {**own, **small(1)}  # the second still runs
    second.__exit__(None, None, None)
    assert session.conf.values == own
    with small_refresh(session, 10 * 2**30) as settings:  # type: ignore[arg-type]
        assert settings == {} and session.conf.values == own


def test_a_value_that_cannot_be_put_back_never_hides_the_refreshs_own_error(caplog) -> None:
    from airflow_provider_fkjoin.engine.runtime.session import small_refresh

    session = FakeSession({"spark.sql.adaptive.enabled": "true", "spark.sql.shuffle.partitions": "16"})

    def set_fails(key: str, value: str) -> None:
        raise ConnectionError("the session is gone")

    with pytest.raises(ValueError, match="the refresh's own error"), small_refresh(session, 10):  # type: ignore[arg-type]
        session.conf.set = set_fails  # type: ignore[method-assign]
        raise ValueError("the refresh's own error")
    assert "could not set spark.sql.adaptive.enabled back to 'true'" in caplog.text


@pytest.mark.parametrize(
    ("own", "limit"),
    [(None, 10 * 2**20), ("20m", 20 * 2**20), ("1GB", 2**30), ("4096", 4096), ("-1", -1)],
)
def test_a_whole_table_join_broadcasts_under_the_session_s_own_bound(own: str | None, limit: int) -> None:
    """The bound is the session's own ``autoBroadcastJoinThreshold``, also while a small refresh has
    turned broadcasts off (-1) for its own joins."""
    from airflow_provider_fkjoin.engine.runtime.session import broadcast_limit_bytes, small_refresh

    values = {"spark.sql.adaptive.enabled": "true"}
    if own is not None:
        values["spark.sql.autoBroadcastJoinThreshold"] = own
    session = FakeSession(values)
    assert broadcast_limit_bytes(session) == limit  # type: ignore[arg-type]
    with small_refresh(session, 10) as settings:  # type: ignore[arg-type]
        assert settings["spark.sql.autoBroadcastJoinThreshold"] == "-1"
        assert broadcast_limit_bytes(session) == limit  # type: ignore[arg-type]
