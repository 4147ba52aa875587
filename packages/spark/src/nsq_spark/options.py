"""The data source's options, parsed once from Spark's case-insensitive string map.

Spark hands every option as a string, and to a Python data source under a lower-cased key,
so ``maxOffsetsPerTrigger`` arrives as ``maxoffsetspertrigger``. :func:`parse` runs when the
DataFrame is defined (``load()``, ``save()``, ``start()``): an unknown option, a value that
does not parse, or options that cannot go together fail there, naming the option (and, for
an unknown one, listing the valid ones). What only a read needs (a topic, nsqd's HTTP API
for an offset read) is checked by :meth:`Options.check_read` when Spark asks a read for its
schema, which is also when the DataFrame is defined; what only a stream or only a batch
refuses, when its reader is made.

Which read: a ``channel`` option reads that channel (NSQ's competing consumers, FINished
after Spark commits); without it the topic's log is read by offset (Kafka's way). Options
that belong to the other kind are refused, saying so.

Connection options are the client library's (:class:`nsq_client.Config`) and may be written
either way, ``tls_root_ca_file`` or ``tlsRootCaFile``; ``tls`` is short for ``tls_v1``. Only
plain values are kept here, so an ``Options`` pickles to the executors as it is.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

import attrs
from nsq_client import Config
from nsq_common import is_valid_channel_name, is_valid_topic_name, parse_go_duration

from .errors import OptionError

log = logging.getLogger("nsq_spark")

DEFAULT_MAX_IN_FLIGHT = 10_000  # messages a channel stream may hold at once
MAX_RDY = 2500  # nsqd's default --max-rdy-count: messages one connection may hold
DEFAULT_TIMEOUT = 30.0  # seconds an unreachable nsqd or nsqlookupd is retried
DEFAULT_MAX_TRIGGER_DELAY = 15 * 60.0  # Kafka's default for maxTriggerDelay
EARLIEST, LATEST = -2, -1  # in startingOffsets/endingOffsets JSON, as Kafka's

#: nsq_client.Config fields a user may set, by their name without underscores.
_CONFIG_FIELDS = {name.replace("_", ""): name for name in attrs.fields_dict(Config)
                  if name not in ("tls_context", "max_in_flight", "msg_timeout")}
_CONFIG_FIELDS["tls"] = "tls_v1"

#: The options of each use, by their spelling in the docs (Spark lower-cases the keys).
WHERE = ("lookupd", "nsqd", "nsqdHttp", "timeout")
OFFSET_READ = ("topic", "topics", "topicPattern", "startingOffsets", "startingTimestamp",
               "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
               "endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp",
               "failOnDataLoss", "maxOffsetsPerTrigger", "maxMessagesPerTrigger",
               "minOffsetsPerTrigger", "maxTriggerDelay", "minPartitions",
               "maxRecordsPerPartition")
CHANNEL_READ = ("topic", "channel", "maxOffsetsPerTrigger", "maxMessagesPerTrigger",
                "maxInFlight", "msgTimeout", "idleTimeout", "transport", "maxMessages",
                "checkpointLocation")
SINK = ("topic", "batchSize", "checkpointLocation")
#: Options that make sense only when reading by offset / only when reading a channel.
ONLY_OFFSET = frozenset(o.lower() for o in OFFSET_READ) - {o.lower() for o in CHANNEL_READ}
ONLY_CHANNEL = frozenset(o.lower() for o in CHANNEL_READ) - {o.lower() for o in OFFSET_READ} - {
    "checkpointlocation"}
STREAM_ONLY = frozenset({"maxoffsetspertrigger", "maxmessagespertrigger", "minoffsetspertrigger",
                         "maxtriggerdelay"})
BATCH_ONLY = frozenset({"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"})


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.capitalize() for part in rest)


def valid_names() -> list[str]:
    """Every option the source and sink take, as the docs spell them."""
    ours = dict.fromkeys([*WHERE, *OFFSET_READ, *CHANNEL_READ, *SINK])
    client = [*sorted(_camel(field) for field in _CONFIG_FIELDS.values()), "tls"]
    return [*ours, *dict.fromkeys(client)]


_SPELLING = {name.lower(): name for name in valid_names()}


def _name(key: str) -> str:
    return _SPELLING.get(key, key)


# -- values ------------------------------------------------------------------------------------

def _addresses(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _int(opts: Mapping[str, str], key: str, *, minimum: int = 1) -> int | None:
    text = opts.get(key)
    if text is None or text.strip() == "":
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {_name(key)} must be a whole number, not {text!r}") from None
    if value < minimum:
        raise OptionError(f"option {_name(key)} must be at least {minimum}, not {value}")
    return value


def _seconds(opts: Mapping[str, str], key: str) -> float | None:
    """A duration: Go's syntax (``90s``, ``1m30s``, ``500ms``) or a number of milliseconds,
    as Spark's own connectors take timeouts."""
    text = opts.get(key)
    if text is None or text.strip() == "":
        return None
    text = text.strip()
    try:
        value = int(text) / 1000 if text.isdigit() else parse_go_duration(text)
    except ValueError:
        raise OptionError(f"option {_name(key)} must be a duration such as 30s, 500ms or 15m, "
                          f"not {text!r}") from None
    if value <= 0:
        raise OptionError(f"option {_name(key)} must be above 0")
    return value


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    text = opts.get(key)
    if text is None:
        return default
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise OptionError(f"option {_name(key)} must be true or false, not {text!r}")


