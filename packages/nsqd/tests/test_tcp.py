"""Protocol V2 in process: a real broker, its TCP handler over Trio memory streams, exact bytes.

No process and no socket: each test starts a ``Broker`` in the test's nursery and talks to
``tcp.handle_stream`` through ``trio.testing.memory_stream_pair``, so protocol errors, the
connection state table and cancellation run in milliseconds.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from nsq_common import ProtocolError
from nsqd.broker import Broker
from nsqd.errors import Exiting
from nsqd.options import Options
from nsqd.state import State, after
from nsqd.tcp import handle_stream

WAIT = 10.0  # the most any one step may take on a busy machine
RESPONSE, ERROR, MESSAGE = 0, 1, 2


@attrs.define
class Peer:
    """The client side of one connection: raw bytes out, whole frames in."""

    stream: trio.abc.Stream
    buffer: bytearray = attrs.field(factory=bytearray)

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def frame(self) -> tuple[int, bytes]:
        with trio.fail_after(WAIT):
            while True:
                if len(self.buffer) >= 4:
                    (size,) = struct.unpack_from(">i", self.buffer)
                    if len(self.buffer) >= 4 + size:
                        kind = struct.unpack_from(">i", self.buffer, 4)[0]
                        data = bytes(self.buffer[8:4 + size])
                        del self.buffer[:4 + size]
                        return kind, data
                chunk = await self.stream.receive_some(65536)
                if not chunk:
                    raise EOFError("closed by nsqd")
                self.buffer += chunk

    async def answer(self) -> tuple[int, bytes]:
        """The next frame that is not a heartbeat."""
        while (frame := await self.frame()) == (RESPONSE, b"_heartbeat_"):
            pass
        return frame

    async def closed(self) -> bool:
        with trio.fail_after(WAIT):
            while chunk := await self.stream.receive_some(65536):
                self.buffer += chunk
        return True


@pytest.fixture
async def broker(nursery: trio.Nursery, tmp_path: Path) -> Broker:
    broker = Broker(Options.defaults(data_path=str(tmp_path)))
    await nursery.start(broker.run)
    return broker


async def connect(nursery: trio.Nursery, broker: Broker) -> Peer:
    client, server = trio.testing.memory_stream_pair()
    nursery.start_soon(handle_stream, broker, server, "127.0.0.1:5000")
    await client.send_all(b"  V2")
    return Peer(client)


def pub(topic: bytes, body: bytes) -> bytes:
    return b"PUB %s\n" % topic + struct.pack(">i", len(body)) + body


async def delivered(nursery: trio.Nursery, broker: Broker, body: bytes) -> tuple[Peer, bytes]:
    """``body`` published to t and sent to a new consumer of t/c (RDY 1): that consumer, and
    the message frame's data."""
    publisher = await connect(nursery, broker)
    await publisher.send(pub(b"t", body))
    assert await publisher.answer() == (RESPONSE, b"OK")
    consumer = await connect(nursery, broker)
    await consumer.send(b"SUB t c\n")
    assert await consumer.answer() == (RESPONSE, b"OK")
    await consumer.send(b"RDY 1\n")
    kind, data = await consumer.answer()
    assert kind == MESSAGE
    return consumer, data


async def test_publish_subscribe_fin(nursery: trio.Nursery, broker: Broker) -> None:
    consumer, data = await delivered(nursery, broker, b"hello")
    attempts, message_id, body = struct.unpack_from(">H", data, 8)[0], data[10:26], data[26:]
    assert (attempts, body) == (1, b"hello")
    await consumer.send(b"FIN %s\n" % message_id)
    # FIN answers nothing; a second one is a non-fatal error, and the connection stays open
    await consumer.send(b"FIN %s\n" % message_id)
    assert await consumer.answer() == (
        ERROR, b"E_FIN_FAILED FIN %s failed ID not in flight" % message_id)
    await consumer.send(b"CLS\n")
    assert await consumer.answer() == (RESPONSE, b"CLOSE_WAIT")


async def test_fins_of_one_read_answered_in_order(nursery: trio.Nursery, broker: Broker) -> None:
    # A read of many FINs goes through the bulk path (CommandReader.next_fins): the failures
    # among them are answered in order, and every other FIN of the read is done.
    publisher = await connect(nursery, broker)
    await publisher.send(b"".join(pub(b"t", b"m%d" % i) for i in range(3)))
    for _ in range(3):
        assert await publisher.answer() == (RESPONSE, b"OK")
    consumer = await connect(nursery, broker)
    await consumer.send(b"SUB t c\n")
    assert await consumer.answer() == (RESPONSE, b"OK")
    await consumer.send(b"RDY 3\n")
    ids = []
    for _ in range(3):
        kind, data = await consumer.answer()
        assert kind == MESSAGE
        ids.append(data[10:26])
    unknown = b"0123456789abcdef"
    await consumer.send(b"FIN %s\nFIN %s\nFIN %s\nFIN %s\nFIN %s\nNOP\nFIN %s\n" % (
        ids[0], unknown, ids[1], ids[0], ids[2], unknown))
    for failed in (unknown, ids[0], unknown):
        assert await consumer.answer() == (
            ERROR, b"E_FIN_FAILED FIN %s failed ID not in flight" % failed)
    channel = broker.topics["t"].channels["c"]
    assert len(channel.in_flight) == 0
    await consumer.send(b"CLS\n")
    assert await consumer.answer() == (RESPONSE, b"CLOSE_WAIT")


