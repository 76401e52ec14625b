"""``jvm_start`` without building an archive: where it is looked for, what its key depends on, and how its
options join the user's. The archive built and mapped for real: ``airflow/test_fast_driver_start.py``."""

from __future__ import annotations

import doctest
import os
from pathlib import Path

import pytest

from airflow_provider_fkjoin import jvm_start
from airflow_provider_fkjoin.jvm_start import (
    SHORT_LIVED_FLAGS,
    archive_dir,
    archive_key,
    archive_path,
    driver_java_options,
    merge_java_options,
)

ARCHIVE = "-XX:SharedArchiveFile=/a/driver.jsa"


def test_the_docstring_examples_run():
    assert doctest.testmod(jvm_start, optionflags=doctest.ELLIPSIS).failed == 0


def test_the_archive_folder_is_the_configured_one_else_the_checkouts_else_the_users_cache(
    tmp_path, monkeypatch
):
    assert archive_dir({"FKJOIN_JVM_ARCHIVE_DIR": str(tmp_path)}) == tmp_path
    checkout_jars = Path(jvm_start.__file__).resolve().parents[1] / ".jars"
    if checkout_jars.is_dir():
        assert archive_dir({}) == checkout_jars / "cds"
    monkeypatch.setattr(jvm_start, "_CHECKOUT_JARS", tmp_path / "not-a-checkout")
    assert archive_dir({"XDG_CACHE_HOME": "/c"}) == Path("/c/fkjoin/cds")
    assert archive_dir({"HOME": "/home/u"}) == Path("/home/u/.cache/fkjoin/cds")


def test_the_key_follows_the_jvm_and_sparks_jars(tmp_path):
    """Another Spark folder (a SPARK_HOME) or another set of jars: another key, so no stale archive."""
    env = dict(os.environ)
    env.pop("SPARK_HOME", None)
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    (jars / "spark-core_2.13-4.2.0.jar").write_bytes(b"")
    other = {**env, "SPARK_HOME": str(tmp_path / "spark")}
    assert archive_key(env) == archive_key(env) != archive_key(other)
    first = archive_key(other)
    (jars / "spark-sql_2.13-4.2.0.jar").write_bytes(b"")
    jvm_start._key.cache_clear()
    assert archive_key(other) != first
    assert archive_path(other).name == f"driver-{archive_key(other)}.jsa"


def test_options_only_when_the_archive_for_this_jvm_and_spark_exists(tmp_path):
    env = {**os.environ, "FKJOIN_JVM_ARCHIVE_DIR": str(tmp_path)}
    assert driver_java_options(env) is None
    archive = archive_path(env)
    archive.write_bytes(b"")
    assert driver_java_options(env) == [f"-XX:SharedArchiveFile={archive}", *SHORT_LIVED_FLAGS]
    assert driver_java_options({**env, "JAVA_HOME": str(tmp_path / "no-jdk")}) is None  # no java there


@pytest.mark.parametrize(
    ("user", "taken", "expected"),
    [
        (None, "", f"{ARCHIVE} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"),
        ("-Dlog4j.configurationFile=file:/l.properties", "", "-Dlog4j.configurationFile=file:/l.properties "
         f"{ARCHIVE} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"),
        ("-XX:+UseParallelGC -Xshare:off", "", "-XX:+UseParallelGC -Xshare:off -XX:TieredStopAtLevel=1"),
        ("-XX:-TieredCompilation", "", f"-XX:-TieredCompilation {ARCHIVE} -XX:+UseSerialGC"),
        ("  -Dx=1 ", "-XX:SharedArchiveFile=/b.jsa -XX:TieredStopAtLevel=1", "-Dx=1 -XX:+UseSerialGC"),
    ],
)  # fmt: skip
def test_ours_follow_the_users_options_less_the_kinds_they_set(user, taken, expected):
    ours = [ARCHIVE, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    assert merge_java_options(user, ours, taken) == expected
