"""nsqd's side of discovery: keep every nsqlookupd told which topics and channels we have.

One task per ``--lookupd-tcp-address``. Each connects, sends the magic and IDENTIFY, then
REGISTERs every topic and channel (a topic with channels is registered through its channels,
as nsqd does), and from then on forwards each create/delete as it happens and PINGs every
15 s. A connection that fails is retried with backoff (1 s doubling to 15 s); on reconnect the
full registration is replayed, so nothing missed while disconnected is lost. Changes are
queued per peer and never awaited by the broker: a lookupd that is down or slow cannot slow
publishing or consuming.

At start, ``Lookup.run`` returns once every peer has made its first attempt (registered, or
failed to): nsqd serves nobody before that, so a client that sees nsqd answer has it in the
lookupds already. The first attempt is usually the early start's (``early_lookup``), made
before Trio is even imported: a peer then carries on over the connection registered there.

When a new topic appears, nsqd asks each lookupd (over HTTP, ``/channels?topic=``) which
channels exist for it elsewhere in the cluster and creates them before the topic starts
flowing, so no message is lost for a channel the cluster already has (NSQ does the same).
The HTTP client for that (httpx, slow to import and to set up) is made in a worker thread
when the first topic needs it, never on the event loop.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Protocol

import trio
from nsq_common import (
    ACCEPT_V1,
    MAGIC_V1,
    ConnectionAbort,
    LookupCommand,
    LookupPing,
    LookupRegister,
    LookupResponseReader,
    LookupUnregister,
    ProtocolError,
    decode_lookupd_info,
    encode_lookup_command,
    is_ephemeral,
    join_host_port,
    lookup_response_error,
    split_address,
)

if TYPE_CHECKING:
    import httpx

    from .options import Options, Settings
    from .topic import Topic

from . import early_lookup
from .early_lookup import FIRST_ATTEMPT_TIMEOUT, IO_TIMEOUT


class Node(Protocol):
    """What discovery needs of the broker (``broker.Broker`` is one): where it listens, its
    topics, and a way to add the channels the lookupds know of. No import of the broker, so
    no cycle."""

    opts: Options
    settings: Settings
    tcp_port: int
    http_port: int
    topics: dict[str, Topic]

    def get_channel(self, topic: Topic, name: str) -> object: ...


log = logging.getLogger("nsqd")

PING_INTERVAL = 15.0
MAX_BACKOFF = 15.0
#: What a peer may fail with: the network, its timeouts, a bad address (ValueError from the
#: port or the IDENTIFY answer), a closed stream, an E_ answer (ProtocolError) or a broken one.
PEER_ERRORS = (OSError, ValueError, trio.TooSlowError, trio.BrokenResourceError,
               trio.ClosedResourceError, ProtocolError, ConnectionAbort)


class LookupPeer:
    """One nsqlookupd: its connection, its queue of changes, and its HTTP address once known."""

    def __init__(self, lookup: Lookup, address: str) -> None:
        self.lookup = lookup
        self.address = address
        self.http_address: str | None = None
        self.scope = trio.CancelScope()
        self.tried = trio.Event()  # set once the first attempt to register is over
        self._send, self._receive = trio.open_memory_channel[LookupCommand](math.inf)
        self._stream: trio.SocketStream | None = None
        self._reader = LookupResponseReader(lookup.broker.opts.max_body_size)
        # the early start's attempt with this lookupd, if it made one: a failed one was this
        # peer's first attempt (start-up waits for no other), a registered one its connection
        self._early = early_lookup.take(address)
        if self._early is not None and self._early.sock is None:
            self._early = None
            self.tried.set()

    def enqueue(self, command: LookupCommand) -> None:
        self._send.send_nowait(command)

    async def run(self) -> None:
        backoff = 1.0
        with self.scope:
            while True:
                try:
                    try:
                        await self._connect()
                    finally:
                        self.tried.set()
                    backoff = 1.0
                    await self._forward()
                except PEER_ERRORS as exc:  # this peer failed: retry it, nothing else
                    log.warning("LOOKUPD(%s): %s; retrying in %.0fs", self.address,
                                exc or type(exc).__name__, backoff)
                except Exception:
                    # A bug, not the peer: retrying would repeat it forever. Say it once,
                    # with its traceback, and stop this peer (publishing is not affected).
                    log.exception("LOOKUPD(%s): unexpected error; this peer stops", self.address)
                    return
                finally:
                    await self._close()
                await trio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    async def _connect(self) -> None:
        self._reader = LookupResponseReader(self.lookup.broker.opts.max_body_size)
        early, self._early = self._early, None
        if early is not None and early.sock is not None:
            # identified and registered by the early start: the same connection goes on
            self._stream = trio.SocketStream(trio.socket.from_stdlib_socket(early.sock))
            reply: bytes | None = early.reply
        else:
            host, port = split_address(self.address)
            with trio.fail_after(IO_TIMEOUT):
                self._stream = await trio.open_tcp_stream(host, port)
            await self._stream.send_all(MAGIC_V1)
            reply = None
        # Changes queued while disconnected are covered by the full registration below.
        while True:
            try:
                self._receive.receive_nowait()
            except trio.WouldBlock:
                break
        if reply is None:
            reply = await self._command(self.lookup.identify())
        info = decode_lookupd_info(reply)
        self.http_address = join_host_port(info.broadcast_address, info.http_port)
        log.info("LOOKUPD(%s): peer info %s", self.address, reply.decode(errors="replace"))
        # (again after the early start's: REGISTER is idempotent, and what nsqd loaded is
        # what counts)
        for command in self.lookup.registrations():
            await self._command(command)

    async def _forward(self) -> None:
        while True:
            with trio.move_on_after(PING_INTERVAL):
                command = await self._receive.receive()
                await self._command(command)
                continue
            await self._command(LookupPing())

    async def _command(self, command: LookupCommand | bytes) -> bytes:
        assert self._stream is not None
        sent = command if isinstance(command, bytes) else encode_lookup_command(command)
        with trio.fail_after(IO_TIMEOUT):
            await self._stream.send_all(sent)
            while (reply := self._reader.next_event()) is None:
                data = await self._stream.receive_some(65536)
                if not data:
                    raise trio.BrokenResourceError("connection closed by lookupd")
                self._reader.receive_data(data)
        error = lookup_response_error(reply)
        if error is not None:
            raise error
        return reply

    async def _close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()


class Lookup:
    """Every lookupd peer of one nsqd."""

    def __init__(self, broker: Node) -> None:
        self.broker = broker
        self.peers: dict[str, LookupPeer] = {}
        self._nursery: trio.Nursery | None = None
        # Made in a worker thread by the first topic that asks the lookupds for its channels:
        # httpx is slow to import, and a standalone nsqd needs none.
        self._http: httpx.AsyncClient | None = None

    def _new_http(self) -> httpx.AsyncClient:
        """The client of the lookupds' HTTP APIs; imports httpx: call it in a thread."""
        import httpx

        opts = self.broker.opts
        return httpx.AsyncClient(timeout=httpx.Timeout(
            opts.http_client_request_timeout, connect=opts.http_client_connect_timeout))

    def identify(self) -> bytes:
        opts, broker = self.broker.opts, self.broker
        return early_lookup.identify(broadcast_address=opts.broadcast_address,
                                     tcp_port=opts.broadcast_tcp_port or broker.tcp_port,
                                     http_port=opts.broadcast_http_port or broker.http_port)

    def registrations(self) -> list[LookupCommand]:
        topics = [(topic.name, list(topic.channels)) for topic in list(self.broker.topics.values())]
        return [LookupRegister(topic, channel)
                for topic, channel in early_lookup.registrations(topics)]

    # -- the broker tells us ----------------------------------------------------------------
    def changed(self, kind: str, topic: str, channel: str | None) -> None:
        command: LookupCommand = (LookupRegister(topic, channel) if kind == "register"
                                  else LookupUnregister(topic, channel))
        for peer in self.peers.values():
            peer.enqueue(command)

    def topic_created(self, topic: Topic) -> None:
        """Hold a new topic until the lookupds have said which channels it has elsewhere."""
        known = [p.http_address for p in self.peers.values() if p.http_address]
        if not known or self._nursery is None:
            if self.peers:
                log.info("TOPIC(%s): no lookupd has answered yet; not asking for channels",
                         topic.name)
            return
        topic.hold_until_started()
        self._nursery.start_soon(self._start_topic, topic, known)

    async def _start_topic(self, topic: Topic, lookupds: list[str]) -> None:
        try:
            if self._http is None:
                client = await trio.to_thread.run_sync(self._new_http)
                if self._http is None:  # another topic's thread may have been first
                    self._http = client
            import httpx  # imported by the thread above: a lookup, not an import

            for address in lookupds:
                try:
                    r = await self._http.get(f"http://{address}/channels",
                                             params={"topic": topic.name},
                                             headers={"Accept": ACCEPT_V1})
                    channels = r.json().get("channels") or [] if r.status_code == 200 else []
                except (httpx.HTTPError, ValueError, AttributeError) as exc:
                    log.warning("LOOKUPD(%s): channels of %s not known - %s", address,
                                topic.name, exc)
                    continue
                for name in channels:
                    if isinstance(name, str) and not is_ephemeral(name) and not topic.deleted:
                        self.broker.get_channel(topic, name)
        finally:
            topic.start()

    # -- peers ----------------------------------------------------------------------------------
    def set_addresses(self, addresses: list[str]) -> None:
        """Reconcile peers with ``addresses`` (start-up and PUT /config/nsqlookupd_tcp_addresses)."""
        wanted = list(dict.fromkeys(addresses))
        for address in list(self.peers):
            if address not in wanted:
                log.info("LOOKUPD(%s): removing peer", address)
                self.peers.pop(address).scope.cancel()
        for address in wanted:
            if address not in self.peers and self._nursery is not None:
                log.info("LOOKUPD(%s): adding peer", address)
                peer = LookupPeer(self, address)
                self.peers[address] = peer
                self._nursery.start_soon(peer.run)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep every lookupd told; started once each has been tried (see the docstring)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.set_addresses(self.broker.settings.nsqlookupd_tcp_addresses)
                early_lookup.close_untaken()
                # Each attempt is bounded by IO_TIMEOUT per step (connect, IDENTIFY, each
                # REGISTER): a lookupd that is down refuses at once, a hung one is waited
                # for no longer than this before nsqd serves without it.
                with trio.move_on_after(FIRST_ATTEMPT_TIMEOUT):
                    for peer in list(self.peers.values()):
                        await peer.tried.wait()
                task_status.started()
                await trio.sleep_forever()
        finally:
            if self._http is not None:
                with trio.CancelScope(shield=True):
                    await self._http.aclose()
