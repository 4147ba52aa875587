"""Protocol V1 end to end: the TCP handler over memory streams (exact bytes), then the whole
server over loopback sockets (garbage never hurts it or other peers)."""

from __future__ import annotations

import io
import json
import random
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial

import attrs
import httpx
import pytest
import trio
import trio.testing
from nsq_common import (
    MAGIC_V1,
    LookupdInfo,
    LookupIdentify,
    LookupPing,
    LookupRegister,
    LookupResponseReader,
    LookupUnregister,
    encode_lookup_command,
    encode_lookup_response,
)
from nsq_testing.clock import FakeClock
from nsqlookupd.app import Addresses, serve
from nsqlookupd.logger import Logger
from nsqlookupd.options import Options
from nsqlookupd.registry import Registration, RegistrationDB
from nsqlookupd.tcp import TCPServer

WAIT = 30.0  # seconds: the most any one step may take on a slow, busy machine
INFO = LookupdInfo("lookupd.local", "lookuphost", 4161, 4160, "1.3.0")
NSQD = LookupIdentify("nsqd.local", 4150, 4151, "1.3.0", hostname="nsqdhost")
IDENTIFY = encode_lookup_command(NSQD)


def frame(data: bytes) -> bytes:
    return encode_lookup_response(data)


@attrs.define
class Client:
    """The nsqd side of one connection."""

    stream: trio.abc.Stream
    reader: LookupResponseReader = attrs.field(factory=LookupResponseReader)
    raw: bytearray = attrs.field(factory=bytearray)

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def response(self) -> bytes:
        while (answer := self.reader.next_event()) is None:
            data = await self.stream.receive_some(65536)
            assert data, "connection closed before a response"
            self.raw += data
            self.reader.receive_data(data)
        return answer

    async def closed(self) -> bool:
        """True once the server closed the connection (after any pending data)."""
        with trio.fail_after(WAIT):
            while True:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    return True
                if not data:
                    return True
                self.raw += data

    async def identify(self) -> bytes:
        await self.send(MAGIC_V1 + IDENTIFY)
        return await self.response()


@attrs.define
class Harness:
    nursery: trio.Nursery
    db: RegistrationDB = attrs.field(factory=RegistrationDB)
    log: io.StringIO = attrs.field(factory=io.StringIO)

    @property
    def server(self) -> TCPServer:
        return TCPServer(self.db, INFO, Logger(stream=self.log))

    def connect(self, remote: str = "127.0.0.1:5001") -> Client:
        client, server = trio.testing.memory_stream_pair()
        self.nursery.start_soon(self.server.handle, server, remote)
        return Client(client)


@pytest.fixture
async def harness(nursery: trio.Nursery) -> Harness:
    return Harness(nursery)


async def test_identify_register_ping(harness: Harness) -> None:
    client = harness.connect()
    assert await client.identify() == INFO.encode()
    assert bytes(client.raw) == frame(
        b'{"broadcast_address":"lookupd.local","hostname":"lookuphost","http_port":4161,'
        b'"tcp_port":4160,"version":"1.3.0"}')
    for command in (LookupRegister("t", "c"), LookupRegister("t"), LookupPing(),
                    LookupUnregister("t", "c")):
        await client.send(encode_lookup_command(command))
        assert await client.response() == b"OK"
    assert harness.db.lookup("t") is not None
    (peer,) = harness.db.lookup("t")[1]  # type: ignore[index]
    assert (peer.id, peer.remote_address, peer.broadcast_address, peer.hostname) == (
        "127.0.0.1:5001", "127.0.0.1:5001", "nsqd.local", "nsqdhost")
    assert (peer.tcp_port, peer.http_port, peer.version) == (4150, 4151, "1.3.0")


async def test_pipelined_commands_in_one_write(harness: Harness) -> None:
    client = harness.connect()
    await client.send(MAGIC_V1 + b"PING\n" + IDENTIFY + b"REGISTER t c\nPING\n")
    assert [await client.response() for _ in range(4)] == [b"OK", INFO.encode(), b"OK", b"OK"]


async def test_byte_at_a_time(harness: Harness) -> None:
    client = harness.connect()
    for byte in MAGIC_V1 + IDENTIFY + b"REGISTER t\n":
        await client.send(bytes([byte]))
    assert await client.response() == INFO.encode()
    assert await client.response() == b"OK"


