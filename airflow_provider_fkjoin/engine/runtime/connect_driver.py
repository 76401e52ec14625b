"""The driver of a Spark Connect server whose sessions share compiled code (``fkjoin connect-server
--share-compiled-code``).

``spark-submit`` runs this file with the server's settings, among them Spark Connect's plugin, which
starts the server inside the driver this file creates; the file then only keeps the driver alive until
it is stopped (SIGTERM), as Spark's own server entry point does.

    spark-submit --conf spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin ... connect_driver.py
"""

from __future__ import annotations

import threading

from pyspark.sql import SparkSession


def main() -> None:
    """Start the driver (and with it the Connect server), then wait."""
    SparkSession.builder.getOrCreate()
    threading.Event().wait()


if __name__ == "__main__":
    main()
