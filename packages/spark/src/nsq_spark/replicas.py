"""A replicated topic (nsqd ``--etcd-endpoints``) read by offset: one partition, on any replica.

Every replica holds a replicated topic's log at the same offsets, and ``/topic/read`` on any
of them answers only below the high watermark, what every in-sync replica holds and a new
leader never lacks (docs/design/replication.md). So such a topic is one partition, as a
Kafka topic-partition is whichever broker leads it: its key in the offsets is
:data:`REPLICATED` where an nsqd's address would be, ``{"clicks": {"*": 1200}}``, which holds
on every replica and stays valid after a failover. Each call about it goes to its leader
first, then to the other in-sync replicas (:func:`.retry.first_of`): a replica down, or
whose high watermark is behind the offset asked, passes the call to the next.

A topic is replicated when ``/stats`` gives it a ``replication`` object (``{"leader",
"epoch", "replicas", "isr", "high_watermark", "lag"}``, the same on every replica); a topic
without one is read as before, one partition per nsqd that has it.
"""

from __future__ import annotations

import logging
from typing import Any

from . import discovery, retry
from .options import Options
from .positions import Key

log = logging.getLogger("nsq_spark")

#: The key of a replicated topic's partition in the offsets (and its rows' ``nsqd`` column).
REPLICATED = "*"

Readers = tuple[str, ...]  # the HTTP addresses a partition is read from, in the order asked


def partitions(options: Options) -> dict[Key, Readers]:
    """Every partition of an offset read and where it is read: each nsqd that has (or, with
    ``nsqdHttp``, may have) an unreplicated topic is one, read there; a replicated topic is one,
    read from its leader and in-sync replicas.

    Raises:
        UnreachableError: no nsqlookupd, or none of a topic's nsqd, answered in time.
    """
    found: dict[Key, Readers] = {}
    for topic, addresses in discovery.log_partitions(options).items():
        replication = _replication(options, topic, addresses)
        if replication is None:
            found.update({(topic, address): (address,) for address in addresses})
        else:
            found[(topic, REPLICATED)] = readers(options, topic, replication, addresses)
    return found


def _replication(options: Options, topic: str, addresses: list[str]) -> dict[str, Any] | None:
    """The topic's ``replication`` object in ``/stats`` of the first of ``addresses`` that has
    the topic; None when it has none (or none of them has the topic)."""
    http = retry.client(options)
    params = {"format": "json", "topic": topic, "include_clients": "false",
              "include_mem": "false"}

    def ask(address: str) -> dict[str, Any] | None:
        status, stats = retry.get_json(http, discovery.nsqd_url(address, "/stats"), params=params)
        topics = (stats or {}).get("topics") if status == 200 else None
        for entry in topics or []:
            if isinstance(entry, dict) and entry.get("topic_name") == topic:
                found = entry.get("replication")
                return found if isinstance(found, dict) else {}
        return None  # not here

    found = retry.first_of(addresses, ask, who="nsqd", timeout=options.timeout)
    return found or None


def readers(options: Options, topic: str, replication: dict[str, Any],
            addresses: list[str]) -> Readers:
    """The HTTP addresses to read a replicated topic from: its leader, then the rest of its
    in-sync set, those known by address (registered with nsqlookupd, or among ``nsqdHttp``);
    ``addresses`` (where the topic was found) when none of them is."""
    http_of = discovery.nodes_http(options, topic)
    wanted = [replication.get("leader"), *(replication.get("isr") or [])]
    found: list[str] = []
    for node in wanted:
        address = http_of.get(node) if isinstance(node, str) else None
        if address is not None and address not in found:
            found.append(address)
    if not found:
        log.warning("nsq_spark: no in-sync replica of topic %s (%s) is known by its HTTP "
                    "address; reading it from %s", topic, replication, ", ".join(addresses))
        return tuple(addresses)
    return tuple(found)
