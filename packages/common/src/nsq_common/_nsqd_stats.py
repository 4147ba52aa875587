"""nsqd's ``/stats`` document (``format=json``) as nsqd writes it: the field names, their order,
``null`` versus ``[]``, and the keys Go's ``omitempty`` leaves out, declared once, here.
Exported as ``nsq_common.nsqd_stats`` (``nsqd_stats.TopicStats`` is Go's ``nsqd.TopicStats``,
apart from ``_stats``'s per-node ``TopicStats`` that nsqadmin sums).

nsqd fills these classes and sends ``to_json()``; the tools that read /stats (nsqadmin,
nsq_stat, through ``_stats``) take a reply back with ``from_json``. A field's name is its JSON
key and the declaration order is the key order (NSQ 1.3.0's nsqd/stats.go, then our own keys).
A field's type says how it is written and read:

- ``int`` / ``bool`` / ``str``: as it is; read with ``int()``/``bool()``/``str()``, a missing
  key as the zero value; ``int | None`` (a Go pointer) reads a missing key or ``null`` as None;
- one of these classes, or a tuple of them: written with their ``to_json``; ``| None`` is
  written ``null`` and read back as None (a missing key too), a tuple without it is read as
  ``()`` from ``null`` or nothing;
- ``Any`` (``e2e_processing_latency``): as it is, both ways (nsqd's ``e2e`` builds it,
  ``_stats.Latency`` reads it).


A field tagged ``omitempty`` is left out while it is its zero value (None for ``| None``), as
Go's ``omitempty`` leaves out a zero value or a nil pointer. Our keys (beyond NSQ: the job
features', a topic's retention, the log's offsets) are all such fields, after Go's keys: a
daemon whose users use only NSQ's features writes exactly Go's document, and the tools that
read it take a missing key as "not in use".

::

    {"version": "1.3.0", "health": "OK", "start_time": 1700000000,
     "topics": [                                   null when the topic asked for is unknown
       {"topic_name": "t", "channels": [           [] when it has none
          {"channel_name": "c", ..., "clients": [...],     null without include_clients
           "dead_letter_count": 2,                 a job feature's key, once it is in use
           "mark_delete_offset": 7,                the channel's cursor, with the offsets
           "read_offset": 9}],
        "depth": 3, ..., "message_ttl": 60,        (message_ttl only when the topic has one)
        "retention": 86400000000000,               (ns; only while the topic has one)
        "earliest_offset": 0, "latest_offset": 9,  include_offsets, or while a retention
        "replication": {"leader": "h:4150", ...}}],   a replicated topic's (beyond NSQ)
     "memory": {"heap_objects": ..., ...},         left out with include_mem=false
     "producers": [{client, with "pub_counts"}]}   null when there are none
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Self

import attrs
from attrs import AttrsInstance

# A field Go tags ``omitempty`` is left out of the JSON while it is its zero value (its
# default; keyword-only, so that the fields after it need none).
_OMITEMPTY = {"omitempty": True}
_PLAIN: dict[Any, Any] = {int: 0, bool: False, str: ""}  # type -> zero value


class _GoStruct:
    """``to_json`` / ``from_json`` for an attrs class whose fields are a Go struct's."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        return _codec(type(self)).write(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Self:
        return typing.cast(Self, _codec(cls).read(raw))


