"""The broker: the registry of topics, channels and clients, publishing and subscribing, and
the lifecycle of the tasks that move messages.

Its parts live apart: delivery and timeouts in ``pump.py`` (the pump and queue-scan tasks),
nsqd.dat in ``metadata.py`` (its writer task), what is kept across a restart (loaded at start,
saved at close) in ``restart.py``, storage in ``topiclog.py`` (a log per topic) and
``cursor.py`` (a cursor per channel). Each topic has one task (its log's disk work and its
cursors' persistence), and each channel's private queues (own, dead letters: made by
``channelqueues``) one each; the broker starts and stops them with their topic or channel.

Everything runs on the one Trio thread, so no locks are needed: a handler's changes are
atomic between its awaits. ``close`` persists every cursor (with what it holds: attempts and
due times) and writes what the logs hold in memory, for the next start (``restart.save``).
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import trio
from nsq_common import NSQ_VERSION, ServerFeatures
from nsq_serving import ConnectionCounts

from . import metadata, restart
from .channel import Channel
from .channelqueues import ChannelQueues
from .client import Client
from .clock import Clock, SystemClock
from .cursor import Cursor
from .deletion import remove_deleted
from .e2e import LatencyStream
from .errors import (
    Exiting,
    LogClosed,
    LogError,
    StoreFailed,
    SubscribeRefused,
)
from .guid import GuidFactory
from .lookup import Lookup
from .message import QueuedMessage
from .options import Options, Settings
from .pump import Pump
from .record import Records, new_records
from .statsd import run_statsd
from .tls import server_context, tls_required
from .topic import Topic
from .topiclog import TopicLog

if TYPE_CHECKING:
    import httpx

    from .backlog import Backlog
    from .deadletters import DeadLetters
    from .replicas import Replicas

log = logging.getLogger("nsqd")

TOPICS_DIR = "topics"


class Broker:
    def __init__(self, opts: Options, clock: Clock | None = None) -> None:
        self.opts = opts
        self.settings = Settings.from_options(opts)  # what PUT /config changes
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.now: Callable[[], float] = self.clock.now
        self.topics: dict[str, Topic] = {}
        self.clients: dict[int, Client] = {}
        self.guid = GuidFactory(opts.id)
        self.start_time = self.clock.wall_ns() // 1_000_000_000  # seconds since the epoch
        self.health = "OK"
        self.exiting = False
        self._loaded = False  # nsqd.dat read: only then may close() write it (and queues) back
        self.tcp_port = 0
        self.http_port = 0
        self.https_port = 0
        self.lmstfy_addresses: tuple[str, ...] = ()  # bound: lmstfy's data and admin APIs
        # the replication cluster (``app.serve`` sets it with --etcd-endpoints only)
        self.replication: Replicas | None = None
        #: what serves a follower's fetch connection (``  R1``): only with --etcd-endpoints
        self.replication_server: Callable[[trio.abc.Stream, bytes, str], Awaitable[None]
                                          ] | None = None
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
        #: whether a publish that made a topic waits for nsqd.dat to list it
        self.sync_metadata = opts.sync_every == 1
        self._next_client_id = 0  # also the count of TCP clients accepted so far
        self.http_connections = ConnectionCounts()  # kept by nsq_serving, for /metrics
        self.pump = Pump(self.now, self.iter_channels, self.store_dead_letters)
        # Channels call this once per FIN: the pump's own bound method, no call in between.
        self.mark_dirty: Callable[[Channel], None] = self.pump.mark_dirty
        self.metadata = metadata.MetadataWriter(opts.data_path, self.topics.values, log)
        self.metadata_changed: Callable[[], None] = self.metadata.changed
        self._nursery: trio.Nursery | None = None
        self._scopes: dict[object, trio.CancelScope] = {}
        self.queues = ChannelQueues(opts, self.clock, self.topic_directory, spawn=self._spawn,
                                    stop=self._stop, background=self._background)
        self.lookup = Lookup(self)
        # Without auth servers the client is never used: it is then made on first use, since
        # httpx and a TLS context with the system's CAs are a good part of nsqd's start-up. A
        # --tls-root-ca-file is still read now, so that a bad one stops nsqd at start.
        self._auth_http: httpx.AsyncClient | None = None
        if opts.auth_http_addresses or opts.tls_root_ca_file:
            self._auth_http = self._new_auth_http()

    def bound(self, tcp_port: int, http_port: int, https_port: int,
              lmstfy_addresses: tuple[str, ...]) -> None:
        """The ports nsqd listens on (0: not served), and lmstfy's addresses ("": not served),
        as /info and the lookupds are told."""
        self.tcp_port = tcp_port
        self.http_port = http_port
        self.https_port = https_port
        self.lmstfy_addresses = lmstfy_addresses

    def replicated(self, cluster: Replicas | None) -> None:
        """The replication cluster this node takes part in from now on (None: no more)."""
        self.replication = cluster

    def serve_replication(self, handler: Callable[[trio.abc.Stream, bytes, str],
                                                  Awaitable[None]]) -> None:
        """Serve followers' fetch connections (``  R1``) with ``handler``
        (--etcd-endpoints)."""
        self.replication_server = handler

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
                await restart.bring_in_old_queues(self.opts, self.clock)
                restart.load(self, self.opts.data_path)
                self._loaded = True
                for channel in self.iter_channels():  # before any client comes
                    await channel.restore_deferred()
                nursery.start_soon(self.pump.run)
                nursery.start_soon(self.pump.run_scan)
                # What deletions left at the last stop (``deletion``), removed while nsqd
                # serves.
                data = Path(self.opts.data_path or ".")
                nursery.start_soon(trio.to_thread.run_sync, remove_deleted, data,
                                   data / TOPICS_DIR)
                nursery.start_soon(self.metadata.run)
                await nursery.start(self.lookup.run)
                if self.opts.statsd_address:
                    nursery.start_soon(run_statsd, self)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                await self.close()

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

    def _background(self, fn: Callable[[], Awaitable[None]]) -> None:
        if self._nursery is not None:
            self._nursery.start_soon(fn)

    def topic_directory(self, name: str) -> Path:
        return Path(self.opts.data_path or ".") / TOPICS_DIR / name

    # -- topics and channels -------------------------------------------------------------
    def get_topic(self, name: str, *, changed: bool = True) -> Topic:
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        o = self.opts
        ephemeral = name.endswith("#ephemeral")
        topic_log = TopicLog(name, None if ephemeral else self.topic_directory(name),
                             mem_queue_size=self._mem_size(name),
                             max_bytes_per_file=o.max_bytes_per_file, sync_every=o.sync_every,
                             sync_timeout=o.sync_timeout, clock=self.clock, logger=log)
        topic = Topic(name, topic_log, clock=self.clock, sync_every=o.sync_every,
                      sync_timeout=o.sync_timeout)
        self.topics[name] = topic
        self._spawn(topic, topic.run)
        if changed:
            self.metadata_changed()
        log.info("TOPIC(%s): created", name)
        self.lookup.changed("register", name, None)
        self.lookup.topic_created(topic)
        return topic

    def get_channel(self, topic: Topic, name: str, *, start: str | None = None,
                    changed: bool = True, listed: bool = False) -> Channel:
        """The channel ``name`` of ``topic``, made if needed: its cursor where the last run
        left it, else at ``start`` (``topic.STARTS``; by default as NSQ); ``listed``: nsqd.dat
        lists it (so it must have a cursor journal). A new channel's journal is written in
        the background: ``keep_channel`` waits for it."""
        channel = topic.channels.get(name)
        if channel is not None:
            return channel
        durable = not (topic.ephemeral or name.endswith("#ephemeral"))
        cursor = restart.open_cursor(topic, name, self.topic_directory(topic.name), start,
                                     listed) if durable else Cursor(topic.start_position(start))
        percentiles = self.opts.e2e_processing_latency_percentiles
        channel = Channel(topic, name, self, cursor=cursor, clock=self.clock,
                          max_msg_timeout=self.opts.max_msg_timeout,
                          mem_queue_size=self._mem_size(name),
                          e2e=LatencyStream(percentiles,
                                            self.opts.e2e_processing_latency_window_time,
                                            self.now) if percentiles else None,
                          default_max_attempts=self.opts.max_attempts)
        topic.add_channel(channel)
        if durable:
            own, dead = self.queues.on_disk(topic.name, name)
            if own:
                channel.own_queue  # noqa: B018 - its messages are delivered from the start
            if dead:
                channel.dead_letters  # noqa: B018 - stored ones are counted from the start
            if changed:  # a new channel: its position is kept from now on
                self._spawn_once(cursor.flush(channel.cursor_state, sync=self.opts.sync_every == 1))
        if changed:
            self.metadata_changed()
        log.info("TOPIC(%s): new channel(%s)", topic.name, name)
        self.lookup.changed("register", topic.name, name)
        return channel

    def _spawn_once(self, work: Awaitable[None]) -> None:
        async def runner() -> None:
            try:
                await work
            except OSError as exc:
                log.error("failed to persist a cursor - %s", exc)

        if self._nursery is not None:
            self._nursery.start_soon(runner)
        else:
            work.close()  # type: ignore[attr-defined]

    def _mem_size(self, name: str) -> int:
        if name.endswith("#ephemeral"):
            return max(self.opts.mem_queue_size, 1)
        return self.mem_queue_size

    def delete_topic(self, name: str) -> bool:
        topic = self.topics.pop(name, None)
        if topic is None:
            return False
        topic.mark_deleted()
        for channel_name in list(topic.channels):
            self._remove_channel(topic, channel_name)
        self._stop(topic)
        topic.log.detach()  # out of the way now: the name may be published to again at once
        if self._nursery is not None:
            self._nursery.start_soon(topic.log.delete)
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
        channel = topic.remove_channel(name)
        channel.close()
        self.pump.forget(channel)
        if channel.cursor.journal is not None:
            channel.cursor.journal.detach()  # a channel made again starts anew
            self._spawn_once(channel.cursor.forget())
        self.queues.remove(channel)

    def dead_letters_for(self, channel: Channel) -> DeadLetters:
        """The dead-letter queue of ``channel``, made when it first needs one (or at start
        when it has one on disk); in memory only for an ephemeral channel."""
        return self.queues.dead_letters_for(channel)

    def own_queue_for(self, channel: Channel) -> Backlog:
        """The own queue of ``channel`` (see ``backlog``), made with its first message."""
        return self.queues.own_queue_for(channel)

    async def store_dead_letters(self, channel: Channel) -> None:
        try:
            await channel.store_dead_letters()
        except LogError as exc:
            if channel.deleted:  # the deletion caught the write: nothing left to keep them for
                return
            self.health = f"NOK - {exc}"
            log.error("%s: failed to store dead letters - %s", self.queues.dead_letter_name(channel),
                      exc)

    async def empty_topic(self, topic: Topic) -> None:
        topic.empty()
        if not topic.channels:
            self.metadata_changed()  # its hold
        await topic.persist_cursors()

    async def empty_channel(self, channel: Channel) -> None:
        channel.empty()
        channel.log.poke()
        await channel.empty_own_files()
        await channel.topic.persist_cursors()

    async def keep_channel(self, channel: Channel) -> None:
        """A new durable channel on disk, its cursor journal written (fsynced as the first
        entry of a journal always is) and nsqd.dat listing it, before the request that made
        it is answered
        (``/channel/create``, ``SUB``, an lmstfy queue): a kill after the answer finds it. A
        failure is logged (the channel lives on; after a crash before its journal is
        written it starts at the earliest offset stored)."""
        journal = channel.cursor.journal
        if journal is None or channel.deleted:
            return
        try:
            if not journal.size:
                await channel.cursor.flush(channel.cursor_state, sync=self.opts.sync_every == 1)
            await self.metadata.written()  # listed in nsqd.dat
        except OSError as exc:
            log.error("TOPIC(%s): channel(%s): failed to persist its cursor - %s",
                      channel.topic_name, channel.name, exc)

    async def rewind_channel(self, channel: Channel, offset: int) -> None:
        channel.rewind(offset)
        await channel.topic.persist_cursors()

    async def flush_cursor(self, channel: Channel) -> None:
        """Persist ``channel``'s cursor now (fsynced with --sync-every=1): an lmstfy DELETE
        is durable before it is answered.

        Raises:
            StoreFailed: it could not be written.
        """
        try:
            await channel.cursor.flush(channel.cursor_state, sync=self.opts.sync_every == 1)
        except OSError as exc:
            raise StoreFailed(f"failed to persist the cursor - {exc}") from exc

    def channel_emptied_of_clients(self, channel: Channel) -> None:
        """An ephemeral channel lost its last client: it goes, and an ephemeral topic with it."""
        topic = self.topics.get(channel.topic_name)
        if topic is not None and topic.channels.get(channel.name) is channel:
            self.delete_channel(topic, channel.name)

    # -- publishing and subscribing -------------------------------------------------------
    def new_messages(self, bodies: list[bytes], defer: float = 0.0, ttl: int = 0
                     ) -> list[QueuedMessage]:
        """Messages for ``bodies``: consecutive ids, one timestamp (one clock read per batch),
        not delivered before ``defer`` seconds from now (DPUB), expiring ``ttl`` seconds after
        it when ``ttl`` is given."""
        ts = self.clock.wall_ns()
        first = self.guid.take(len(bodies), ts)
        expires = ts + ttl * 1_000_000_000 if ttl else 0
        due = ts + int(defer * 1e9) if defer > 0 else 0
        return [QueuedMessage(b"%016x" % (first + i), body, ts, 0, expires=expires, due=due)
                for i, body in enumerate(bodies)]

    def new_records(self, bodies: list[bytes]) -> Records:
        """``new_messages`` (no deferral, no expiry) as their records (``record.new_records``):
        what PUB and MPUB publish."""
        ts = self.clock.wall_ns()
        return new_records(bodies, self.guid.take(len(bodies), ts), ts)

    def topic_before_body(self, name: str) -> None:
        """Go's nsqd makes a publish's topic before it reads the body (a refused body still
        leaves the topic). With --etcd-endpoints the publish itself places the topic
        (``publish``), so nothing is made here."""
        if self.replication is None:
            self.get_topic(name)

    async def publish(self, topic_name: str, msgs: list[QueuedMessage] | Records) -> None:
        """Store ``msgs`` (messages, or records from ``new_records``) in a topic (created if
        needed; with --etcd-endpoints, a topic not here is first placed, or published on
        its leader when placed on other nodes only: ``Replicas.publish_new``).

        Raises:
            Exiting: nsqd is shutting down.
            StoreFailed: the disk write failed (nsqd turns unhealthy until a store succeeds);
                or, on a replicated topic, its leader's refusal (forwarded from a follower),
                its ISR below the minimum, or the ISR did not copy the messages in time.
        """
        if self.exiting:
            raise Exiting
        cluster = self.replication
        if (cluster is not None and topic_name not in self.topics
                and not topic_name.endswith("#ephemeral")
                and await cluster.publish_new(topic_name, msgs)):
            return  # placed on other nodes only: published on its leader
        try:
            topic = self.get_topic(topic_name)
            replica = topic.replica
            if replica is not None:  # replicated: on its leader, with its ISR at the minimum
                if not replica.leading:
                    await replica.forward(msgs)
                    return
                replica.check_publish()
            if isinstance(msgs, Records):
                await topic.put_records(msgs)
            else:
                await topic.put(msgs)
        except LogClosed as exc:  # the topic was deleted meanwhile (as Go's "exiting":
            raise Exiting from exc       # no health change, no log line)
        except LogError as exc:
            self.health = f"NOK - {exc}"
            log.error("TOPIC(%s): failed to store messages - %s", topic_name, exc)
            raise StoreFailed(str(exc)) from exc
        if self.sync_metadata and self.metadata.behind:
            try:  # a topic it made listed in nsqd.dat before the OK
                await self.metadata.written()
            except OSError as exc:
                raise StoreFailed(f"failed to persist metadata - {exc}") from exc
        if self.health != "OK":
            self.health = "OK"
        if replica is not None:  # acknowledged once the in-sync set holds it
            end = topic.log.end
            replica.published()
            await replica.committed(end)

    async def keep_topics(self) -> None:
        """nsqd.dat written with every topic and channel made so far before the request that
        made them is answered (``/topic/create``): a kill after the answer finds them. A
        failure is logged, by the writer (the topic lives on, as it does in memory)."""
        with contextlib.suppress(OSError):
            await self.metadata.written()

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
        client.joined(channel)
        return channel

    # -- clients ---------------------------------------------------------------------------
    def new_client(self, remote_address: str) -> Client:
        self._next_client_id += 1
        opts = self.opts
        client = Client(
            self._next_client_id, remote_address, msg_timeout=opts.msg_timeout,
            heartbeat_interval=30.0, output_buffer_size=16384,
            output_buffer_timeout=opts.output_buffer_timeout, clock=self.now,
            connect_ts=self.clock.wall_ns() // 1_000_000_000,
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
            client.joined(None)
            channel.remove_client(client)

    # -- delivery ------------------------------------------------------------------------
    def iter_channels(self) -> list[Channel]:
        return [c for t in self.topics.values() for c in t.channels.values()]

    # -- shutdown --------------------------------------------------------------------------
    async def close(self) -> None:
        """Persist every cursor and what the logs hold in memory, then the metadata.

        Nothing is written when nsqd.dat could not be loaded: the start failed, and an empty
        nsqd.dat written over an unreadable one would orphan every topic it listed.
        """
        self.exiting = True
        if self._loaded:
            await restart.save(self, self.metadata)
        if self._auth_http is not None:
            await self._auth_http.aclose()
