"""get_spark's configuration, checked without starting a JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_fkjoin.engine.session import DELTA_MAVEN_COORDINATE, parse_conf, session_conf


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
    _, conf = session_conf()
    assert conf["spark.jars"] == str(tmp_path / "delta-spark.jar")
    assert "spark.jars.packages" not in conf
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("FKJOIN_DELTA_JARS", str(empty))
    _, conf = session_conf()
    assert conf["spark.jars.packages"] == DELTA_MAVEN_COORDINATE


def test_parse_conf_forms() -> None:
    assert parse_conf('{"a": 1}') == {"a": "1"}
    assert parse_conf("a=1\nb=x=y") == {"a": "1", "b": "x=y"}
    assert parse_conf("  ") == {}
    with pytest.raises(ValueError, match="not key=value"):
        parse_conf("novalue")
