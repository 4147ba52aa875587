"""Where to rewind a channel to (beyond NSQ: nsqd's ``POST /channel/rewind``, see
docs/design/storage.md), as the channel page's form and the JSON API give it.

The channel delivers again everything its topic's log still holds from that point:

======================  ==================================  ==============================
``to``                  with                                nsqd is asked
======================  ==================================  ==============================
``time`` (default)      ``time``: ``2026-05-01T12:30[:15]``   ``timestamp=<unix seconds>``
                        in UTC (an offset such as ``+02:00``
                        or ``Z`` is honoured), or
                        ``timestamp``: unix seconds
``earliest``                                                ``timestamp=0`` (each nsqd starts
                                                            at the oldest message it holds;
                                                            an offset below it is refused)
``offset``              ``offset``: 0 or more               ``offset=N``
======================  ==================================  ==============================

Offsets are each nsqd's own: with more than one nsqd, name the ``node`` for an offset.
``to`` may be left out when just one of ``timestamp``, ``time`` and ``offset`` is given; a
``time`` or ``offset`` target whose field is empty while the other one is filled is taken as
that other one (a form whose radio button was left at its default).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import Any

import attrs

from .formatting import timestamp as utc_text

TARGETS = ("time", "earliest", "offset")
MAX_TIMESTAMP = 1e11  # nsqd's bound, seconds


class RewindError(ValueError):
    """A rewind target nsqd would refuse, or none at all; ``str()`` says why."""


@attrs.frozen
class RewindTarget:
    """One of: a time (``timestamp``, unix seconds), the earliest kept, an ``offset``."""

    timestamp: float | None = None
    offset: int | None = None

    @property
    def params(self) -> dict[str, str]:
        """For nsqd's ``/channel/rewind``."""
        seconds = self.timestamp
        if seconds is not None:
            return {"timestamp": repr(seconds) if seconds % 1 else str(int(seconds))}
        if self.offset is None:  # the earliest: no time is before it (an offset may be)
            return {"timestamp": "0"}
        return {"offset": str(self.offset)}

    def describe(self) -> str:
        """``to 2026-05-01T12:30:00Z``, ``to the earliest message kept``, ``to offset 42``."""
        if self.timestamp is not None:
            return f"to {utc_text(int(self.timestamp))}"
        if self.offset is None:
            return "to the earliest message kept"
        return f"to offset {self.offset:,}"


def parse(fields: Mapping[str, Any]) -> RewindTarget:
    """The target in form fields or a JSON object.

    Raises:
        RewindError: no target, or a bad one.
    """
    to = fields.get("to") or ""
    if not to or (to in ("time", "offset") and not _names_one(fields, to)):
        to = _implied(fields) or to
    if to not in TARGETS:
        raise RewindError("Rewind to a time, the earliest message kept or an offset.")
    if to == "earliest":
        return RewindTarget()
    if to == "offset":
        return RewindTarget(offset=_offset(fields.get("offset")))
    if fields.get("timestamp") not in (None, ""):
        return RewindTarget(timestamp=_timestamp(fields["timestamp"]))
    return RewindTarget(timestamp=_time(fields.get("time")))


def _filled(fields: Mapping[str, Any], name: str) -> bool:
    return fields.get(name) not in (None, "")


def _names_one(fields: Mapping[str, Any], to: str) -> bool:
    """Whether the field ``to`` needs is filled."""
    if to == "offset":
        return _filled(fields, "offset")
    return _filled(fields, "time") or _filled(fields, "timestamp")


def _implied(fields: Mapping[str, Any]) -> str:
    """The target the one field given names, if just one is."""
    given = [name for name in ("timestamp", "time", "offset") if _filled(fields, name)]
    if len(given) != 1:
        return ""
    return "offset" if given == ["offset"] else "time"


def _offset(value: Any) -> int:
    text = "" if value is None or isinstance(value, bool) else str(value).strip()
    if not (text.isascii() and text.isdigit()) or int(text) >= 2**63:
        raise RewindError("An offset is a whole number, 0 or more.")
    return int(text)


def _timestamp(value: Any) -> float:
    try:
        seconds = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        seconds = math.nan
    if not 0 <= seconds < MAX_TIMESTAMP:  # NaN fails this too
        raise RewindError("A timestamp is unix seconds, 0 or more.")
    return seconds


def _time(value: Any) -> float:
    text = str(value or "").strip()
    if not text:
        raise RewindError("Which time to rewind to is missing.")
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise RewindError(f"Not a time: {text[:40]!r} (2026-05-01T12:30, UTC).") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return _timestamp(moment.timestamp())
