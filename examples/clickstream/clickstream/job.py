"""The streaming job: ``pageviews`` from NSQ -> per-minute views and users per page -> Parquet,
and alerts -> the ``pageview_alerts`` topic.

Exactly once per window, from three parts:

* the ``nsq`` source reads the topic by offset, and Spark keeps the offsets in the query's
  checkpoint (the writer's ``checkpointLocation``, the only one): after a crash, batch N is
  read again from the same offsets, so it holds the same events;
* the watermark and append mode emit each window once, when the watermark passes its end,
  with its final counts (a restarted query recomputes the same batch from the same state);
* :class:`BatchWriter` writes batch N to ``<out>/views/batch_id=N`` in overwrite mode, so
  running batch N again replaces what its first run wrote instead of adding to it.

Alerts go to NSQ with the ``nsq`` sink after the Parquet write: at least once, as NSQ itself
delivers, each with an ``id`` that is the same on a repeat (see :func:`.transform.alerts`).
A window's page is compared with its own recent minutes: those written by earlier batches
(read back from ``<out>/views``) and those of the same batch.

With ``channel`` set the job reads that channel instead (NSQ's competing consumers): the
source then logs each batch under the checkpoint, which the reader gets too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from .events import ALERTS_TOPIC, BASELINE_MINUTES, FACTOR, MIN_HISTORY, MIN_VIEWS, TOPIC
from .transform import alerts, parse, per_minute

log = logging.getLogger("clickstream")


@dataclass(frozen=True)
class JobConfig:
    out: str  # views under <out>/views/batch_id=<N>
    checkpoint: str  # the query's checkpoint
    lookupd: str = ""  # nsqlookupd HTTP addresses to find the topic's nsqd (or the next two)
    nsqd_http: str = ""  # nsqd HTTP addresses: read from these when no lookupd
    nsqd: str = ""  # nsqd TCP addresses: alerts go here (and a channel is read from here)
    topic: str = TOPIC
    channel: str = ""  # read this channel instead of the topic's log by offset
    starting_offsets: str = "earliest"  # where a new query starts reading the topic
    alerts_topic: str = ALERTS_TOPIC
    factor: float = FACTOR
    baseline_minutes: int = BASELINE_MINUTES
    min_history: int = MIN_HISTORY
    min_views: int = MIN_VIEWS
    watermark: str = "30 seconds"  # how late an event may be and still count
    trigger: str | None = None  # a processing-time interval ("10 seconds"); None: AvailableNow
    max_per_trigger: int | None = None
    idle_timeout: str = "2s"  # a channel under AvailableNow: done after this long with nothing new
    echo: bool = False  # print each batch's windows and alerts (the laptop demo)

    def source_options(self) -> dict[str, str]:
        opts = {"topic": self.topic}
        if self.lookupd:
            opts["lookupd"] = self.lookupd
        elif self.channel and self.nsqd:
            opts["nsqd"] = self.nsqd
        else:
            opts["nsqdHttp"] = self.nsqd_http
        if self.channel:
            opts.update(channel=self.channel, checkpointLocation=self.checkpoint,
                        idleTimeout=self.idle_timeout)
        else:
            opts["startingOffsets"] = self.starting_offsets
        if self.max_per_trigger:
            opts["maxOffsetsPerTrigger"] = str(self.max_per_trigger)
        return opts

    def alert_options(self) -> dict[str, str]:
        where = {"nsqd": self.nsqd} if self.nsqd else {"lookupd": self.lookupd}
        return {"topic": self.alerts_topic, **where}


class BatchWriter:
    """``foreachBatch``'s function: batch N's closed windows to ``<out>/views/batch_id=N``
    (overwrite: idempotent by batch id), then their alerts to NSQ. It runs on the driver; the
    writes themselves run on executors."""

    def __init__(self, config: JobConfig) -> None:
        self.config = config

    def views_path(self, batch_id: int) -> str:
        return f"{self.config.out.rstrip('/')}/views/batch_id={batch_id}"

    def history(self, windows: DataFrame, batch_id: int) -> DataFrame:
        """The windows earlier batches wrote (the same whenever batch N runs again)."""
        try:
            written = windows.sparkSession.read.parquet(f"{self.config.out.rstrip('/')}/views")
        except AnalysisException:  # nothing written yet
            return windows.limit(0)
        return written.where(F.col("batch_id") < batch_id).drop("batch_id")

    def __call__(self, windows: DataFrame, batch_id: int) -> None:
        config = self.config
        windows = windows.persist()  # written and compared for alerts: computed once
        try:
            if windows.isEmpty():  # most batches: no window closed
                return
            windows.write.mode("overwrite").parquet(self.views_path(batch_id))
            hot = alerts(windows, self.history(windows, batch_id), factor=config.factor,
                         baseline_minutes=config.baseline_minutes,
                         min_history=config.min_history, min_views=config.min_views).persist()
            try:
                if not hot.isEmpty():
                    (hot.write.format("nsq").mode("append")
                     .options(**config.alert_options()).save())
                if config.echo:
                    windows.orderBy("window_start", "page").show(100, truncate=False)
                    for row in hot.collect():
                        print(f"ALERT {row.body}", flush=True)
            finally:
                hot.unpersist()
        finally:
            windows.unpersist()


def build(spark: SparkSession, config: JobConfig) -> DataFrame:
    """The windows as a streaming DataFrame (before the sink)."""
    raw = spark.readStream.format("nsq").options(**config.source_options()).load()
    events = parse(raw).withWatermark("event_time", config.watermark)
    return per_minute(events)


def start(spark: SparkSession, config: JobConfig) -> StreamingQuery:
    """Start the query: ``Trigger.AvailableNow`` (what the topic holds at the start, then it
    ends) without ``config.trigger``."""
    writer = (build(spark, config).writeStream.queryName("clickstream").outputMode("append")
              .foreachBatch(BatchWriter(config))
              .option("checkpointLocation", config.checkpoint))
    if config.trigger is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=config.trigger)
    return writer.start()


def views(spark: SparkSession, out: str) -> DataFrame:
    """Every window the job wrote under ``out`` (its ``batch_id`` partition column dropped)."""
    return spark.read.parquet(f"{out.rstrip('/')}/views").drop("batch_id")
