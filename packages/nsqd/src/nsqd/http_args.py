"""What an nsqd HTTP request carries, read as NSQ reads it: its body within a limit, its
query's arguments (each refusal a 400 with NSQ's text: ``INVALID_TTL``, ``MISSING_ARG_TOPIC``)
and the topic or channel they name (404 ``TOPIC_NOT_FOUND``, ``CHANNEL_NOT_FOUND``, also when
the channel is deleted while the request is at work: ``still_existing``).

Shared by NSQ's routes (``http_api``) and the job routes (``http_jobs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsq_common import is_valid_name, parse_go_duration
from nsq_serving import HttpError, read_body
from starlette.requests import Request

if TYPE_CHECKING:
    from .broker import Broker
    from .channel import Channel
    from .topic import Topic

ApiError = HttpError  # nsq_serving's one HTTP error, by the name nsqd's handlers use
UNREADABLE = HttpError(500, "INTERNAL_ERROR")  # Go's nsqd when io.ReadAll fails

#: The refusals of a body too large, made once (``read_body`` raises a copy).
_TOO_BIG = {code: HttpError(413, code) for code in ("MSG_TOO_BIG", "BODY_TOO_BIG",
                                                    "INVALID_VALUE")}


async def read_limited(request: Request, limit: int, too_big: str) -> bytes:
    """The whole body, refused (413 ``too_big``) by its declared length before a byte of it
    is read, or as soon as more than ``limit`` bytes arrive."""
    return await read_body(request, limit, too_large=_TOO_BIG[too_big],
                           unreadable=UNREADABLE)


def max_attempts(q: dict[str, str]) -> int | None:
    """``max_attempts`` (0 to 65535; 0: nsqd's --max-attempts), or None when absent."""
    text = q.get("max_attempts")
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) > 65535:
        raise ApiError(400, "INVALID_MAX_ATTEMPTS")
    return int(text)


def replicas(q: dict[str, str]) -> int | None:
    """``replicas`` (at least 1), or None when absent. Raises 400 INVALID_REPLICAS."""
    text = q.get("replicas")
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise ApiError(400, "INVALID_REPLICAS")
    return int(text)


def flag(q: dict[str, str], key: str) -> bool | None:
    """``true``/``1`` or ``false``/``0``, or None when absent. Raises 400 INVALID_<KEY>."""
    text = q.get(key)
    if text is None:
        return None
    if text not in ("true", "1", "false", "0"):
        raise ApiError(400, f"INVALID_{key.upper()}")
    return text in ("true", "1")


MAX_TTL = 2**32 - 1  # seconds, as lmstfy bounds it


def ttl_seconds(q: dict[str, str], key: str) -> int:
    """A TTL in whole seconds (0 when absent: none of its own). Raises 400 INVALID_TTL."""
    text = q.get(key)
    if text is None:
        return 0
    # ASCII digits only: no sign, no spaces, and no "²", which isdigit() accepts and int() refuses
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_TTL:
        raise ApiError(400, "INVALID_TTL")
    return int(text)


def size(q: dict[str, str], key: str, error: str) -> int | None:
    """A non-negative integer (an offset, a size in bytes), or None when absent."""
    text = q.get(key)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) >= 1 << 63:
        raise ApiError(400, error)
    return int(text)


def timestamp_ns(q: dict[str, str]) -> int:
    """``timestamp``, unix seconds (a fraction allowed), in ns."""
    text = q.get("timestamp")
    if text is None:
        raise ApiError(400, "MISSING_ARG_TIMESTAMP")
    try:
        seconds = float(text)
    except ValueError:
        raise ApiError(400, "INVALID_TIMESTAMP") from None
    if not 0 <= seconds < 1e11:  # NaN fails this too
        raise ApiError(400, "INVALID_TIMESTAMP")
    return int(seconds * 1e9)


def duration_ns(q: dict[str, str], key: str, error: str) -> int | None:
    """A Go duration (``24h``, ``90m``; a bare number is seconds) in ns, or None."""
    text = q.get(key)
    if text is None:
        return None
    try:
        seconds = float(text) if text.replace(".", "", 1).isdigit() else parse_go_duration(text)
    except ValueError:
        raise ApiError(400, error) from None
    if not 0 <= seconds < 1e10:
        raise ApiError(400, error)
    return int(seconds * 1e9)


def bool_param(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return value in ("true", "1")


def decimal_seconds(q: dict[str, str], key: str, default: float, *, low: float, high: float,
                    error: str) -> float:
    """A duration in (decimal) seconds from the query, within [low, high]."""
    text = q.get(key)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ApiError(400, error) from None
    if not low <= value <= high:  # NaN fails this too
        raise ApiError(400, error)
    return value


def message_count(q: dict[str, str], most: int) -> int:
    """``n``: 1 (absent) to ``most`` (--max-rdy-count)."""
    try:
        n = int(q.get("n", "1"), 10)
    except ValueError:
        raise ApiError(400, "INVALID_N") from None
    if not 1 <= n <= most:
        raise ApiError(400, "INVALID_N")
    return n


def topic_arg(broker: Broker, q: dict[str, str], invalid: str = "INVALID_TOPIC") -> str:
    """``topic``: a valid name (or an existing topic's), not necessarily of a topic."""
    topic = q.get("topic")
    if topic is None:
        raise ApiError(400, "MISSING_ARG_TOPIC")
    if topic not in broker.topics and not is_valid_name(topic):  # topics are valid
        raise ApiError(400, invalid)
    return topic


def existing_topic(broker: Broker, q: dict[str, str], invalid: str = "INVALID_TOPIC") -> Topic:
    name = topic_arg(broker, q, invalid)
    topic = broker.topics.get(name)
    if topic is None:
        raise ApiError(404, "TOPIC_NOT_FOUND")
    return topic


def channel_args(broker: Broker, q: dict[str, str]) -> tuple[Topic, str]:
    """The existing topic of ``topic`` and the valid name ``channel``."""
    topic_name = topic_arg(broker, q, "INVALID_ARG_TOPIC")
    channel = q.get("channel")
    if channel is None:
        raise ApiError(400, "MISSING_ARG_CHANNEL")
    topic = broker.topics.get(topic_name)
    if not (topic is not None and channel in topic.channels) and not is_valid_name(channel):
        raise ApiError(400, "INVALID_ARG_CHANNEL")  # (a channel that exists is valid)
    if topic is None:
        raise ApiError(404, "TOPIC_NOT_FOUND")
    return topic, channel


def existing_channel(broker: Broker, q: dict[str, str]) -> tuple[Topic, Channel]:
    topic, name = channel_args(broker, q)
    channel = topic.channels.get(name)
    if channel is None:
        raise ApiError(404, "CHANNEL_NOT_FOUND")
    return topic, channel


def still_existing(broker: Broker, channel: Channel) -> None:
    """A request on ``channel`` that its deletion overtook (its private queues closed under
    it, say) is answered as one for a channel that does not exist: the deletion counts as
    first, as it does for the request's effects, which went with the channel. 404
    ``CHANNEL_NOT_FOUND``, or ``TOPIC_NOT_FOUND`` when the topic went too."""
    if channel.deleted:
        raise ApiError(404, "CHANNEL_NOT_FOUND" if channel.topic_name in broker.topics
                       else "TOPIC_NOT_FOUND")
