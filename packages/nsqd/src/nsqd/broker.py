"""The broker's state: topics, channels, clients, and the two loops that move messages.

- the pump task delivers messages for every channel marked dirty (new messages, a freed
  in-flight slot, a RDY change, an unpause), so delivery is batched per wake-up, never a
  task or an await per message;
- the queue scan task runs every 100 ms, as nsqd's does, and requeues timed-out in-flight
  messages and releases due deferred ones.

Both loops and every protocol handler run on the one Trio thread, so no locks are needed: a
handler's changes are atomic between its awaits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio
from nsq_common import NSQ_VERSION, ServerFeatures

from .channel import Channel
from .client import Client
from .guid import GuidFactory
from .message import Message
from .options import Options
from .topic import Topic

log = logging.getLogger("nsqd")

QUEUE_SCAN_INTERVAL = 0.1


class Broker:
    def __init__(self, opts: Options, clock: Callable[[], float] = trio.current_time) -> None:
        self.opts = opts
        self.now = clock
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, Client] = {}
        self.guid = GuidFactory(opts.id)
        self.start_time = int(time.time())
        self.health = "OK"
        self.tcp_port = 0
        self.http_port = 0
        self.features = ServerFeatures(
            version=NSQ_VERSION,
            max_rdy_count=opts.max_rdy_count,
            msg_timeout=int(opts.msg_timeout * 1000),
            max_msg_timeout=int(opts.max_msg_timeout * 1000),
            heartbeat_interval=30000,
            max_heartbeat_interval=int(opts.max_heartbeat_interval * 1000),
            output_buffer_size=16384,
            max_output_buffer_size=opts.max_output_buffer_size,
            output_buffer_timeout=int(opts.output_buffer_timeout * 1000),
            min_output_buffer_timeout=int(opts.min_output_buffer_timeout * 1000),
            max_output_buffer_timeout=int(opts.max_output_buffer_timeout * 1000),
            max_deflate_level=opts.max_deflate_level,
        )
        self._next_client_id = 0
        self._dirty: set[Channel] = set()
        self._dirty_event = trio.Event()

    # -- topics and channels -------------------------------------------------------------
    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            topic = Topic(name, self, max_msg_timeout=self.opts.max_msg_timeout)
            self.topics[name] = topic
            log.info("TOPIC(%s): created", name)
        return topic

    def get_channel(self, topic: Topic, name: str) -> Channel:
        channel, created = topic.get_channel(name, self.now())
        if created:
            log.info("TOPIC(%s): new channel(%s)", topic.name, name)
        return channel

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        topic.deleted = True
        for channel_name in list(topic.channels):
            self._close_channel(topic, channel_name)
        log.info("TOPIC(%s): deleted", name)
        return True

    def delete_channel(self, topic: Topic, name: str) -> bool:
        if name not in topic.channels:
            return False
        self._close_channel(topic, name)
        log.info("TOPIC(%s): deleted channel(%s)", topic.name, name)
        if topic.ephemeral and not topic.channels and not topic.deleted:
            self.delete_topic(topic.name)
        return True

    def _close_channel(self, topic: Topic, name: str) -> None:
        channel = topic.channels.pop(name)
        channel.deleted = True
        self._dirty.discard(channel)
        for client in list(channel.clients.values()):
            client.disconnect()
        channel.clients.clear()
        channel.empty()

    def channel_emptied_of_clients(self, channel: Channel) -> None:
        """An ephemeral channel lost its last client: it goes, and an ephemeral topic with it."""
        topic = self.topics.get(channel.topic_name)
        if topic is not None and topic.channels.get(channel.name) is channel:
            self.delete_channel(topic, channel.name)

    # -- publishing and subscribing -------------------------------------------------------
    async def publish(self, topic_name: str, msgs: list[Message]) -> None:
        self.get_topic(topic_name).put(msgs, self.now())

    def subscribe(self, client: Client, topic_name: str, channel_name: str) -> Channel:
        topic = self.get_topic(topic_name)
        channel = self.get_channel(topic, channel_name)
        channel.add_client(client)
        client.channel = channel
        return channel

    # -- clients ---------------------------------------------------------------------------
    def new_client(self, remote_address: str) -> Client:
        self._next_client_id += 1
        opts = self.opts
        client = Client(
            self._next_client_id, remote_address, msg_timeout=opts.msg_timeout,
            heartbeat_interval=30.0, output_buffer_size=16384,
            output_buffer_timeout=opts.output_buffer_timeout, clock=self.now,
        )
        self.clients[client.id] = client
        return client

    def remove_client(self, client: Client) -> None:
        self.clients.pop(client.id, None)
        channel = client.channel
        if channel is not None:
            client.channel = None
            channel.remove_client(client)

    # -- the loops -------------------------------------------------------------------------
    def mark_dirty(self, channel: Channel) -> None:
        self._dirty.add(channel)
        self._dirty_event.set()

    def iter_channels(self) -> list[Channel]:
        return [c for t in self.topics.values() for c in t.channels.values()]

    async def run_pump(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                       ) -> None:
        task_status.started()
        while True:
            await self._dirty_event.wait()
            self._dirty_event = trio.Event()
            dirty, self._dirty = self._dirty, set()
            now = self.now()
            for channel in dirty:
                if not channel.deleted:
                    channel.pump(now)
            await trio.lowlevel.checkpoint()

    async def run_queue_scan(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                             ) -> None:
        task_status.started()
        while True:
            await trio.sleep(QUEUE_SCAN_INTERVAL)
            now = self.now()
            for channel in self.iter_channels():
                if channel.in_flight or channel.deferred:
                    channel.scan(now)