@pytest.mark.parametrize(("commands", "error"), [
    (b"RDY 1\n", b"E_INVALID cannot RDY in current state"),
    (b"FIN 0123456789abcdef\n", b"E_INVALID cannot FIN in current state"),
    (b"CLS\n", b"E_INVALID cannot CLS in current state"),
    (b"SUB t c\nIDENTIFY\n", b"E_INVALID cannot IDENTIFY in current state"),
    (b"SUB t c\nSUB t c\n", b"E_INVALID cannot SUB in current state"),
    (b"SUB t c\nAUTH\n", b"E_INVALID cannot AUTH in current state"),
])
async def test_commands_in_the_wrong_state_are_fatal(nursery: trio.Nursery, broker: Broker,
                                                     commands: bytes, error: bytes) -> None:
    peer = await connect(nursery, broker)
    await peer.send(commands)
    frame = await peer.answer()
    if frame == (RESPONSE, b"OK"):  # the SUB before
        frame = await peer.answer()
    assert frame == (ERROR, error)
    assert await peer.closed()


async def test_closing_consumer_still_answers_and_ignores_rdy(nursery: trio.Nursery,
                                                              broker: Broker) -> None:
    consumer, data = await delivered(nursery, broker, b"a")
    await consumer.send(b"CLS\nRDY 5\n")
    assert await consumer.answer() == (RESPONSE, b"CLOSE_WAIT")
    await consumer.send(b"REQ %s 0\nNOP\n" % data[10:26])
    channel = broker.topics["t"].channels["c"]
    (client,) = channel.clients.values()
    with trio.fail_after(WAIT):
        while channel.requeue_count == 0:
            await trio.sleep(0.01)
    assert client.state is State.CLOSING and client.rdy == 0


async def test_domain_errors_become_nsq_errors(nursery: trio.Nursery, broker: Broker) -> None:
    peer = await connect(nursery, broker)
    broker.exiting = True
    await peer.send(pub(b"t", b"x"))
    assert await peer.answer() == (ERROR, b"E_PUB_FAILED PUB failed exiting")
    assert await peer.closed()


