"""The connector's errors, all under one base so a job can catch them together::

    NSQSparkError
    ├── OptionError        a missing or bad option (also a ValueError)
    ├── SchemaError        the sink's DataFrame has no body column, or a row it cannot send
    ├── ConsumerError      the driver's NSQ consumers stopped (their cause is chained)
    ├── BatchLogError      the batch log disagrees with the offsets Spark asks for
    └── PublishError       the sink could not publish a partition (Spark retries the task)
"""

from __future__ import annotations


class NSQSparkError(Exception):
    """Base of every error raised by nsq_spark."""


class OptionError(NSQSparkError, ValueError):
    """An option is missing or does not parse; the message names it."""


class SchemaError(NSQSparkError, ValueError):
    """The DataFrame cannot be published: the message says which column or row is wrong."""


class ConsumerError(NSQSparkError):
    """The driver's consumers stopped; ``__cause__`` says why."""


class BatchLogError(NSQSparkError):
    """The batch log under the checkpoint does not match what Spark asks to replay."""


class PublishError(NSQSparkError):
    """A partition's rows could not all be published."""
