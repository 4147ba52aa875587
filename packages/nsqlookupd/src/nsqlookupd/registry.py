"""The registration DB: which nsqd produces which topic and channel. Pure state, no I/O.

Layout, as in nsqlookupd::

    Registration(category, key, subkey)  ->  {peer id: Producer}
      ("client",  "",      "")               every IDENTIFYed nsqd
      ("topic",   topic,   "")               nsqds that have the topic
      ("channel", topic,   channel)          nsqds that have the channel

A peer id is the nsqd connection's remote ``ip:port``. One ``PeerInfo`` is shared by all the
``Producer`` entries of a connection, so a PING refreshes them all at once; a tombstone, by
contrast, is set on one ``Producer``, i.e. for one topic only.

Registrations outlive their producers: a disconnected nsqd leaves its topics listed with no
producers (only ephemeral ones are dropped, and only by an explicit UNREGISTER), until someone
deletes them over HTTP. ``*`` as a key or subkey in the find methods matches anything, which
makes ``/lookup?topic=*`` and ``/topic/delete?topic=*`` span every topic, as in NSQ.

Time comes from an injected clock (integer nanoseconds since the epoch), so tests control it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import attrs
from nsq_common import is_ephemeral

CLIENT = "client"
TOPIC = "topic"
CHANNEL = "channel"

# Go's time.Time{}.UnixNano(): what /debug shows for a producer never tombstoned.
GO_ZERO_TIME_NS = -6795364578871345152

Clock = Callable[[], int]


@attrs.frozen
class Registration:
    category: str
    key: str
    subkey: str

    def matches(self, category: str, key: str, subkey: str) -> bool:
        return (self.category == category and key in ("*", self.key)
                and subkey in ("*", self.subkey))


@attrs.define(eq=False)
class PeerInfo:
    """One IDENTIFYed nsqd connection."""

    id: str
    remote_address: str
    hostname: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    last_update: int = 0

    def to_json(self) -> dict[str, Any]:
        """The producer object of ``/lookup``, in NSQ's field order."""
        return {"remote_address": self.remote_address, "hostname": self.hostname,
                "broadcast_address": self.broadcast_address, "tcp_port": self.tcp_port,
                "http_port": self.http_port, "version": self.version}


@attrs.define(eq=False)
class Producer:
    """A peer inside one registration; only topic producers ever get a tombstone."""

    peer: PeerInfo
    tombstoned: bool = False
    tombstoned_at: int = GO_ZERO_TIME_NS


