"""The object-store tests' fixtures: the S3-protocol server of this test process (``support/s3.py``) and the
test session's Spark pointed at its bucket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.s3 import S3Server, start_server

from airflow_provider_fkjoin.engine.runtime.packaging import s3a_jars


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The S3-protocol server of this test process, with its bucket created."""
    server = start_server(tmp_path_factory.mktemp("s3"))
    try:
        server.create_bucket()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_spark(spark, s3: S3Server):
    """The test session's Spark with S3A pointed at the server's bucket (its per-bucket settings)."""
    if not s3a_jars():
        pytest.fail("no S3A jars: run ./scripts/setup.sh (it fetches them into .jars/s3a/)")
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3.hadoop_conf().items():
        conf.set(key, value)
    return spark
