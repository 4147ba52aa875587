"""Where the nsqd are: nsqlookupd's and nsqd's HTTP APIs, asked with plain blocking HTTP.

These run per trigger or batch (driver) or per task (executor), outside any event loop. The
options name the nsqd directly (``nsqd``: TCP addresses; ``nsqdHttp``: HTTP addresses) or
through nsqlookupd (``lookupd``), whose ``/lookup`` and ``/nodes`` give both ports. Every
call rides out a restart and fails, naming the address, after the ``timeout`` option
(:mod:`.retry`); several nsqlookupd are asked together and one of them down is only logged.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
from nsq_client import lookupd_url
from nsq_common import ACCEPT_V1, decode_v1, join_host_port

from . import retry
from .errors import UnreachableError
from .options import Options

log = logging.getLogger("nsq_spark")


def nsqd_url(http_address: str, path: str) -> str:
    """``path`` on an nsqd's HTTP address (``host:port``, or a URL with its scheme)."""
    return retry.url(http_address, path)


def _headers(options: Options) -> dict[str, str]:
    config = options.client_config()
    if config.auth_secret and config.lookupd_authorization:
        return {"Authorization": f"Bearer {config.auth_secret}"}
    return {}


def _producers(options: Options, topic: str | None) -> list[dict[str, Any]]:
    """The producers every answering nsqlookupd names for ``topic`` (``/lookup``), or every
    nsqd they know (``/nodes``, ``topic`` None), merged by address."""
    http = retry.client(options)
    headers = _headers(options)

    def ask(address: str) -> list[dict[str, Any]]:
        target = (lookupd_url(address, "/lookup", topic=topic) if topic is not None
                  else lookupd_url(address, "/nodes"))
        status, payload = retry.get_json(http, target, headers=headers)
        if status == 404:  # TOPIC_NOT_FOUND: no nsqd has it (yet)
            return []
        if status != 200:
            raise UnreachableError(f"nsqlookupd {address} answered {status} to {target}")
        found = payload.get("producers") if isinstance(payload, dict) else None
        return [p for p in found or [] if isinstance(p, dict)]

    merged: dict[tuple[str, Any, Any], dict[str, Any]] = {}
    for producers in retry.one_of(options.lookupd, ask, who="nsqlookupd",
                                  timeout=options.timeout):
        for p in producers:
            merged[(str(p.get("broadcast_address")), p.get("tcp_port"), p.get("http_port"))] = p
    return list(merged.values())


def _address(producer: dict[str, Any], port: str) -> str | None:
    try:
        return join_host_port(str(producer["broadcast_address"]), int(producer[port]))
    except (KeyError, TypeError, ValueError):
        log.warning("nsq_spark: nsqlookupd names an nsqd without %s: %r", port, producer)
        return None


