"""The batch path: the same per-minute aggregates from the files ``nsq_to_file`` archives.

``nsq_to_file --topic pageviews --output-dir DIR`` writes each message as one line to files
named ``<TOPIC>.<HOST><REV>.<DATETIME>.log`` (``.gz`` appended with ``--gzip``; a file of
several gzip members, which Spark's gzip codec reads whole). Spark picks the codec by the
file's extension, so plain and gzipped files can be read together. With ``--work-dir`` only
finished files are in the output directory; without it the current hour's file is still
being appended to, and a read sees what had been written by then.

Without a watermark every window is computed, the still open last minute included: the batch
path agrees with the streaming one on every window the streaming job has emitted.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from .events import TOPIC
from .transform import parse, per_minute


def read_archive(spark: SparkSession, directory: str, topic: str = TOPIC) -> DataFrame:
    """The page views in ``topic``'s archive files under ``directory``."""
    lines = spark.read.option("pathGlobFilter", f"{topic}.*").text(directory)
    return parse(lines, "value")


def aggregate_archive(spark: SparkSession, directory: str, topic: str = TOPIC,
                      out: str | None = None) -> DataFrame:
    """Per-minute views and users per page from the archive; written to Parquet at ``out``
    (replacing what is there) when given."""
    windows = per_minute(read_archive(spark, directory, topic))
    if out is not None:
        windows.write.mode("overwrite").parquet(out)
    return windows
