"""A clickstream pipeline on NSQ and Spark: page views in, per-minute page counts out.

* :mod:`.events`: the page-view events (deterministic from a seed) and, in plain Python, the
  aggregates and alerts any correct pipeline must produce from them;
* :mod:`.generator`: publishes events to the ``pageviews`` topic (a fixed set, or live);
* :mod:`.transform`: the Spark side shared by both paths: the JSON schema, parsing, the
  per-minute aggregation and the alert rule;
* :mod:`.job`: the streaming job (``format("nsq")`` in, Parquet and ``pageview_alerts`` out);
* :mod:`.batch`: the batch path over the files ``nsq_to_file`` archives;
* ``python -m clickstream``: the command line (``--help``).

Only :mod:`.transform`'s built-in Spark functions run on executors, so the executors need
``nsq_spark`` (the source and the sink) but not this package.
"""

from __future__ import annotations

from .events import ALERTS_TOPIC, TOPIC, Alert, Event, WindowStats, expected_alerts, expected_windows

__all__ = ["ALERTS_TOPIC", "TOPIC", "Alert", "Event", "WindowStats", "expected_alerts",
           "expected_windows"]
