"""A topic's and a channel's settings beyond NSQ (docs/jobs.md), as nsqadmin's forms and JSON
API take them and nsqd's ``/topic/create``, ``/channel/create`` and ``/channel/update`` take them.

A field left out (or blank in a form) leaves that setting as it is; a value outside nsqd's
range is refused here, with the words nsqd would use, before any daemon is asked.

========================  ===========================  =====================================
field                     values                       nsqd
========================  ===========================  =====================================
``message_ttl``           0 to 4294967295 seconds      a topic's default TTL (0: none)
``max_attempts``          0 to 65535                   a channel's limit (0: --max-attempts)
``dead_letter_expired``   ``true`` / ``false``         expired messages kept as dead letters
``paused``                ``true`` / ``false``         created paused (create only)
========================  ===========================  =====================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

MAX_TTL = 2**32 - 1
MAX_ATTEMPTS = 65535
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

    @property
    def topic_params(self) -> dict[str, str]:
        """For nsqd's ``/topic/create`` (which also changes an existing topic's TTL)."""
        return {} if self.message_ttl is None else {"message_ttl": str(self.message_ttl)}

    @property
    def channel_params(self) -> dict[str, str]:
        """For nsqd's ``/channel/create`` and ``/channel/update``."""
        params = {}
        if self.max_attempts is not None:
            params["max_attempts"] = str(self.max_attempts)
        if self.dead_letter_expired is not None:
            params["dead_letter_expired"] = "true" if self.dead_letter_expired else "false"
        return params

    def describe(self) -> str:
        """``TTL 60 s, max attempts 5``: what is being set, for reports."""
        parts = []
        if self.message_ttl is not None:
            parts.append(f"TTL {self.message_ttl} s" if self.message_ttl else "no TTL")
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
    )


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
