"""nsq_to_nsq: copy topics from one cluster to another.

Each ``--topic`` is consumed (``--channel``, default ``nsq_to_nsq``) and every message is
published to ``--destination-topic`` (default: the same topic) on one of the
``--destination-nsqd-tcp-address``, chosen per ``--mode`` (``hostpool``, the default, and
``epsilon-greedy`` rest failing nsqd; ``round-robin`` takes them in turn). A message is
FINished once the destination said OK and REQueued (with backoff) if it refused.

JSON filtering, as NSQ's: with ``--require-json-field`` only messages having that field pass
(and, with ``--require-json-value``, that value; a message lacking the field then counts as a
failure); with ``--whitelist-json-field`` only those fields are kept. Messages that are not
JSON objects are dropped (FINished) when filtering is on.

Up to ``--max-in-flight`` publishes are in flight at once, pipelined on each destination
connection by a fixed pool of workers.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

import trio
from nsq_common import FlagSet, go_json, is_valid_name

from .._config import Config
from .._consumer import Consumer
from .._message import Message
from .._producer import Producer
from ._common import fatal, parse_flags, run_tool, setup_logging, stop_on_signals, tool_config
from ._consuming import consumer_flags, require_one_source, validate_consumer_args
from ._hostpool import EpsilonGreedy, HostPool, TimerMetrics
from ._progress import Progress

PROGRAM = "nsq_to_nsq"
log = logging.getLogger("nsq_client.tools")


def flag_set() -> FlagSet:
    fs = consumer_flags(PROGRAM, channel="nsq_to_nsq", see=True)
    fs.add("destination-topic", "string", "", "use this destination topic for all consumed "
           "topics (default is consumed topic name)")
    fs.add("status-every", "int", 250, "the # of requests between logging status (per "
           "destination), 0 disables")
    fs.add("mode", "string", "hostpool", "the upstream request mode options: round-robin, "
           "hostpool (default), epsilon-greedy")
    fs.add("destination-nsqd-tcp-address", "strings", [],
           "destination nsqd TCP address (may be given multiple times)")
    fs.add("whitelist-json-field", "strings", [],
           "for JSON messages: pass this field (may be given multiple times)")
    fs.add("require-json-field", "string", "",
           "for JSON messages: only pass messages that contain this field")
    fs.add("require-json-value", "string", "",
           "for JSON messages: only pass messages in which the required field has this value")
    fs.add("producer-opt", "strings", [], "option to passthrough to nsq.Producer (may be given "
           "multiple times, see http://godoc.org/github.com/nsqio/go-nsq#Config)")
    return fs


class RetryLater(Exception):
    """A message the filter wants retried (the required field is missing)."""


class JSONFilter:
    """NSQ's --require-json-field / --require-json-value / --whitelist-json-field."""

    def __init__(self, field: str, value: str, whitelist: Sequence[str]) -> None:
        self.field = field
        self.value = value
        self.whitelist = list(whitelist)
        self.number: float | None = None
        if value:
            try:
                self.number = float(value)
            except ValueError:
                self.number = None

    @property
    def active(self) -> bool:
        return bool(self.field or self.whitelist)

    def apply(self, body: bytes) -> bytes | None:
        """The body to publish, or None to drop the message.

        Raises:
            RetryLater: the required field is missing while a value is required.
        """
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            log.error("ERROR: Unable to decode json: %s", body.decode("utf-8", "replace"))
            return None
        if not self._passes(data):
            return None
        if not self.whitelist:
            return body
        kept: dict[str, Any] = {}
        for key in self.whitelist:
            if key in data:
                value = data[key]
                if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
                    value = int(value)  # as NSQ prints it: no 1.0 for 1
                kept[key] = value
        return go_json(dict(sorted(kept.items())))

    def _passes(self, data: dict[str, Any]) -> bool:
        if not self.field:
            return True
        if self.field not in data:
            if self.value:
                log.error("ERROR: missing field to check required value")
                raise RetryLater("backoff")
            return False
        if not self.value:
            return True
        found = data[self.field]
        if isinstance(found, str):
            return found == self.value
        if self.number is not None and isinstance(found, int | float) and not isinstance(found, bool):
            return float(found) == self.number
        return False


