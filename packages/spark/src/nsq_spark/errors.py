"""The connector's errors, all under one base so a job can catch them together::

    NSQSparkError
    ├── OptionError        a missing, bad or unknown option (also a ValueError)
    ├── UnreachableError   an nsqd or nsqlookupd did not answer within the timeout option
    │                      (also a ConnectionError); the message names its address
    ├── DataLossError      offsets a query needed are no longer stored (failOnDataLoss)
    ├── SchemaError        the sink's DataFrame has no body column, or a row it cannot send
    ├── ConsumerError      the driver's NSQ consumers stopped (their cause is chained)
    ├── BatchLogError      the batch log disagrees with the offsets Spark asks for
    └── PublishError       the sink could not publish a partition (Spark retries the task)

Spark shows an error raised on an executor or in the driver's Python worker inside its own
(``StreamingQueryException``, ``PythonException``), with the class and message of ours in
its text: ``nsq_spark.errors.UnreachableError: nsqd 10.0.0.5:4151 ...``.
"""

from __future__ import annotations


class NSQSparkError(Exception):
    """Base of every error raised by nsq_spark."""


class OptionError(NSQSparkError, ValueError):
    """An option is missing, unknown or does not parse; the message names it."""


class UnreachableError(NSQSparkError, ConnectionError):
    """An nsqd or nsqlookupd could not be reached (or kept failing) for the ``timeout``
    option's time; the message names the address and the last failure."""


class DataLossError(NSQSparkError):
    """Offsets the query needed were removed from the topic's log (its retention passed, or
    no channel held them) or the log was reset; raised when ``failOnDataLoss`` is true."""


class SchemaError(NSQSparkError, ValueError):
    """The DataFrame cannot be published: the message says which column or row is wrong."""


class ConsumerError(NSQSparkError):
    """The driver's consumers stopped; ``__cause__`` says why."""


class BatchLogError(NSQSparkError):
    """The batch log under the checkpoint does not match what Spark asks to replay."""


class PublishError(NSQSparkError):
    """A partition's rows could not all be published."""
