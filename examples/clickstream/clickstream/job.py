"""The streaming job: ``pageviews`` from NSQ -> per-minute views and users per page -> Parquet,
and alerts -> the ``pageview_alerts`` topic.

Exactly once per window, from three parts:

* the ``nsq`` source FINishes a micro-batch's messages only after Spark commits the batch, and
  replays the same messages for the same batch id after a restart (its batch log lives under
  the query's checkpoint, which is why the reader gets ``checkpointLocation`` too);
* the watermark and append mode emit each window once, when the watermark passes its end,
  with its final counts (a restarted query recomputes the same batch from the same state);
* :class:`BatchWriter` writes batch N to ``<out>/views/batch_id=N`` in overwrite mode, so
  running batch N again replaces what its first run wrote instead of adding to it.

Alerts go to NSQ with the ``nsq`` sink after the Parquet write: at least once, as NSQ itself
delivers, each with an ``id`` that is the same on a repeat (see :func:`.transform.alerts`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from .events import ALERTS_TOPIC, DEFAULT_THRESHOLD, TOPIC
from .transform import alerts, parse, per_minute

log = logging.getLogger("clickstream")


@dataclass(frozen=True)
class JobConfig:
    out: str  # views under <out>/views/batch_id=<N>
    checkpoint: str  # the query's checkpoint, given to the nsq reader as well
    lookupd: str = ""  # nsqlookupd HTTP addresses to find the topic's nsqd (or nsqd below)
    nsqd: str = ""  # nsqd TCP addresses: read from these when no lookupd; alerts go here
    topic: str = TOPIC
    channel: str = "clickstream"
    alerts_topic: str = ALERTS_TOPIC
    threshold: int = DEFAULT_THRESHOLD
    watermark: str = "30 seconds"  # how late an event may be and still count
    trigger: str | None = None  # a processing-time interval ("10 seconds"); None: AvailableNow
    max_per_trigger: int | None = None
    idle_timeout: str = "2s"  # AvailableNow: done after this long with nothing new
    echo: bool = False  # print each batch's windows and alerts (the laptop demo)

    def source_options(self) -> dict[str, str]:
        opts = {"topic": self.topic, "channel": self.channel,
                "checkpointLocation": self.checkpoint, "idleTimeout": self.idle_timeout}
        if self.lookupd:
            opts["lookupd"] = self.lookupd
        else:
            opts["nsqd"] = self.nsqd
        if self.max_per_trigger:
            opts["maxMessagesPerTrigger"] = str(self.max_per_trigger)
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

    def __call__(self, windows: DataFrame, batch_id: int) -> None:
        windows = windows.persist()  # written and filtered for alerts: computed once
        try:
            if windows.isEmpty():  # most batches: no window closed
                return
            windows.write.mode("overwrite").parquet(self.views_path(batch_id))
            hot = alerts(windows, self.config.threshold).persist()
            try:
                if not hot.isEmpty():
                    (hot.write.format("nsq").mode("append")
                     .options(**self.config.alert_options()).save())
                if self.config.echo:
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
    """Start the query: ``Trigger.AvailableNow`` (ends once idle) without ``config.trigger``."""
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