class Forwarder:
    """Publishes each message to a destination nsqd chosen per --mode."""

    def __init__(self, producers: dict[str, Producer], opts: dict[str, Any]) -> None:
        self.producers = producers
        self.addresses = list(producers)
        self.mode = opts["mode"]
        self.pool = (EpsilonGreedy(self.addresses) if self.mode == "epsilon-greedy"
                     else HostPool(self.addresses))
        self.counter = 0
        self.filter = JSONFilter(opts["require_json_field"], opts["require_json_value"],
                                 opts["whitelist_json_field"])
        every = opts["status_every"]
        self.per_address = {a: TimerMetrics(every if len(self.addresses) > 1 else 0, f"[{a}]:")
                            for a in self.addresses}
        self.aggregate = TimerMetrics(every, "[aggregate]:")

    async def forward(self, message: Message, topic: str) -> bool:
        """True when published; False when the filter dropped it."""
        body = message.body
        if self.filter.active:
            filtered = self.filter.apply(body)
            if filtered is None:
                return False
            body = filtered
        start = time.monotonic()
        if self.mode in ("hostpool", "epsilon-greedy"):
            address = self.pool.get()
        else:
            self.counter += 1
            address = self.addresses[self.counter % len(self.addresses)]
        try:
            await self.producers[address].pub(topic, body)
        except Exception as exc:
            self.pool.mark(address, exc)
            raise
        took = time.monotonic() - start
        self.pool.mark(address, None, took)
        self.per_address[address].status(took)
        self.aggregate.status(took)
        return True


async def run(opts: dict[str, Any]) -> None:
    consumer_config = tool_config(opts, PROGRAM, max_in_flight=opts["max_in_flight"])
    producer_config = tool_config(opts, PROGRAM, "producer-opt")
    progress = Progress(PROGRAM)
    consumers: list[Consumer] = []

    def stop() -> None:
        for consumer in consumers:
            consumer.stop()

    async with AsyncExitStack() as stack:
        producers = {a: await stack.enter_async_context(Producer(a, config=producer_config))
                     for a in dict.fromkeys(opts["destination_nsqd_tcp_address"])}
        forwarder = Forwarder(producers, opts)
        async with trio.open_nursery() as nursery:
            await nursery.start(stop_on_signals, stop)
            nursery.start_soon(progress.run)
            async with trio.open_nursery() as copying:
                for topic in opts["topic"]:
                    destination = opts["destination_topic"] or topic
                    copying.start_soon(_copy, topic, destination, opts, consumer_config,
                                       forwarder, consumers, progress)
            nursery.cancel_scope.cancel()


async def _copy(topic: str, destination: str, opts: dict[str, Any], config: Config,
                forwarder: Forwarder, consumers: list[Consumer], progress: Progress) -> None:
    async def handler(message: Message) -> None:
        if await forwarder.forward(message, destination):
            progress.add("messages")

    async with Consumer(topic, opts["channel"], config=config,
                        nsqd_tcp_addresses=opts["nsqd_tcp_address"],
                        lookupd_http_addresses=opts["lookupd_http_address"]) as consumer:
        consumers.append(consumer)
        await consumer.run(handler, concurrency=max(1, opts["max_in_flight"]))


def main(argv: Sequence[str] | None = None) -> None:
    setup_logging()
    opts = parse_flags(flag_set(), argv)
    if not opts["topic"] or not opts["channel"]:
        fatal("--topic and --channel are required")
    for topic in opts["topic"]:
        if not is_valid_name(topic):
            fatal("--topic is invalid")
    if opts["destination_topic"] and not is_valid_name(opts["destination_topic"]):
        fatal("--destination-topic is invalid")
    if not is_valid_name(opts["channel"]):
        fatal("--channel is invalid")
    require_one_source(opts["nsqd_tcp_address"], opts["lookupd_http_address"])
    if not opts["destination_nsqd_tcp_address"]:
        fatal("--destination-nsqd-tcp-address required")
    validate_consumer_args(opts["topic"], opts["channel"], opts["lookupd_http_address"])
    run_tool(run, opts)


if __name__ == "__main__":
    main()
