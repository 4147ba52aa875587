"""Requests at work on a channel's dead letters (or its own queue, or a rewind looking up its
offset) when the channel, or its topic, is deleted: the deletion closes the channel's private
queues at once (``deletion``), under the request.

nsqd's HTTP API answers such a request as it answers one for a channel that does not exist:
404 ``CHANNEL_NOT_FOUND``, or ``TOPIC_NOT_FOUND`` when the topic went too. The deletion counts
as first, as it does for every effect (whatever the request did went with the channel); never
a 500, never an ERROR line. lmstfy has no deleted queue: it answers as real lmstfy answers
for a queue with no dead letters (``deadletter_size`` 0 and an empty head, a respawn of 0, a
delete's 204). A consume answers as it does for a channel deleted during its wait (nothing).

A real broker on a temporary data path, both APIs in process (httpx over ASGI), on Trio's
virtual clock (``io_clock``): a request that would wait forever fails the test at once. The
order is made, never waited for: a file operation of the dead letters' internal log (the read
of the dead letters, or their write) is held in its worker thread until the deletion's rename
aside waits for it (``hold_in_thread``); or the read of the dead letters has not begun when
the deletion comes (``HeldReadAhead``), so that nothing but the deletion can end the wait.
The records to read are on disk only: the logs keep nothing written in memory
(``on_disk_only``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing
from nsqd import cursorfile, privatelog
from nsqd.broker import Broker
from nsqd.channel import Channel
from nsqd.clock import VirtualClock
from nsqd.http_api import build_app
from nsqd.lmstfy import names
from nsqd.lmstfy.api import build_data_app
from nsqd.lmstfy.queues import JobQueues
from nsqd.lmstfy.state import State
from nsqd.lmstfy.throttle import Throttle
from nsqd.logfiles import LogFiles
from nsqd.options import Options
from nsqd.privatelog import PrivateLog
from nsqd.topiclog import TopicLog

Hold = Callable[..., Any]  # conftest's hold_in_thread: a HeldInThread
WAIT = 60.0  # virtual seconds: a request still waiting after this waits forever
OPTIONS = pytest.mark.parametrize("options", [{}, {"mem_queue_size": 0}, {"sync_every": 1}],
                                  ids=["default", "mem-queue-size=0", "sync-every=1"])
LMSTFY_TOPIC = names.topic_name("ns", "q")


@attrs.frozen
class Route:
    api: str  # "nsqd" or "lmstfy"
    method: str
    target: str
    #: lmstfy's answer for a queue that is gone (nsqd's is a 404, see ``gone``)
    lmstfy_gone: tuple[int, object] = (0, None)

    @property
    def names(self) -> tuple[str, str]:
        """The topic and channel the route works on."""
        return ("t", "c") if self.api == "nsqd" else (LMSTFY_TOPIC, names.CHANNEL)


LMSTFY_NO_DEAD_LETTERS = {"namespace": "ns", "queue": "q", "deadletter_size": 0,
                          "deadletter_head": ""}
#: Routes that wait for the dead letters' read when none is read yet.
READING = {
    "nsqd peek": Route("nsqd", "GET", "/channel/deadletter?topic=t&channel=c&n=10"),
    "nsqd respawn": Route("nsqd", "POST", "/channel/deadletter/respawn?topic=t&channel=c&n=10"),
    "nsqd drop": Route("nsqd", "POST", "/channel/deadletter/empty?topic=t&channel=c&n=10"),
    "lmstfy peek": Route("lmstfy", "GET", "/api/ns/q/deadletter",
                         (200, LMSTFY_NO_DEAD_LETTERS)),
    "lmstfy respawn": Route("lmstfy", "PUT", "/api/ns/q/deadletter?limit=10",
                            (200, {"msg": "respawned", "count": 0})),
    "lmstfy delete": Route("lmstfy", "DELETE", "/api/ns/q/deadletter?limit=10", (204, None)),
}
#: Routes that store the dead letters pending first (and wait behind their write).
STORING = {
    "nsqd respawn": READING["nsqd respawn"],
    "nsqd empty": Route("nsqd", "POST", "/channel/deadletter/empty?topic=t&channel=c"),
    "nsqd message/deadletter": Route("nsqd", "POST", "/message/deadletter?topic=t&channel=c"),
    "lmstfy respawn": READING["lmstfy respawn"],
    "lmstfy delete": READING["lmstfy delete"],
}


def gone(route: Route, deleted: str) -> tuple[int, object]:
    """The answer for the route once its channel (``deleted``: or its topic) is gone."""
    if route.api == "lmstfy":
        return route.lmstfy_gone
    return 404, {"message": "TOPIC_NOT_FOUND" if deleted == "topic" else "CHANNEL_NOT_FOUND"}


async def start(nursery: trio.Nursery, path: Path, **options: object) -> Broker:
    broker = Broker(Options.defaults(data_path=str(path), **options), VirtualClock())
    await nursery.start(broker.run)
    return broker


@attrs.define
class Apis:
    nsqd: httpx.AsyncClient
    lmstfy: httpx.AsyncClient

    def client(self, route: Route) -> httpx.AsyncClient:
        return self.nsqd if route.api == "nsqd" else self.lmstfy


@pytest.fixture
async def apis_of() -> AsyncIterator[Callable[[Broker, Path], Apis]]:
    """nsqd's HTTP API and lmstfy's data API (token ``T`` for namespace ``ns``) of a broker,
    in process."""
    made: list[Apis] = []

    def make(broker: Broker, path: Path) -> Apis:
        state = State(str(path))
        state.tokens["ns"] = {"T": "test"}
        data_app = build_data_app(JobQueues(broker, state), state,
                                  Throttle(state.limits, broker.now))
        apis = Apis(httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(broker)),
                                      base_url="http://nsqd.test"),
                    httpx.AsyncClient(transport=httpx.ASGITransport(app=data_app),
                                      base_url="http://lmstfy.test", headers={"X-Token": "T"}))
        made.append(apis)
        return apis

    yield make
    for apis in made:
        await apis.nsqd.aclose()
        await apis.lmstfy.aclose()


class Asked:
    """A request sent in a task of its own; its answer once it has one."""

    def __init__(self, nursery: trio.Nursery, client: httpx.AsyncClient, method: str,
                 target: str) -> None:
        self.response: httpx.Response | None = None
        self._done = trio.Event()
        nursery.start_soon(self._send, client, method, target)

    async def _send(self, client: httpx.AsyncClient, method: str, target: str) -> None:
        self.response = await client.request(method, target)
        self._done.set()

    async def answer(self) -> tuple[int, object]:
        """Status and JSON (None for no body), within WAIT virtual seconds."""
        with trio.fail_after(WAIT):
            await self._done.wait()
        assert self.response is not None
        body = self.response.json() if self.response.content else None
        return self.response.status_code, body


async def asked(nursery: trio.Nursery, apis: Apis, route: Route, query: str = "") -> Asked:
    """``route`` asked, and waiting (for its dead letters' read, or their write)."""
    request = Asked(nursery, apis.client(route), route.method, route.target + query)
    await trio.testing.wait_all_tasks_blocked()
    return request


class HeldReadAhead:
    """Logs whose name ends with ``suffix`` read nothing from disk (``#dead``: no dead letter
    is read): a request waiting for their records waits until the deletion ends it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
        original = TopicLog._read_wanted
        never = trio.Event()

        async def held(log: TopicLog) -> None:
            if log.name.endswith(suffix):
                await never.wait()
            await original(log)

        monkeypatch.setattr(TopicLog, "_read_wanted", held)


@pytest.fixture
def on_disk_only(monkeypatch: pytest.MonkeyPatch) -> Callable[[PrivateLog], Any]:
    """``await on_disk_only(log)``: what ``log`` wrote is on disk only from now on (its
    memory trimmed, and it keeps nothing written in memory)."""
    monkeypatch.setattr(privatelog, "CACHE_BYTES", 0)

    async def trim(private: PrivateLog) -> None:
        await private.log.tidy()
        assert private.depth() and not private.ready()

    return trim


def channel_of(broker: Broker, route: Route) -> Channel:
    topic, channel = route.names
    return broker.get_channel(broker.get_topic(topic), channel)


def delete(broker: Broker, route: Route, what: str) -> None:
    topic, channel = route.names
    if what == "topic":
        assert broker.delete_topic(topic)
    else:
        assert broker.delete_channel(broker.topics[topic], channel)


async def dead_letters(broker: Broker, channel: Channel, bodies: list[bytes], *,
                       store: bool = True) -> list[bytes]:
    """``bodies`` published, pulled and given up on: dead letters of ``channel``, stored
    (``store``) or left for the pump to store; their ids."""
    await broker.publish(channel.topic_name, broker.new_messages(bodies))
    await channel.fetch()
    msgs = channel.pull(len(bodies), 600, broker.now())
    assert [m.body for m in msgs] == bodies
    for msg in msgs:
        assert channel.dead_letter_pulled(msg.id)
    if store:
        await broker.store_dead_letters(channel)
        assert broker.health == "OK"
    return [msg.id for msg in msgs]


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# -- a request waiting for the read of the dead letters --------------------------------------

@OPTIONS
@pytest.mark.parametrize("route", list(READING))
async def test_a_request_waiting_for_the_dead_letters_read_answers_as_for_no_channel(
        options: dict[str, object], route: str, io_clock: trio.testing.MockClock,
        io_clock_moving: None, nursery: trio.Nursery, tmp_path: Path,
        apis_of: Callable[[Broker, Path], Apis], hold_in_thread: Hold,
        on_disk_only: Callable[[PrivateLog], Any], caplog: pytest.LogCaptureFixture) -> None:
    # The read is under way in its worker thread when the channel is deleted: the rename
    # aside waits for it, and the read's records arrive in a log already closed.
    broker = await start(nursery, tmp_path, **options)
    apis = apis_of(broker, tmp_path)
    the_route = READING[route]
    channel = channel_of(broker, the_route)
    read = hold_in_thread(LogFiles, "read", when=lambda files, *_: files.name.endswith("#dead"))
    disk = channel.dead_letters.backlog.disk
    assert disk is not None
    disk.log._files.busy = read.lock  # type: ignore[assignment]
    await dead_letters(broker, channel, [b"dead 1", b"dead 2"])
    await on_disk_only(disk)
    request = await asked(nursery, apis, the_route)  # which asks for the read of the two
    await read.moving_aside(lambda: delete(broker, the_route, "channel"))
    assert await request.answer() == gone(the_route, "channel")
    assert errors(caplog) == []


@pytest.mark.parametrize("route", list(READING))
async def test_a_request_waiting_for_a_read_not_begun_ends_when_the_topic_is_deleted(
        route: str, io_clock: trio.testing.MockClock, io_clock_moving: None,
        nursery: trio.Nursery, tmp_path: Path, apis_of: Callable[[Broker, Path], Apis],
        monkeypatch: pytest.MonkeyPatch, on_disk_only: Callable[[PrivateLog], Any],
        caplog: pytest.LogCaptureFixture) -> None:
    # Nothing will ever read the dead letters for it: the deletion cancels the log's task
    # and closes it; the request must end with it, not wait forever.
    broker = await start(nursery, tmp_path)
    apis = apis_of(broker, tmp_path)
    the_route = READING[route]
    channel = channel_of(broker, the_route)
    HeldReadAhead(monkeypatch, "#dead")
    await dead_letters(broker, channel, [b"dead 1", b"dead 2"])
    assert channel.dead_letters.backlog.disk is not None
    await on_disk_only(channel.dead_letters.backlog.disk)
    request = await asked(nursery, apis, the_route)
    delete(broker, the_route, "topic")
    assert await request.answer() == gone(the_route, "topic")
    assert errors(caplog) == []


# -- a request behind the write of dead letters ------------------------------------------------

@pytest.mark.parametrize("route", list(STORING))
async def test_a_request_behind_the_dead_letters_write_answers_as_for_no_channel(
        route: str, io_clock: trio.testing.MockClock, io_clock_moving: None,
        nursery: trio.Nursery, tmp_path: Path, apis_of: Callable[[Broker, Path], Apis],
        hold_in_thread: Hold, caplog: pytest.LogCaptureFixture) -> None:
    # A dead letter is being written (one larger than an inline write, so in a worker
    # thread whatever the storage flags) when the channel is deleted: the rename aside waits
    # for the write, and the request, which stores the dead letters pending before it does
    # its work (or waits for the write under way to store them), finds its log closed.
    broker = await start(nursery, tmp_path)
    apis = apis_of(broker, tmp_path)
    the_route = STORING[route]
    channel = channel_of(broker, the_route)
    write = hold_in_thread(LogFiles, "write", when=lambda files, *_: files.name.endswith("#dead"))
    disk = channel.dead_letters.backlog.disk
    assert disk is not None
    disk.log._files.busy = write.lock  # type: ignore[assignment]
    large = b"x" * (300 << 10)
    if route == "nsqd message/deadletter":  # the request gives it up: its own store writes
        await broker.publish(channel.topic_name, broker.new_messages([large]))
        await channel.fetch()
        (msg,) = channel.pull(1, 600, broker.now())
        request = Asked(nursery, apis.nsqd, "POST",
                        f"{the_route.target}&id={msg.id.decode()}")
    else:  # the pump stores it; the request waits for that store
        await dead_letters(broker, channel, [large], store=False)
        await write.under_way()
        request = await asked(nursery, apis, the_route)
    await write.moving_aside(lambda: delete(broker, the_route, "channel"))
    assert await request.answer() == gone(the_route, "channel")
    assert errors(caplog) == []
    assert broker.health == "OK"


# -- the channel's own queue ----------------------------------------------------------------

async def test_an_empty_waiting_for_the_own_queues_cursor_answers_as_for_no_channel(
        io_clock: trio.testing.MockClock, io_clock_moving: None, nursery: trio.Nursery,
        tmp_path: Path, apis_of: Callable[[Broker, Path], Apis], hold_in_thread: Hold,
        caplog: pytest.LogCaptureFixture) -> None:
    # /channel/empty empties the own queue too: its cursor, written (the journal's first
    # entry, a rewrite) in a worker thread, and the channel is deleted meanwhile.
    broker = await start(nursery, tmp_path)
    apis = apis_of(broker, tmp_path)
    route = Route("nsqd", "POST", "/channel/empty?topic=t&channel=c")
    channel = channel_of(broker, route)
    await dead_letters(broker, channel, [b"own 1", b"own 2"])
    assert await channel.respawn(2) == 2
    disk = channel.own_queue.disk
    assert disk is not None and disk.cursor.journal is not None
    rewrite = hold_in_thread(cursorfile, "write_atomically",
                             when=lambda path, *_: path.parent.name.endswith("#own"))
    disk.cursor.journal._busy = rewrite.lock  # type: ignore[assignment]
    request = await asked(nursery, apis, route)
    await rewrite.moving_aside(lambda: delete(broker, route, "channel"))
    assert await request.answer() == gone(route, "channel")
    assert errors(caplog) == []


@pytest.mark.parametrize("api", ["nsqd", "lmstfy"])
async def test_a_consume_waiting_for_the_own_queues_read_ends_when_the_channel_is_deleted(
        api: str, io_clock: trio.testing.MockClock, io_clock_moving: None,
        nursery: trio.Nursery, tmp_path: Path, apis_of: Callable[[Broker, Path], Apis],
        monkeypatch: pytest.MonkeyPatch, on_disk_only: Callable[[PrivateLog], Any],
        caplog: pytest.LogCaptureFixture) -> None:
    # Respawned dead letters wait in the channel's own queue, on disk, not read yet: a
    # consume waits for them before it looks for messages (nothing read yet must not be
    # missed); the deletion must end that wait, and the consume gets nothing.
    broker = await start(nursery, tmp_path)
    apis = apis_of(broker, tmp_path)
    route = (Route("nsqd", "POST", "/channel/consume?topic=t&channel=c&n=10") if api == "nsqd"
             else Route("lmstfy", "GET", "/api/ns/q?timeout=0&ttr=30", (404, {
                 "msg": "no job available"})))
    channel = channel_of(broker, route)
    await dead_letters(broker, channel, [b"own 1", b"own 2"])
    HeldReadAhead(monkeypatch, "#own")
    assert await channel.respawn(2) == 2
    assert channel.own is not None and channel.own.disk_depth == 2
    assert channel.own.disk is not None
    await on_disk_only(channel.own.disk)
    request = await asked(nursery, apis, route)
    delete(broker, route, "channel")
    expected = (200, {"messages": []}) if api == "nsqd" else route.lmstfy_gone
    assert await request.answer() == expected
    assert errors(caplog) == []


# -- a rewind by time, looking up its offset ---------------------------------------------------

@OPTIONS
@pytest.mark.parametrize("deleted", ["channel", "topic"])
async def test_a_rewind_by_time_its_deletion_overtakes_answers_as_for_no_channel(
        options: dict[str, object], deleted: str, io_clock: trio.testing.MockClock, io_clock_moving: None,
        nursery: trio.Nursery, tmp_path: Path, apis_of: Callable[[Broker, Path], Apis],
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # /channel/rewind?timestamp= looks the offset up in the topic's log (the segments' time
    # index, in a worker thread) before it moves the cursor; the channel is deleted while it
    # looks. Before, the rewind went on with the deleted channel and answered 200.
    broker = await start(nursery, tmp_path, **options)
    apis = apis_of(broker, tmp_path)
    route = Route("nsqd", "POST", "/channel/rewind?topic=t&channel=c&timestamp=0")
    channel = channel_of(broker, route)
    await broker.publish("t", broker.new_messages([b"one", b"two"]))
    looking = trio.Event()
    go_on = trio.Event()
    find_time = type(channel.log).find_time

    async def held(log: Any, timestamp_ns: int) -> int:
        looking.set()
        await go_on.wait()
        return await find_time(log, timestamp_ns)

    monkeypatch.setattr(type(channel.log), "find_time", held)
    request = Asked(nursery, apis.nsqd, route.method, route.target)
    await looking.wait()
    delete(broker, route, deleted)
    go_on.set()
    assert await request.answer() == gone(route, deleted)
    assert errors(caplog) == []
    assert broker.health == "OK"