async def test_ping_before_identify(harness: Harness) -> None:
    client = harness.connect()
    await client.send(MAGIC_V1 + b"PING\n")
    assert await client.response() == b"OK"


async def test_bad_magic(harness: Harness) -> None:
    client = harness.connect()
    await client.send(b"  V2PING\n")
    assert await client.closed()
    assert bytes(client.raw) == b"\x00\x00\x00\x0eE_BAD_PROTOCOL"


@pytest.mark.parametrize(("identified", "data", "error"), [
    (False, b"FOO\n", b"E_INVALID invalid command FOO"),
    (False, b"REGISTER t\n", b"E_INVALID client must IDENTIFY"),
    (False, b"UNREGISTER t\n", b"E_INVALID client must IDENTIFY"),
    (True, IDENTIFY, b"E_INVALID cannot IDENTIFY again"),
    (True, b"REGISTER\n", b"E_INVALID REGISTER insufficient number of params"),
    (True, b"UNREGISTER\n", b"E_INVALID UNREGISTER insufficient number of params"),
    (True, b"REGISTER t!\n", b"E_BAD_TOPIC REGISTER topic name 't!' is not valid"),
    (True, b"UNREGISTER t!\n", b"E_BAD_TOPIC UNREGISTER topic name 't!' is not valid"),
    (True, b"REGISTER t c!\n", b"E_BAD_CHANNEL REGISTER channel name 'c!' is not valid"),
    (True, b"UNREGISTER t c!\n", b"E_BAD_CHANNEL UNREGISTER channel name 'c!' is not valid"),
    (False, b"IDENTIFY\n\x00\x00\x00\x02{}", b"E_BAD_BODY IDENTIFY missing fields"),
    (False, b"IDENTIFY\n\x00\x00\x00\x03{x}", b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
    (False, b"IDENTIFY\n\xff\xff\xff\xff", b"E_BAD_BODY IDENTIFY invalid body size -1"),
])
async def test_every_error_is_fatal(harness: Harness, identified: bool, data: bytes,
                                    error: bytes) -> None:
    client = harness.connect()
    if identified:
        await client.identify()
        client.raw.clear()
    else:
        await client.send(MAGIC_V1)
    await client.send(data)
    assert await client.closed()
    assert bytes(client.raw) == frame(error)
    assert harness.db.lookup_registrations("127.0.0.1:5001") == []


async def test_identify_body_cut_short_by_close(harness: Harness) -> None:
    for data, error in ((b"IDENTIFY\n\x00\x00", b"E_BAD_BODY IDENTIFY failed to read body size"),
                        (b"IDENTIFY\n\x00\x00\x00\x09{}", b"E_BAD_BODY IDENTIFY failed to read body")):
        client = harness.connect()
        await client.send(MAGIC_V1 + data)
        await client.stream.send_eof()  # type: ignore[attr-defined]
        assert await client.closed()
        assert bytes(client.raw) == frame(error)


async def test_disconnect_unregisters_everything(harness: Harness) -> None:
    a, b = harness.connect("127.0.0.1:5001"), harness.connect("127.0.0.1:5002")
    for client in (a, b):
        await client.identify()
        await client.send(b"REGISTER t c\n")
        assert await client.response() == b"OK"
    await a.stream.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert harness.db.lookup_registrations("127.0.0.1:5001") == []
    assert [p.id for p in harness.db.lookup("t")[1]] == ["127.0.0.1:5002"]  # type: ignore[index]
    assert harness.db.channels("t") == ["c"]
    log = harness.log.getvalue()
    assert "DB: client(127.0.0.1:5001) UNREGISTER category:channel key:t subkey:c" in log
    # b is untouched
    await b.send(b"PING\n")
    assert await b.response() == b"OK"


async def test_unregister_topic_logs_channels_as_unexpected(harness: Harness) -> None:
    client = harness.connect()
    await client.identify()
    await client.send(b"REGISTER t c\nUNREGISTER t\n")
    assert [await client.response() for _ in range(2)] == [b"OK", b"OK"]
    assert "WARNING: client(127.0.0.1:5001) unexpected UNREGISTER category:channel key:t " \
        "subkey:c" in harness.log.getvalue()
    assert harness.db.lookup_registrations("127.0.0.1:5001") == [Registration("client", "", "")]


class ExplodingDB(RegistrationDB):
    def register(self, *args: object) -> list[Registration]:
        raise RuntimeError("boom")


async def test_a_bug_in_one_session_stays_there(nursery: trio.Nursery) -> None:
    harness = Harness(nursery, ExplodingDB())
    good = harness.connect("127.0.0.1:5002")
    await good.identify()
    bad = harness.connect("127.0.0.1:5001")
    await bad.identify()
    await bad.send(b"REGISTER t\n")
    assert await bad.closed()
    assert "internal error RuntimeError('boom')" in harness.log.getvalue()
    assert harness.db.lookup_registrations("127.0.0.1:5001") == []
    await good.send(b"PING\n")
    assert await good.response() == b"OK"


# --- the whole server on loopback -------------------------------------------------------------


async def start_lookupd(nursery: trio.Nursery, clock: Callable[[], int] | None = None,
                        **options: float) -> Addresses:
    """The whole server on loopback ports, in this process; ``clock`` (ns) for the registry."""
    opts = Options(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0",
                   broadcast_address="lookupd.local", **options)  # type: ignore[arg-type]
    addresses: Addresses = await nursery.start(
        partial(serve, opts, log=Logger(stream=io.StringIO()), clock=clock))
    return addresses


@pytest.fixture
async def lookupd(nursery: trio.Nursery) -> AsyncIterator[Addresses]:
    yield await start_lookupd(nursery)
    nursery.cancel_scope.cancel()


Connect = Callable[[str], Awaitable[Client]]


@pytest.fixture
async def connect_tcp() -> AsyncIterator[Connect]:
    """``await connect_tcp(address)`` -> a Client over loopback, closed at the end (also when the
    test fails: a socket left open would add a ResourceWarning error)."""
    clients: list[Client] = []

    async def connect(address: str) -> Client:
        host, port = address.rsplit(":", 1)
        client = Client(await trio.open_tcp_stream(host, int(port)))
        clients.append(client)
        return client

    yield connect
    for client in clients:
        await client.stream.aclose()


async def test_real_socket_identify_answers_real_ports(lookupd: Addresses, connect_tcp: Connect) -> None:
    client = await connect_tcp(lookupd.tcp)
    info = json.loads(await client.identify())
    assert info["tcp_port"] == int(lookupd.tcp.rsplit(":", 1)[1])
    assert info["http_port"] == int(lookupd.http.rsplit(":", 1)[1])
    assert info["broadcast_address"] == "lookupd.local"
    assert info["version"] == "1.3.0"
    assert list(info) == sorted(info)
    await client.stream.aclose()


GARBAGE = [
    b"",
    b"\x00" * 100,
    b"  V1" + b"\n" * 5,
    b"  V1IDENTIFY\n" + b"\x7f\xff\xff\xff" + b"x" * 100,
    b"  V1IDENTIFY\n\x00\x00\x00\x05[[[[[",
    b"  V1IDENTIFY\n\x00\x00\x00\x10" + b'{"tcp_port":-1e9',
    b"  V1" + b"A" * 70000,
    b"  V1REGISTER " + bytes(range(256)) + b"\n",
    b"  V1" + IDENTIFY + b"REGISTER \xff\xfe\n",
    b"  V1" + IDENTIFY + b"UNREGISTER t " + b"c" * 10000 + b"\n",
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
]


async def test_garbage_never_hurts_the_server_or_other_peers(lookupd: Addresses,
                                                             connect_tcp: Connect) -> None:
    good = await connect_tcp(lookupd.tcp)
    await good.identify()
    await good.send(b"REGISTER kept c\n")
    assert await good.response() == b"OK"

    rng = random.Random(1234)
    blobs = GARBAGE + [rng.randbytes(rng.randint(1, 300)) for _ in range(30)]
    blobs += [b"  V1" + IDENTIFY + rng.randbytes(rng.randint(1, 300)) for _ in range(30)]
    for blob in blobs:
        bad = await connect_tcp(lookupd.tcp)
        try:
            await bad.send(blob)
            await bad.stream.send_eof()  # type: ignore[attr-defined]
        except trio.BrokenResourceError:
            pass  # the server may already have closed on us
        assert await bad.closed()
        await bad.stream.aclose()

    await good.send(b"PING\n")
    assert await good.response() == b"OK"
    fresh = await connect_tcp(lookupd.tcp)
    await fresh.send(MAGIC_V1 + b"PING\n")
    assert await fresh.response() == b"OK"
    async with httpx.AsyncClient(base_url=f"http://{lookupd.http}", timeout=WAIT) as http:
        lookup = (await http.get("/lookup", params={"topic": "kept"})).json()
    assert lookup["channels"] == ["c"]
    assert [p["broadcast_address"] for p in lookup["producers"]] == ["nsqd.local"]
    await good.stream.aclose()
    await fresh.stream.aclose()


async def test_real_disconnect_unregisters(lookupd: Addresses, connect_tcp: Connect) -> None:
    client = await connect_tcp(lookupd.tcp)
    await client.identify()
    await client.send(b"REGISTER gone\n")
    assert await client.response() == b"OK"
    async with httpx.AsyncClient(base_url=f"http://{lookupd.http}", timeout=WAIT) as http:
        assert len((await http.get("/lookup?topic=gone")).json()["producers"]) == 1
        await client.stream.aclose()
        with trio.fail_after(WAIT):
            while (await http.get("/lookup?topic=gone")).json()["producers"]:
                await trio.sleep(0.01)
        assert (await http.get("/nodes")).json() == {"producers": []}


# --- lifetimes on a clock the test moves (the process tests cannot time them exactly) --------



@attrs.define
class Timed:
    """A whole server with ``--inactive-producer-timeout=400ms --tombstone-lifetime=600ms``
    whose registry reads ``clock``: no time passes for it unless the test moves the clock."""

    clock: FakeClock
    tcp: str
    http: httpx.AsyncClient

    async def producers(self, topic: str) -> list[str]:
        lookup = (await self.http.get("/lookup", params={"topic": topic})).json()
        return [p["broadcast_address"] for p in lookup["producers"]]


@pytest.fixture
async def timed(nursery: trio.Nursery) -> AsyncIterator[Timed]:
    clock = FakeClock()
    addresses = await start_lookupd(nursery, clock, inactive_producer_timeout=0.4,
                                    tombstone_lifetime=0.6)
    async with httpx.AsyncClient(base_url=f"http://{addresses.http}", timeout=WAIT) as http:
        yield Timed(clock, addresses.tcp, http)
    nursery.cancel_scope.cancel()


async def command(client: Client, line: bytes) -> bytes:
    await client.send(line + b"\n")
    return await client.response()


async def test_inactive_producer_is_hidden_after_exactly_its_timeout(
        timed: Timed, connect_tcp: Connect) -> None:
    nsqd = await connect_tcp(timed.tcp)
    await nsqd.identify()
    assert await command(nsqd, b"REGISTER t c") == b"OK"
    assert await timed.producers("t") == ["nsqd.local"]
    timed.clock.now += 400_000_000  # exactly the timeout: still active
    assert await timed.producers("t") == ["nsqd.local"]
    timed.clock.now += 1
    assert await timed.producers("t") == []
    assert (await timed.http.get("/nodes")).json() == {"producers": []}
    # still registered, just inactive: the topic and channel stay listed
    assert (await timed.http.get("/lookup?topic=t")).json()["channels"] == ["c"]
    assert await command(nsqd, b"PING") == b"OK"
    assert await timed.producers("t") == ["nsqd.local"]


async def test_tombstone_hides_for_exactly_its_lifetime(timed: Timed, connect_tcp: Connect) -> None:
    nsqd = await connect_tcp(timed.tcp)
    await nsqd.identify()
    for line in (b"REGISTER t", b"REGISTER u"):
        assert await command(nsqd, line) == b"OK"
    response = await timed.http.post("/topic/tombstone?topic=t&node=nsqd.local:4151")
    assert response.status_code == 200 and response.content == b""
    timed.clock.now += 600_000_000 - 1
    assert await command(nsqd, b"PING") == b"OK"  # active: only the tombstone hides it
    assert await timed.producers("t") == []
    assert await timed.producers("u") == ["nsqd.local"]
    (node,) = (await timed.http.get("/nodes")).json()["producers"]
    assert dict(zip(node["topics"], node["tombstones"], strict=True)) == {"t": True, "u": False}
    timed.clock.now += 1
    assert await timed.producers("t") == ["nsqd.local"]

def test_identify_frame_layout() -> None:
    body = IDENTIFY[len(b"IDENTIFY\n") + 4 :]
    assert IDENTIFY[:13] == b"IDENTIFY\n" + struct.pack(">i", len(body))
