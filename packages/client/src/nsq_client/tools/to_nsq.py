"""to_nsq: publish stdin, one message per delimited record, to a topic.

As NSQ's: every record goes to *every* ``--nsqd-tcp-address`` (one producer each), empty
records are skipped, ``--rate`` caps messages per second (a token bucket holding at most one
second of tokens). Publishes are pipelined per nsqd and ordered; the first failure ends the
program with status 1. At the end of input, or on Ctrl-C, it waits for the answers of what
it sent and exits.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from typing import Any, BinaryIO

import trio
from nsq_common import FlagSet, is_valid_name

from .._errors import NSQError
from .._pipeline import Pipeline
from .._producer import Producer
from ._common import Fatal, fatal, parse_flags, run_tool, setup_logging, stop_on_signals, tool_config
from ._progress import Progress

PROGRAM = "to_nsq"
log = logging.getLogger("nsq_client.tools")
READ_SIZE = 65536
PIPELINE_DEPTH = 1000


def flag_set() -> FlagSet:
    fs = FlagSet(PROGRAM)
    fs.add("topic", "string", "", "NSQ topic to publish to")
    fs.add("delimiter", "string", "\n", "character to split input from stdin")
    fs.add("nsqd-tcp-address", "strings", [],
           "destination nsqd TCP address (may be given multiple times)")
    fs.add("producer-opt", "strings", [], "option to passthrough to nsq.Producer (may be given "
           "multiple times, http://godoc.org/github.com/nsqio/go-nsq#Config)")
    fs.add("rate", "int", 0, "Throttle messages to n/second. 0 to disable")
    return fs


async def read_records(source: BinaryIO, delimiter: bytes) -> AsyncIterator[bytes]:
    """Records of ``source`` split on ``delimiter`` (a last record without one included)."""
    pending = b""
    while True:
        chunk = await trio.to_thread.run_sync(_read1, source, abandon_on_cancel=True)
        if not chunk:
            break
        pending += chunk
        *records, pending = pending.split(delimiter)
        for record in records:
            yield record
    if pending:
        yield pending


def _read1(source: BinaryIO) -> bytes:
    read = getattr(source, "read1", source.read)
    return bytes(read(READ_SIZE))


class TokenBucket:
    """to_nsq's throttle: one token per 1/rate s, at most ``rate`` saved (one second)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.interval = 1.0 / rate
        self.tokens = 1.0
        self.stamp = trio.current_time()

    async def take(self) -> None:
        now = trio.current_time()
        self.tokens = min(float(self.rate), self.tokens + (now - self.stamp) / self.interval)
        self.stamp = now
        if self.tokens < 1.0:
            await trio.sleep((1.0 - self.tokens) * self.interval)
            self.tokens = 1.0
            self.stamp = trio.current_time()
        self.tokens -= 1.0


async def run(opts: dict[str, Any], source: BinaryIO) -> int:
    config = tool_config(opts, PROGRAM, "producer-opt")
    topic = opts["topic"]
    delimiter = opts["delimiter"].encode("latin-1")
    bucket = TokenBucket(opts["rate"]) if opts["rate"] >= 1 else None
    progress = Progress(PROGRAM)
    published = 0
    async with trio.open_nursery() as nursery:
        reading = trio.CancelScope()
        await nursery.start(stop_on_signals, reading.cancel)
        nursery.start_soon(progress.run)
        try:
            async with AsyncExitStack() as stack:
                pipelines: list[Pipeline] = []
                for address in opts["nsqd_tcp_address"]:
                    producer = await stack.enter_async_context(Producer(address, config=config))
                    pipelines.append(producer.pipeline(PIPELINE_DEPTH))
                with reading:
                    async for record in read_records(source, delimiter):
                        if not record:
                            continue
                        if bucket is not None:
                            await bucket.take()
                        for pipeline in pipelines:
                            await pipeline.pub(topic, record)
                        published += 1
                        progress.add("published")
                for pipeline in pipelines:
                    await pipeline.flush()
        except NSQError as exc:
            raise Fatal(str(exc)) from exc
        nursery.cancel_scope.cancel()
    return published


def main(argv: Sequence[str] | None = None) -> None:
    setup_logging()
    opts = parse_flags(flag_set(), argv)
    if not opts["topic"]:
        fatal("--topic required")
    if not is_valid_name(opts["topic"]):
        fatal("--topic is invalid")
    if len(opts["delimiter"].encode("latin-1", "replace")) != 1:
        fatal("--delimiter must be a single byte")
    if not opts["nsqd_tcp_address"]:
        fatal("--nsqd-tcp-address required")
    if opts["rate"] >= 1:
        log.info("Throttling messages rate to max:%d/second", opts["rate"])
    run_tool(run, opts, sys.stdin.buffer)


if __name__ == "__main__":
    main()
