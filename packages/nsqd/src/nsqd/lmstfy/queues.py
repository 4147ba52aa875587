"""lmstfy's job queues on nsqd's own topics and channels (see ``names`` for the mapping).

A job is a ``Job`` message: published to its queue's topic, delivered through its one
channel to lmstfy consumers (HTTP pulls, in flight for the TTR) and to any NSQ consumer of
that channel alike. lmstfy's tries are the job's most deliveries: a job whose TTR runs out
with no try left, or that would be delivered once more than it may, is a dead letter of the
channel; its TTL is the message's expiry; its delay holds it back until due (``due``). What
lmstfy answers (the size of the ready list, its head, a job wherever it is) the channel's
front door says (``Channel.ready_count``, ``peek_head``, ``find``, ``delete``,
``purge_ready``), the same whatever the storage flags: a job is visible to the next consume
the moment its publish is answered, and a DELETE under ``--sync-every=1`` is on disk before
it is answered.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from json.encoder import encode_basestring_ascii

import attrs
import trio

from ..broker import Broker
from ..channel import Channel
from ..errors import LogError, StoreFailed
from ..message import Job, QueuedMessage
from . import ids, names
from .state import State

NS = 1_000_000_000


@attrs.frozen
class Taken:
    """A job handed out, and the queue it came from."""

    queue: str
    msg: QueuedMessage


class JobQueues:
    def __init__(self, broker: Broker, state: State) -> None:
        self.broker = broker
        self.state = state
        self._new_queue = trio.Event()  # waiting consumers look at queues made since
        self._waiting = 0  # consumers in ``wait``: only they need ``_new_queue`` set

    # -- queues ------------------------------------------------------------------------------
    def channel(self, namespace: str, queue: str) -> Channel | None:
        topic = self.broker.topics.get(names.topic_name(namespace, queue))
        return topic.channels.get(names.CHANNEL) if topic is not None else None

    async def _open(self, namespace: str, queue: str) -> Channel:
        """The queue's channel, made if needed. With --etcd-endpoints a queue's topic this
        node does not have is placed first, as a first publish places a topic
        (``--default-replicas``; docs/design/replication.md).

        Raises:
            StoreFailed: it could not be placed, or is placed on other nodes only (its jobs
                go to its leader's lmstfy).
        """
        broker = self.broker
        name = names.topic_name(namespace, queue)
        cluster = broker.replication
        if cluster is not None and name not in broker.topics and not await cluster.hold(name):
            raise StoreFailed(f"the queue's topic {name} is placed on other nodes: "
                              "publish on its leader")
        topic = broker.get_topic(name)
        channel = topic.channels.get(names.CHANNEL)
        if channel is None:
            channel = broker.get_channel(topic, names.CHANNEL)
            await broker.keep_channel(channel)  # on disk before the job is answered
        channel.configure(requeue_behind=True)  # lmstfy's ready list: back of the queue
        if self.state.add_queue(namespace, queue):
            await self.state.save()
        return channel

    # -- publishing ----------------------------------------------------------------------------
    async def publish(self, namespace: str, queue: str, bodies: Sequence[bytes], *, delay: int,
                      ttl: int, tries: int, attributes: bytes | None) -> list[str]:
        """Store the jobs; their ids, in order. Waiting consumers see them once stored.

        Raises:
            Exiting, StoreFailed: nsqd is exiting or could not store them.
        """
        channel = await self._open(namespace, queue)
        ts = self.broker.clock.wall_ns()
        ms = ts // 1_000_000
        expires = ts + ttl * NS if ttl else 0
        due = ts + delay * NS if delay else 0
        version = 0 if attributes is None else 1
        jobs: list[QueuedMessage] = []
        job_ids: list[str] = []
        for body in bodies:
            message_id, job_id = ids.new_job(ms, delay, version)
            jobs.append(Job(message_id, body, ts, expires=expires, tries=tries, delay=delay,
                            due=due, attributes=attributes))
            job_ids.append(job_id)
        await self.broker.publish(channel.topic_name, jobs)
        if self._waiting:  # a consumer waiting on no queue yet looks again
            self._new_queue.set()
            self._new_queue = trio.Event()
        return job_ids

    # -- consuming -----------------------------------------------------------------------------
    async def take(self, namespace: str, queues: Sequence[str], count: int, ttr: int
                   ) -> list[Taken]:
        """Up to ``count`` jobs, from the queues in the order given, in flight for ``ttr``;
        as lmstfy pops its ready lists, a job deleted or expired while waiting ends the take
        (what was taken before it is kept)."""
        out: list[Taken] = []
        for queue in queues:
            channel = self.channel(namespace, queue)
            if channel is None:
                continue
            await channel.fetch()
            now = self.broker.now()
            msgs = channel.pull(count - len(out), ttr, now, stop_at_stale=True)
            out += [Taken(queue, msg) for msg in msgs]
            if len(out) >= count or channel.stale_popped:
                break  # full, or a stale job ended the take
        return out

    async def wait(self, namespace: str, queues: Sequence[str]) -> None:
        """Return when one of the queues may have a job (or a queue was made). The events
        are taken before anything can run, so a job stored after the caller's last look is
        never missed."""
        events = [self._new_queue]
        for queue in queues:
            channel = self.channel(namespace, queue)
            if channel is not None:
                if channel.has_pullable():
                    await trio.lowlevel.checkpoint()
                    return
                events.append(channel.pull_wakeup())
        self._waiting += 1
        try:
            async with trio.open_nursery() as nursery:
                for event in events:
                    nursery.start_soon(_first, event, nursery.cancel_scope)
        finally:
            self._waiting -= 1

    async def ack(self, namespace: str, queue: str, job_id: str) -> None:
        """Delete a job wherever it is (unknown ids are fine, as in lmstfy); under
        ``--sync-every=1`` on disk before this returns.

        Raises:
            StoreFailed: the deletion could not be made durable.
        """
        channel = self.channel(namespace, queue)
        msg_id = ids.message_id(job_id)
        if channel is None or msg_id is None:
            return
        if await channel.delete(msg_id) and self.broker.opts.sync_every == 1:
            await self.broker.flush_cursor(channel)

    # -- looking ------------------------------------------------------------------------------
    async def peek(self, namespace: str, queue: str) -> tuple[QueuedMessage, bool] | None:
        """The head of the ready list, and whether it is stale (deleted or expired)."""
        channel = self.channel(namespace, queue)
        if channel is None:
            return None
        await channel.fetch()
        return channel.peek_head()

    async def find(self, namespace: str, queue: str, job_id: str) -> QueuedMessage | None:
        """The job wherever it is (delayed, waiting, in flight, dead), unless it expired or
        was deleted."""
        channel = self.channel(namespace, queue)
        msg_id = ids.message_id(job_id)
        if channel is None or msg_id is None:
            return None
        msg = await channel.find(msg_id)
        if msg is None or (msg.expires and msg.expires <= self.broker.clock.wall_ns()
                           and not self.is_dead(channel, msg)):
            return None
        return msg

    @staticmethod
    def is_dead(channel: Channel, msg: QueuedMessage) -> bool:
        """Whether ``msg`` is one of the channel's dead letters (they never expire)."""
        return channel.is_dead_letter(msg.id)

    def size(self, namespace: str, queue: str) -> int:
        """lmstfy's size: the ready list's length, stale entries included."""
        channel = self.channel(namespace, queue)
        return channel.ready_count() if channel is not None else 0

    async def destroy(self, namespace: str, queue: str) -> None:
        """Drop the jobs waiting in the queue (not the delayed, in-flight or dead ones) and
        forget the queue in ``/info``; under ``--sync-every=1`` on disk before this returns."""
        channel = self.channel(namespace, queue)
        if channel is not None:
            await channel.purge_ready()
            if self.broker.opts.sync_every == 1:
                await self.broker.flush_cursor(channel)
        if self.state.forget_queue(namespace, queue):
            await self.state.save()

    # -- dead letters -------------------------------------------------------------------------
    def dead_letter_size(self, namespace: str, queue: str) -> int:
        channel = self.channel(namespace, queue)
        return channel.dead_letter_count if channel is not None else 0

    async def dead_letter_head(self, namespace: str, queue: str
                               ) -> tuple[int, QueuedMessage | None]:
        """How many dead letters, and the oldest (none once the queue is gone, also when
        that happens while the oldest is read)."""
        channel = self.channel(namespace, queue)
        if channel is None or not channel.dead_letter_count:
            return 0, None
        head = await channel.peek_dead(1)
        if channel.deleted:
            return 0, None
        return channel.dead_letter_count, head[0] if head else None

    async def respawn(self, namespace: str, queue: str, limit: int, ttl: int) -> int:
        channel = self.channel(namespace, queue)
        if channel is None or not channel.dead_letter_count:
            return 0
        expires = self.broker.clock.wall_ns() + ttl * NS if ttl else 0
        return await self._on_dead_letters(channel, partial(channel.respawn, limit, expires))

    async def delete_dead(self, namespace: str, queue: str, limit: int) -> int:
        channel = self.channel(namespace, queue)
        if channel is None or not channel.dead_letter_count:
            return 0
        return await self._on_dead_letters(channel, partial(channel.drop_dead, limit))

    async def _on_dead_letters(self, channel: Channel, work: Callable[[], Awaitable[int]]
                               ) -> int:
        """``work`` on the channel's dead letters, once those pending are stored: its count,
        or 0 when the queue is gone before it ends (its topic or channel deleted, which
        closes the dead letters' queue under the work: no failure then). lmstfy has no
        deleted queue; what it answers for a queue with no dead letters is the answer."""
        try:
            await self.broker.store_dead_letters(channel)
            count = await work()
        except LogError:
            if not channel.deleted:
                raise
            return 0
        return 0 if channel.deleted else count


async def _first(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


_COMPACT = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def consumed_job_text(namespace: str, queue: str, msg: QueuedMessage, now_ns: int) -> str:
    """A consumed job as lmstfy answers it: the text of ``{"msg": "new job", **job_json(...)}``
    in compact JSON with sorted keys, written directly (a consume of 100 jobs spent more on
    building and encoding their dicts than on taking them)."""
    job = msg if isinstance(msg, Job) else None
    if job is not None:
        delay, attributes = job.delay, job.attributes
        remain_tries = max(job.tries - job.attempts, 0)
    else:
        delay, attributes, remain_tries = 0, None, 0
    job_id = ids.job_id(msg.id, delay, 0 if attributes is None else 1)
    elapsed = max((now_ns - msg.timestamp) // 1_000_000, 0)
    ttl = max((msg.expires - now_ns + NS - 1) // NS, 0) if msg.expires else 0
    attributes_text = _COMPACT.encode(json.loads(attributes)) if attributes else "null"
    data = base64.b64encode(msg.body).decode("ascii")
    return (f'{{"attributes":{attributes_text},"data":"{data}","elapsed_ms":{elapsed},'
            f'"job_id":"{job_id}","msg":"new job","namespace":{encode_basestring_ascii(namespace)},'
            f'"queue":{encode_basestring_ascii(queue)},"remain_tries":{remain_tries},"ttl":{ttl}}}')


def job_json(namespace: str, queue: str, msg: QueuedMessage, now_ns: int, *,
             remain_tries: int | None = None, stale: bool = False, dead: bool = False
             ) -> dict[str, object]:
    """A job as lmstfy answers it (without ``msg``): ``remain_tries`` is what the job has
    left after its deliveries so far, unless given; a ``stale`` job (deleted or expired while
    waiting) shows no data, as lmstfy shows a ready-list entry whose data is gone; a ``dead``
    job never expires, so its ``ttl`` is 0."""
    job = msg if isinstance(msg, Job) else None
    delay = job.delay if job is not None else 0
    attributes = job.attributes if job is not None else None
    if remain_tries is None:
        remain_tries = max(job.tries - job.attempts, 0) if job is not None else 0
    job_id = ids.job_id(msg.id, delay, 0 if attributes is None else 1)
    elapsed = max((now_ns - msg.timestamp) // 1_000_000, 0)
    if stale:
        return {"namespace": namespace, "queue": queue, "job_id": job_id, "data": None,
                "ttl": 0, "elapsed_ms": elapsed, "remain_tries": 0, "attributes": None}
    ttl = max((msg.expires - now_ns + NS - 1) // NS, 0) if msg.expires and not dead else 0
    return {
        "namespace": namespace,
        "queue": queue,
        "job_id": job_id,
        "data": base64.b64encode(msg.body).decode("ascii"),
        "ttl": ttl,
        "elapsed_ms": elapsed,
        "remain_tries": remain_tries,
        "attributes": json.loads(attributes) if attributes else None,
    }
