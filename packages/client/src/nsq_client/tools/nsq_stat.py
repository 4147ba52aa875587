"""nsq_stat: poll /stats of every nsqd with a topic and print one channel's totals.

The table is NSQ's, column for column: ingress and egress rates (messages per second since the
previous report), depths (total, memory, disk), in flight, deferred, requeued, timed out,
messages and clients, summed over the nsqd (``nsq_common.ChannelStats``, as nsqadmin sums
them). A header comes first and again every 25 lines;
the first poll only sets the baseline for the rates. ``--count N`` stops after N reports.

Our nsqd's keys beyond NSQ (the job features' counts, a topic's retention, the log's offsets)
are read with the rest and not shown: the table stays NSQ's, as Go's nsq_stat (which ignores
keys it does not know) shows it against our nsqd.

nsqd are found through ``--lookupd-http-address`` (``/lookup``: each producer's
``broadcast_address:http_port``) or given as ``--nsqd-http-address``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO
from urllib.parse import quote

import httpx
import trio
from nsq_common import ChannelStats, FlagSet, aggregate_channel, join_host_port

from .._discovery import get_v1, lookupd_url
from ._common import Fatal, fatal, parse_flags, run_tool, setup_logging, stop_on_signals

PROGRAM = "nsq_stat"
HEADER = (
    "------rate------+----------------depth----------------+--------------metadata---------------\n"
    f"{'ingress':>7} {'egress':>7} | {'total':>7} {'mem':>7} {'disk':>7} {'inflt':>5} {'def':>5} | "
    f"{'req':>7} {'t-o':>7} {'msgs':>12} {'clients':>7}\n"
)


def flag_set() -> FlagSet:
    fs = FlagSet(PROGRAM)
    fs.add("version", "bool", False, "print version")
    fs.add("topic", "string", "", "NSQ topic")
    fs.add("channel", "string", "", "NSQ channel")
    fs.add("interval", "duration", 2.0, "duration of time between polling/printing output")
    fs.add("http-client-connect-timeout", "duration", 2.0, "timeout for HTTP connect")
    fs.add("http-client-request-timeout", "duration", 5.0, "timeout for HTTP request")
    fs.add("count", "int", 0, "number of reports")
    fs.add("nsqd-http-address", "strings", [], "nsqd HTTP address (may be given multiple times)")
    fs.add("lookupd-http-address", "strings", [],
           "lookupd HTTP address (may be given multiple times)")
    return fs


def totals(stats_replies: Sequence[Any], topic: str, channel: str) -> ChannelStats | None:
    """Sum ``channel`` of ``topic`` over /stats replies (as nsqadmin sums it:
    ``nsq_common.aggregate_channel``); None when no nsqd has it."""
    parts = [ChannelStats.parse(c, "", "", topic)
             for reply in stats_replies for t in (reply or {}).get("topics") or []
             if t.get("topic_name") == topic
             for c in t.get("channels") or [] if c.get("channel_name") == channel]
    return aggregate_channel(topic, channel, parts) if parts else None


def report_line(now: ChannelStats, before: ChannelStats, interval: float) -> str:
    ingress = now.message_count - before.message_count
    egress = ingress - (now.depth - before.depth)
    return (f"{int(ingress / interval):7d} {int(egress / interval):7d} | {now.depth:7d} "
            f"{now.memory_depth:7d} {now.backend_depth:7d} {now.in_flight_count:5d} "
            f"{now.deferred_count:5d} | {now.requeue_count:7d} {now.timeout_count:7d} "
            f"{now.message_count:12d} {now.client_count:7d}\n")


async def nsqd_addresses(client: httpx.AsyncClient, opts: dict[str, Any]) -> list[str]:
    """The HTTP addresses of the nsqd to ask: given, or every producer lookupd knows."""
    if opts["nsqd_http_address"]:
        return list(opts["nsqd_http_address"])
    found: list[str] = []
    errors = []
    for address in opts["lookupd_http_address"]:
        try:
            payload = await get_v1(client, lookupd_url(address, topic=opts["topic"]))
        except (httpx.HTTPError, ValueError) as exc:
            errors.append(f"{address}: {exc}")
            continue
        for producer in payload.get("producers") or []:
            found.append(join_host_port(str(producer["broadcast_address"]),
                                        int(producer["http_port"])))
    if errors and len(errors) == len(opts["lookupd_http_address"]):
        raise Fatal("ERROR: failed to get topic producers - failed to query any nsqlookupd: "
                    + "; ".join(errors))
    return list(dict.fromkeys(found))


async def poll(client: httpx.AsyncClient, addresses: list[str], topic: str, channel: str) -> list[Any]:
    query = f"format=json&topic={quote(topic)}&channel={quote(channel)}&include_clients=false"
    replies: list[Any] = []
    errors: list[str] = []

    async def one(address: str) -> None:
        try:
            replies.append(await get_v1(client, f"http://{address}/stats?{query}"))
        except (httpx.HTTPError, ValueError) as exc:
            errors.append(f"{address}: {exc}")

    async with trio.open_nursery() as nursery:
        for address in addresses:
            nursery.start_soon(one, address)
    if addresses and len(errors) == len(addresses):
        raise Fatal("ERROR: failed to get nsqd stats - failed to query any nsqd: " + "; ".join(errors))
    return replies


async def run(opts: dict[str, Any], out: TextIO) -> None:
    interval = opts["interval"]
    timeout = httpx.Timeout(opts["http_client_request_timeout"],
                            connect=opts["http_client_connect_timeout"])
    async with trio.open_nursery() as nursery:
        await nursery.start(stop_on_signals, nursery.cancel_scope.cancel)
        async with httpx.AsyncClient(timeout=timeout) as client:
            before: ChannelStats | None = None
            i = 0
            while not opts["count"] or opts["count"] >= i:
                addresses = await nsqd_addresses(client, opts)
                replies = await poll(client, addresses, opts["topic"], opts["channel"])
                now = totals(replies, opts["topic"], opts["channel"])
                if now is None:
                    raise Fatal(f"ERROR: failed to find channel({opts['channel']}) in stats "
                                f"metadata for topic({opts['topic']})")
                if i % 25 == 0:
                    out.write(HEADER)
                if before is not None:
                    out.write(report_line(now, before, interval))
                out.flush()
                before = now
                i += 1
                if opts["count"] and i > opts["count"]:
                    break
                await trio.sleep(interval)
        nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    setup_logging()
    opts = parse_flags(flag_set(), argv)
    if not opts["topic"] or not opts["channel"]:
        fatal("--topic and --channel are required")
    if opts["interval"] <= 0:
        fatal("--interval should be positive")
    if opts["http_client_connect_timeout"] <= 0:
        fatal("--http-client-connect-timeout should be positive")
    if opts["http_client_request_timeout"] <= 0:
        fatal("--http-client-request-timeout should be positive")
    if "count" in opts["_given"] and opts["count"] <= 0:
        fatal("--count should be positive")
    nsqd, lookupd = opts["nsqd_http_address"], opts["lookupd_http_address"]
    if not nsqd and not lookupd:
        fatal("--nsqd-http-address or --lookupd-http-address required")
    if nsqd and lookupd:
        fatal("use --nsqd-http-address or --lookupd-http-address not both")
    for flag, addresses in (("--nsqd-http-address", nsqd), ("--lookupd-http-address", lookupd)):
        if any(a.startswith("http") for a in addresses):
            fatal(f"{flag} error - address should not contain scheme")
    run_tool(run, opts, sys.stdout)


if __name__ == "__main__":
    main()
