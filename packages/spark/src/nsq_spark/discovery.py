"""Where the nsqd are: nsqlookupd's and nsqd's HTTP APIs, asked with plain blocking HTTP.

These run once per query or batch (driver) or per task (executor), outside any Trio loop.
The options name the nsqd directly (``nsqd``: TCP addresses; ``nsqdHttp``: HTTP addresses)
or through nsqlookupd (``lookupd``), whose ``/lookup`` and ``/nodes`` give both ports.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from nsq_client import lookupd_url
from nsq_client._discovery import producer_tcp_addresses
from nsq_common import ACCEPT_V1, decode_v1, join_host_port

from .options import Options

log = logging.getLogger("nsq_spark")

#: How long an HTTP query to nsqlookupd or nsqd may take.
HTTP_TIMEOUT = 10.0


def nsqd_url(http_address: str, path: str) -> str:
    """``path`` on an nsqd's HTTP address (``host:port``, or a URL with its scheme)."""
    base = http_address if "://" in http_address else f"http://{http_address}"
    return base + path


def _headers(options: Options) -> dict[str, str]:
    headers = {"Accept": ACCEPT_V1}
    config = options.client_config()
    if config.auth_secret and config.lookupd_authorization:
        headers["Authorization"] = f"Bearer {config.auth_secret}"
    return headers


def _ask_lookupds(options: Options, path: str, **query: str) -> list[str]:
    """The nsqd TCP addresses every reachable lookupd gives for ``path``, merged (lookupds
    may each know different nsqd).

    Raises:
        ConnectionError: no lookupd answered.
    """
    found: dict[str, None] = {}
    errors: list[str] = []
    headers = _headers(options)
    with httpx.Client(timeout=HTTP_TIMEOUT) as client:
        for address in options.lookupd:
            url = lookupd_url(address, path, **query)
            try:
                response = client.get(url, headers=headers)
                if response.status_code == 404:  # TOPIC_NOT_FOUND: no nsqd has it yet
                    continue
                response.raise_for_status()
                found.update(dict.fromkeys(producer_tcp_addresses(
                    decode_v1(response.headers, response.content))))
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("nsqlookupd %s: %s", url, exc)
                errors.append(f"{url}: {exc}")
    if errors and len(errors) == len(options.lookupd):
        raise ConnectionError("no nsqlookupd answered: " + "; ".join(errors))
    return list(found)


def _ask_nsqd_http(options: Options) -> list[str]:
    """The TCP address of each nsqd in ``nsqdHttp``: its HTTP host and ``/info``'s tcp_port.

    Raises:
        ConnectionError: an nsqd did not answer.
    """
    found = []
    with httpx.Client(timeout=HTTP_TIMEOUT) as client:
        for address in options.nsqd_http:
            base = nsqd_url(address, "")
            try:
                response = client.get(f"{base}/info", headers={"Accept": ACCEPT_V1})
                response.raise_for_status()
                info = decode_v1(response.headers, response.content)
                host = httpx.URL(base).host
                found.append(join_host_port(host, int(info["tcp_port"])))
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                raise ConnectionError(f"nsqd {address}: /info failed: {exc}") from exc
    return found


def tcp_addresses_of(options: Options) -> list[str]:
    """The TCP addresses of the nsqd named by ``nsqdHttp``."""
    return _ask_nsqd_http(options)


def topic_nsqd(options: Options) -> list[str]:
    """TCP addresses of the nsqd to read ``options.topic`` from."""
    if options.nsqd:
        return list(options.nsqd)
    if options.lookupd:
        return _ask_lookupds(options, "/lookup", topic=options.topic)
    return _ask_nsqd_http(options)


def all_nsqd(options: Options) -> list[str]:
    """TCP addresses of every nsqd that can take a publish: ``nsqd``, else lookupd's
    ``/nodes`` (any nsqd takes any topic), else ``nsqdHttp``.

    Raises:
        ConnectionError: none found.
    """
    if options.nsqd:
        found = list(options.nsqd)
    elif options.lookupd:
        found = _ask_lookupds(options, "/nodes")
    else:
        found = _ask_nsqd_http(options)
    if not found:
        raise ConnectionError(f"no nsqd registered with nsqlookupd {options.sources}")
    return found


def _lookup_producers(options: Options) -> list[dict[str, Any]]:
    """The producers of ``options.topic`` that every reachable lookupd names, merged."""
    found: dict[str, dict[str, Any]] = {}
    with httpx.Client(timeout=HTTP_TIMEOUT) as client:
        for address in options.lookupd:
            url = lookupd_url(address, "/lookup", topic=options.topic)
            try:
                response = client.get(url, headers=_headers(options))
                if response.status_code == 404:
                    continue
                response.raise_for_status()
                payload = decode_v1(response.headers, response.content)
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("nsqlookupd %s: %s", url, exc)
                continue
            for producer in payload.get("producers") or []:
                try:
                    http = join_host_port(str(producer["broadcast_address"]),
                                          int(producer["http_port"]))
                except (KeyError, TypeError, ValueError):
                    continue
                found[http] = producer
    return list(found.values())


def topic_nsqd_http(options: Options) -> list[tuple[str, str]]:
    """(HTTP address, TCP address) of each nsqd to read ``options.topic`` from, when the
    options can tell both: ``nsqdHttp`` (the TCP port from ``/info``) or ``lookupd``."""
    if options.nsqd_http:
        return list(zip(options.nsqd_http, _ask_nsqd_http(options), strict=True))
    pairs = []
    for producer in _lookup_producers(options):
        host = str(producer["broadcast_address"])
        pairs.append((join_host_port(host, int(producer["http_port"])),
                      join_host_port(host, int(producer["tcp_port"]))))
    return pairs


def consumes_over_http(http_address: str) -> bool:
    """Whether this nsqd lets clients consume over HTTP (``POST /channel/consume``, beyond
    NSQ): asked without a topic, it answers 400 MISSING_ARG_TOPIC; Go's nsqd answers 404."""
    try:
        response = httpx.post(nsqd_url(http_address, "/channel/consume"), timeout=HTTP_TIMEOUT)
    except httpx.HTTPError:
        return False
    return response.status_code == 400 and b"MISSING_ARG_TOPIC" in response.content
