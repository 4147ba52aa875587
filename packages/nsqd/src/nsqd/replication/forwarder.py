"""A follower's publishes sent to the leader (docs/design/replication.md, "Forwarding
publishes"): one connection per leader node (``  R1``, apart from the fetches, so never
behind a long-poll), ``FORWARD`` frames out, ``FORWARDED`` answers matched by id; the
client gets the leader's answer.

Opened on the first publish, kept while it works; a connection lost fails every publish
waiting on it (``StoreFailed``: the producer counts them as unknown, as a timed-out
publish), and the next publish opens another.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio
from nsq_common import commands

from ..errors import StoreFailed
from ..record import HEADER_SIZE, Records
from . import wire
from .wire import Forward, Forwarded, FrameReader, Hello

if TYPE_CHECKING:
    from ..message import QueuedMessage
    from .keys import NodeInfo

log = logging.getLogger("nsqd")

#: a forwarded publish waits for its answer as long as the leader may wait for its ISR
#: (2 x --replica-lag-max), and this much more
ANSWER_MARGIN = 5.0


class Forwarder:
    def __init__(self, node: str, leader: str, address_of: Callable[[str], NodeInfo | None],
                 nursery: trio.Nursery, lag_max: float) -> None:
        self.node = node
        self.answer_within = 2 * lag_max + ANSWER_MARGIN
        self.leader = leader
        self.address_of = address_of
        self._nursery = nursery
        self._stream: trio.abc.Stream | None = None
        self._connecting = trio.Lock()
        self._send_lock = trio.Lock()
        self._next_id = 0
        self._waiting: dict[int, tuple[trio.Event, list[bytes]]] = {}

    async def publish(self, topic: str, msgs: list[QueuedMessage] | Records) -> None:
        """Publish ``msgs`` through the leader.

        Raises:
            StoreFailed: the leader refused them (its reason), or could not be asked.
        """
        kind, defer_ms, body = _forward_body(msgs)
        stream = await self._connect()
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        fid = self._next_id
        done, answer = trio.Event(), list[bytes]()
        self._waiting[fid] = (done, answer)
        try:
            async with self._send_lock:
                await stream.send_all(wire.encode(Forward(fid, topic, kind, defer_ms, body)))
            with trio.move_on_after(self.answer_within):
                await done.wait()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._lost(stream, exc)
            raise StoreFailed(f"the leader {self.leader} unreachable") from None
        finally:
            self._waiting.pop(fid, None)
        if not answer:
            raise StoreFailed(f"no answer from the leader {self.leader}")
        if answer[0] != b"OK":  # ("E_PUB_FAILED <reason>": the reason, as this node's)
            raise StoreFailed(answer[0].decode(errors="replace").partition(" ")[2]
                              or "refused by the leader")

    async def _connect(self) -> trio.abc.Stream:
        async with self._connecting:
            if self._stream is not None:
                return self._stream
            info = self.address_of(self.leader)
            if info is None:
                raise StoreFailed(f"the leader {self.leader} is not known")
            try:
                stream: trio.abc.Stream = await trio.open_tcp_stream(
                    info.broadcast_address, info.tcp_port)
                await stream.send_all(wire.MAGIC + wire.encode(Hello(self.node)))
            except (OSError, trio.BrokenResourceError) as exc:
                raise StoreFailed(f"the leader {self.leader} unreachable: {exc}") from None
            self._stream = stream
            self._nursery.start_soon(self._read, stream)
            return stream

    async def _read(self, stream: trio.abc.Stream) -> None:
        reader = FrameReader()
        try:
            while True:
                data = await stream.receive_some(1 << 16)
                if not data:
                    raise trio.BrokenResourceError("closed by the leader")
                reader.receive_data(data)
                while (frame := reader.next_frame()) is not None:
                    if not isinstance(frame, Forwarded):
                        raise wire.WireError(f"a {type(frame).__name__} answering a forward")
                    waiting = self._waiting.get(frame.id)
                    if waiting is not None:
                        waiting[1].append(frame.answer)
                        waiting[0].set()
        except (trio.BrokenResourceError, trio.ClosedResourceError, wire.WireError) as exc:
            self._lost(stream, exc)

    def _lost(self, stream: trio.abc.Stream, exc: BaseException) -> None:
        if self._stream is stream:
            log.info("replication: forwarding to %s: %s", self.leader, exc)
            self._stream = None
            self._nursery.start_soon(trio.aclose_forcefully, stream)
            for done, _ in self._waiting.values():
                done.set()  # (no answer: failed)

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await trio.aclose_forcefully(stream)


def _forward_body(msgs: list[QueuedMessage] | Records) -> tuple[int, int, bytes]:
    """FORWARD's kind, defer and body for what a client published.

    Raises:
            StoreFailed: messages FORWARD cannot carry (an expiry of their own, lmstfy's
                jobs: their tries, TTL and delay).
    """
    if isinstance(msgs, Records):
        bodies = [r[HEADER_SIZE:] for r in msgs]
        defer_ms = 0
    else:
        if any(m.is_job for m in msgs):
            raise StoreFailed("a job is published on its queue's leader only")
        if any(m.expires for m in msgs):
            raise StoreFailed("a message with a TTL is published on the leader only")
        bodies = [m.body for m in msgs]
        due = max((m.due - m.timestamp for m in msgs if m.due), default=0)
        defer_ms = max(due // 1_000_000, 0)
    if defer_ms:
        return wire.DPUB, defer_ms, bodies[0]
    if len(bodies) == 1:
        return wire.PUB, 0, bodies[0]
    return wire.MPUB, 0, commands.mpub_body(bodies)
