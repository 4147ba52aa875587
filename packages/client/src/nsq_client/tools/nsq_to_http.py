"""nsq_to_http: send every message of a topic to HTTP endpoints.

``--post URL`` sends the body as a POST (``--content-type``); ``--get URL`` sends a GET with the
body, query-escaped, in place of the single ``%s`` in the URL. A 2xx (POST) or 200 (GET)
answer FINishes the message, anything else REQueues it (and backs the consumer off). With
several URLs ``--mode`` picks where each message goes: ``round-robin``, ``hostpool``
(default; failing hosts are rested) or ``epsilon-greedy`` (mostly the fastest); any other mode
sends every message to every URL (fan-out), as NSQ's does. ``--n`` requests run at once.
``--sample`` sends only that fraction of the messages (the rest are FINished unsent).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote_plus

import httpx
import trio
from nsq_common import FlagSet

from .._consumer import Consumer
from .._message import Message
from ._common import VERSION, fatal, parse_flags, run_tool, setup_logging, stop_on_signals, tool_config
from ._consuming import consumer_flags, require_one_source, validate_consumer_args
from ._hostpool import EpsilonGreedy, HostPool, TimerMetrics
from ._progress import Progress

PROGRAM = "nsq_to_http"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
log = logging.getLogger("nsq_client.tools")


def flag_set() -> FlagSet:
    fs = consumer_flags(PROGRAM, channel="nsq_to_http", one_topic=True)
    fs.add("n", "int", 100, "number of concurrent publishers")
    fs.add("mode", "string", "hostpool", "the upstream request mode options: round-robin, "
           "hostpool (default), epsilon-greedy")
    fs.add("sample", "float", 1.0, "% of messages to publish (float b/w 0 -> 1)")
    fs.add("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect")
    fs.add("http-client-request-timeout", "duration", 20.0, "timeout for HTTP request")
    fs.add("status-every", "int", 250, "the # of requests between logging status (per handler), "
           "0 disables")
    fs.add("content-type", "string", DEFAULT_CONTENT_TYPE,
           "the Content-Type used for POST requests")
    fs.add("post", "strings", [], "HTTP address to make a POST request to.  data will be in the "
           "body (may be given multiple times)")
    fs.add("header", "strings", [], "Custom header for HTTP requests (may be given multiple times)")
    fs.add("get", "strings", [], "HTTP address to make a GET request to. '%s' will be printf "
           "replaced with data (may be given multiple times)")
    return fs


def parse_headers(items: Sequence[str]) -> dict[str, str]:
    """``"Key: value"`` pairs (split at the first colon, both sides trimmed and non-empty)."""
    headers = {}
    for item in items:
        key, sep, value = item.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ValueError(f"invalid header: {item!r}")
        headers[key] = value
    return headers


class HTTPPublisher:
    """Sends one message to its destination(s) per ``--mode``; raises on a bad answer."""

    def __init__(self, client: httpx.AsyncClient, opts: dict[str, Any],
                 rng: random.Random | None = None) -> None:
        self.client = client
        self.post = bool(opts["post"])
        self.addresses: list[str] = list(opts["post"] or opts["get"])
        self.mode = opts["mode"]
        self.sample = opts["sample"]
        self.rng = rng or random.Random()
        self.headers = {"User-Agent": f"{PROGRAM} v{VERSION}", **parse_headers(opts["header"])}
        if self.post:
            self.headers["Content-Type"] = opts["content_type"]
        self.pool = (EpsilonGreedy(self.addresses, rng=self.rng) if self.mode == "epsilon-greedy"
                     else HostPool(self.addresses, rng=self.rng))
        self.counter = 0
        every = opts["status_every"]
        self.per_address = {a: TimerMetrics(every if len(self.addresses) > 1 else 0, f"[{a}]:")
                            for a in self.addresses}
        self.aggregate = TimerMetrics(every, "[aggregate]:")

    async def send(self, address: str, body: bytes) -> None:
        if self.post:
            response = await self.client.post(address, content=body, headers=self.headers)
            ok = 200 <= response.status_code < 300
        else:
            url = address.replace("%s", quote_plus(body, safe=""), 1)
            response = await self.client.get(url, headers=self.headers)
            ok = response.status_code == 200
        if not ok:
            raise RuntimeError(f"got status code {response.status_code}")

    async def handle(self, message: Message) -> None:
        if self.sample < 1.0 and self.rng.random() > self.sample:
            return
        start = time.monotonic()
        if self.mode == "round-robin":
            self.counter += 1
            targets = [self.addresses[self.counter % len(self.addresses)]]
        elif self.mode in ("hostpool", "epsilon-greedy"):
            address = self.pool.get()
            try:
                await self.send(address, message.body)
            except Exception as exc:
                self.pool.mark(address, exc)
                raise
            self.pool.mark(address, None, time.monotonic() - start)
            self.per_address[address].status(time.monotonic() - start)
            self.aggregate.status(time.monotonic() - start)
            return
        else:  # every address, in turn
            targets = self.addresses
        for address in targets:
            began = time.monotonic()
            await self.send(address, message.body)
            self.per_address[address].status(time.monotonic() - began)
        self.aggregate.status(time.monotonic() - start)


async def run(opts: dict[str, Any]) -> None:
    config = tool_config(opts, PROGRAM, max_in_flight=opts["max_in_flight"])
    timeout = httpx.Timeout(opts["http_client_request_timeout"],
                            connect=opts["http_client_connect_timeout"])
    limits = httpx.Limits(max_connections=max(1, opts["n"]) * 2,
                          max_keepalive_connections=max(1, opts["n"]))
    progress = Progress(PROGRAM)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        publisher = HTTPPublisher(client, opts)

        async def handler(message: Message) -> None:
            await publisher.handle(message)
            progress.add("messages")

        consumer = Consumer(opts["topic"], opts["channel"], config=config,
                            nsqd_tcp_addresses=opts["nsqd_tcp_address"],
                            lookupd_http_addresses=opts["lookupd_http_address"])
        # The consumer outside the nursery: cancelling the nursery must not cut its drain.
        async with consumer, trio.open_nursery() as nursery:
            await nursery.start(stop_on_signals, consumer.stop)
            nursery.start_soon(progress.run)
            await consumer.run(handler, concurrency=max(1, opts["n"]))
            nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    setup_logging()
    opts = parse_flags(flag_set(), argv)
    if opts["header"]:
        try:
            parse_headers(opts["header"])
        except ValueError:
            fatal("--header value format should be 'key=value'")
    if not opts["topic"] or not opts["channel"]:
        fatal("--topic and --channel are required")
    if opts["content_type"] != DEFAULT_CONTENT_TYPE:
        if not opts["post"]:
            fatal("--content-type only used with --post")
        if not opts["content_type"]:
            fatal("--content-type requires a value when used")
    require_one_source(opts["nsqd_tcp_address"], opts["lookupd_http_address"])
    if not opts["get"] and not opts["post"]:
        fatal("--get or --post required")
    if opts["get"] and opts["post"]:
        fatal("use --get or --post not both")
    for get in opts["get"]:
        if get.count("%s") != 1:
            fatal("invalid GET address - must be a printf string")
    if not 0.0 <= opts["sample"] <= 1.0:
        fatal("ERROR: --sample must be between 0.0 and 1.0")
    validate_consumer_args([opts["topic"]], opts["channel"], opts["lookupd_http_address"])
    run_tool(run, opts)


if __name__ == "__main__":
    main()
