"""The broker: the registry of topics, channels and clients, publishing and subscribing, and
the lifecycle of the tasks that move messages.

Its parts live apart: delivery and timeouts in ``pump.py`` (the pump and queue-scan tasks),
nsqd.dat in ``metadata.py`` (its writer task), messages across restarts in ``saving.py``.
Each topic has one task moving held messages to its channels, and each disk queue one task
reading ahead; the broker starts and stops them with their topic or channel.

Everything runs on the one Trio thread, so no locks are needed: a handler's changes are
atomic between its awaits. ``close`` saves every message (queued, in flight, deferred) of
every durable topic and channel, for the next start.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import trio
from nsq_common import NSQ_VERSION, ServerFeatures
from nsq_serving import ConnectionCounts

from . import deferred_store, metadata, saving
from .backlog import MAX_EXTENSION, Backlog, Records, new_records
from .channel import Channel
from .client import Client
from .deadletters import SUFFIX as DEAD_LETTER_SUFFIX
from .deadletters import DeadLetters
from .diskqueue import DiskQueue
from .e2e import LatencyStream
from .errors import (
    DiskQueueClosed,
    DiskQueueError,
    Exiting,
    StartError,
    StoreFailed,
    SubscribeRefused,
)
from .guid import GuidFactory
from .lookup import Lookup
from .message import QueuedMessage
from .options import Options, Settings
from .pump import Pump
from .statsd import run_statsd
from .tls import server_context, tls_required
from .topic import Topic

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("nsqd")


class Broker:
    def __init__(self, opts: Options, clock: Callable[[], float] = trio.current_time) -> None:
        self.opts = opts
        self.settings = Settings.from_options(opts)  # what PUT /config changes
        self.now = clock
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, Client] = {}
        self.guid = GuidFactory(opts.id)
        self.start_time = int(time.time())
        self.health = "OK"
        self.exiting = False
        self._loaded = False  # nsqd.dat read: only then may close() write it (and queues) back
        self.tcp_port = 0
        self.http_port = 0
        self.https_port = 0
        self.tls_context = server_context(opts)
        self.tls_required = tls_required(opts)
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
            tls_available=self.tls_context is not None,
            snappy_enabled=opts.snappy,
            deflate_enabled=opts.deflate,
            auth_required=bool(opts.auth_http_addresses),
        )
        # With --sync-every 1 every message is written through to disk before it is
        # acknowledged, so that not even a kill -9 loses one: memory queues are skipped, and a
        # message read from disk stays on disk until it is finished (explicit commits).
        self.mem_queue_size = 0 if opts.sync_every == 1 else opts.mem_queue_size
        self._next_client_id = 0  # also the count of TCP clients accepted so far
        self.http_connections = ConnectionCounts()  # kept by nsq_serving, for /metrics
        self.pump = Pump(clock, self.iter_channels, self.store_dead_letters)
        # Channels call this once per FIN: the pump's own bound method, no call in between.
        self.mark_dirty: Callable[[Channel], None] = self.pump.mark_dirty
        self.metadata = metadata.MetadataWriter(opts.data_path, self.topics.values, log)
        self.metadata_changed: Callable[[], None] = self.metadata.changed
        self._nursery: trio.Nursery | None = None
        self._scopes: dict[object, trio.CancelScope] = {}
        self.lookup = Lookup(self)
        # Without auth servers the client is never used: it is then made on first use, since
        # httpx and a TLS context with the system's CAs are a good part of nsqd's start-up. A
        # --tls-root-ca-file is still read now, so that a bad one stops nsqd at start.
        self._auth_http: httpx.AsyncClient | None = None
        if opts.auth_http_addresses or opts.tls_root_ca_file:
            self._auth_http = self._new_auth_http()

    def _new_auth_http(self) -> httpx.AsyncClient:
        import httpx  # deferred: see __init__

        opts = self.opts
        return httpx.AsyncClient(timeout=httpx.Timeout(
            opts.http_client_request_timeout, connect=opts.http_client_connect_timeout),
            verify=ssl.create_default_context(cafile=opts.tls_root_ca_file or None))

    @property
    def auth_http(self) -> httpx.AsyncClient:
        """The HTTP client of the auth servers (--auth-http-address)."""
        if self._auth_http is None:
            self._auth_http = self._new_auth_http()
        return self._auth_http

    # -- lifecycle -----------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load what the last run left, then keep the broker's loops going until cancelled;
        on the way out, save every message to disk."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._load()
                nursery.start_soon(self.pump.run)
                nursery.start_soon(self.pump.run_scan)
                nursery.start_soon(self.metadata.run)
                await nursery.start(self.lookup.run)
                if self.opts.statsd_address:
                    nursery.start_soon(run_statsd, self)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                await self.close()

    def _load(self) -> None:
        path = metadata.metadata_path(self.opts.data_path)
        try:
            topics, warnings = metadata.load(path)
        except ValueError as exc:
            raise StartError(f"failed to load metadata - {exc}") from None
        for warning in warnings:
            log.warning("%s", warning)
        for meta in topics:
            topic = self.get_topic(meta.name)
            topic.paused = meta.paused
            topic.message_ttl = meta.message_ttl
            for cmeta in meta.channels:
                channel = self.get_channel(topic, cmeta.name)
                channel.paused = cmeta.paused
                channel.max_attempts = cmeta.max_attempts
                channel.dead_letter_expired = cmeta.dead_letter_expired
        if topics:
            log.info("loaded metadata: %d topics", len(topics))
        self._loaded = True
        self.metadata.write_now()

    def _spawn(self, key: object, fn: Callable[[], Awaitable[None]]) -> None:
        assert self._nursery is not None, "the broker is not running"
        scope = trio.CancelScope()
        self._scopes[key] = scope

        async def runner() -> None:
            with scope:
                await fn()

        self._nursery.start_soon(runner)

    def _stop(self, key: object) -> None:
        scope = self._scopes.pop(key, None)
        if scope is not None:
            scope.cancel()

    def _disk_queue(self, name: str) -> DiskQueue:
        o = self.opts
        return DiskQueue(name, o.data_path or ".", max_bytes_per_file=o.max_bytes_per_file,
                         min_msg_size=26, max_msg_size=o.max_msg_size + 26 + MAX_EXTENSION,
                         sync_every=o.sync_every, sync_timeout=o.sync_timeout, logger=log,
                         explicit_commit=o.sync_every == 1)

    # -- topics and channels -------------------------------------------------------------
    def get_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        topic = Topic(name, mem_queue_size=self._mem_size(name),
                      disk=None if name.endswith("#ephemeral") else self._disk_queue(name),
                      clock=self.now)
        self.topics[name] = topic
        saving.restore_deferred(self.opts.data_path, name, topic, self.now())
        self._spawn(topic, topic.run)
        self.metadata_changed()
        log.info("TOPIC(%s): created", name)
        self.lookup.changed("register", name, None)
        self.lookup.topic_created(topic)
        return topic

    def get_channel(self, topic: Topic, name: str) -> Channel:
        channel = topic.channels.get(name)
        if channel is not None:
            return channel
        durable = not (topic.ephemeral or name.endswith("#ephemeral"))
        queue_name = f"{topic.name}:{name}"
        percentiles = self.opts.e2e_processing_latency_percentiles
        channel = Channel(topic.name, name, self, max_msg_timeout=self.opts.max_msg_timeout,
                          mem_queue_size=self._mem_size(name),
                          disk=self._disk_queue(queue_name) if durable else None,
                          e2e=LatencyStream(percentiles,
                                            self.opts.e2e_processing_latency_window_time,
                                            self.now) if percentiles else None)
        channel.default_max_attempts = self.opts.max_attempts
        saving.restore_deferred(self.opts.data_path, queue_name, channel, self.now())
        topic.add_channel(channel)
        self._spawn(channel, channel.backlog.run)
        if durable and self._dead_letter_meta(channel).exists():
            channel.dead_letters  # noqa: B018 - stored ones are counted from the start
        self.metadata_changed()
        log.info("TOPIC(%s): new channel(%s)", topic.name, name)
        self.lookup.changed("register", topic.name, name)
        return channel

    def _mem_size(self, name: str) -> int:
        if name.endswith("#ephemeral"):
            return max(self.opts.mem_queue_size, 1)
        return self.mem_queue_size

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        topic.deleted = True
        for channel_name in list(topic.channels):
            self._remove_channel(topic, channel_name)
        self._stop(topic)
        topic.empty()
        self._drop_files(topic.backlog.disk, topic.name)
        self.metadata_changed()
        log.info("TOPIC(%s): deleted", name)
        self.lookup.changed("unregister", name, None)
        return True

    def delete_channel(self, topic: Topic, name: str) -> bool:
        if name not in topic.channels:
            return False
        self._remove_channel(topic, name)
        self.metadata_changed()
        log.info("TOPIC(%s): deleted channel(%s)", topic.name, name)
        self.lookup.changed("unregister", topic.name, name)
        if topic.ephemeral and not topic.channels and not topic.deleted:
            self.delete_topic(topic.name)
        return True

    def _remove_channel(self, topic: Topic, name: str) -> None:
        channel = topic.channels.pop(name)
        channel.deleted = True
        channel.wake_pullers()  # they find it deleted and answer
        self.pump.forget(channel)
        self._stop(channel)
        for client in list(channel.clients.values()):
            client.disconnect()
        channel.clients.clear()
        channel.empty()
        self._drop_files(channel.backlog.disk, f"{topic.name}:{name}")
        dead = channel.dead_letters_if_any
        if dead is not None:
            self._stop(dead)
            self._drop_files(dead.backlog.disk, self._dead_letter_name(channel))

    def dead_letters_for(self, channel: Channel) -> DeadLetters:
        """The dead-letter queue of ``channel``, made when it first needs one (or at start
        when it has one on disk); in memory only for an ephemeral channel."""
        durable = channel.backlog.disk is not None
        disk = self._disk_queue(self._dead_letter_name(channel)) if durable else None
        dead = DeadLetters(Backlog(0 if durable else 1 << 62, disk, lambda: None))
        self._spawn(dead, dead.backlog.run)
        return dead

    @staticmethod
    def _dead_letter_name(channel: Channel) -> str:
        return f"{channel.topic_name}:{channel.name}{DEAD_LETTER_SUFFIX}"

    def _dead_letter_meta(self, channel: Channel) -> Path:
        return Path(self.opts.data_path or ".") / (
            f"{self._dead_letter_name(channel)}.diskqueue.meta.dat")

    async def store_dead_letters(self, channel: Channel) -> None:
        try:
            await channel.store_dead_letters()
        except DiskQueueError as exc:
            self.health = f"NOK - {exc}"
            log.error("%s: failed to store dead letters - %s", self._dead_letter_name(channel),
                      exc)

    def _drop_files(self, disk: DiskQueue | None, queue_name: str) -> None:
        deferred_store.deferred_path(self.opts.data_path, queue_name).unlink(missing_ok=True)
        if disk is not None and self._nursery is not None:
            self._nursery.start_soon(disk.delete)

    async def empty_topic(self, topic: Topic) -> None:
        topic.empty()
        if topic.backlog.disk is not None:
            await topic.backlog.disk.empty()

    async def empty_channel(self, channel: Channel) -> None:
        channel.empty()
        if channel.backlog.disk is not None:
            await channel.backlog.disk.empty()

    def channel_emptied_of_clients(self, channel: Channel) -> None:
        """An ephemeral channel lost its last client: it goes, and an ephemeral topic with it."""
        topic = self.topics.get(channel.topic_name)
        if topic is not None and topic.channels.get(channel.name) is channel:
            self.delete_channel(topic, channel.name)

    # -- publishing and subscribing -------------------------------------------------------
    def new_messages(self, bodies: list[bytes], defer: float = 0.0, ttl: int = 0
                     ) -> list[QueuedMessage]:
        """Messages for ``bodies``: consecutive ids, one timestamp (one clock read per batch),
        expiring ``ttl`` seconds after it when ``ttl`` is given."""
        ts = time.time_ns()
        first = self.guid.take(len(bodies))
        expires = ts + ttl * 1_000_000_000 if ttl else 0
        return [QueuedMessage(b"%016x" % (first + i), body, ts, 0, defer, expires)
                for i, body in enumerate(bodies)]

    def new_records(self, bodies: list[bytes]) -> Records:
        """``new_messages`` (no deferral, no expiry) as the records they wait as
        (``backlog.new_records``): what PUB and MPUB publish."""
        return new_records(bodies, self.guid.take(len(bodies)), time.time_ns())

    async def publish(self, topic_name: str, msgs: list[QueuedMessage] | Records, *,
                      extended: bool = False) -> None:
        """Store ``msgs`` (messages, or records from ``new_records``) in a topic (created if
        needed).

        Raises:
            Exiting: nsqd is shutting down.
            StoreFailed: the disk write failed (nsqd turns unhealthy until a store succeeds).
        """
        if self.exiting:
            raise Exiting
        try:
            topic = self.get_topic(topic_name)
            if isinstance(msgs, Records):
                await topic.put_records(msgs)
            else:
                await topic.put(msgs, extended=extended)
        except DiskQueueError as exc:
            self.health = f"NOK - {exc}"
            log.error("TOPIC(%s): failed to store messages - %s", topic_name, exc)
            if isinstance(exc, DiskQueueClosed):
                raise Exiting from exc
            raise StoreFailed(str(exc)) from exc
        if self.health != "OK":
            self.health = "OK"

    def subscribe(self, client: Client, topic_name: str, channel_name: str) -> Channel:
        """Add ``client`` to a channel (created if needed).

        Raises:
            Exiting: nsqd is shutting down.
            SubscribeRefused: the channel has --max-channel-consumers already.
        """
        if self.exiting:
            raise Exiting
        topic = self.get_topic(topic_name)
        channel = self.get_channel(topic, channel_name)
        limit = self.opts.max_channel_consumers
        if limit and len(channel.clients) >= limit:
            raise SubscribeRefused(
                f"consumers for {topic_name}:{channel_name} exceeds limit of {limit}")
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

    @property
    def clients_accepted(self) -> int:
        """TCP connections that sent protocol V2's magic since start."""
        return self._next_client_id

    def remove_client(self, client: Client) -> None:
        self.clients.pop(client.id, None)
        channel = client.channel
        if channel is not None:
            client.channel = None
            channel.remove_client(client)

    # -- delivery ------------------------------------------------------------------------
    def iter_channels(self) -> list[Channel]:
        return [c for t in self.topics.values() for c in t.channels.values()]

    # -- shutdown --------------------------------------------------------------------------
    async def close(self) -> None:
        """Save every message of every durable topic and channel, then the metadata.

        Nothing is written when nsqd.dat could not be loaded: the start failed, and an empty
        nsqd.dat written over an unreadable one would orphan every queue it listed.
        """
        self.exiting = True
        if self._loaded:
            await self._save_everything()
        if self._auth_http is not None:
            await self._auth_http.aclose()

    async def _save_everything(self) -> None:
        for client in list(self.clients.values()):
            self.remove_client(client)  # their in-flight messages go back to the queues
        await saving.save_all(list(self.topics.values()), self.opts.data_path, self.now(),
                              self.store_dead_letters)
        try:
            self.metadata.write_now()
        except OSError as exc:
            log.error("failed to persist metadata - %s", exc)