def _info(options: Options, address: str) -> dict[str, Any]:
    response = retry.call(retry.client(options), "GET", address, "/info", who="nsqd",
                          timeout=options.timeout, headers={"Accept": ACCEPT_V1})
    try:
        response.raise_for_status()
        info = decode_v1(response.headers, response.content)
        int(info["tcp_port"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise UnreachableError(f"nsqd {address}: GET /info gave no tcp_port ({exc})") from exc
    return dict(info)


def _nsqd_http_tcp(options: Options) -> list[str]:
    """The TCP address of each nsqd in ``nsqdHttp``: its HTTP host and ``/info``'s tcp_port."""
    return [join_host_port(httpx.URL(nsqd_url(a, "")).host, int(_info(options, a)["tcp_port"]))
            for a in options.nsqd_http]


def tcp_addresses_of(options: Options) -> list[str]:
    """The TCP addresses of the nsqd named by ``nsqdHttp``."""
    return _nsqd_http_tcp(options)


def topic_nsqd(options: Options) -> list[str]:
    """TCP addresses of the nsqd to read ``options.topic`` from (channel reads)."""
    if options.nsqd:
        return list(options.nsqd)
    if options.lookupd:
        return [a for p in _producers(options, options.topic)
                if (a := _address(p, "tcp_port")) is not None]
    return _nsqd_http_tcp(options)


def all_nsqd(options: Options) -> list[str]:
    """TCP addresses of every nsqd that can take a publish: ``nsqd``, else lookupd's
    ``/nodes`` (any nsqd takes any topic), else ``nsqdHttp``.

    Raises:
        UnreachableError: none found, or none could be asked.
    """
    if options.nsqd:
        found = list(options.nsqd)
    elif options.lookupd:
        found = [a for p in _producers(options, None) if (a := _address(p, "tcp_port"))]
    else:
        found = _nsqd_http_tcp(options)
    if not found:
        raise UnreachableError(f"no nsqd registered with nsqlookupd {options.sources}")
    return found


def topic_nsqd_http(options: Options) -> list[tuple[str, str]]:
    """(HTTP address, TCP address) of each nsqd to read ``options.topic`` from, when the
    options can tell both: ``nsqdHttp`` (the TCP port from ``/info``) or ``lookupd``."""
    if options.nsqd_http:
        return list(zip(options.nsqd_http, _nsqd_http_tcp(options), strict=True))
    pairs = []
    for producer in _producers(options, options.topic):
        http, tcp = _address(producer, "http_port"), _address(producer, "tcp_port")
        if http and tcp:
            pairs.append((http, tcp))
    return pairs


def consumes_over_http(options: Options, http_address: str) -> bool:
    """Whether this nsqd lets clients consume over HTTP (``POST /channel/consume``, beyond
    NSQ): asked without a topic, it answers 400 MISSING_ARG_TOPIC; Go's nsqd answers 404."""
    response = retry.call(retry.client(options), "POST", http_address, "/channel/consume",
                          who="nsqd", timeout=options.timeout)
    return response.status_code == 400 and b"MISSING_ARG_TOPIC" in response.content


# -- reads by offset --------------------------------------------------------------------------

def log_partitions(options: Options) -> dict[str, list[str]]:
    """The partitions of an offset read: for each topic read, the HTTP addresses of the nsqd
    that have it (``lookupd``), or that may have it (``nsqdHttp``: every one of them; an nsqd
    without the topic answers 404 when its log is asked for, and is left out then).

    Raises:
        UnreachableError: no nsqlookupd (or an nsqd of ``nsqdHttp``) answered in time.
    """
    topics = list(options.topics)
    if options.topic_pattern is not None:
        pattern = re.compile(options.topic_pattern)
        topics = [t for t in _all_topics(options) if pattern.fullmatch(t)]
    if options.nsqd_http and not options.lookupd:
        return {topic: list(options.nsqd_http) for topic in topics}
    found: dict[str, list[str]] = {}
    for topic in topics:
        addresses = [a for p in _producers(options, topic) if (a := _address(p, "http_port"))]
        if addresses:
            found[topic] = sorted(addresses)
    return found


def nodes_http(options: Options, topic: str) -> dict[str, str]:
    """The HTTP address of each nsqd by its id as replication names a node (``<broadcast
    address>:<tcp port>``): those that nsqlookupd names for ``topic`` (``lookupd``), or those
    of ``nsqdHttp`` that answer ``/info`` (one that does not is left out, and logged)."""
    if options.lookupd:
        found = {}
        for producer in _producers(options, topic):
            http, tcp = _address(producer, "http_port"), _address(producer, "tcp_port")
            if http and tcp:
                found[tcp] = http
        return found
    client = retry.client(options)

    def node(address: str) -> tuple[str, str] | None:
        status, info = retry.get_json(client, nsqd_url(address, "/info"))
        try:
            return join_host_port(str(info["broadcast_address"]), int(info["tcp_port"])), address
        except (KeyError, TypeError, ValueError):
            log.warning("nsq_spark: nsqd %s: GET /info answered %s without its address", address,
                        status)
            return None

    answers = retry.one_of(options.nsqd_http, node, who="nsqd", timeout=options.timeout)
    return dict(found for found in answers if found is not None)


def _all_topics(options: Options) -> list[str]:
    """Every topic nsqlookupd knows (``/topics``), or every nsqd of ``nsqdHttp`` has."""
    http = retry.client(options)
    if options.lookupd:
        headers = _headers(options)

        def ask(address: str) -> list[str]:
            status, payload = retry.get_json(http, lookupd_url(address, "/topics"),
                                             headers=headers)
            return [str(t) for t in (payload or {}).get("topics") or []] if status == 200 else []

        lists = retry.one_of(options.lookupd, ask, who="nsqlookupd", timeout=options.timeout)
    else:
        def stats(address: str) -> list[str]:
            status, payload = retry.get_json(http, nsqd_url(address, "/stats"),
                                             params={"format": "json", "include_clients": "false"})
            return [str(t.get("topic_name")) for t in (payload or {}).get("topics") or []
                    if isinstance(t, dict)] if status == 200 else []

        lists = [retry.one_of([a], stats, who="nsqd", timeout=options.timeout)[0]
                 for a in options.nsqd_http]
    return sorted({t for found in lists for t in found})