def _topic(name: str, option: str) -> str:
    if not is_valid_topic_name(name):
        raise OptionError(f"invalid topic name {name!r} in option {option}")
    return name


def _json_per_nsqd(opts: Mapping[str, str], key: str) -> dict[str, dict[str, int]] | None:
    """``{"topic": {"nsqd address": number}}``, as Kafka's per-partition JSON."""
    text = opts.get(key)
    if text is None:
        return None
    example = '{"clicks": {"127.0.0.1:4151": 1200}}'
    try:
        doc = json.loads(text)
    except ValueError:
        raise OptionError(f"option {_name(key)} must be JSON such as {example}, not {text!r}"
                          ) from None
    if not isinstance(doc, dict) or not doc:
        raise OptionError(f"option {_name(key)} must be a JSON object such as {example}")
    out: dict[str, dict[str, int]] = {}
    for topic, per_nsqd in doc.items():
        _topic(topic, _name(key))
        if not isinstance(per_nsqd, dict) or not per_nsqd:
            raise OptionError(f"option {_name(key)}: topic {topic!r} needs an object of nsqd "
                              f"addresses and numbers, such as {example}")
        for address, number in per_nsqd.items():
            if isinstance(number, bool) or not isinstance(number, int):
                raise OptionError(f"option {_name(key)}: {topic}/{address} must be a whole "
                                  f"number, not {number!r}")
        out[topic] = {str(address): int(number) for address, number in per_nsqd.items()}
    return out


@attrs.frozen
class Position:
    """Where an offset read starts or ends (``startingOffsets`` and friends).

    ``kind``: ``earliest``, ``latest``, ``offsets`` (per topic and nsqd, ``-2``/``-1`` for
    earliest/latest), ``timestamp`` (ms, every nsqd) or ``timestamps`` (ms per topic and nsqd).
    """

    kind: str
    offsets: dict[str, dict[str, int]] | None = None
    timestamp: int | None = None


