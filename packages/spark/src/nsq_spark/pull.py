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
import os
from binascii import a2b_base64
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import httpx
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from .batchlog import ID_SIZE, BatchLog, Messages, Part
from .discovery import nsqd_url
from .rows import messages_batch

log = logging.getLogger("nsq_spark")

HTTP_TIMEOUT = 30.0
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


def read_part(partition: PullPartition) -> Iterator[pa.RecordBatch]:
    """The executor's side; see the module docstring."""
    batch_log = BatchLog(partition.log_dir)
    messages = batch_log.read_part(partition.end, partition.index)
    if messages is None:
        messages = _pull(partition)
        batch_log.write_part(partition.end, partition.index, messages)
    if len(messages):
        yield messages_batch(messages, partition.topic, partition.channel)


_shared: tuple[int, httpx.Client] | None = None


def _client() -> httpx.Client:
    """This process's client, kept for the tasks it runs after (Spark reuses its Python
    workers): making one (an SSL context, certificates read) costs more than a pull."""
    global _shared
    if _shared is None or _shared[0] != os.getpid():  # not one inherited through a fork
        _shared = (os.getpid(), httpx.Client(timeout=HTTP_TIMEOUT))
    return _shared[1]


def id_set(ids: bytes) -> set[bytes]:
    return {ids[i:i + ID_SIZE] for i in range(0, len(ids), ID_SIZE)}


def _pull(p: PullPartition) -> Messages:
    part = p.part
    committed, pending = id_set(p.committed), id_set(p.pending)
    ids: list[bytes] = []
    attempts: list[int] = []
    timestamps: list[int] = []
    bodies: list[bytes] = []
    late: list[bytes] = []
    remaining = part.count
    client = _client()
    while remaining > 0:
        response = client.post(nsqd_url(part.nsqd_http, "/channel/consume"), params={
            "topic": p.topic, "channel": p.channel, "n": str(min(remaining, MAX_PULL)),
            "ttr": f"{p.ttr:g}"})
        response.raise_for_status()
        messages = json.loads(response.content)["messages"]
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
        finish(client, part.nsqd_http, p.topic, p.channel, late)
    return Messages.build(part.nsqd, ids, attempts, timestamps, bodies)


# -- the driver's calls -----------------------------------------------------------------------------

def finish(client: httpx.Client, nsqd_http: str, topic: str, channel: str,
           ids: Iterable[bytes]) -> list[bytes]:
    """FIN the ids; those nsqd did not confirm, returned: some of them were no longer in
    flight (their timeout passed: nsqd delivers them again, to be dropped then as committed)."""
    batch = list(ids)
    missed: list[bytes] = []
    for i in range(0, len(batch), FIN_CHUNK):
        chunk = batch[i:i + FIN_CHUNK]
        response = client.post(nsqd_url(nsqd_http, "/message/fin"),
                               params={"topic": topic, "channel": channel},
                               content=b"\n".join(chunk))
        if response.status_code == 404:
            log.warning("nsq_spark: some of %d messages of %s/%s were no longer in flight on %s",
                        len(chunk), topic, channel, nsqd_http)
            missed += chunk
        else:
            response.raise_for_status()
    return missed


def depth(client: httpx.Client, nsqd_http: str, topic: str, channel: str) -> int:
    """Messages the channel holds on this nsqd, neither in flight nor deferred."""
    response = client.get(nsqd_url(nsqd_http, "/stats"),
                          params={"format": "json", "topic": topic, "channel": channel})
    response.raise_for_status()
    for t in response.json().get("topics") or []:
        for c in t.get("channels") or []:
            if c.get("channel_name") == channel:
                return int(c.get("depth", 0))
    return 0


def create_channel(client: httpx.Client, nsqd_http: str, topic: str, channel: str) -> None:
    """As a TCP SUB would: the channel exists, and keeps every message from now on."""
    client.post(nsqd_url(nsqd_http, "/topic/create"), params={"topic": topic}).raise_for_status()
    client.post(nsqd_url(nsqd_http, "/channel/create"),
                params={"topic": topic, "channel": channel}).raise_for_status()
