"""A topic's log on one nsqd, over its HTTP API (``GET /topic/read``, beyond NSQ).

Each message of a topic has an offset on each nsqd that stores it (0, 1, 2, ... in publishing
order; they never change). ``/topic/read?topic=T&offset=N&n=K`` answers up to K of them from
N, with the log's bounds: ``earliest_offset`` (the first still stored) and ``latest_offset``
(the last, -1 for none). An offset read's position on an nsqd is, as Kafka's, the *next*
offset to read: a range ``[start, end)``. A replicated topic has the same offsets on every
replica, and each answers only below its high watermark (``latest_offset`` is the last
below it): it is read from the first of its replicas that answers (:mod:`.replicas`).

* :func:`bounds`: an nsqd's earliest and next offsets for a topic (the driver, each trigger).
* :func:`offset_at`: the first offset published at or after a time (``startingTimestamp``).
* :func:`read_range`: the messages of a range as Arrow record batches (an executor's task).
  What the range needs and the log no longer holds (removed by retention, never stored
  because no channel held it, or the end of a log nsqd lost in a crash) is data loss: an error
  (:class:`.DataLossError`) with ``failOnDataLoss`` true (the default), else a warning and
  the rest of the range.
"""

from __future__ import annotations

import json
import logging
from array import array
from binascii import a2b_base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import attrs
import httpx
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from . import retry
from .batchlog import Messages
from .errors import DataLossError, NSQSparkError
from .options import Options
from .rows import messages_batch

log = logging.getLogger("nsq_spark")

#: Messages per request: nsqd's default --max-rdy-count caps ``n`` (a lower one is met by
#: asking for fewer, see :func:`read_range`).
READ_N = 2500
#: An offset past any log's end: asked from there, nsqd answers the bounds and no message.
PAST_THE_END = (1 << 63) - 2


#: Where a log is read: an nsqd's HTTP address, or a replicated topic's replicas (the
#: addresses asked in turn, :mod:`.replicas`).
Where = str | tuple[str, ...]


@attrs.frozen
class Bounds:
    earliest: int  # the first offset still stored (``end`` when none is)
    end: int  # the next offset to be given: latest_offset + 1
    #: a replicated topic's: the HTTP addresses it is read from, its leader first
    readers: tuple[str, ...] = ()


class _Refused(NSQSparkError):
    """nsqd answered a request with an error; ``message`` is nsqd's (``INVALID_N``)."""

    def __init__(self, text: str, message: str) -> None:
        super().__init__(text)
        self.message = message


def _get(options: Options, where: Where, topic: str, params: dict[str, str], *,
         holding: int | None = None) -> dict[str, Any] | None:
    """``/topic/read``'s answer; None when the nsqd does not have the topic (no replica has
    it). A replicated topic's replicas are asked in turn, passing over those down and, with
    ``holding``, those whose high watermark is not past that offset yet."""
    if isinstance(where, str):
        response = retry.call(retry.client(options), "GET", where, "/topic/read", who="nsqd",
                              timeout=options.timeout, params={"topic": topic, **params})
        return _answer(response, where, topic)
    http = retry.client(options)

    def ask(nsqd: str) -> dict[str, Any] | None:
        response = retry.request(http, "GET", nsqd, "/topic/read",
                                 params={"topic": topic, **params})
        doc = _answer(response, nsqd, topic)
        if doc is not None and holding is not None and int(doc["latest_offset"]) < holding:
            raise retry.NotYet(f"topic {topic} is read there below offset "
                               f"{int(doc['latest_offset']) + 1} (its high watermark), not past "
                               f"{holding} yet")
        return doc

    return retry.first_of(where, ask, who="nsqd", timeout=options.timeout)


def _answer(response: httpx.Response, nsqd: str, topic: str) -> dict[str, Any] | None:
    if response.status_code == 200:
        doc: dict[str, Any] = response.json()
        return doc
    message = _message(response.content)
    if response.status_code == 404 and message == "TOPIC_NOT_FOUND":
        return None
    if response.status_code == 404:
        raise NSQSparkError(f"nsqd {nsqd} has no GET /topic/read (answered 404 {message}): "
                            "only this project's nsqd is read by offset; read Go's nsqd through "
                            "a channel (option channel)")
    raise _Refused(f"nsqd {nsqd}: GET /topic/read?topic={topic} answered "
                   f"{response.status_code} {message}", message)


def _message(content: bytes) -> str:
    try:
        return str(json.loads(content).get("message", ""))
    except (ValueError, AttributeError):
        return content[:200].decode("utf-8", "replace")