@attrs.define(eq=False)
class RegistrationDB:
    """The registrations, plus the two lifetimes that decide which producers are shown.

    Args:
        inactive_timeout: ns; a producer not heard of for longer is hidden.
        tombstone_lifetime: ns; how long a tombstone hides a topic producer.
        clock: ns since the epoch.
    """

    inactive_timeout: int = 300 * 10**9
    tombstone_lifetime: int = 45 * 10**9
    clock: Clock = time.time_ns
    _map: dict[Registration, dict[str, Producer]] = attrs.field(factory=dict, init=False)
    #: (action, category) -> how many times an nsqd joined ("register") or left ("unregister")
    #: a registration over TCP, disconnects included; for /metrics
    events: dict[tuple[str, str], int] = attrs.field(factory=dict, init=False)

    # --- primitives ---------------------------------------------------------------------------

    def add_registration(self, reg: Registration) -> None:
        self._map.setdefault(reg, {})

    def add_producer(self, reg: Registration, peer: PeerInfo) -> bool:
        """Add ``peer`` under ``reg``; False if its id is there already (kept as it was)."""
        producers = self._map.setdefault(reg, {})
        if peer.id in producers:
            return False
        producers[peer.id] = Producer(peer)
        return True

    def remove_producer(self, reg: Registration, peer_id: str) -> tuple[bool, int]:
        """Remove a peer from ``reg``; returns (whether it was there, producers left)."""
        producers = self._map.get(reg)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        return removed, len(producers)

    def remove_registration(self, reg: Registration) -> None:
        self._map.pop(reg, None)

    def find_registrations(self, category: str, key: str, subkey: str) -> list[Registration]:
        if key != "*" and subkey != "*":
            reg = Registration(category, key, subkey)
            return [reg] if reg in self._map else []
        return [reg for reg in self._map if reg.matches(category, key, subkey)]

    def find_producers(self, category: str, key: str, subkey: str) -> list[Producer]:
        """Producers of the matching registrations, one per peer id."""
        seen: dict[str, Producer] = {}
        for reg in self.find_registrations(category, key, subkey):
            for peer_id, producer in self._map[reg].items():
                seen.setdefault(peer_id, producer)
        return list(seen.values())

    def lookup_registrations(self, peer_id: str) -> list[Registration]:
        return [reg for reg, producers in self._map.items() if peer_id in producers]

    def producers(self, reg: Registration) -> list[Producer]:
        return list(self._map.get(reg, {}).values())

    # --- time ---------------------------------------------------------------------------------

    def touch(self, peer: PeerInfo) -> int:
        """Record that ``peer`` was heard from; returns ns since the previous time."""
        now = self.clock()
        since, peer.last_update = now - peer.last_update, now
        return since

    def is_tombstoned(self, producer: Producer, lifetime: int | None = None) -> bool:
        lifetime = self.tombstone_lifetime if lifetime is None else lifetime
        return producer.tombstoned and self.clock() - producer.tombstoned_at < lifetime

    def is_active(self, producer: Producer, tombstone_lifetime: int | None = None) -> bool:
        """Heard from within the inactive timeout, and not under a live tombstone."""
        if self.clock() - producer.peer.last_update > self.inactive_timeout:
            return False
        return not self.is_tombstoned(producer, tombstone_lifetime)

    def tombstone(self, producer: Producer) -> None:
        producer.tombstoned = True
        producer.tombstoned_at = self.clock()

    # --- what the TCP protocol does ----------------------------------------------------------

    def identify(self, peer: PeerInfo) -> bool:
        self.touch(peer)
        reg = Registration(CLIENT, "", "")
        added = self.add_producer(reg, peer)
        if added:
            self._count("register", [reg])
        return added

    def register(self, peer: PeerInfo, topic: str, channel: str | None) -> list[Registration]:
        """REGISTER: the channel (if any), then its topic; returns the ones newly joined."""
        regs = [Registration(TOPIC, topic, "")]
        if channel is not None:
            regs.insert(0, Registration(CHANNEL, topic, channel))
        joined = [reg for reg in regs if self.add_producer(reg, peer)]
        self._count("register", joined)
        return joined

    def unregister(self, peer: PeerInfo, topic: str, channel: str | None) -> list[Registration]:
        """UNREGISTER; returns the registrations the peer left.

        With a channel, only that channel; an ephemeral channel left with no producers goes.
        Without, the topic and every channel of it; an ephemeral topic left with no producers
        goes (its channels stay, empty).
        """
        left: list[Registration] = []
        if channel is not None:
            self._leave(Registration(CHANNEL, topic, channel), channel, peer, left)
        else:
            for reg in self.find_registrations(CHANNEL, topic, "*"):
                if self.remove_producer(reg, peer.id)[0]:
                    left.append(reg)
            self._leave(Registration(TOPIC, topic, ""), topic, peer, left)
        self._count("unregister", left)
        return left

    def _leave(self, reg: Registration, name: str, peer: PeerInfo, left: list[Registration]
               ) -> None:
        """``peer`` leaves ``reg`` (added to ``left`` if it was there); an ephemeral ``name``
        left with no producers goes."""
        removed, remaining = self.remove_producer(reg, peer.id)
        if removed:
            left.append(reg)
        if remaining == 0 and is_ephemeral(name):
            self.remove_registration(reg)

    def remove_peer(self, peer: PeerInfo) -> list[Registration]:
        """A disconnect: drop the peer from every registration (the registrations stay)."""
        left = []
        for reg in self.lookup_registrations(peer.id):
            producer = self._map[reg][peer.id]
            if producer.peer is peer:  # never a newer connection that reused the address
                del self._map[reg][peer.id]
                left.append(reg)
        self._count("unregister", left)
        return left

    # --- what the HTTP API does ---------------------------------------------------------------

    def topics(self) -> list[str]:
        return [reg.key for reg in self.find_registrations(TOPIC, "*", "")]

    def channels(self, topic: str) -> list[str]:
        return [reg.subkey for reg in self.find_registrations(CHANNEL, topic, "*")]

    def lookup(self, topic: str) -> tuple[list[str], list[PeerInfo]] | None:
        """``/lookup``: every channel, and the active producers; None if no such topic."""
        if not self.find_registrations(TOPIC, topic, ""):
            return None
        producers = self.find_producers(TOPIC, topic, "")
        return self.channels(topic), [p.peer for p in producers if self.is_active(p)]

    def nodes(self) -> list[tuple[PeerInfo, list[str], list[bool]]]:
        """``/nodes``: active peers (tombstones ignored), their topics and tombstone flags."""
        result = []
        for client in self.find_producers(CLIENT, "", ""):
            if not self.is_active(client, tombstone_lifetime=0):
                continue
            peer = client.peer
            topics = [reg.key for reg in self.lookup_registrations(peer.id)
                      if reg.category == TOPIC]
            tombstones = [self._tombstoned_in(peer, Registration(TOPIC, t, "")) for t in topics]
            result.append((peer, topics, tombstones))
        return result

    def create_topic(self, topic: str) -> None:
        self.add_registration(Registration(TOPIC, topic, ""))

    def create_channel(self, topic: str, channel: str) -> None:
        self.add_registration(Registration(CHANNEL, topic, channel))
        self.add_registration(Registration(TOPIC, topic, ""))

    def delete_topic(self, topic: str) -> list[Registration]:
        """Drop the topic's channels, then the topic, producers and all; returns what went."""
        gone = self.find_registrations(CHANNEL, topic, "*")
        gone += self.find_registrations(TOPIC, topic, "")
        self._remove_all(gone)
        return gone

    def delete_channel(self, topic: str, channel: str) -> bool:
        """Drop a channel registration; False if there was none."""
        gone = self.find_registrations(CHANNEL, topic, channel)
        self._remove_all(gone)
        return bool(gone)

    def tombstone_topic_producer(self, topic: str, node: str) -> int:
        """Tombstone the topic's producers whose ``broadcast_address:http_port`` is ``node``."""
        count = 0
        for producer in self.find_producers(TOPIC, topic, ""):
            peer = producer.peer
            # no brackets for IPv6 (not join_host_port): Go's nsqlookupd compares
            # fmt.Sprintf("%s:%d"), and nsqadmin sends the node in that form
            if f"{peer.broadcast_address}:{peer.http_port}" == node:
                self.tombstone(producer)
                count += 1
        return count

    def debug(self) -> dict[str, list[dict[str, Any]]]:
        """``/debug``: every non-empty registration and its producers, keys sorted as Go's maps."""
        data: dict[str, list[dict[str, Any]]] = {}
        for reg, producers in self._map.items():
            for producer in producers.values():
                peer = producer.peer
                data.setdefault(f"{reg.category}:{reg.key}:{reg.subkey}", []).append({
                    "broadcast_address": peer.broadcast_address, "hostname": peer.hostname,
                    "http_port": peer.http_port, "id": peer.id, "last_update": peer.last_update,
                    "tcp_port": peer.tcp_port, "tombstoned": producer.tombstoned,
                    "tombstoned_at": producer.tombstoned_at, "version": peer.version,
                })
        return dict(sorted(data.items()))

    def _tombstoned_in(self, peer: PeerInfo, reg: Registration) -> bool:
        producer = self._map.get(reg, {}).get(peer.id)
        return producer is not None and producer.peer is peer and self.is_tombstoned(producer)

    def _count(self, action: str, regs: Iterable[Registration]) -> None:
        for reg in regs:
            key = (action, reg.category)
            self.events[key] = self.events.get(key, 0) + 1

    def _remove_all(self, regs: Iterable[Registration]) -> None:
        for reg in regs:
            self.remove_registration(reg)
