"""A PySpark data source for NSQ topics, registered under the short name ``nsq``.

::

    import nsq_spark
    nsq_spark.register(spark)          # the one line: spark.dataSource.register(NSQDataSource)

    events = (spark.readStream.format("nsq")          # the topic's log, by offset, as Kafka's
              .option("lookupd", "127.0.0.1:4161")
              .option("topic", "clicks").option("startingOffsets", "earliest")
              .load())       # id, body, value, timestamp, attempts, nsqd, topic, offset, channel
    events.writeStream.format("nsq").option("nsqd", "127.0.0.1:4150").option("topic", "copy")

A ``channel`` option reads that channel instead (NSQ's competing consumers, each micro-batch
FINished once Spark commits it). docs/spark.md says which to choose.

Spark starts Python workers with ``PYSPARK_PYTHON`` (else ``python3`` on the PATH), which must
be an interpreter that has this package. Imported in a program that starts Spark itself (not
under ``spark-submit``, which has started the JVM already and whose cluster chooses its own
interpreter with ``spark.pyspark.python``), it makes that the current interpreter when nothing
else was chosen, so a local session works as it is.
"""

from __future__ import annotations

import os
import sys

from . import savemode
from .datasource import NSQDataSource
from .errors import (
    BatchLogError,
    ConsumerError,
    DataLossError,
    NSQSparkError,
    OptionError,
    PublishError,
    SchemaError,
    UnreachableError,
)
from .rows import SCHEMA

# The workers of a session this program starts run this interpreter unless the user chose
# one; set before the JVM starts, because Spark reads it only then. Under spark-submit (the
# JVM is already there: PYSPARK_GATEWAY_PORT) the cluster's settings decide.
if "PYSPARK_GATEWAY_PORT" not in os.environ:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

__all__ = [
    "SCHEMA",
    "BatchLogError",
    "ConsumerError",
    "DataLossError",
    "NSQDataSource",
    "NSQSparkError",
    "OptionError",
    "PublishError",
    "SchemaError",
    "UnreachableError",
    "local_session",
    "register",
]


def register(spark: object) -> None:
    """Make ``format("nsq")`` known to the session ``spark``, its sink taking Spark's default
    save mode as Kafka's does (:mod:`.savemode`)."""
    spark.dataSource.register(NSQDataSource)  # type: ignore[attr-defined]
    savemode.install()


def local_session(app_name: str = "nsq", *, cores: int = 2, **conf: str) -> object:
    """A ``local[cores]`` SparkSession on loopback with the data source registered: for a
    laptop, tests and examples (a cluster's session comes from ``spark-submit``)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(cores))
               .config("spark.sql.session.timeZone", "UTC")
               # A Python worker that takes longer than this to start and connect back
               # fails the query (Spark's default, 15 s, is short for a busy machine).
               .config("spark.python.authenticate.socketTimeout", "120s"))
    for key, value in conf.items():
        builder = builder.config(key.replace("__", "."), value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