def bounds(options: Options, where: Where, topic: str) -> Bounds | None:
    """The topic's log bounds on this nsqd (on the first of its replicas that answers); None
    when it does not have the topic.

    Raises:
        UnreachableError: the nsqd (no replica) did not answer within the timeout option.
    """
    doc = _get(options, where, topic, {"offset": str(PAST_THE_END), "n": "1"})
    if doc is None:
        return None
    end = int(doc["latest_offset"]) + 1
    return Bounds(min(int(doc["earliest_offset"]), end), end,
                  () if isinstance(where, str) else where)


def offset_at(options: Options, where: Where, topic: str, ms: int) -> int | None:
    """The offset of the first message stored on this nsqd published at or after ``ms``
    (milliseconds since the epoch); None when there is none (or no such topic)."""
    doc = _get(options, where, topic, {"timestamp": f"{ms / 1000:.3f}", "n": "1"})
    if doc is None or not doc["messages"]:
        return None
    return int(doc["messages"][0]["offset"])


@dataclass(repr=False)
class LogRange(InputPartition):
    """One task of an offset read: ``topic``'s offsets ``start`` to ``end`` (exclusive) on the
    nsqd at HTTP address ``nsqd`` (a replicated topic: ``nsqd`` is ``*``, and it is read from
    the first of ``readers`` that holds the offsets). ``from_earliest``: the range began as
    "the earliest" (a new nsqd, or ``startingOffsets`` earliest), so a start below what the
    log still holds is not data loss."""

    topic: str
    nsqd: str
    start: int
    end: int
    from_earliest: bool = False
    readers: tuple[str, ...] = ()

    @property
    def where(self) -> Where:
        return self.readers or self.nsqd

    def __repr__(self) -> str:
        return f"LogRange({self.topic} on {self.nsqd}: {self.start}..{self.end})"


def read_range(options: Options, part: LogRange) -> Iterator[pa.RecordBatch]:
    """The messages of ``part``, one record batch per request (see the module docstring).

    Raises:
        DataLossError: offsets of the range are no longer stored, with ``failOnDataLoss``.
        UnreachableError: the nsqd did not answer within the timeout option.
    """
    at, n = part.start, READ_N
    first = True
    while at < part.end:
        try:
            doc = _get(options, part.where, part.topic,
                       {"offset": str(at), "n": str(min(n, part.end - at))}, holding=at)
        except _Refused as exc:
            if exc.message == "INVALID_N" and n > 1:  # an nsqd with a lower --max-rdy-count
                n = max(1, n // 4)
                continue
            raise
        if doc is None:
            _lost(options, part, at, part.end, "the nsqd no longer has the topic")
            return
        messages = [m for m in doc["messages"] if int(m["offset"]) < part.end]
        found = int(messages[0]["offset"]) if messages else min(int(doc["next_offset"]), part.end)
        if found > at and not (first and part.from_earliest):
            earliest = int(doc["earliest_offset"])
            why = (f"the log's earliest offset is {earliest}" if earliest > at
                   else "they were never stored (no channel held them and the topic has no "
                        "retention)")
            _lost(options, part, at, found, why)
        first = False
        if not messages:
            if found <= at:  # the log ends before the range does (nsqd lost its end)
                _lost(options, part, at, part.end, f"the log ends at {doc['latest_offset']}")
                return
            at = found
            continue
        yield _batch(messages, part)
        at = int(messages[-1]["offset"]) + 1


def _batch(messages: list[dict[str, Any]], part: LogRange) -> pa.RecordBatch:
    bodies = [a2b_base64(m["body"]) for m in messages]
    columns = Messages.build(part.nsqd, [m["id"].encode() for m in messages],
                             [m["attempts"] for m in messages],
                             [m["timestamp"] for m in messages], bodies)
    offsets = array("q", [m["offset"] for m in messages])
    return messages_batch(columns, part.topic, None, offsets)


def _lost(options: Options, part: LogRange, start: int, end: int, why: str) -> None:
    on = f"nsqd {part.nsqd}" if not part.readers else f"its replicas {', '.join(part.readers)}"
    text = (f"offsets {start} to {end - 1} of topic {part.topic} on {on} are no "
            f"longer stored ({why}): a topic read by offset needs a retention (POST "
            "/topic/create?topic=...&retention=24h) or a channel that holds its messages")
    if options.fail_on_data_loss:
        raise DataLossError(f"{text}. Set option failOnDataLoss to false to go on without them")
    log.warning("nsq_spark: %s; going on without them (failOnDataLoss is false)", text)
