"""Consuming over HTTP, for nsqd that offer it (beyond NSQ; see docs/jobs.md): the executors
pull a batch's messages themselves and the driver finishes them by id.

The driver plans each batch as parts, "up to n messages from this nsqd", sized by the
channel's depth there; each part is one partition. An executor reading a part:

1. replays the part from the batch log if it was pulled before (the query was restarted);
2. otherwise pulls up to n messages (``POST /channel/consume``, ``ttr`` = the message
   timeout), FINishes at once those whose batch Spark already committed (late redeliveries),
   leaves in flight those that belong to another batch still being replayed (that batch's
   commit finishes them by id), logs the rest in the part file, and only then hands them to
   Spark.

The driver TOUCHes the logged messages of uncommitted batches every third of the timeout and
FINishes them once Spark commits their batch. Needs the checkpoint on a file system the
executors share with the driver (one machine, or a shared mount).
"""

from __future__ import annotations

import json
import logging
from binascii import a2b_base64
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from . import retry
from .batchlog import ID_SIZE, BatchLog, Messages, Part
from .errors import NSQSparkError
from .options import Options
from .rows import messages_batch

log = logging.getLogger("nsq_spark")

MAX_PULL = 2500  # messages per /channel/consume: nsqd's default --max-rdy-count
FIN_CHUNK = 5000  # ids per /message/fin body


@dataclass(repr=False)
class PullPartition(InputPartition):
    """Part ``index`` of the batch ending at ``end``: pull up to ``part.count`` messages.

    ``committed`` and ``pending`` are the ids (16 bytes each, back to back: one string to
    pickle) on this part's nsqd of recently committed batches and of other batches not yet
    committed."""

    topic: str
    channel: str
    log_dir: str
    end: int
    index: int
    part: Part
    ttr: float
    committed: bytes
    pending: bytes

    def __repr__(self) -> str:
        return (f"PullPartition({self.topic}/{self.channel} batch {self.end} part {self.index}: "
                f"{self.part.count} from {self.part.nsqd_http})")


def read_part(options: Options, partition: PullPartition) -> Iterator[pa.RecordBatch]:
    """The executor's side; see the module docstring."""
    batch_log = BatchLog(partition.log_dir)
    messages = batch_log.read_part(partition.end, partition.index)
    if messages is None:
        messages = _pull(options, partition)
        batch_log.write_part(partition.end, partition.index, messages)
    if len(messages):
        yield messages_batch(messages, partition.topic, partition.channel)


def _post(options: Options, nsqd_http: str, path: str, params: dict[str, str],
          content: bytes | None = None) -> bytes:
    """A POST to nsqd (retried as :mod:`.retry` says); its body, for 200.

    Raises:
        UnreachableError: no answer within the timeout option.
        NSQSparkError: an answer other than 200 (404 is the caller's: returned as None).
    """
    response = retry.call(retry.client(options), "POST", nsqd_http, path, who="nsqd",
                          timeout=options.timeout, params=params, content=content)
    if response.status_code != 200:
        raise NSQSparkError(f"nsqd {nsqd_http}: POST {path} answered {response.status_code} "
                            f"{response.text.strip()[:200]}")
    return response.content


def id_set(ids: bytes) -> set[bytes]:
    return {ids[i:i + ID_SIZE] for i in range(0, len(ids), ID_SIZE)}


def _pull(options: Options, p: PullPartition) -> Messages:
    part = p.part
    committed, pending = id_set(p.committed), id_set(p.pending)
    ids: list[bytes] = []
    attempts: list[int] = []
    timestamps: list[int] = []
    bodies: list[bytes] = []
    late: list[bytes] = []
    remaining = part.count
    while remaining > 0:
        messages = json.loads(_post(options, part.nsqd_http, "/channel/consume", {
            "topic": p.topic, "channel": p.channel, "n": str(min(remaining, MAX_PULL)),
            "ttr": f"{p.ttr:g}"}))["messages"]
        if not messages:
            break  # others took the rest
        remaining -= len(messages)
        if committed or pending:
            kept = []
            for m in messages:
                id = m["id"].encode()
                if id in committed:
                    late.append(id)
                elif id not in pending:
                    kept.append(m)
            messages = kept
        ids += [m["id"].encode() for m in messages]
        attempts += [m["attempts"] for m in messages]
        timestamps += [m["timestamp"] for m in messages]
        bodies += [a2b_base64(m["body"]) for m in messages]
    if late:
        finish(options, part.nsqd_http, p.topic, p.channel, late)
    return Messages.build(part.nsqd, ids, attempts, timestamps, bodies)


# -- the driver's calls -----------------------------------------------------------------------------

def finish(options: Options, nsqd_http: str, topic: str, channel: str,
           ids: Iterable[bytes]) -> list[bytes]:
    """FIN the ids; those nsqd did not confirm, returned: some of them were no longer in
    flight (their timeout passed: nsqd delivers them again, to be dropped then as committed).

    Raises:
        UnreachableError: the nsqd did not answer within the timeout option.
    """
    batch = list(ids)
    missed: list[bytes] = []
    for i in range(0, len(batch), FIN_CHUNK):
        chunk = batch[i:i + FIN_CHUNK]
        response = retry.call(retry.client(options), "POST", nsqd_http, "/message/fin",
                              who="nsqd", timeout=options.timeout,
                              params={"topic": topic, "channel": channel},
                              content=b"\n".join(chunk))
        if response.status_code == 404:
            log.warning("nsq_spark: some of %d messages of %s/%s were no longer in flight on %s",
                        len(chunk), topic, channel, nsqd_http)
            missed += chunk
        elif response.status_code != 200:
            raise NSQSparkError(f"nsqd {nsqd_http}: POST /message/fin answered "
                                f"{response.status_code} {response.text.strip()[:200]}")
    return missed


def depth(options: Options, nsqd_http: str, topic: str, channel: str) -> int:
    """Messages the channel holds on this nsqd, neither in flight nor deferred."""
    response = retry.call(retry.client(options), "GET", nsqd_http, "/stats", who="nsqd",
                          timeout=options.timeout,
                          params={"format": "json", "topic": topic, "channel": channel})
    if response.status_code != 200:
        raise NSQSparkError(f"nsqd {nsqd_http}: GET /stats answered {response.status_code}")
    for t in response.json().get("topics") or []:
        for c in t.get("channels") or []:
            if c.get("channel_name") == channel:
                return int(c.get("depth", 0))
    return 0


def create_channel(options: Options, nsqd_http: str, topic: str, channel: str) -> None:
    """As a TCP SUB would: the channel exists, and keeps every message from now on."""
    _post(options, nsqd_http, "/topic/create", {"topic": topic})
    _post(options, nsqd_http, "/channel/create", {"topic": topic, "channel": channel})
