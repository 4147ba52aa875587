"""A topic's and a channel's settings beyond NSQ (docs/jobs.md, docs/design/storage.md), as
nsqadmin's forms and JSON API take them and nsqd's ``/topic/create``, ``/channel/create`` and
``/channel/update`` take them.

A field left out (or blank in a form) leaves that setting as it is; a value outside nsqd's
range is refused here, with the words nsqd would use, before any daemon is asked.

========================  ===========================  =====================================
field                     values                       nsqd
========================  ===========================  =====================================
``message_ttl``           0 to 4294967295 seconds      a topic's default TTL (0: none)
``retention``             a Go duration (``24h``), or  how long a topic's log keeps what
                          seconds; under 10^10 s       every channel has finished (0: not)
``retention_bytes``       0 to 2^63-1                  or the newest segments within this
``max_attempts``          0 to 65535                   a channel's limit (0: --max-attempts)
``dead_letter_expired``   ``true`` / ``false``         expired messages kept as dead letters
``paused``                ``true`` / ``false``         created paused (create only)
``start``                 ``earliest`` / ``latest``    where a new channel starts in the
                                                       topic's log (create only)
========================  ===========================  =====================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from nsq_common import format_go_duration, parse_go_duration

MAX_TTL = 2**32 - 1
MAX_ATTEMPTS = 65535
MAX_RETENTION_SECONDS = 10**10  # nsqd's bound
MAX_BYTES = 2**63 - 1
STARTS = ("earliest", "latest")
_TRUE, _FALSE = ("true", "1", "on", "yes"), ("false", "0", "off", "no")


class SettingError(ValueError):
    """A setting nsqd would refuse; ``str()`` says which and why."""


@attrs.frozen
class Settings:
    """What to set; None: leave it as it is."""

    message_ttl: int | None = None
    max_attempts: int | None = None
    dead_letter_expired: bool | None = None
    paused: bool | None = None
    retention: int | None = None  # ns
    retention_bytes: int | None = None
    start: str | None = None  # one of STARTS

    @property
    def topic_params(self) -> dict[str, str]:
        """For nsqd's ``/topic/create`` (which also changes an existing topic's settings)."""
        params = {}
        if self.message_ttl is not None:
            params["message_ttl"] = str(self.message_ttl)
        if self.retention is not None:
            params["retention"] = format_go_duration(self.retention / 1e9)
        if self.retention_bytes is not None:
            params["retention_bytes"] = str(self.retention_bytes)
        return params

    @property
    def channel_params(self) -> dict[str, str]:
        """For nsqd's ``/channel/create`` and ``/channel/update``."""
        params = {}
        if self.max_attempts is not None:
            params["max_attempts"] = str(self.max_attempts)
        if self.dead_letter_expired is not None:
            params["dead_letter_expired"] = "true" if self.dead_letter_expired else "false"
        return params

    @property
    def create_channel_params(self) -> dict[str, str]:
        """For nsqd's ``/channel/create``: ``channel_params`` and where it starts."""
        start = {} if self.start is None else {"start": self.start}
        return {**self.channel_params, **start}

    @property
    def topic_only(self) -> Settings:
        """The settings a topic's settings form may change."""
        return Settings(message_ttl=self.message_ttl, retention=self.retention,
                        retention_bytes=self.retention_bytes)

    @property
    def channel_only(self) -> Settings:
        """The settings a channel's settings form may change."""
        return Settings(max_attempts=self.max_attempts,
                        dead_letter_expired=self.dead_letter_expired)

    def describe(self) -> str:
        """``TTL 60 s, max attempts 5``: what is being set, for reports."""
        parts = []
        if self.message_ttl is not None:
            parts.append(f"TTL {self.message_ttl} s" if self.message_ttl else "no TTL")
        if self.retention is not None:
            parts.append(f"retention {format_go_duration(self.retention / 1e9)}"
                         if self.retention else "no retention")
        if self.retention_bytes is not None:
            parts.append(f"retention {self.retention_bytes:,} bytes" if self.retention_bytes
                         else "no retention in bytes")
        if self.start is not None:
            parts.append(f"starting at the {self.start}")
        if self.max_attempts is not None:
            parts.append(f"max attempts {self.max_attempts}" if self.max_attempts
                         else "nsqd's default max attempts")
        if self.dead_letter_expired is not None:
            parts.append("expired messages kept as dead letters" if self.dead_letter_expired
                         else "expired messages dropped")
        if self.paused:
            parts.append("paused")
        return ", ".join(parts)


def parse(fields: Mapping[str, Any]) -> Settings:
    """The settings in form fields or a JSON object (numbers as numbers or text).

    Raises:
        SettingError: a value nsqd would refuse.
    """
    return Settings(
        message_ttl=_number(fields, "message_ttl", MAX_TTL, "INVALID_TTL"),
        max_attempts=_number(fields, "max_attempts", MAX_ATTEMPTS, "INVALID_MAX_ATTEMPTS"),
        dead_letter_expired=_flag(fields, "dead_letter_expired"),
        paused=_flag(fields, "paused"),
        retention=_duration_ns(fields, "retention", "INVALID_RETENTION"),
        retention_bytes=_number(fields, "retention_bytes", MAX_BYTES,
                                "INVALID_RETENTION_BYTES"),
        start=_choice(fields, "start", STARTS, "INVALID_START"),
    )


def _duration_ns(fields: Mapping[str, Any], name: str, error: str) -> int | None:
    """A Go duration (``24h``, ``90m``) or a number of seconds, as nsqd takes it, in ns."""
    value = fields.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise SettingError(error)
    text = str(value).strip()
    try:
        seconds = (float(text) if text.replace(".", "", 1).isascii()
                   and text.replace(".", "", 1).isdigit() else parse_go_duration(text))
    except ValueError:
        raise SettingError(error) from None
    if not 0 <= seconds < MAX_RETENTION_SECONDS:
        raise SettingError(error)
    return round(seconds * 1e9)


def _choice(fields: Mapping[str, Any], name: str, choices: tuple[str, ...], error: str
            ) -> str | None:
    value = fields.get(name)
    if value is None or value == "":
        return None
    if value not in choices:
        raise SettingError(error)
    return str(value)


def _number(fields: Mapping[str, Any], name: str, most: int, error: str) -> int | None:
    value = fields.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise SettingError(error)
    text = str(value).strip()
    if not (text.isascii() and text.isdigit()) or int(text) > most:
        raise SettingError(error)
    return int(text)


def _flag(fields: Mapping[str, Any], name: str) -> bool | None:
    value = fields.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingError(f"INVALID_{name.upper()}")
