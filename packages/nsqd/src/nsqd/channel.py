"""A channel: a cursor into its topic's log, shared by its subscribers (docs/design/storage.md).

``Channel`` is what the rest of nsqd holds: the channel's name, settings, counters and pause,
and the parts it is made of, each one concept:

- ``MessageStates`` (``channel_state``): the one owner of its messages' states (waiting,
  deferred, in flight, dead...) and of every move between them, by ``lifecycle``'s table; it
  reads the log through ``LogReader`` (``channel_read``);
- ``Subscribers`` (``channel_delivery``): its TCP consumers, delivery within their RDY, and
  their FIN, REQ and TOUCH;
- ``PullDoor`` (``channel_pull``): HTTP pulling and lmstfy's front door;
- ``DeadLetterDoor`` (``channel_dead``): its dead letters.

Nothing here awaits or spawns: delivery happens in ``pump``, which the broker's pump task calls
for every channel marked dirty, so one read of 2,000 FINs costs one pump, not 2,000. The few
things that need the disk (finding a job not in memory, storing dead letters) are async and
said so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from nsq_common import is_ephemeral

from .channel_dead import DeadLetterDoor
from .channel_delivery import Consumer, Subscribers, spread
from .channel_limits import Limits
from .channel_pull import PullDoor
from .channel_state import PULLER, READ_BATCH, TOMBSTONE, MessageStates, Source

if TYPE_CHECKING:
    import trio

    from .backlog import Backlog
    from .clock import Clock
    from .cursor import Cursor
    from .cursorfile import CursorState
    from .deadletters import DeadLetters
    from .e2e import LatencyStream
    from .errors import InFlightError
    from .inflight import DeferredQueue, InFlightQueue
    from .message import QueuedMessage
    from .topiclog import TopicLog

__all__ = ["PULLER", "READ_BATCH", "TOMBSTONE", "Channel", "Consumer", "Owner", "Source",
           "spread"]


class Owner(Protocol):
    """What a channel needs from the broker."""

    def mark_dirty(self, channel: Channel) -> None: ...

    def channel_emptied_of_clients(self, channel: Channel) -> None: ...

    def dead_letters_for(self, channel: Channel) -> DeadLetters: ...

    def own_queue_for(self, channel: Channel) -> Backlog: ...


class Channel:
    """A channel of a topic: its parts, and the one surface the rest of nsqd uses."""

    def __init__(self, topic: Source, name: str, owner: Owner, *, cursor: Cursor,
                 clock: Clock, max_msg_timeout: float, mem_queue_size: int = 10000,
                 own: Backlog | None = None, e2e: LatencyStream | None = None,
                 default_max_attempts: int = 0) -> None:
        self.topic = topic
        self.topic_name = topic.name
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.owner = owner
        self.clock = clock
        self.limits = Limits(default_max_attempts)
        self.paused = False
        self.deleted = False
        self.message_count = 0
        self.states = MessageStates(topic, cursor, self, clock=clock, limits=self.limits,
                                    ephemeral=self.ephemeral, mem_queue_size=mem_queue_size,
                                    max_msg_timeout=max_msg_timeout, own=own, e2e=e2e)
        self.subscribers = Subscribers(self.states, self.mark_dirty)
        self.pulling = PullDoor(self.states)
        self.dead = DeadLetterDoor(self.states)

    # -- what the parts need (``channel_state.Host``) --------------------------------------------
    def mark_dirty(self) -> None:
        """Have the broker pump this channel soon."""
        self.owner.mark_dirty(self)

    def changed(self) -> None:
        """Messages may be deliverable now: the broker pumps the channel, waiting HTTP
        pullers look again."""
        self.owner.mark_dirty(self)
        self.pulling.wake()

    def new_dead_letters(self) -> DeadLetters:
        return self.owner.dead_letters_for(self)

    def new_own_queue(self) -> Backlog:
        return self.owner.own_queue_for(self)

    # -- what others read ----------------------------------------------------------------------
    @property
    def log(self) -> TopicLog:
        return self.topic.log

    @property
    def cursor(self) -> Cursor:
        return self.states.cursor

    @property
    def clients(self) -> dict[int, Consumer]:
        """The subscribers, by id (read them; ``add_client``, ``remove_client`` change them)."""
        return self.subscribers.clients

    @property
    def in_flight(self) -> InFlightQueue:
        return self.states.in_flight

    @property
    def deferred(self) -> DeferredQueue:
        return self.states.deferred

    @property
    def own(self) -> Backlog | None:
        return self.states.waiting.own

    @property
    def own_queue(self) -> Backlog:
        """The own queue, made if it was not (at start, when it has messages on disk)."""
        return self.states.waiting.own_queue

    @property
    def e2e(self) -> LatencyStream | None:
        return self.states.e2e

    @property
    def held_count(self) -> int:
        """Messages deferred or in flight (lmstfy's "delayed" figure)."""
        return len(self.states.deferred) + len(self.states.in_flight)

    @property
    def depth(self) -> int:
        """Messages waiting (NSQ's depth: not in flight, not deferred)."""
        return self.states.waiting.depth

    @property
    def backend_depth(self) -> int:
        """Those of ``depth`` that are on disk only."""
        return self.states.waiting.backend_depth

    @property
    def requeue_count(self) -> int:
        return self.states.requeue_count

    @property
    def timeout_count(self) -> int:
        return self.states.timeout_count

    @property
    def expired_count(self) -> int:
        return self.states.expired_count

    @property
    def stale_popped(self) -> bool:
        """The last ``pull`` with ``stop_at_stale`` stopped at a stale message."""
        return self.states.stale_popped

    # -- settings ------------------------------------------------------------------------------
    @property
    def max_attempts(self) -> int:
        """This channel's attempt limit (0: none, then ``default_max_attempts``)."""
        return self.limits.max_attempts

    @property
    def default_max_attempts(self) -> int:
        """nsqd's ``--max-attempts``."""
        return self.limits.default_max_attempts

    @property
    def dead_letter_expired(self) -> bool:
        return self.limits.dead_letter_expired

    @property
    def requeue_behind(self) -> bool:
        return self.limits.requeue_behind

    def configure(self, *, max_attempts: int | None = None,
                  default_max_attempts: int | None = None,
                  dead_letter_expired: bool | None = None,
                  requeue_behind: bool | None = None) -> bool:
        """Change the settings given (beyond NSQ: an attempt limit, expired messages kept as
        dead letters, lmstfy's ready list); whether one changed. They apply from the next
        pump on."""
        return self.limits.update(max_attempts=max_attempts,
                                  default_max_attempts=default_max_attempts,
                                  dead_letter_expired=dead_letter_expired,
                                  requeue_behind=requeue_behind)

    # -- the topic -----------------------------------------------------------------------------
    def published(self, count: int, deferred: Sequence[QueuedMessage] = ()) -> None:
        """The topic stored ``count`` new messages this channel will read; those of
        ``deferred`` (with a due time: DPUB, delayed jobs) it holds ahead of its cursor now,
        deferred until due, as nsqd puts a DPUB straight into a channel's deferred queue."""
        self.message_count += count
        if deferred:
            self.states.published_deferred(deferred)
        # The pump only for a channel with subscribers (one that has none does nothing
        # there, and a RDY wakes it): a publisher's round trip then needs no task switch.
        if self.subscribers.clients:
            self.owner.mark_dirty(self)
        self.pulling.wake()

    def counted(self, count: int) -> None:
        """``count`` messages the topic held for its first channel, this one: its
        ``message_count`` includes them."""
        self.message_count += count

    def skip(self, start: int, end: int) -> None:
        """The log's offsets [start, end) are done with unread (the topic emptied while
        paused)."""
        self.states.cursor.skip(start, end)

    # -- TCP consumers -------------------------------------------------------------------------
    def pump(self, now: float) -> None:
        """Hand waiting messages to ready clients, spread across them in turn."""
        if not self.paused:
            self.subscribers.pump(now)

    def add_client(self, client: Consumer) -> None:
        self.subscribers.add(client)

    def remove_client(self, client: Consumer) -> None:
        """Drop a subscriber; its in-flight messages go back to the queue at once."""
        if self.subscribers.remove(client) and not self.subscribers.clients and self.ephemeral:
            self.owner.channel_emptied_of_clients(self)

    def finish(self, client: Consumer, message_id: bytes) -> None:
        """FIN.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_FIN_FAILED.
        """
        self.subscribers.finish(client, message_id)

    def finish_many(self, client: Consumer, message_ids: list[bytes]
                    ) -> list[tuple[bytes, InFlightError]]:
        """FIN of each of ``message_ids`` (``Subscribers.finish_many``)."""
        return self.subscribers.finish_many(client, message_ids)

    def requeue(self, client: Consumer, message_id: bytes, delay: float, now: float) -> None:
        """REQ: back to the queue at once, or deferred by ``delay`` seconds.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_REQ_FAILED.
        """
        self.subscribers.requeue(client, message_id, delay, now)

    def touch(self, client: Consumer, message_id: bytes, now: float) -> None:
        """TOUCH: restart the timeout, never past delivery + max-msg-timeout.

        Raises:
            NotInFlight, NotOwner: NSQ's reasons for E_TOUCH_FAILED.
        """
        self.subscribers.touch(client, message_id, now)

    # -- time ----------------------------------------------------------------------------------
    def scan(self, now: float) -> bool:
        """Requeue timed-out in-flight messages and release due deferred ones; whether any."""
        timed_out = self.states.scan(now)
        if timed_out is None:
            return False
        self.subscribers.timed_out(timed_out)
        return True

    def next_deadline(self) -> float | None:
        return self.states.next_deadline()

    # -- the whole channel ---------------------------------------------------------------------
    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self.changed()

    def empty(self) -> None:
        """Drop queued, in-flight and deferred messages (NSQ's channel empty): the cursor to
        the end of the log; the own queue's files are dropped by ``empty_own_files``."""
        self.states.empty(self.topic.visible_end)
        self.subscribers.nothing_in_flight()
        self.changed()

    async def empty_own_files(self) -> None:
        """The own queue's messages on disk dropped too (after ``empty``)."""
        own = self.states.waiting.own
        if own is not None and own.disk is not None:
            await own.disk.empty()

    def rewind(self, offset: int) -> None:
        """Deliver again everything from ``offset`` (clamped to what the log still holds, and
        to its end: nothing moves a cursor past it): in-flight messages stay in flight,
        requeued and deferred ones come again from the log."""
        self.states.rewind(offset)
        self.changed()

    def close(self) -> None:
        """The channel is deleted: pullers waiting on it answered, its subscribers
        disconnected, what it holds dropped (its files are the broker's to remove)."""
        self.deleted = True
        self.pulling.wake()  # they find it deleted and answer
        self.subscribers.disconnect_all()
        self.empty()

    # -- the cursor's journal ------------------------------------------------------------------
    def held_extras(self, *, in_flight: bool) -> dict[int, tuple[int, int]]:
        """What the cursor's journal keeps of the messages this channel holds
        (``MessageStates.held_extras``)."""
        return self.states.held_extras(in_flight=in_flight)

    async def restore_deferred(self) -> None:
        """At start: what the last run held deferred, deferred again."""
        await self.states.restore_deferred()

    def cursor_state(self, *, in_flight: bool = False) -> CursorState:
        return self.states.cursor_state(in_flight=in_flight)

    # -- HTTP pulling and lmstfy (``PullDoor``) ------------------------------------------------
    def pull(self, n: int, ttr: float, now: float, *, stop_at_stale: bool = False
             ) -> list[QueuedMessage]:
        """Up to ``n`` waiting messages, in flight to HTTP pullers for ``ttr`` seconds
        (``PullDoor.pull``); none while paused or deleted."""
        if not self.has_pullable():
            n = 0
        return self.pulling.pull(n, ttr, now, stop_at_stale=stop_at_stale)

    def has_pullable(self) -> bool:
        """Whether ``pull`` may find something now (a waiting consume looks before it
        sleeps, so a message stored just before it began waiting is not missed)."""
        return not self.paused and not self.deleted and self.states.waiting.has_waiting()

    def pull_wakeup(self) -> trio.Event:
        return self.pulling.pull_wakeup()

    async def wait_pullable(self) -> None:
        """Return once messages may be there to pull (a publish, a requeue, a timeout...)."""
        await self.pulling.pull_wakeup().wait()

    def wake_pullers(self) -> None:
        self.pulling.wake()

    async def fetch(self) -> None:
        await self.pulling.fetch()

    def finish_pulled(self, message_id: bytes) -> bool:
        return self.pulling.finish_pulled(message_id)

    def requeue_pulled(self, message_id: bytes, delay: float, now: float) -> bool:
        return self.pulling.requeue_pulled(message_id, delay, now)

    def touch_pulled(self, message_id: bytes, now: float) -> bool:
        return self.pulling.touch_pulled(message_id, now)

    def dead_letter_pulled(self, message_id: bytes) -> bool:
        return self.pulling.dead_letter_pulled(message_id)

    def peek(self, n: int, now: float) -> list[QueuedMessage]:
        return self.pulling.peek(n, now)

    def peek_head(self) -> tuple[QueuedMessage, bool] | None:
        return self.pulling.peek_head()

    def peek_delayed(self, n: int, wall_ns: int) -> list[QueuedMessage]:
        return self.pulling.delayed(n, wall_ns)

    def ready_count(self) -> int:
        """lmstfy's ``size``: messages waiting and due, those deleted or expired while
        waiting included (lmstfy counts such ready-list entries until a consume meets them);
        not the deferred ones (delayed jobs are deferred the moment they are published)."""
        return self.states.waiting.depth

    async def find(self, message_id: bytes) -> QueuedMessage | None:
        return await self.pulling.find(message_id)

    async def delete(self, message_id: bytes) -> bool:
        return await self.pulling.delete(message_id)

    async def purge_ready(self) -> int:
        """Done with every message waiting and due (lmstfy's destroy); how many."""
        return await self.states.purge_ready()

    # -- dead letters (``DeadLetterDoor``) -------------------------------------------------------
    @property
    def dead_letters(self) -> DeadLetters:
        """The dead-letter store, made if it was not (at start, when it has some on disk)."""
        return self.states.dead_letters

    @property
    def dead_letters_if_any(self) -> DeadLetters | None:
        return self.states.dead_letters_if_any

    @property
    def dead_letters_pending(self) -> bool:
        return self.dead.pending

    @property
    def dead_letter_count(self) -> int:
        return self.dead.count

    async def store_dead_letters(self) -> None:
        """Write the dead letters decided since the last call (``MessageStates``).

        Raises:
            LogError: they could not be written (they stay pending).
        """
        await self.states.store_dead_letters()

    async def respawn(self, n: int, expires: int | None = None) -> int:
        return await self.dead.respawn(n, expires)

    async def peek_dead(self, n: int) -> list[QueuedMessage]:
        return await self.dead.peek(n)

    def is_dead_letter(self, message_id: bytes) -> bool:
        return self.dead.has(message_id)

    async def drop_dead(self, n: int) -> int:
        return await self.dead.drop(n)

    async def empty_dead(self) -> int:
        return await self.dead.empty()
