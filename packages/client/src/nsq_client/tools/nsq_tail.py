"""nsq_tail: print the messages of one or more topics to stdout.

Flags are NSQ's. Without ``--channel`` it subscribes to a fresh ephemeral channel
(``tail<6 digits>#ephemeral``), so it takes a copy of the stream without disturbing anyone.
With ``--n`` it stops after that many messages of a topic (and asks for no more than that).
Every message printed is FINished; on Ctrl-C or after ``--n``, messages received but not
printed are given back (REQ) rather than lost.
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Sequence
from typing import Any, BinaryIO

import trio
from nsq_common import FlagSet

from .._config import Config
from .._consumer import Consumer
from .._message import Message
from ._common import Fatal, fatal, parse_flags, run_tool, setup_logging, stop_on_signals, tool_config
from ._consuming import consumer_flags, require_one_source, validate_consumer_args
from ._progress import Progress

PROGRAM = "nsq_tail"
log = logging.getLogger("nsq_client.tools")


def flag_set() -> FlagSet:
    fs = consumer_flags(PROGRAM, channel="", nsq="NSQ")
    fs.add("n", "int", 0, "total messages to show (will wait if starved)")
    fs.add("print-topic", "bool", False, "print topic name where message was received")
    return fs


class _Tail:
    """Prints messages; stops every consumer once one topic has shown ``total`` messages."""

    def __init__(self, out: BinaryIO, total: int, print_topic: bool, progress: Progress) -> None:
        self.out = out
        self.total = total
        self.print_topic = print_topic
        self.progress = progress
        self.consumers: list[Consumer] = []
        self.done = False

    def stop(self) -> None:
        self.done = True
        for consumer in self.consumers:
            consumer.stop()

    async def follow(self, consumer: Consumer) -> None:
        shown = 0
        prefix = consumer.topic.encode() + b" | "
        out = self.out
        async for message in consumer:
            if self.done:  # another topic reached --n: give this one back
                message.requeue(0, backoff=False)
                continue
            self.show(message, prefix)
            shown += 1
            if self.total and shown >= self.total:
                message.finish()
                self.stop()
        out.flush()

    def show(self, message: Message, prefix: bytes) -> None:
        out = self.out
        try:
            if self.print_topic:
                out.write(prefix)
            out.write(message.body)
            out.write(b"\n")
            out.flush()
        except OSError as exc:
            raise Fatal(f"ERROR: failed to write to os.Stdout - {exc}") from exc
        self.progress.add("messages")


async def run(opts: dict[str, Any], out: BinaryIO) -> None:
    max_in_flight = opts["max_in_flight"]
    total = opts["n"]
    if 0 < total < max_in_flight:
        max_in_flight = total  # do not ask for more than we want
    config = tool_config(opts, PROGRAM, max_in_flight=max_in_flight)
    # Progress on stderr only when it does not share a terminal with the messages.
    progress = Progress(PROGRAM, enabled=not out.isatty() if hasattr(out, "isatty") else True,
                        log_every=0)
    tail = _Tail(out, total, opts["print_topic"], progress)
    async with trio.open_nursery() as nursery:
        await nursery.start(stop_on_signals, tail.stop)
        nursery.start_soon(progress.run)
        async with trio.open_nursery() as consumers:
            for topic in opts["topic"]:
                consumers.start_soon(_consume, tail, topic, opts, config)
        nursery.cancel_scope.cancel()


async def _consume(tail: _Tail, topic: str, opts: dict[str, Any], config: Config) -> None:
    log.info("Adding consumer for topic: %s", topic)
    async with Consumer(topic, opts["channel"], config=config,
                        nsqd_tcp_addresses=opts["nsqd_tcp_address"],
                        lookupd_http_addresses=opts["lookupd_http_address"]) as consumer:
        tail.consumers.append(consumer)
        if tail.done:
            consumer.stop()
        await tail.follow(consumer)


def main(argv: Sequence[str] | None = None) -> None:
    setup_logging()
    opts = parse_flags(flag_set(), argv)
    if not opts["channel"]:
        opts["channel"] = f"tail{random.randrange(999999):06d}#ephemeral"
    require_one_source(opts["nsqd_tcp_address"], opts["lookupd_http_address"])
    if not opts["topic"]:
        fatal("--topic required")
    validate_consumer_args(opts["topic"], opts["channel"], opts["lookupd_http_address"])
    run_tool(run, opts, sys.stdout.buffer)


if __name__ == "__main__":
    main()
