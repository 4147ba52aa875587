"""A Trio client library for NSQ: ``Producer``, ``Consumer`` and their ``Message``.

It speaks only NSQ's own protocol (TCP V2 to nsqd, HTTP ``/lookup`` to nsqlookupd), so it
works the same against the Go daemons. The wire format comes from ``nsq_common``.

::

    async with Producer("127.0.0.1:4150") as producer:
        await producer.pub("events", b"hello")

    async with Consumer("events", "archive", lookupd_http_addresses=["127.0.0.1:4161"],
                        max_in_flight=100) as consumer:
        async for message in consumer:
            handle(message.body)          # FIN is sent when the next message is taken
"""

from ._backoff import Backoff, exponential, full_jitter
from ._config import Config
from ._consumer import Consumer, ConsumerStats, open_consumer
from ._discovery import LookupdPoller, lookupd_url
from ._errors import (
    ConnectError,
    ConnectionClosed,
    DiscoveryError,
    MessageResponded,
    NSQError,
    PublishError,
    ServerError,
)
from ._message import Message
from ._pipeline import Pipeline
from ._producer import Producer, open_producer
from ._rdy import RdyController
from ._version import __version__

__all__ = [
    "Backoff",
    "Config",
    "ConnectError",
    "ConnectionClosed",
    "Consumer",
    "ConsumerStats",
    "DiscoveryError",
    "LookupdPoller",
    "Message",
    "MessageResponded",
    "NSQError",
    "Pipeline",
    "Producer",
    "PublishError",
    "RdyController",
    "ServerError",
    "__version__",
    "exponential",
    "full_jitter",
    "lookupd_url",
    "open_consumer",
    "open_producer",
]