def _position(opts: Mapping[str, str], offsets_key: str, timestamp_key: str,
              by_timestamp_key: str) -> Position | None:
    """The position one of three options gives (a timestamp wins, as Kafka's order)."""
    text = opts.get(timestamp_key)
    if text is not None:
        try:
            ms = int(text.strip())
        except ValueError:
            raise OptionError(f"option {_name(timestamp_key)} must be milliseconds since the "
                              f"epoch, not {text!r}") from None
        if ms < 0:
            raise OptionError(f"option {_name(timestamp_key)} must not be negative")
        return Position("timestamp", timestamp=ms)
    per_nsqd = _json_per_nsqd(opts, by_timestamp_key)
    if per_nsqd is not None:
        if any(ms < 0 for offsets in per_nsqd.values() for ms in offsets.values()):
            raise OptionError(f"option {_name(by_timestamp_key)}: timestamps must not be negative")
        return Position("timestamps", offsets=per_nsqd)
    text = opts.get(offsets_key)
    if text is None:
        return None
    if text.strip().lower() in ("earliest", "latest"):
        return Position(text.strip().lower())
    per_nsqd = _json_per_nsqd(opts, offsets_key)
    assert per_nsqd is not None
    if any(n < EARLIEST for offsets in per_nsqd.values() for n in offsets.values()):
        raise OptionError(f"option {_name(offsets_key)}: an offset is at least 0, or -2 "
                          "(earliest) or -1 (latest)")
    return Position("offsets", offsets=per_nsqd)


# -- the options -----------------------------------------------------------------------------

@attrs.frozen
class Options:
    # where the nsqd are
    lookupd: tuple[str, ...]  # nsqlookupd HTTP addresses
    nsqd: tuple[str, ...]  # nsqd TCP addresses
    nsqd_http: tuple[str, ...]  # nsqd HTTP addresses
    timeout: float  # seconds an unreachable nsqd or nsqlookupd is retried before failing
    config: tuple[tuple[str, str], ...]  # nsq_client.Config options, as text
    # what
    topic: str  # the topic option ("" when not given)
    topics: tuple[str, ...]  # topic or topics: the topics to read
    topic_pattern: str | None  # topicPattern: every topic whose whole name matches
    channel: str | None  # a channel read (None: the log, by offset)
    # offset reads
    starting: Position | None
    ending: Position | None
    no_match_latest: bool  # startingOffsetsByTimestampStrategy=latest
    fail_on_data_loss: bool
    max_per_trigger: int | None  # maxOffsetsPerTrigger / maxMessagesPerTrigger
    min_per_trigger: int | None
    max_trigger_delay: float
    min_partitions: int | None
    max_records_per_partition: int | None
    # channel reads
    max_in_flight: int
    msg_timeout: float | None  # seconds; None: nsqd's --msg-timeout
    checkpoint: str | None  # the channel stream's batch log lives under it
    transport: str  # "auto", "tcp" (the driver holds TCP consumers) or "http" (executors pull)
    max_messages: int | None  # channel batch reads: most messages to take
    idle_timeout: float  # channel batch reads: stop after this long with nothing new
    # the sink
    topic_column: bool  # no topic option: each row names its topic
    batch_size: int  # rows per MPUB
    given: frozenset[str]  # the options given (lower-cased)

    def client_config(self, **overrides: Any) -> Config:
        config = Config()
        for name, text in self.config:
            config = config.set(name, text)
        return attrs.evolve(config, **overrides) if overrides else config

    @property
    def by_offset(self) -> bool:
        """A read of the topic's log by offset (no ``channel`` option)."""
        return self.channel is None

    @property
    def sources(self) -> str:
        """Where the messages come from, for log lines and errors."""
        return ",".join(self.lookupd) or ",".join(self.nsqd_http) or ",".join(self.nsqd)

    @property
    def what(self) -> str:
        """The topics (and channel) read, for log lines and errors."""
        topics = f"topics matching {self.topic_pattern!r}" if self.topic_pattern else ",".join(
            self.topics)
        return f"{topics}/{self.channel}" if self.channel else topics

    def check_read(self) -> None:
        """What a read needs beyond :func:`parse`: called when Spark asks a read for its
        schema, which it does when the DataFrame is defined.

        Raises:
            OptionError: no topic; an offset read without nsqd's HTTP API; sink options.
        """
        if not (self.topics or self.topic_pattern):
            raise OptionError('reading needs option "topic" (or "topics", a comma-separated '
                              'list, or "topicPattern", a regular expression)')
        sink_only = sorted(_name(k) for k in self.given & {"batchsize"})
        if sink_only:
            raise OptionError(f"option {', '.join(sink_only)} is an option of the sink "
                              "(df.write.format('nsq')), not of a read")
        if self.by_offset:
            if not (self.lookupd or self.nsqd_http):
                raise OptionError(
                    'reading a topic by offset uses nsqd\'s HTTP API (GET /topic/read): give '
                    'option "lookupd" (nsqlookupd HTTP addresses) or "nsqdHttp" (nsqd HTTP '
                    'addresses); option "nsqd" names TCP addresses, for channel reads '
                    '(option "channel") and the sink')
            if "checkpointlocation" in self.given:
                log.warning("nsq_spark: option checkpointLocation of an offset read is not "
                            "used: Spark keeps the offsets in the writer's checkpoint")

    def check_stream(self) -> None:
        """Raises OptionError for what a streaming read refuses (Kafka's rules)."""
        if self.by_offset:
            ending = sorted(_name(k) for k in self.given & BATCH_ONLY)
            if ending:
                raise OptionError(f"option {', '.join(ending)} is for batch reads "
                                  "(spark.read), not streaming queries")

    def check_batch(self) -> None:
        """Raises OptionError for what a batch read refuses (Kafka's rules); warns of stream
        options it ignores."""
        if self.by_offset:
            if self.starting is not None and (self.starting.kind == "latest" or (
                    self.starting.kind == "offsets" and self.starting.offsets is not None and any(
                        n == LATEST for o in self.starting.offsets.values() for n in o.values()))):
                raise OptionError("option startingOffsets can't be latest for batch reads")
            if self.ending is not None and (self.ending.kind == "earliest" or (
                    self.ending.kind == "offsets" and self.ending.offsets is not None and any(
                        n == EARLIEST for o in self.ending.offsets.values() for n in o.values()))):
                raise OptionError("option endingOffsets can't be earliest for batch reads")
        for key in sorted(self.given & STREAM_ONLY):
            log.warning("nsq_spark: option %s is ignored in batch reads", _name(key))


