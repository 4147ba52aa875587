"""Client options: go-nsq's ``Config``, with its names, defaults and ranges.

Every duration is in seconds (a float), as everywhere in Trio; the wire's milliseconds are
computed where the commands are built. Options are validated on construction, so a ``Config``
that exists is usable. ``Config.set(name, text)`` parses one option from text the way
go-nsq's ``Config.Set`` does, for the tools' ``--consumer-opt`` / ``--producer-opt`` flags
(``name`` may use ``-`` or ``_``; durations are Go durations such as ``250ms``).
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

import attrs
from nsq_common import parse_bool, parse_go_duration

from ._version import __version__

_MIN = 60.0


def _between(low: float, high: float) -> Any:
    def check(inst: Any, attr: attrs.Attribute[Any], value: float) -> None:
        if not low <= value <= high:
            raise ValueError(f"invalid {attr.name} ! {low} <= {value} <= {high}")

    return check


def _at_least(low: float) -> Any:
    def check(inst: Any, attr: attrs.Attribute[Any], value: float) -> None:
        if value < low:
            raise ValueError(f"invalid {attr.name} ! {value} >= {low}")

    return check


def _one_of(*choices: str) -> Any:
    def check(inst: Any, attr: attrs.Attribute[Any], value: str) -> None:
        if value not in choices:
            raise ValueError(f"invalid {attr.name} {value!r} (one of {', '.join(choices)})")

    return check


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def _duration(kind: str = "duration") -> dict[str, str]:
    return {"kind": kind}


@attrs.frozen(kw_only=True)
class Config:
    """Options shared by ``Producer`` and ``Consumer`` (go-nsq names and defaults).

    Durations are seconds. ``heartbeat_interval``, ``output_buffer_size`` and
    ``output_buffer_timeout`` may be negative to ask nsqd to disable them (sent as -1);
    ``msg_timeout`` 0 keeps nsqd's default.
    """

    dial_timeout: float = attrs.field(default=1.0, validator=_at_least(0.0),
                                      metadata=_duration())
    read_timeout: float = attrs.field(default=60.0, validator=_between(0.1, 5 * _MIN),
                                      metadata=_duration())
    write_timeout: float = attrs.field(default=1.0, validator=_between(0.1, 5 * _MIN),
                                       metadata=_duration())

    lookupd_poll_interval: float = attrs.field(default=60.0, validator=_between(0.01, 5 * _MIN),
                                               metadata=_duration())
    lookupd_poll_jitter: float = attrs.field(default=0.3, validator=_between(0.0, 1.0),
                                             metadata={"kind": "float"})
    lookupd_poll_timeout: float = attrs.field(default=60.0, validator=_at_least(0.0),
                                              metadata=_duration())

    max_requeue_delay: float = attrs.field(default=15 * _MIN, validator=_between(0, 60 * _MIN),
                                           metadata=_duration())
    default_requeue_delay: float = attrs.field(default=90.0, validator=_between(0, 60 * _MIN),
                                               metadata=_duration())
    backoff_strategy: str = attrs.field(default="exponential",
                                        validator=_one_of("exponential", "full_jitter"))
    max_backoff_duration: float = attrs.field(default=2 * _MIN, validator=_between(0, 60 * _MIN),
                                              metadata=_duration())
    backoff_multiplier: float = attrs.field(default=1.0, validator=_between(0, 60 * _MIN),
                                            metadata=_duration())
    max_attempts: int = attrs.field(default=5, validator=_between(0, 65535), metadata={"kind": "int"})

    low_rdy_idle_timeout: float = attrs.field(default=10.0, validator=_between(1.0, 5 * _MIN),
                                              metadata=_duration())
    low_rdy_timeout: float = attrs.field(default=30.0, validator=_between(1.0, 5 * _MIN),
                                         metadata=_duration())
    rdy_redistribute_interval: float = attrs.field(default=5.0, validator=_between(0.001, 5.0),
                                                   metadata=_duration())

    client_id: str = attrs.field(factory=_short_hostname)
    hostname: str = attrs.field(factory=socket.gethostname)
    user_agent: str = f"nsq_client/{__version__}"

    heartbeat_interval: float = attrs.field(default=30.0, metadata=_duration())
    sample_rate: int = attrs.field(default=0, validator=_between(0, 99), metadata={"kind": "int"})

    tls_v1: bool = attrs.field(default=False, metadata={"kind": "bool"})
    # An ssl.SSLContext to use for TLS; without one, a default context is built from the
    # tls_* options below.
    tls_context: ssl.SSLContext | None = attrs.field(default=None, eq=False, repr=False)
    tls_root_ca_file: str = ""
    tls_insecure_skip_verify: bool = attrs.field(default=False, metadata={"kind": "bool"})
    tls_cert: str = ""
    tls_key: str = ""
    tls_min_version: str = attrs.field(default="tls1.2",
                                       validator=_one_of("tls1.0", "tls1.1", "tls1.2", "tls1.3"))

    deflate: bool = attrs.field(default=False, metadata={"kind": "bool"})
    deflate_level: int = attrs.field(default=6, validator=_between(1, 9), metadata={"kind": "int"})
    snappy: bool = attrs.field(default=False, metadata={"kind": "bool"})

    output_buffer_size: int = attrs.field(default=16384, metadata={"kind": "int"})
    output_buffer_timeout: float = attrs.field(default=0.25, metadata=_duration())

    max_in_flight: int = attrs.field(default=1, validator=_at_least(0), metadata={"kind": "int"})
    msg_timeout: float = attrs.field(default=0.0, validator=_at_least(0.0), metadata=_duration())
    max_msg_size: int = attrs.field(default=0, validator=_at_least(0), metadata={"kind": "int"})

    auth_secret: str = ""
    # go-nsq's "skip_lookupd_authorization" (field LookupdAuthorization): when true and an
    # auth secret is set, lookupd queries carry "Authorization: Bearer <secret>".
    lookupd_authorization: bool = attrs.field(default=True, metadata={"kind": "bool"})

    def __attrs_post_init__(self) -> None:
        if self.heartbeat_interval > self.read_timeout:
            raise ValueError(f"heartbeat_interval {self.heartbeat_interval} must be less than "
                             f"read_timeout {self.read_timeout}")
        if self.deflate and self.snappy:
            raise ValueError("cannot enable both deflate and snappy compression")

    def set(self, name: str, text: str | None = None) -> Config:
        """A copy with one option parsed from text (``None`` means ``true`` for booleans).

        Raises:
            ValueError: unknown option or a value that does not parse or is out of range.
        """
        key = name.replace("-", "_")
        if key == "skip_lookupd_authorization":
            key = "lookupd_authorization"
        fields = attrs.fields_dict(Config)
        field = fields.get(key)
        if field is None or key == "tls_context":
            raise ValueError(f"invalid option {name}")
        kind = field.metadata.get("kind", "str")
        if text is None:
            if kind != "bool":
                raise ValueError(f"option {name} needs a value")
            text = "true"
        value: Any
        if kind == "duration":
            value = parse_go_duration(text)
        elif kind == "int":
            value = int(text, 10)
        elif kind == "float":
            value = float(text)
        elif kind == "bool":
            value = parse_bool(text)
        else:
            value = text
        return attrs.evolve(self, **{key: value})

    # -- IDENTIFY ----------------------------------------------------------------------------
    def identify_body(self) -> dict[str, Any]:
        """The IDENTIFY JSON go-nsq sends (durations in ms, -1 to disable)."""

        def ms(value: float) -> int:
            return -1 if value < 0 else int(value * 1000)

        return {
            "client_id": self.client_id,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
            "feature_negotiation": True,
            "heartbeat_interval": ms(self.heartbeat_interval),
            "hostname": self.hostname,
            "long_id": self.hostname,
            "msg_timeout": int(self.msg_timeout * 1000),
            "output_buffer_size": -1 if self.output_buffer_size < 0 else self.output_buffer_size,
            "output_buffer_timeout": ms(self.output_buffer_timeout),
            "sample_rate": self.sample_rate,
            "short_id": self.client_id,
            "snappy": self.snappy,
            "tls_v1": self.tls_v1,
            "user_agent": self.user_agent,
        }

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context for ``tls_v1``: ``tls_context`` if given, else one built from tls_*."""
        if self.tls_context is not None:
            return self.tls_context
        ctx = ssl.create_default_context(cafile=self.tls_root_ca_file or None)
        ctx.minimum_version = {
            "tls1.0": ssl.TLSVersion.TLSv1, "tls1.1": ssl.TLSVersion.TLSv1_1,
            "tls1.2": ssl.TLSVersion.TLSv1_2, "tls1.3": ssl.TLSVersion.TLSv1_3,
        }[self.tls_min_version]
        if self.tls_insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.tls_cert:
            ctx.load_cert_chain(self.tls_cert, self.tls_key or None)
        return ctx
