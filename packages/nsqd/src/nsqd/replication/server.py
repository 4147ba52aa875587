"""The leader's side of the fetch protocol (docs/design/replication.md): a connection that
opened with ``  R1`` on nsqd's TCP port (``tcp.handle_stream`` hands it here, only on an
nsqd with ``--etcd-endpoints``).

One task per connection reads the requests: ``HELLO`` names the follower, ``FETCH`` is
answered with ``DATA`` (held at the tail until a named topic grows or ``max wait`` passes),
``EPOCH_END`` with ``EPOCH``, one at a time; each ``FORWARD`` (a follower's publish, on a
connection of its own) is published in a task of its own and answered with ``FORWARDED``
when done. Errors are per topic; a malformed frame closes the connection.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from . import wire
from .cursors import CURSOR_SHIP_INTERVAL, Shipped
from .wire import (
    Data,
    Epoch,
    EpochEnd,
    Fetch,
    FetchTopic,
    Forward,
    Forwarded,
    FrameReader,
    Hello,
    TopicData,
)

if TYPE_CHECKING:
    from .replica import Replica

log = logging.getLogger("nsqd")

READ_SIZE = 1 << 16
#: a connection that sends nothing this long is closed (a fetch comes every max wait)
IDLE_TIMEOUT = 60.0
#: the longest a fetch is held, whatever it asks
MAX_WAIT = 5.0
#: records read per topic per answer at most
MAX_RECORDS = 1 << 16


class ReplicationServer:
    def __init__(self, replicas: Callable[[str], Replica | None],
                 now: Callable[[], float],
                 publish: Callable[[Forward], Awaitable[bytes]]) -> None:
        self.replicas = replicas
        self.now = now  # the broker's clock (Trio's)
        self.publish = publish  # a forwarded publish: the answer NSQ would send

    async def handle(self, stream: trio.abc.Stream, initial: bytes, remote: str) -> None:
        """Serve one follower's connection until it closes or sends something malformed."""
        reader = FrameReader()
        reader.receive_data(initial)
        send_lock = trio.Lock()

        async def send(frame: wire.Frame) -> None:
            async with send_lock:
                await stream.send_all(wire.encode(frame))

        async def forwarded(ask: Forward) -> None:
            answer = await self.publish(ask)
            try:
                await send(Forwarded(ask.id, answer))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # (the follower gone: its producer counts the message as unknown)

        async with trio.open_nursery() as nursery:
            await self._serve(stream, reader, send, forwarded, nursery, remote, Shipped())

    async def _serve(self, stream: trio.abc.Stream, reader: FrameReader,
                     send: Callable[[wire.Frame], Awaitable[None]],
                     forwarded: Callable[[Forward], Awaitable[None]], nursery: trio.Nursery,
                     follower: str, shipped: Shipped) -> None:
        try:
            while True:
                frame = reader.next_frame()
                if frame is None:
                    with trio.move_on_after(IDLE_TIMEOUT):
                        data = await stream.receive_some(READ_SIZE)
                        if not data:
                            return
                        reader.receive_data(data)
                        continue
                    log.info("replication: follower %s idle, closing", follower)
                    return
                if isinstance(frame, Hello):
                    log.info("replication: %s connected from %s", frame.node, follower)
                    follower = frame.node
                elif isinstance(frame, Fetch):
                    await send(await self.fetch(follower, frame, shipped))
                elif isinstance(frame, EpochEnd):
                    await send(self.epoch_end(frame))
                elif isinstance(frame, Forward):
                    nursery.start_soon(forwarded, frame)
                else:
                    raise wire.WireError(f"a {type(frame).__name__} frame from a follower")
        except wire.WireError as exc:
            log.warning("replication: follower %s: %s, closing", follower, exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            # (a follower killed, its connection reset: as a client's, not a bug; raised out
            # of the nursery it would reach the TCP handler in an exception group)
            log.info("replication: follower %s: connection lost (%s)", follower, exc)
        finally:
            nursery.cancel_scope.cancel()

    def epoch_end(self, ask: EpochEnd) -> Epoch:
        replica = self.replicas(ask.topic)
        if replica is None or not replica.leading:
            return Epoch(ask.topic, wire.NOT_LEADER, 0, 0)
        found, end = replica.epochs.end_of(ask.epoch, replica.log.end)
        return Epoch(ask.topic, wire.NONE, found, end)

    async def fetch(self, follower: str, ask: Fetch, shipped: Shipped) -> Data:
        """The answer to a fetch: at once when some topic has data, channel records due or
        an error, else once one grows or has channel records due, or at ``max wait``."""
        deadline = self.now() + min(ask.max_wait_ms / 1000, MAX_WAIT)
        while True:
            answers, waits = [], []
            for t in ask.topics:
                answer, replica = await self._topic(follower, t, ask.max_bytes, shipped)
                answers.append(answer)
                if replica is not None:
                    waits.append(replica)
            if len(waits) < len(answers) or self.now() >= deadline:
                for replica in waits:  # (answered at the tail: caught up as of now)
                    replica.answered(follower)
                return Data(tuple(answers))
            await _any_appended(waits, min(deadline, self.now() + CURSOR_SHIP_INTERVAL))

    async def _topic(self, follower: str, ask: FetchTopic, max_bytes: int, shipped: Shipped
                     ) -> tuple[TopicData, Replica | None]:
        """One topic's answer, and its replica when it has nothing to send (the fetch may
        wait for it)."""
        replica = self.replicas(ask.topic)
        if replica is None or not replica.leading:
            return TopicData(ask.topic, wire.NOT_LEADER, replica.epoch if replica else 0,
                             0, 0, 0), None
        log_ = replica.log
        if ask.epoch != replica.epoch:
            error = wire.FENCED if ask.epoch < replica.epoch else wire.UNKNOWN_EPOCH
            return TopicData(ask.topic, error, replica.epoch, replica.hw, log_.start,
                             ask.offset), None
        start = log_.start
        if ask.offset < start and ask.offset < log_.end:
            return TopicData(ask.topic, wire.OUT_OF_RANGE, replica.epoch, replica.hw, start,
                             start), None
        if ask.offset > log_.end:  # (never taken as held: the follower gives it back)
            return TopicData(ask.topic, wire.OUT_OF_RANGE, replica.epoch, replica.hw, start,
                             log_.end), None
        progress = replica.fetched(follower, ask.offset, ask.flags)
        channels = await shipped.due(replica.topic, ask.offset, self.now(),
                                     epoch=replica.epoch, budget=max(max_bytes, 1))
        if ask.offset >= log_.end:
            return TopicData(ask.topic, wire.NONE, replica.epoch, replica.hw, start,
                             ask.offset, channels=channels), None if channels else replica
        try:
            runs = await log_.read_at(ask.offset, MAX_RECORDS, max(max_bytes, 1))
        except Exception as exc:  # (a read problem of the leader's, told to the follower)
            log.error("replication: topic %s: read at %d for %s failed - %s", ask.topic,
                      ask.offset, follower, exc)
            return TopicData(ask.topic, wire.STORAGE, replica.epoch, replica.hw, start,
                             ask.offset), None
        runs_out = wire.within_budget(runs, max_bytes)
        if runs_out:
            next_offset = runs_out[-1][0] + len(runs_out[-1][1])
        elif log_.hole is not None and log_.hole[0] <= ask.offset < log_.hole[1]:
            next_offset = log_.hole[1]  # offsets a crash gave no record: passed, as a gap
        else:
            # nothing readable there yet (an append placed, not stored): the follower asks
            # again from where it is; never told to pass offsets that will hold records
            # (it would claim them, and the HW pass what it lacks)
            next_offset = ask.offset
        lines = replica.epochs.lines
        covering = [i for i, (_, s) in enumerate(lines) if s <= ask.offset]
        since = covering[-1] if covering else 0
        epochs = tuple(line for line in lines[since:] if line[1] < next_offset)
        progress.answered(log_.end)
        return TopicData(ask.topic, wire.NONE, replica.epoch, replica.hw, start, next_offset,
                         epochs, wire.encode_batches(runs_out), channels), None


async def _any_appended(replicas: list[Replica], deadline: float) -> None:
    """Until one of ``replicas``' logs grows, or ``deadline``."""
    with trio.move_on_at(deadline):
        async with trio.open_nursery() as nursery:
            async def wait(event: trio.Event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()
            for replica in replicas:
                nursery.start_soon(wait, replica.appended)