async def test_a_bug_is_logged_with_its_traceback_and_never_sent(
        nursery: trio.Nursery, broker: Broker, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("secret internals")

    monkeypatch.setattr(broker, "publish", broken)
    peer = await connect(nursery, broker)
    with caplog.at_level(logging.ERROR, logger="nsqd"):
        await peer.send(pub(b"t", b"x"))
        assert await peer.closed()
    assert b"secret" not in peer.buffer
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and errors[0].exc_info is not None
    assert "ZeroDivisionError" in caplog.text


async def test_cancelled_connection_gives_its_messages_back(nursery: trio.Nursery,
                                                            broker: Broker) -> None:
    publisher = await connect(nursery, broker)
    await publisher.send(pub(b"t", b"a"))
    assert await publisher.answer() == (RESPONSE, b"OK")
    client_side, server_side = trio.testing.memory_stream_pair()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as inner:
            inner.start_soon(handle_stream, broker, server_side, "127.0.0.1:6000")
            consumer = Peer(client_side)
            await consumer.send(b"  V2SUB t c\nRDY 1\n")
            assert await consumer.answer() == (RESPONSE, b"OK")
            assert (await consumer.answer())[0] == MESSAGE
            scope.cancel()
    channel = broker.topics["t"].channels["c"]
    assert not channel.clients and len(channel.in_flight) == 0 and channel.depth == 1


async def test_bad_magic(nursery: trio.Nursery, broker: Broker) -> None:
    client, server = trio.testing.memory_stream_pair()
    nursery.start_soon(handle_stream, broker, server, "127.0.0.1:5000")
    await client.send_all(b"  V1")
    peer = Peer(client)
    assert await peer.frame() == (ERROR, b"E_BAD_PROTOCOL")
    assert await peer.closed()


def test_state_table() -> None:
    assert after(State.INIT, b"SUB") is State.SUBSCRIBED
    assert after(State.SUBSCRIBED, b"CLS") is State.CLOSING
    assert after(State.CLOSING, b"FIN") is State.CLOSING
    assert after(State.SUBSCRIBED, b"PUB") is State.SUBSCRIBED
    with pytest.raises(ProtocolError, match=r"^E_INVALID cannot CLS in current state$"):
        after(State.CLOSING, b"CLS")
    assert Exiting().args == ("exiting",)


# -- REQ with a delay, DPUB, timeouts and TOUCH on Trio's virtual clock ----------------------
# The broker reads Trio's virtual clock (``io_clock``) through a ``VirtualClock``: a delay or a
# timeout runs out the moment every task waits for it and no file write is under way, and
# nothing here waits in real time.

@pytest.fixture
async def virtual_broker(io_clock_moving: None, nursery: trio.Nursery,
                         tmp_path: Path) -> Broker:
    from nsqd.clock import VirtualClock

    broker = Broker(Options.defaults(data_path=str(tmp_path)), VirtualClock())
    await nursery.start(broker.run)
    return broker


async def consumer_of(nursery: trio.Nursery, broker: Broker, rdy: int, *,
                      msg_timeout: int | None = None) -> Peer:
    peer = await connect(nursery, broker)
    if msg_timeout is not None:
        body = b'{"msg_timeout":%d}' % msg_timeout
        await peer.send(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
        assert await peer.answer() == (RESPONSE, b"OK")
    await peer.send(b"SUB t c\nRDY %d\n" % rdy)
    assert await peer.answer() == (RESPONSE, b"OK")
    return peer


async def message(peer: Peer) -> tuple[int, bytes, bytes]:
    """The next message frame: attempts, id, body."""
    kind, data = await peer.answer()
    assert kind == MESSAGE, (kind, data)
    return struct.unpack_from(">H", data, 8)[0], data[10:26], data[26:]


async def test_req_with_a_delay_redelivers_when_due(
        io_clock: trio.testing.MockClock, nursery: trio.Nursery,
        virtual_broker: Broker) -> None:
    publisher = await connect(nursery, virtual_broker)
    consumer = await consumer_of(nursery, virtual_broker, 1)
    await publisher.send(pub(b"t", b"x"))
    assert await publisher.answer() == (RESPONSE, b"OK")
    attempts, first, _ = await message(consumer)
    await consumer.send(b"REQ %s 0\n" % first)
    attempts, again, _ = await message(consumer)
    assert (again, attempts) == (first, 2)
    start = trio.current_time()
    await consumer.send(b"REQ %s 2000\nNOP\n" % again)
    channel = virtual_broker.topics["t"].channels["c"]
    while channel.requeue_count < 2:
        await trio.sleep(0.01)
    assert len(channel.deferred) == 1
    attempts, third, _ = await message(consumer)
    assert (third, attempts) == (first, 3)
    assert trio.current_time() - start >= 2.0


async def test_dpub_arrives_no_earlier_than_its_delay(
        io_clock: trio.testing.MockClock, nursery: trio.Nursery,
        virtual_broker: Broker) -> None:
    publisher = await connect(nursery, virtual_broker)
    consumer = await consumer_of(nursery, virtual_broker, 5)
    start = trio.current_time()
    await publisher.send(b"DPUB t 700\n" + struct.pack(">i", 5) + b"later" + pub(b"t", b"now"))
    assert await publisher.answer() == (RESPONSE, b"OK")
    assert await publisher.answer() == (RESPONSE, b"OK")
    assert (await message(consumer))[2] == b"now"
    assert (await message(consumer))[2] == b"later"
    assert trio.current_time() - start >= 0.7


async def test_a_timeout_redelivers_and_touch_keeps_a_message(
        io_clock: trio.testing.MockClock, nursery: trio.Nursery,
        virtual_broker: Broker) -> None:
    publisher = await connect(nursery, virtual_broker)
    consumer = await consumer_of(nursery, virtual_broker, 2, msg_timeout=1000)
    start = trio.current_time()  # before the PUB: its 1 s timeout starts later
    await publisher.send(pub(b"t", b"dropped"))
    assert await publisher.answer() == (RESPONSE, b"OK")
    _, dropped, _ = await message(consumer)
    attempts, again, _ = await message(consumer)  # not finished within 1 s: again
    assert (again, attempts) == (dropped, 2) and trio.current_time() - start >= 1.0
    channel = virtual_broker.topics["t"].channels["c"]
    # TOUCH it every 0.5 s for 5 s (five timeouts): it never comes back (a message reaches
    # the consumer up to 0.25 s after it went out: nsqd's output buffer timeout)
    for _ in range(10):
        await trio.sleep(0.5)
        await consumer.send(b"TOUCH %s\n" % again)
    await consumer.send(b"FIN %s\nNOP\n" % again)
    while len(channel.in_flight):
        await trio.sleep(0.01)
    assert (channel.timeout_count, len(channel.in_flight), channel.depth) == (1, 0, 0)