def parse(options: Mapping[str, str]) -> Options:
    """Check and convert the options given to ``spark.read[Stream]`` or ``df.write[Stream]``.

    Raises:
        OptionError: an unknown, missing or bad option, in words a user can act on.
    """
    opts = {key.lower(): value for key, value in options.items()}
    config: list[tuple[str, str]] = []
    unknown = []
    for key, value in opts.items():
        if key in _SPELLING:
            field = _CONFIG_FIELDS.get(key)
            if field is not None:
                config.append((field, value))
        elif key.replace("_", "") in _CONFIG_FIELDS:
            config.append((_CONFIG_FIELDS[key.replace("_", "")], value))
        else:
            unknown.append(key)
    if unknown:
        raise OptionError(f"unknown option{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(sorted(unknown))} for format('nsq'); the valid options are: "
                          f"{', '.join(valid_names())}")

    lookupd = _addresses(opts.get("lookupd", ""))
    nsqd = _addresses(opts.get("nsqd", ""))
    nsqd_http = _addresses(opts.get("nsqdhttp", ""))
    if not (lookupd or nsqd or nsqd_http):
        raise OptionError('one of the options "lookupd" (nsqlookupd HTTP addresses), "nsqdHttp" '
                          '(nsqd HTTP addresses) or "nsqd" (nsqd TCP addresses) is required')

    given = frozenset(opts)
    channel = opts.get("channel") or None
    topic = opts.get("topic", "").strip()
    chosen = [k for k in ("topic", "topics", "topicpattern") if opts.get(k, "").strip()]
    if len(chosen) > 1:
        raise OptionError("only one of the options topic, topics and topicPattern can be given")
    topics = ((_topic(topic, "topic"),) if topic else
              tuple(_topic(t, "topics") for t in _addresses(opts.get("topics", ""))))
    pattern = opts.get("topicpattern", "").strip() or None
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option topicPattern is not a regular expression: {exc}") from None

    if channel is not None:
        if not is_valid_channel_name(channel):
            raise OptionError(f"invalid channel name {channel!r}")
        wrong = sorted(_name(k) for k in given & ONLY_OFFSET)
        if wrong:
            raise OptionError(
                f"option {', '.join(wrong)} reads a topic by offset, and option channel reads "
                "a channel, which starts where its cursor is (see POST /channel/rewind): give "
                "one or the other")
    else:
        wrong = sorted(_name(k) for k in given & ONLY_CHANNEL)
        if wrong:
            raise OptionError(f"option {', '.join(wrong)} applies to channel reads (option "
                              "channel); without a channel the topic is read by offset")

    starting = _position(opts, "startingoffsets", "startingtimestamp",
                         "startingoffsetsbytimestamp")
    ending = _position(opts, "endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option startingOffsetsByTimestampStrategy must be error or latest, "
                          f"not {strategy!r}")
    if "maxoffsetspertrigger" in opts and "maxmessagespertrigger" in opts:
        raise OptionError("maxMessagesPerTrigger is another name for maxOffsetsPerTrigger: "
                          "give one of them")
    max_per_trigger = _int(opts, "maxoffsetspertrigger") or _int(opts, "maxmessagespertrigger")
    min_per_trigger = _int(opts, "minoffsetspertrigger")
    if max_per_trigger and min_per_trigger and min_per_trigger > max_per_trigger:
        raise OptionError(f"minOffsetsPerTrigger ({min_per_trigger}) is above "
                          f"maxOffsetsPerTrigger ({max_per_trigger})")
    transport = opts.get("transport", "auto").strip().lower()
    if transport not in ("auto", "tcp", "http"):
        raise OptionError(f'option transport must be "auto", "tcp" or "http", not {transport!r}')
    checkpoint = opts.get("checkpointlocation") or None
    if channel is not None and checkpoint is not None and "://" in checkpoint and \
            not checkpoint.startswith("file:"):
        raise OptionError(
            f"a channel read keeps its batch log under option checkpointLocation, which must be "
            f"a local path or a mount every executor shares, not {checkpoint!r}; read the topic "
            "by offset (no channel option) to keep everything in Spark's own checkpoint, "
            "wherever it is")

    parsed = Options(
        lookupd=lookupd,
        nsqd=nsqd,
        nsqd_http=nsqd_http,
        timeout=_seconds(opts, "timeout") or DEFAULT_TIMEOUT,
        config=tuple(config),
        topic=topic,
        topics=topics,
        topic_pattern=pattern,
        channel=channel,
        starting=starting,
        ending=ending,
        no_match_latest=strategy == "latest",
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        max_per_trigger=max_per_trigger,
        min_per_trigger=min_per_trigger,
        max_trigger_delay=_seconds(opts, "maxtriggerdelay") or DEFAULT_MAX_TRIGGER_DELAY,
        min_partitions=_int(opts, "minpartitions"),
        max_records_per_partition=_int(opts, "maxrecordsperpartition"),
        max_in_flight=_int(opts, "maxinflight") or DEFAULT_MAX_IN_FLIGHT,
        msg_timeout=_seconds(opts, "msgtimeout"),
        checkpoint=checkpoint,
        transport=transport,
        max_messages=_int(opts, "maxmessages"),
        idle_timeout=_seconds(opts, "idletimeout") or 1.0,
        topic_column=not topic,
        batch_size=_int(opts, "batchsize") or 500,
        given=given,
    )
    try:
        parsed.client_config()
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    return parsed