@attrs.frozen
class _Field:
    """How one field is written and read (see the module's docstring)."""

    name: str
    omitempty: bool
    plain: type | None  # int, bool or str
    shape: type[_GoStruct] | None  # a nested struct, or the items of a tuple of them
    many: bool  # a tuple of ``shape``
    optional: bool  # ``| None``

    @classmethod
    def of(cls, field: attrs.Attribute[Any]) -> _Field:
        kind, optional = field.type, False
        if isinstance(kind, types.UnionType):
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            kind, optional = args[0], True
        many = typing.get_origin(kind) is tuple
        if many:
            kind = typing.get_args(kind)[0]
        return cls(field.name, bool(field.metadata.get("omitempty")),
                   kind if kind in _PLAIN else None,
                   kind if isinstance(kind, type) and issubclass(kind, _GoStruct) else None,
                   many, optional)

    def write(self) -> str:
        """The field as an expression of ``o`` in the generated writer."""
        value = f"o.{self.name}"
        if self.shape is None:
            return value
        out = f"[i.to_json() for i in {value}]" if self.many else f"{value}.to_json()"
        return f"(None if {value} is None else {out})" if self.optional else out

    def read(self, raw: Mapping[str, Any]) -> Any:
        if self.plain is not None:
            value = raw.get(self.name)
            if value is None:
                return None if self.optional else _PLAIN[self.plain]
            return self.plain(value)
        value = raw.get(self.name)
        if self.shape is None:
            return value
        if value is None and self.optional:
            return None
        if self.many:
            return tuple(self.shape.from_json(item) for item in value or ())
        return self.shape.from_json(value or {})  # a struct, not a pointer: zero if missing


@attrs.frozen
class _Codec:
    write: Callable[[Any], dict[str, Any]]
    read: Callable[[Mapping[str, Any]], Any]


_CODECS: dict[type, _Codec] = {}


def _codec(cls: type[AttrsInstance] | type[_GoStruct]) -> _Codec:
    codec = _CODECS.get(cls)
    if codec is None:
        attrs.resolve_types(typing.cast(type[AttrsInstance], cls))
        fields = [_Field.of(f) for f in attrs.fields(typing.cast(type[AttrsInstance], cls))]

        def read(raw: Mapping[str, Any]) -> Any:
            return cls(**{f.name: f.read(raw) for f in fields})

        codec = _CODECS[cls] = _Codec(_writer(fields), read)
    return codec


def _writer(fields: list[_Field]) -> Callable[[Any], dict[str, Any]]:
    """The fields to a dict, written out as code once per class (as attrs writes
    ``__init__``): a dict display is twice as fast as a loop over the fields, and /metrics and
    statsd build these on every scrape. An ``omitempty`` field goes in only when truthy (a
    ``| None`` one: when not None)."""
    lines, plain = ["def write(o):"], []
    for field in fields:
        if field.omitempty:
            test = f"o.{field.name} is not None" if field.optional else f"o.{field.name}"
            lines.append(f"    if {test}: d[{field.name!r}] = {field.write()}")
        elif len(lines) == 1:
            plain.append(f"{field.name!r}: {field.write()}")
        else:
            lines.append(f"    d[{field.name!r}] = {field.write()}")
    lines.insert(1, f"    d = {{{', '.join(plain)}}}")
    lines.append("    return d")
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)
    return typing.cast(Callable[[Any], dict[str, Any]], namespace["write"])


@attrs.frozen
class PubCount(_GoStruct):
    """What a producer published to one topic."""

    topic: str
    count: int


@attrs.frozen
class ClientStats(_GoStruct):
    """One TCP client: a channel's consumer, or a producer (then with ``pub_counts``)."""

    client_id: str
    hostname: str
    version: str
    remote_address: str
    state: int
    ready_count: int
    in_flight_count: int
    message_count: int
    finish_count: int
    requeue_count: int
    connect_ts: int
    sample_rate: int
    deflate: bool
    snappy: bool
    user_agent: str
    authed: bool = attrs.field(default=False, metadata=_OMITEMPTY, kw_only=True)
    auth_identity: str = attrs.field(default="", metadata=_OMITEMPTY, kw_only=True)
    auth_identity_url: str = attrs.field(default="", metadata=_OMITEMPTY, kw_only=True)
    pub_counts: tuple[PubCount, ...] = attrs.field(
        default=(), metadata=_OMITEMPTY, kw_only=True)
    tls: bool
    tls_cipher_suite: str
    tls_version: str
    tls_negotiated_protocol: str
    tls_negotiated_protocol_is_mutual: bool


