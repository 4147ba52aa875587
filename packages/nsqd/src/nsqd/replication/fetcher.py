"""A follower's fetching from one leader node (docs/design/replication.md, "The fetch
protocol" and "The leader epoch on disk").

One connection per leader node, for every topic this node follows there: ``HELLO``, then per
topic not fetched at its current epoch yet the truncation (its gap or lost memory tail given
back, then ``EPOCH_END`` of its last epoch, and its log cut back to the answer, records it
stores past it included: ``TopicLog.truncate``), then
``FETCH`` after ``FETCH`` from each log's end. The batches of a ``DATA`` are appended with
``TopicLog.append_at`` at the leader's offsets, its epoch lines written, its end moved past
a gap at the leader's tail, and its HW kept.

A connection lost, refused or sent something malformed is opened again after ``RETRY``; a
topic the leader answers with an error is asked again after ``RETRY`` (the coordinator's
watch brings the new role meanwhile).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio
from nsq_common import join_host_port

from ..errors import LogError
from . import wire
from .wire import Data, Epoch, EpochEnd, Fetch, FetchTopic, FrameReader, Hello

if TYPE_CHECKING:
    from .keys import NodeInfo
    from .replica import Replica

log = logging.getLogger("nsqd")

RETRY = 1.0
MAX_WAIT_MS = 500
MAX_BYTES = 1 << 20
#: an answer later than its fetch's max wait by this much: the connection is given up
ANSWER_TIMEOUT = 30.0


class Fetcher:
    def __init__(self, node: str, leader: str, replicas: Callable[[str], Replica | None],
                 address_of: Callable[[str], NodeInfo | None],
                 now: Callable[[], float],
                 apply_channel: Callable[[Replica, str, int, bytes], Awaitable[None]],
                 cut_cursors: Callable[[Replica], Awaitable[None]],
                 etcd_unreachable: Callable[[], bool] = lambda: False) -> None:
        #: a channel record of the leader's taken (``cursors.apply_record``)
        self.apply_channel = apply_channel
        #: the channels' cursors brought back to a log cut back (``cursors.cut_back``)
        self.cut_cursors = cut_cursors
        self.node = node
        self.now = now  # the broker's clock (Trio's)
        self.leader = leader
        self.replicas = replicas
        self.address_of = address_of
        self.etcd_unreachable = etcd_unreachable
        self.topics: set[str] = set()
        #: topics to ask again only from this time on (an error answered)
        self._later: dict[str, float] = {}
        self._scope: trio.CancelScope | None = None

    def follow(self, topics: set[str]) -> None:
        """The topics this node follows on this leader now."""
        self.topics = topics

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        with trio.CancelScope() as self._scope:
            while self.topics:
                info = self.address_of(self.leader)
                if info is not None:
                    address = join_host_port(info.broadcast_address, info.tcp_port)
                    try:
                        stream = await trio.open_tcp_stream(info.broadcast_address,
                                                            info.tcp_port)
                    except OSError as exc:
                        log.info("replication: leader %s unreachable at %s: %s", self.leader,
                                 address, exc)
                    else:
                        try:
                            await self._session(stream)
                        except (trio.BrokenResourceError, trio.ClosedResourceError,
                                trio.TooSlowError, EOFError, wire.WireError,
                                LogError) as exc:  # (LogError: a channel record not stored)
                            log.info("replication: fetching from %s: %s", self.leader,
                                     exc or type(exc).__name__)
                        except Exception:  # a bug: logged, and this connection only ends
                            log.exception("replication: fetching from %s: unexpected error",
                                          self.leader)
                        finally:
                            await trio.aclose_forcefully(stream)
                await trio.sleep(RETRY)

    async def _session(self, stream: trio.abc.Stream) -> None:
        reader = FrameReader()
        await stream.send_all(wire.MAGIC + wire.encode(Hello(self.node)))
        log.info("replication: fetching from leader %s", self.leader)

        async def ask(frame: wire.Frame, within: float) -> wire.Frame:
            await stream.send_all(wire.encode(frame))
            with trio.fail_after(within):
                while (answer := reader.next_frame()) is None:
                    data = await stream.receive_some(1 << 16)
                    if not data:
                        raise EOFError("the leader closed the connection")
                    reader.receive_data(data)
            return answer

        while self.topics:
            now = self.now()
            asks: list[FetchTopic] = []
            for topic in sorted(self.topics):
                replica = self.replicas(topic)
                if replica is None or replica.leading or self._later.get(topic, 0) > now:
                    continue
                if (replica.fetching_epoch != replica.epoch
                        and not await self._truncate(replica, ask)):
                    continue
                flags = wire.ETCD_UNREACHABLE if self.etcd_unreachable() else 0
                asks.append(FetchTopic(topic, replica.epoch, replica.log.end, replica.hw,
                                       flags))
            if not asks:
                await trio.sleep(min([RETRY, *(t - now for t in self._later.values()
                                               if t > now)]))
                continue
            answer = await ask(Fetch(MAX_WAIT_MS, MAX_BYTES, tuple(asks)),
                               MAX_WAIT_MS / 1000 + ANSWER_TIMEOUT)
            if not isinstance(answer, Data):
                raise wire.WireError(f"a {type(answer).__name__} frame answering a fetch")
            for data in answer.topics:
                await self._apply(data)

    async def _truncate(self, replica: Replica,
                        ask: Callable[[wire.Frame, float], Awaitable[wire.Frame]]) -> bool:
        """Before the first fetch at the leader's epoch: this log cut back to where the
        leader's copy of its last epoch ends. Whether the topic may be fetched now."""
        log_ = replica.log
        topic = replica.topic.name
        try:  # what this log gave past its records (a gap, a crash's lost tail): back
            log_.cut_back(max(log_.stored_end, replica.hw))
        except LogError as exc:
            log.error("replication: topic %s: %s", topic, exc)
        await self.cut_cursors(replica)
        if log_.stored_end == 0 and not replica.epochs.lines:
            replica.truncated()  # an empty log: nothing to cut
            return True
        answer = await ask(EpochEnd(topic, replica.epochs.latest), ANSWER_TIMEOUT)
        if not isinstance(answer, Epoch) or answer.topic != topic:
            raise wire.WireError("not an EPOCH answering EPOCH_END")
        if answer.error != wire.NONE:
            self._retry_later(topic, answer.error)
            return False
        cut = min(answer.end, log_.end)
        if cut < replica.hw:
            log.error("replication: topic %s: the leader's epoch %d ends at %d, below this "
                      "replica's HW %d: not fetched", topic, answer.epoch, answer.end,
                      replica.hw)
            self._later[topic] = self.now() + 10 * RETRY
            return False
        if cut < log_.end:
            try:  # (records stored past it too: they were never committed)
                await log_.truncate(cut)
            except LogError as exc:
                log.error("replication: topic %s: truncation to %d: %s; not fetched", topic,
                          cut, exc)
                self._later[topic] = self.now() + 10 * RETRY
                return False
            log.info("replication: topic %s: log cut back to %d (epoch %d)", topic, cut,
                     answer.epoch)
            await self.cut_cursors(replica)
        try:
            replica.epochs.cut(cut)
        except OSError as exc:
            log.error("replication: topic %s: epochs not written - %s", topic, exc)
            return False
        replica.truncated()
        return True

    async def _apply(self, data: wire.TopicData) -> None:
        replica = self.replicas(data.topic)
        if replica is None or replica.leading or data.topic not in self.topics:
            return
        log_ = replica.log
        if data.error == wire.OUT_OF_RANGE:
            await self._out_of_range(replica, data)
            return
        if data.error != wire.NONE:
            self._retry_later(data.topic, data.error)
            return
        try:
            for base, records in wire.decode_batches(data.batches):
                if base + len(records) <= log_.end:
                    continue  # (held already)
                skip = max(log_.end - base, 0)
                await log_.append_at(base + skip, records[skip:])
        except LogError as exc:
            log.error("replication: topic %s: append failed - %s", data.topic, exc)
            self._later[data.topic] = self.now() + RETRY
            return
        for epoch, start in data.epochs:
            if epoch > replica.epochs.latest and start <= data.next_offset:
                try:
                    replica.epochs.add(epoch, start)
                except OSError as exc:
                    log.error("replication: topic %s: epochs not written - %s", data.topic,
                              exc)
        log_.skip_to(data.next_offset)
        replica.follower_hw(data.hw)
        for channel, kind, payload in wire.decode_channel_records(data.channels):
            await self.apply_channel(replica, channel, kind, payload)

    async def _out_of_range(self, replica: Replica, data: wire.TopicData) -> None:
        """This log's end is below the leader's log start (retention removed the records
        between: fetched from the start, a gap), or past its log end (``next offset``: this
        log is cut back to it, never below its HW)."""
        log_ = replica.log
        if log_.end < data.log_start:
            log.info("replication: topic %s: the leader's log starts at %d, past this "
                     "replica's end %d: fetching from there", data.topic, data.log_start,
                     log_.end)
            log_.skip_to(data.log_start)
            return
        try:
            if data.next_offset < replica.hw:
                raise LogError(f"that is below this replica's HW {replica.hw}")
            await log_.truncate(data.next_offset)
        except LogError as exc:
            log.error("replication: topic %s: past the leader's end %d: %s", data.topic,
                      data.next_offset, exc)
            self._later[data.topic] = self.now() + 10 * RETRY
            return
        await self.cut_cursors(replica)

    def _retry_later(self, topic: str, error: int) -> None:
        name = wire.ERROR_NAMES[error] if error < len(wire.ERROR_NAMES) else str(error)
        log.info("replication: topic %s: leader %s answered %s", topic, self.leader, name)
        self._later[topic] = self.now() + RETRY
        replica = self.replicas(topic)
        if replica is not None and error in (wire.FENCED, wire.UNKNOWN_EPOCH):
            replica.truncate_again()  # at the epoch etcd says
