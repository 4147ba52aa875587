"""The same benchmark clients written with the workspace's client library, ``nsq_client``.

``--client library`` runs each scenario's clients with these instead of the raw sockets of
``workers``: one process per connection as there, the same counts, batch sizes, windows and
RDY, every message FINished, and the same timing (first send to last ``OK`` or last message,
``time.monotonic``). Each process runs one Trio event loop with the library's documented
API and nothing else on the hot path:

* ``mpub``: ``await producer.mpub(topic, bodies)`` one after the other (``--mpub-window`` 1,
  stop-and-wait), or through ``producer.pipeline(window)`` when more may be in flight;
* ``pub``: ``await pl.pub(topic, body)`` in ``async with producer.pipeline(--pub-window)``;
* ``sub``: ``async for message in consumer`` (the loop FINishes each message when it takes
  the next, leaving ``async with`` FINishes the last) with ``max_in_flight`` = ``--rdy``.

Set-up (connecting, IDENTIFY, SUB) happens before the start signal, as with the raw clients;
a consumer starts at ``max_in_flight`` 0 and is given ``--rdy`` at the start, so that its RDY
goes out when the clock starts, like the raw consumer's.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from .workers import START_TIMEOUT, USER_AGENT, BenchError

LIBRARY_USER_AGENT = USER_AGENT + " nsq_client"
# How often consumers sharing a count (sub4) add theirs to the shared total and look at it;
# the raw consumers look every 50 ms when idle. Only the end of the run waits for it, not
# the timed part: a consumer's end is the arrival of its last message.
POLL = 0.01


async def _wait_for_go(go: Any) -> None:
    if not await trio.to_thread.run_sync(go.wait, START_TIMEOUT):
        raise BenchError("no start signal")


async def publish(conn: Any, go: Any, params: dict[str, Any]) -> dict[str, Any]:
    from nsq_client import Producer

    role, topic, units, window = params["role"], params["topic"], params["units"], params["window"]
    body = b"x" * params["size"]
    bodies = [body] * params["batch"]
    async with Producer(params["address"], client_id=f"bench-{role}", hostname="bench",
                        user_agent=LIBRARY_USER_AGENT) as producer:
        await producer.ping()  # connect and IDENTIFY now, not in the timed part
        conn.send(("ready", None))
        await _wait_for_go(go)
        cpu = time.process_time()
        start = time.monotonic()
        if role == "mpub" and window == 1:
            mpub = producer.mpub
            for _ in range(units):
                await mpub(topic, bodies)
        else:
            async with producer.pipeline(window) as pl:
                if role == "mpub":
                    send = pl.mpub
                    for _ in range(units):
                        await send(topic, bodies)
                else:
                    pub = pl.pub
                    for _ in range(units):
                        await pub(topic, body)
        end = time.monotonic()
        cpu = time.process_time() - cpu
    return {"start": start, "end": end, "cpu": cpu, "messages": units * params["per_unit"]}


def _buffer_timeout(ms: int) -> float:
    """The bench's ``--output-buffer-timeout`` (ms; 0 = nsqd's default, -1 = none) as the
    library's option (seconds; it sends ``int(seconds * 1000)``, hence the half ms)."""
    return -1.0 if ms < 0 else (ms + 0.5) / 1000 if ms else 0.0


async def consume(conn: Any, go: Any, params: dict[str, Any], counter: Any) -> dict[str, Any]:
    from nsq_client import Consumer

    target = params["target"]
    async with Consumer(params["topic"], params["channel"],
                        nsqd_tcp_addresses=[params["address"]], max_in_flight=0,
                        output_buffer_timeout=_buffer_timeout(params["output_buffer_timeout"]),
                        client_id="bench-sub", hostname="bench",
                        user_agent=LIBRARY_USER_AGENT) as consumer:
        if not consumer.connections:
            raise BenchError("the consumer could not connect and subscribe")
        conn.send(("ready", None))
        await _wait_for_go(go)
        count = 0
        cpu = time.process_time()
        start = last = time.monotonic()
        consumer.change_max_in_flight(params["rdy"])
        if counter is None:
            async for _message in consumer:
                count += 1
                if count >= target:
                    break
            last = time.monotonic()
            cpu_last = time.process_time()
        else:
            monotonic = time.monotonic
            cpu_last = cpu

            async def watch(scope: trio.CancelScope) -> None:
                nonlocal cpu_last
                reported = 0
                while True:
                    await trio.sleep(POLL)
                    seen = count
                    with counter.get_lock():
                        counter.value += seen - reported
                        total = counter.value
                    reported = seen
                    if total >= target:
                        cpu_last = time.process_time()
                        scope.cancel()
                        return

            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(watch, scope)
                    async for _message in consumer:
                        count += 1
                        last = monotonic()
    # Leaving ``async with`` FINished the last message, sent CLS and waited for every
    # connection to close; messages that came after the target were REQueued.
    extra = consumer.stats.messages_received - count
    return {"start": start, "end": last, "messages": count, "extra": extra,
            "cpu": cpu_last - cpu}


async def _main(conn: Any, go: Any, params: dict[str, Any], counter: Any) -> dict[str, Any]:
    if params["role"] in ("mpub", "pub"):
        return await publish(conn, go, params)
    return await consume(conn, go, params, counter)


def run(conn: Any, go: Any, params: dict[str, Any], counter: Any = None) -> dict[str, Any]:
    """One library client: set up, say ``ready`` on ``conn``, wait for ``go``, run; the result."""
    return trio.run(_main, conn, go, params, counter)