@attrs.frozen
class ChannelStats(_GoStruct):
    """One channel; ``clients`` is None when /stats was asked without them."""

    channel_name: str
    depth: int
    backend_depth: int
    in_flight_count: int
    deferred_count: int
    message_count: int
    requeue_count: int
    timeout_count: int
    client_count: int
    clients: tuple[ClientStats, ...] | None
    paused: bool
    e2e_processing_latency: Any
    # beyond NSQ, after Go's keys, each only while its feature is in use (nsqd's stats module
    # decides when): the counts None until then, the settings while set
    expired_count: int | None = attrs.field(default=None, metadata=_OMITEMPTY, kw_only=True)
    dead_letter_count: int | None = attrs.field(default=None, metadata=_OMITEMPTY,
                                                kw_only=True)
    max_attempts: int = attrs.field(default=0, metadata=_OMITEMPTY, kw_only=True)
    dead_letter_expired: bool = attrs.field(default=False, metadata=_OMITEMPTY, kw_only=True)
    # the channel's cursor in its topic's log: with the topic's offsets (see TopicStats)
    mark_delete_offset: int | None = attrs.field(default=None, metadata=_OMITEMPTY,
                                                 kw_only=True)
    read_offset: int | None = attrs.field(default=None, metadata=_OMITEMPTY, kw_only=True)


@attrs.frozen
class TopicStats(_GoStruct):
    """One topic with its channels (``[]`` when it has none, or none passed the filter)."""

    topic_name: str
    channels: tuple[ChannelStats, ...]
    depth: int
    backend_depth: int
    message_count: int
    message_bytes: int
    paused: bool
    e2e_processing_latency: Any
    # beyond NSQ, after Go's keys: the settings only when set, the offsets when asked for
    # (``include_offsets``) or while the topic has a retention (nsqd's stats module decides)
    message_ttl: int = attrs.field(default=0, metadata=_OMITEMPTY, kw_only=True)  # seconds
    retention: int = attrs.field(default=0, metadata=_OMITEMPTY, kw_only=True)  # ns
    retention_bytes: int = attrs.field(default=0, metadata=_OMITEMPTY, kw_only=True)
    earliest_offset: int | None = attrs.field(default=None, metadata=_OMITEMPTY, kw_only=True)
    latest_offset: int | None = attrs.field(default=None, metadata=_OMITEMPTY, kw_only=True)
    # damaged batches found in the topic's log since the start, and their bytes: once any
    damaged_batches: int = attrs.field(default=0, metadata=_OMITEMPTY, kw_only=True)
    damaged_bytes: int = attrs.field(default=0, metadata=_OMITEMPTY, kw_only=True)
    # a replicated topic's (nsqd with --etcd-endpoints): {"leader", "epoch", "replicas",
    # "isr", "high_watermark", "lag"}, as it is both ways; only on a topic placed in etcd
    replication: Any = attrs.field(default=None, metadata=_OMITEMPTY, kw_only=True)


@attrs.frozen
class MemoryStats(_GoStruct):
    """Go's runtime memory figures (nsqd fills what Python has of them)."""

    heap_objects: int
    heap_idle_bytes: int
    heap_in_use_bytes: int
    heap_released_bytes: int
    gc_pause_usec_100: int
    gc_pause_usec_99: int
    gc_pause_usec_95: int
    next_gc_bytes: int
    gc_total_runs: int


@attrs.frozen
class Stats(_GoStruct):
    """The whole document: ``topics`` None for an unknown topic, ``memory`` None without
    include_mem (the key is then left out), ``producers`` None when there are none."""

    version: str
    health: str
    start_time: int
    topics: tuple[TopicStats, ...] | None
    memory: MemoryStats | None = attrs.field(default=None, metadata=_OMITEMPTY, kw_only=True)
    producers: tuple[ClientStats, ...] | None
