"""lmstfy's job queues on nsqd's own topics and channels (see ``names`` for the mapping).

A job is a ``Job`` message: published to its queue's topic, delivered through its one
channel to lmstfy consumers (HTTP pulls, in flight for the TTR) and to any NSQ consumer of
that channel alike. lmstfy's tries are the job's most deliveries: a job whose TTR runs out
with no try left, or that would be delivered once more than it may, is a dead letter of the
channel; its TTL is the message's expiry; its delay holds it back until due (``Job.due``).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from ..broker import Broker
from ..channel import Channel
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

    # -- queues ------------------------------------------------------------------------------
    def channel(self, namespace: str, queue: str) -> Channel | None:
        topic = self.broker.topics.get(names.topic_name(namespace, queue))
        return topic.channels.get(names.CHANNEL) if topic is not None else None

    async def _open(self, namespace: str, queue: str) -> Channel:
        broker = self.broker
        topic = broker.get_topic(names.topic_name(namespace, queue))
        channel = topic.channels.get(names.CHANNEL)
        if channel is None:
            channel = broker.get_channel(topic, names.CHANNEL)
            self._new_queue.set()
            self._new_queue = trio.Event()
        if self.state.add_queue(namespace, queue):
            await self.state.save()
        return channel

    # -- publishing ----------------------------------------------------------------------------
    async def publish(self, namespace: str, queue: str, bodies: Sequence[bytes], *, delay: int,
                      ttl: int, tries: int, attributes: bytes | None) -> list[str]:
        """Store the jobs; their ids, in order.

        Raises:
            Exiting, StoreFailed: nsqd is exiting or could not store them.
        """
        channel = await self._open(namespace, queue)
        ts = time.time_ns()
        ms = ts // 1_000_000
        expires = ts + ttl * NS if ttl else 0
        due = ts + delay * NS if delay else 0
        jobs: list[QueuedMessage] = [Job(ids.new_message_id(ms), body, ts, expires=expires,
                                   tries=tries, delay=delay, due=due, attributes=attributes)
                               for body in bodies]
        await self.broker.publish(channel.topic_name, jobs, extended=True)
        version = 0 if attributes is None else 1
        return [ids.job_id(job.id, delay, version) for job in jobs]

    # -- consuming -----------------------------------------------------------------------------
    def take(self, namespace: str, queues: Sequence[str], count: int, ttr: int) -> list[Taken]:
        """Up to ``count`` jobs, from the queues in the order given, in flight for ``ttr``."""
        out: list[Taken] = []
        now = self.broker.now()
        for queue in queues:
            channel = self.channel(namespace, queue)
            if channel is None:
                continue
            out += [Taken(queue, msg) for msg in channel.pull(count - len(out), ttr, now)]
            if len(out) >= count:
                break
        return out

    async def wait(self, namespace: str, queues: Sequence[str]) -> None:
        """Return when one of the queues may have a job (or a queue was made)."""
        async with trio.open_nursery() as nursery:
            async def first(wait: Callable[[], Awaitable[object]]) -> None:
                await wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(first, self._new_queue.wait)
            for queue in queues:
                channel = self.channel(namespace, queue)
                if channel is not None:
                    nursery.start_soon(first, channel.wait_pullable)

    def ack(self, namespace: str, queue: str, job_id: str) -> None:
        """Delete a job: finished when in flight to an HTTP consumer, else removed where it
        waits (see ``Channel.cancel``). Unknown ids are fine, as in lmstfy."""
        channel = self.channel(namespace, queue)
        msg_id = ids.message_id(job_id)
        if channel is None or msg_id is None:
            return
        if not channel.finish_pulled(msg_id):
            channel.cancel(msg_id)

    # -- looking ------------------------------------------------------------------------------
    def peek(self, namespace: str, queue: str) -> QueuedMessage | None:
        channel = self.channel(namespace, queue)
        if channel is None:
            return None
        head = channel.peek(1, self.broker.now())
        return head[0] if head else None

    def find(self, namespace: str, queue: str, job_id: str) -> QueuedMessage | None:
        """The job wherever it is: in flight, delayed, waiting (in memory or read ahead from
        disk), or a dead letter."""
        channel = self.channel(namespace, queue)
        msg_id = ids.message_id(job_id)
        if channel is None or msg_id is None:
            return None
        found = channel.in_flight.get(msg_id)
        if found is not None:
            return found
        for msg in channel.deferred:
            if msg.id == msg_id:
                return msg
        for msg in channel.backlog.peek(len(channel.backlog.memory) + 10_000):
            if msg.id == msg_id:
                return msg
        dead = channel.dead_letters_if_any
        if dead is not None:
            for msg in dead.peek(10_000):
                if msg.id == msg_id:
                    return msg
        return None

    def size(self, namespace: str, queue: str) -> int:
        channel = self.channel(namespace, queue)
        return channel.depth if channel is not None else 0

    async def destroy(self, namespace: str, queue: str) -> None:
        """Drop the jobs waiting in the queue (not the delayed, in-flight or dead ones) and
        forget the queue in ``/info``."""
        channel = self.channel(namespace, queue)
        if channel is not None:
            backlog = channel.backlog
            backlog.clear_memory()
            backlog.ack_all()
            if backlog.disk is not None:
                await backlog.disk.empty()
        if self.state.forget_queue(namespace, queue):
            await self.state.save()

    # -- dead letters -------------------------------------------------------------------------
    def dead_letter_head(self, namespace: str, queue: str) -> tuple[int, QueuedMessage | None]:
        channel = self.channel(namespace, queue)
        if channel is None or not channel.dead_letter_count:
            return 0, None
        head = channel.dead_letters.peek(1)
        return channel.dead_letter_count, head[0] if head else None

    async def respawn(self, namespace: str, queue: str, limit: int, ttl: int) -> int:
        channel = self.channel(namespace, queue)
        if channel is None or not channel.dead_letter_count:
            return 0
        await self.broker.store_dead_letters(channel)
        expires = time.time_ns() + ttl * NS if ttl else 0
        return channel.respawn(limit, expires)

    async def delete_dead(self, namespace: str, queue: str, limit: int) -> int:
        channel = self.channel(namespace, queue)
        if channel is None or not channel.dead_letter_count:
            return 0
        await self.broker.store_dead_letters(channel)
        return len(channel.dead_letters.take(limit))


def job_json(namespace: str, queue: str, msg: QueuedMessage, *, remain_tries: int | None = None
             ) -> dict[str, object]:
    """A job as lmstfy answers it (without ``msg``): ``remain_tries`` is what the job has
    left after its deliveries so far, unless given."""
    now_ns = time.time_ns()
    job = msg if isinstance(msg, Job) else None
    delay = job.delay if job is not None else 0
    attributes = job.attributes if job is not None else None
    if remain_tries is None:
        remain_tries = max(job.tries - job.attempts, 0) if job is not None else 0
    return {
        "namespace": namespace,
        "queue": queue,
        "job_id": ids.job_id(msg.id, delay, 0 if attributes is None else 1),
        "data": base64.b64encode(msg.body).decode("ascii"),
        "ttl": max((msg.expires - now_ns + NS - 1) // NS, 0) if msg.expires else 0,
        "elapsed_ms": max((now_ns - msg.timestamp) // 1_000_000, 0),
        "remain_tries": remain_tries,
        "attributes": json.loads(attributes) if attributes else None,
    }
