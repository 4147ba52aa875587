"""One replicated topic on this node (docs/design/replication.md): its role, its epochs file,
its high watermark, and, while it leads, what each follower's fetches said.

Only a topic placed on more than one node has one (``Topic.replica``); a topic with one
replica, and every topic of an nsqd without ``--etcd-endpoints``, has None and pays for
nothing here.

The leader's high watermark is the lowest of its own log end and the fetch offset of each
other ISR member (one that has not fetched from it yet counts at the HW it had), and of each
follower an expansion of the ISR in flight is adding; it only moves up. So the ISR in etcd,
which elections choose from, never holds a replica that lacks a record below the HW: an
expansion counts its followers from the moment it is decided (they are at the HW then), a
shrink stops counting its followers only once etcd has them out, and an ISR read from an
older etcd revision than the one applied is not taken. When it moves the topic's channels
may read further (``deliver_end``: the HW on the leader, nothing on a follower) and waiting
publishes look again (``changed``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import StoreFailed
from .epochs import Epochs

if TYPE_CHECKING:
    from ..message import QueuedMessage
    from ..record import Records
    from ..topic import Topic

log = logging.getLogger("nsqd")


@attrs.define
class Progress:
    """A follower, as its fetches show it to the leader."""

    #: its last fetch offset (its log end: it holds everything below); -1 before its first
    offset: int = -1
    #: when a fetch of it last reached the leader's log end of the answer before
    caught_up_at: float = 0.0
    #: the leader's log end when its previous fetch was answered
    answered_end: int = 0
    #: its last fetch said etcd is unreachable from it
    etcd_unreachable: bool = False
    #: when its last fetch came
    fetched_at: float = 0.0

    def fetch(self, offset: int, flags: int, now: float) -> None:
        self.offset = offset
        self.etcd_unreachable = bool(flags & 1)
        self.fetched_at = now
        if offset >= self.answered_end:
            self.caught_up_at = now

    def answered(self, end: int) -> None:
        self.answered_end = end


class Replica:
    def __init__(self, topic: Topic, *, node: str, min_insync: int, lag_max: float,
                 forwarder: Callable[[str, str, list[QueuedMessage] | Records],
                                     Awaitable[None]] | None = None,
                 fence_from: Callable[[], float] = lambda: float("inf")) -> None:
        self.topic = topic
        self.log = topic.log
        self.node = node
        self.min_insync = min_insync
        self.lag_max = lag_max
        self.epochs = Epochs(topic.log.directory).load()
        self.leading = False
        self.leader = ""
        self.epoch = 0
        self.replicas = 1
        self.isr: tuple[str, ...] = ()
        #: the etcd revision of the state ``isr`` was taken from (0: not known)
        self.isr_revision = 0
        #: followers an ISR expansion in flight adds (``adding``): counted in the HW already
        self.joining: frozenset[str] = frozenset()
        self.hw = 0
        #: where this node's leadership began (its epoch's first offset)
        self.epoch_start = 0
        self.followers: dict[str, Progress] = {}
        #: a follower: the epoch it truncated at (it fetches only at that epoch)
        self.fetching_epoch = 0
        #: it may lead (docs/design/replication.md, RECOVERING): it has led or fetched up to
        #: its leader's HW in this process, or its log lost nothing at its last stop (a
        #: clean one: no ``hole``; or every record fsynced before its fetch said it held it)
        self.eligible = (topic.log.hole is None
                          or (topic.log.mem_queue_size == 0 and topic.sync_every == 1))
        #: when it was made (the clock's now): how long it has been recovering
        self.since = topic.clock.now()
        #: a follower: publishes sent to the leader (``DataPath.forward``)
        self.forwarder = forwarder
        #: set (and replaced) when the log grows: held fetches answer
        self.appended = trio.Event()
        #: set (and replaced) when the HW, the ISR or the role changes: publishes look again
        self.changed = trio.Event()
        #: from when this node's lease may have expired in etcd (the clock's now; the
        #: membership's fence): a leader stops acknowledging and delivering then
        self.fence_from = fence_from
        self._was_fenced = False

    @property
    def deliver_end(self) -> int:
        """How far the topic's channels may read: the HW while leading (and not fenced),
        else nothing."""
        return self.hw if self.leading and not self.fenced() else 0

    @property
    def delivering(self) -> bool:
        """Whether the topic's channels may deliver at all (their own queues too): while
        leading and not fenced."""
        return self.leading and not self.fenced()

    # -- the fence ---------------------------------------------------------------------------
    def fenced(self) -> bool:
        """A leader whose lease may have expired (docs/design/replication.md, "The fence"):
        it neither acknowledges nor delivers, unless every other ISR member's fetch since
        then says it cannot reach etcd either (then nothing can elect another: etcd down)."""
        since = self.fence_from()
        if not self.leading or self.topic.clock.now() < since:
            return False
        for node in self.isr:
            if node == self.node:
                continue
            progress = self.followers.get(node)
            if progress is None or not progress.etcd_unreachable or progress.fetched_at < since:
                return True
        return False

    def check_fence(self) -> None:
        """Looked at every little while: a fence raised or lifted wakes the channels and the
        waiting publishes."""
        fenced = self.fenced()
        if fenced != self._was_fenced:
            self._was_fenced = fenced
            if fenced:
                log.warning("replication: topic %s: fenced (this node's lease may have "
                            "expired): not acknowledging or delivering", self.topic.name)
            else:
                log.info("replication: topic %s: the fence lifted", self.topic.name)
            for channel in self.topic.channels.values():
                channel.changed()
            self._changed()

    @property
    def insync_needed(self) -> int:
        return min(self.min_insync, self.replicas)

    # -- roles -------------------------------------------------------------------------------
    def lead(self, epoch: int, isr: tuple[str, ...], replicas: int, revision: int = 0
             ) -> None:
        """Lead at ``epoch`` with the ISR of the state etcd wrote at ``revision`` (its line in
        the epochs file first: raises OSError when it cannot be written, and then does not
        lead)."""
        if not self.leading or epoch != self.epoch:
            self.joining = frozenset()
            end = self.log.end
            self.epochs.add(epoch, end)
            self.epoch_start = self.epochs.start_of(epoch) or end
            now = self.topic.clock.now()
            self.followers = {n: Progress(caught_up_at=now) for n in isr if n != self.node}
            log.info("replication: topic %s: leading at epoch %d from offset %d (HW %d)",
                     self.topic.name, epoch, self.epoch_start, self.hw)
        was_leading = self.leading
        self.leading, self.leader, self.epoch = True, self.node, epoch
        if not was_leading:  # (what they hold apart from the log, their own queues, may go)
            for channel in self.topic.channels.values():
                channel.changed()
        self.eligible = True
        self.set_isr(isr, replicas, revision)

    def follow(self, leader: str, epoch: int, isr: tuple[str, ...], replicas: int,
               revision: int = 0) -> None:
        was_leading = self.leading
        self.leading, self.leader, self.epoch = False, leader, epoch
        self.isr, self.replicas = isr, replicas
        self.isr_revision = max(self.isr_revision, revision)
        self.followers = {}
        self.joining = frozenset()
        if was_leading:
            log.info("replication: topic %s: no longer leading (epoch %d)", self.topic.name,
                     epoch)
        self._changed()

    def set_isr(self, isr: tuple[str, ...], replicas: int, revision: int = 0) -> None:
        """The ISR of the state etcd wrote at ``revision`` (0: not known, taken as it is);
        one older than the state applied last is not taken (a watch's view behind the answer
        to this leader's own change: taking it could count fewer replicas than etcd's ISR
        holds)."""
        self.replicas = replicas
        if revision and revision < self.isr_revision:
            return
        self.isr, self.isr_revision = isr, max(self.isr_revision, revision)
        self.joining -= set(isr)
        now = self.topic.clock.now()
        for node in isr:
            if node != self.node and node not in self.followers:
                self.followers[node] = Progress(caught_up_at=now)
        self.update_hw()
        self._changed()

    def adding(self, nodes: list[str]) -> None:
        """An ISR expansion of ``nodes`` is about to be written to etcd: they count in the
        HW from now on (they are at it: ``caught_up``), so that once etcd has them in the
        ISR, where an election may choose one, they hold every record below the HW."""
        self.joining |= set(nodes)

    def isr_written(self, isr: tuple[str, ...], revision: int) -> None:
        """This leader's change of the ISR, as etcd wrote it at ``revision``: the ISR is
        exactly that now (one change at a time), no expansion in flight."""
        self.joining = frozenset()
        self.set_isr(isr, self.replicas, revision)

    # -- the leader --------------------------------------------------------------------------
    def check_publish(self) -> None:
        """Before a publish is appended.

        Raises:
            StoreFailed: this node does not lead the topic, or its ISR is below the minimum.
        """
        if not self.leading:
            raise StoreFailed(f"not the leader of the replicated topic {self.topic.name}")
        if self.fenced():
            raise StoreFailed(f"the leader of {self.topic.name} is fenced (its lease may "
                              "have expired)")
        if len(self.isr) < self.insync_needed:
            raise StoreFailed(f"{len(self.isr)} in-sync replicas, {self.insync_needed} needed")

    async def forward(self, msgs: list[QueuedMessage] | Records) -> None:
        """A publish on a follower: sent to the leader, answered as it answers.

        Raises:
            StoreFailed: no leader known, the leader unreachable, or its refusal.
        """
        if not self.leader or self.forwarder is None:
            raise StoreFailed(f"no leader of the replicated topic {self.topic.name}")
        await self.forwarder(self.leader, self.topic.name, msgs)

    def published(self) -> None:
        """The log grew (a publish on the leader)."""
        self.appended.set()
        self.appended = trio.Event()
        self.update_hw()

    async def committed(self, end: int) -> None:
        """Wait until the HW reaches ``end`` with the ISR at its minimum (at most
        ``2 x lag_max``).

        Raises:
            StoreFailed: leadership lost, the ISR below the minimum, or the time is up (the
                records stay in the log and may yet be committed).
        """
        deadline = self.topic.clock.now() + 2 * self.lag_max
        while True:
            self.check_publish()
            if self.hw >= end:
                return
            changed = self.changed
            with trio.move_on_at(deadline) as scope:
                await changed.wait()
            if scope.cancelled_caught:
                raise StoreFailed(f"not replicated to the in-sync set within "
                                  f"{2 * self.lag_max:g}s")

    def fetched(self, node: str, offset: int, flags: int) -> Progress:
        """A fetch of ``node`` from ``offset``: it holds everything below."""
        progress = self.followers.get(node)
        if progress is None:
            progress = self.followers[node] = Progress(caught_up_at=self.topic.clock.now())
        progress.fetch(offset, flags, self.topic.clock.now())
        self.update_hw()
        return progress

    def answered(self, node: str) -> None:
        """A fetch of ``node`` answered with nothing: it has the log's end now."""
        progress = self.followers.get(node)
        if progress is not None:
            progress.answered(self.log.end)

    def update_hw(self) -> None:
        if not self.leading:
            return
        hw = self.log.end
        for node in {*self.isr, *self.joining}:
            if node == self.node:
                continue
            progress = self.followers.get(node)
            hw = min(hw, progress.offset if progress is not None and progress.offset >= 0
                     else self.hw)
        if hw > self.hw:
            self.hw = hw
            for channel in self.topic.channels.values():
                channel.changed()
            self._changed()

    def lagging(self, now: float) -> list[str]:
        """ISR followers (and followers an unanswered expansion may have added) not caught
        up for longer than ``lag_max``."""
        return [n for n in (*self.isr, *sorted(self.joining - set(self.isr)))
                if n != self.node and (
                    (p := self.followers.get(n)) is None or now - p.caught_up_at > self.lag_max)]

    def caught_up(self, placed: tuple[str, ...]) -> list[str]:
        """Placed followers out of the ISR that may join: their fetch offset at or past the
        HW and past the start of this leader's epoch."""
        return [n for n in placed if n not in self.isr and n != self.node
                and (p := self.followers.get(n)) is not None
                and p.offset >= self.hw and p.offset >= self.epoch_start
                and p.offset >= p.answered_end]

    def lag(self) -> dict[str, int]:
        """Each follower's lag in records (its fetch offset behind the log end)."""
        end = self.log.end
        return {n: max(end - p.offset, 0) for n, p in self.followers.items() if p.offset >= 0}

    # -- a follower --------------------------------------------------------------------------
    def truncated(self) -> None:
        """Cut back (or nothing to cut) at its epoch: it fetches at it from now on."""
        self.fetching_epoch = self.epoch

    def eligible_as_it_is(self) -> None:
        """No leader to catch up with for long enough: it may lead with what it holds."""
        self.eligible = True

    def truncate_again(self) -> None:
        self.fetching_epoch = 0

    def follower_hw(self, hw: int) -> None:
        """The leader's HW as a fetch answer carried it (never past this log's end)."""
        if not self.eligible and self.log.end >= hw:
            self.eligible = True
            log.info("replication: topic %s: caught up with the leader's HW %d: may lead",
                     self.topic.name, hw)
        hw = min(hw, self.log.end)
        if hw > self.hw:
            self.hw = hw

    def _changed(self) -> None:
        self.changed.set()
        self.changed = trio.Event()
