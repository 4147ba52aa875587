"""The data source's options, parsed once from Spark's case-insensitive string map.

Spark hands every option as a string under a lower-cased key, so ``maxMessagesPerTrigger``
arrives as ``maxmessagespertrigger``. Connection options are the client library's
(:class:`nsq_client.Config`) and may be written either way, ``tls_root_ca_file`` or
``tlsRootCaFile``; ``tls`` is short for ``tls_v1``. Only plain values are kept here, so an
``Options`` pickles to the executors as it is; the ``Config`` is built where it is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from nsq_client import Config
from nsq_common import is_valid_channel_name, is_valid_topic_name, parse_go_duration

from .errors import OptionError

# nsq_client.Config fields a user may set, by their name with underscores removed.
_CONFIG_FIELDS = {name.replace("_", ""): name for name in attrs.fields_dict(Config)
                  if name not in ("tls_context", "max_in_flight", "msg_timeout")}
_CONFIG_FIELDS["tls"] = "tls_v1"

DEFAULT_MAX_IN_FLIGHT = 10_000  # messages a stream may hold at once (planned and prefetched)
MAX_RDY = 2500  # nsqd's default --max-rdy-count: messages one connection may hold


def _addresses(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _positive_int(options: Mapping[str, str], key: str, name: str) -> int | None:
    text = options.get(key)
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {name} must be a whole number, not {text!r}") from None
    if value <= 0:
        raise OptionError(f"option {name} must be above 0, not {value}")
    return value


def _seconds(options: Mapping[str, str], key: str, name: str) -> float | None:
    """A duration: Go's syntax (``90s``, ``1m30s``, ``500ms``) or a number of milliseconds,
    as Spark's own connectors take timeouts."""
    text = options.get(key)
    if text is None or text == "":
        return None
    try:
        value = int(text) / 1000 if text.isdigit() else parse_go_duration(text)
    except ValueError:
        raise OptionError(f"option {name} must be a duration such as 60s, not {text!r}") from None
    if value <= 0:
        raise OptionError(f"option {name} must be above 0")
    return value


@attrs.frozen
class Options:
    topic: str
    channel: str | None
    lookupd: tuple[str, ...]  # nsqlookupd HTTP addresses
    nsqd: tuple[str, ...]  # nsqd TCP addresses
    nsqd_http: tuple[str, ...]  # nsqd HTTP addresses (for HTTP consumption without lookupd)
    max_messages_per_trigger: int | None
    max_in_flight: int
    msg_timeout: float | None  # seconds; None: nsqd's --msg-timeout
    checkpoint: str | None  # the query's checkpoint directory; the batch log lives under it
    mode: str  # "auto", "tcp" (the driver holds TCP consumers) or "http" (executors pull)
    max_messages: int | None  # batch reads: most messages to take
    idle_timeout: float  # batch reads and Trigger.AvailableNow: stop after this long with nothing new
    topic_column: bool  # sink: no topic option, each row names its topic
    batch_size: int  # sink: rows per MPUB
    config: tuple[tuple[str, str], ...]  # nsq_client.Config options, as text

    def client_config(self, **overrides: Any) -> Config:
        config = Config()
        for name, text in self.config:
            config = config.set(name, text)
        return attrs.evolve(config, **overrides) if overrides else config

    @property
    def sources(self) -> str:
        """Where the messages come from, for log lines and errors."""
        return ",".join(self.lookupd) or ",".join(self.nsqd) or ",".join(self.nsqd_http)


def parse(options: Mapping[str, str], *, reading: bool) -> Options:
    """Check and convert the options given to ``spark.read[Stream]`` or ``df.write[Stream]``.

    Raises:
        OptionError: a missing or bad option, in words a user can act on.
    """
    opts = {key.lower(): value for key, value in options.items()}
    topic = opts.get("topic", "")
    if reading or topic:
        if not topic:
            raise OptionError('option "topic" is required')
        if not is_valid_topic_name(topic):
            raise OptionError(f"invalid topic name {topic!r}")
    channel = opts.get("channel") or None
    if reading:
        if channel is None:
            raise OptionError('option "channel" is required to read')
        if not is_valid_channel_name(channel):
            raise OptionError(f"invalid channel name {channel!r}")
    lookupd = _addresses(opts.get("lookupd", ""))
    nsqd = _addresses(opts.get("nsqd", ""))
    nsqd_http = _addresses(opts.get("nsqdhttp", ""))
    if not (lookupd or nsqd or nsqd_http):
        raise OptionError('one of the options "lookupd" (nsqlookupd HTTP host:port list) or "nsqd" '
                          '(nsqd TCP host:port list) is required')
    mode = opts.get("mode", "auto").lower()
    if mode not in ("auto", "tcp", "http"):
        raise OptionError(f'option mode must be "auto", "tcp" or "http", not {mode!r}')
    config: list[tuple[str, str]] = []
    for key, value in opts.items():
        field = _CONFIG_FIELDS.get(key.replace("_", ""))
        if field is not None:
            config.append((field, value))
    parsed = Options(
        topic=topic,
        channel=channel,
        lookupd=lookupd,
        nsqd=nsqd,
        nsqd_http=nsqd_http,
        max_messages_per_trigger=_positive_int(opts, "maxmessagespertrigger", "maxMessagesPerTrigger"),
        max_in_flight=_positive_int(opts, "maxinflight", "maxInFlight") or DEFAULT_MAX_IN_FLIGHT,
        msg_timeout=_seconds(opts, "msgtimeout", "msgTimeout"),
        checkpoint=opts.get("checkpointlocation") or None,
        mode=mode,
        max_messages=_positive_int(opts, "maxmessages", "maxMessages"),
        idle_timeout=_seconds(opts, "idletimeout", "idleTimeout") or 1.0,
        topic_column=not topic,
        batch_size=_positive_int(opts, "batchsize", "batchSize") or 500,
        config=tuple(config),
    )
    try:
        parsed.client_config()
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    return parsed
