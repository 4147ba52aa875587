"""The Spark half shared by the streaming job and the batch path, in built-in functions only
(no Python UDF, so executors need no code of this package).

Distinct users are counted exactly, as ``size(collect_set(user))``: Spark refuses
``count(distinct ...)`` in a streaming aggregation, and a set of the users of one page in one
minute is small state. For pages with millions of users per minute use
``approx_count_distinct(user)`` (HyperLogLog++, about 5% error by default, constant state).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

EVENT_SCHEMA = StructType([
    StructField("user", StringType()),
    StructField("page", StringType()),
    StructField("ts", LongType()),
])

WINDOW = "1 minute"


def parse(raw: DataFrame, column: str = "body") -> DataFrame:
    """``user``, ``page``, ``event_time`` (a timestamp) from JSON text or bytes in ``column``;
    lines that are not such an event (bad JSON, a field missing) are dropped."""
    text: Column = F.col(column).cast("string")
    event = F.from_json(text, EVENT_SCHEMA).alias("e")
    return (raw.select(event)
            .where(F.col("e.user").isNotNull() & F.col("e.page").isNotNull()
                   & F.col("e.ts").isNotNull())
            .select("e.user", "e.page", F.timestamp_millis("e.ts").alias("event_time")))


def per_minute(events: DataFrame) -> DataFrame:
    """Views and distinct users per page per minute of event time: ``window_start``,
    ``window_end``, ``page``, ``views``, ``unique_users``. A streaming ``events`` must carry
    a watermark on ``event_time`` for append mode."""
    return (events.groupBy(F.window("event_time", WINDOW).alias("w"), "page")
            .agg(F.count(F.lit(1)).alias("views"),
                 F.size(F.collect_set("user")).alias("unique_users"))
            .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
                    "page", "views", "unique_users"))


def alerts(windows: DataFrame, history: DataFrame, *, factor: float, baseline_minutes: int,
           min_history: int, min_views: int) -> DataFrame:
    """One JSON ``body`` per window of ``windows`` whose page had more than ``factor`` times
    its baseline: the median of the page's views in the windows (of ``history`` and
    ``windows`` both) of the ``baseline_minutes`` before it, given ``min_history`` of them
    and at least ``min_views`` views (the rule of :mod:`.events`).

    ``id`` (page and window start) is the same whenever the alert is sent again, so a consumer
    can drop a repeat: NSQ delivers at least once, and a replayed batch publishes its alerts
    again."""
    now = windows.select("window_start", "window_end", "page", "views", "unique_users").alias("w")
    known = (history.select("window_start", "page", "views")
             .unionByName(windows.select("window_start", "page", "views")).alias("k"))
    earlier = ((F.col("k.page") == F.col("w.page"))
               & (F.col("k.window_start") < F.col("w.window_start"))
               & (F.col("k.window_start") >= F.col("w.window_start")
                  - F.make_interval(mins=F.lit(baseline_minutes))))
    rated = (now.join(known, earlier)
             .groupBy("w.window_start", "w.window_end", "w.page", "w.views", "w.unique_users")
             .agg(F.median("k.views").alias("baseline"), F.count(F.lit(1)).alias("history")))
    start_ms = F.unix_millis("window_start")
    return (rated.where((F.col("history") >= min_history) & (F.col("views") >= min_views)
                        & (F.col("views") > F.col("baseline") * factor))
            .select(F.to_json(F.struct(
                F.concat_ws("@", "page", start_ms.cast("string")).alias("id"),
                "page",
                start_ms.alias("window_start"),
                F.unix_millis("window_end").alias("window_end"),
                "views", "unique_users",
                F.col("baseline").cast("double").alias("baseline"),
                F.lit(factor).alias("factor"),
            )).alias("body")))
