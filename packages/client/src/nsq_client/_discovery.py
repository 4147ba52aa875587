"""Finding nsqd through nsqlookupd's HTTP ``/lookup``, the way go-nsq does.

* Each lookupd address becomes ``http://host:port/lookup?topic=<topic>`` (a scheme or a
  path of its own is kept; the port is required).
* The first query runs at once; then, after a random jitter in
  ``[0, lookupd_poll_jitter * lookupd_poll_interval)`` (so consumers restarted together do
  not poll together), one query every ``lookupd_poll_interval``, going round the lookupds.
  A failed query moves on to the next lookupd, up to three per round, each asked once: a
  lone lookupd that answers ``TOPIC_NOT_FOUND`` is asked (and its answer logged) once a
  poll, not three times in a row as go-nsq does. A closed nsqd connection asks for a query
  right away (``recheck``).
* Requests send ``Accept: application/vnd.nsq; version=1.0``. A reply with the header
  ``X-NSQ-Content-Type: nsq; version=1.0`` is the object itself; older servers wrap it in
  ``{"status_code":..,"data":{..}}`` (NSQ's HTTP V1 conventions: ``nsq_common.decode_v1``).
* Every producer found is ``broadcast_address:tcp_port``; connecting to it is the caller's
  job. A producer that disappears from lookupd is not disconnected here: its connection
  ends when that nsqd goes away (go-nsq behaves the same).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import trio
from nsq_common import ACCEPT_V1, decode_v1, join_host_port

from ._config import Config
from ._errors import DiscoveryError

log = logging.getLogger("nsq_client")

_TRIES_PER_ROUND = 3


def lookupd_url(address: str, path: str = "/lookup", **query: str) -> str:
    """A lookupd HTTP address as go-nsq's buildLookupAddr makes it, for ``path``.

    Raises:
        ValueError: the address has no port.
    """
    text = address if "://" in address else "http://" + address
    parts = urlsplit(text)
    if parts.port is None:
        raise ValueError(f"lookupd address {address!r}: missing port")
    own_path = parts.path if parts.path not in ("", "/") else path
    params = parse_qsl(parts.query, keep_blank_values=True)
    params.extend(query.items())
    params.sort(key=lambda kv: kv[0])  # Go's url.Values.Encode sorts by key
    return urlunsplit((parts.scheme, parts.netloc, own_path, urlencode(params), ""))


def producer_tcp_addresses(payload: Any) -> list[str]:
    """``broadcast_address:tcp_port`` of every producer in a /lookup payload."""
    producers = payload.get("producers") if isinstance(payload, dict) else None
    out = []
    for producer in producers or []:
        try:
            out.append(join_host_port(str(producer["broadcast_address"]), int(producer["tcp_port"])))
        except (KeyError, TypeError, ValueError):
            log.warning("lookupd producer without an address: %r", producer)
    return out


async def get_v1(client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None) -> Any:
    """GET an NSQ V1 endpoint.

    Raises:
        httpx.HTTPError: transport failure; ``httpx.HTTPStatusError`` for a non-200 reply.
        ValueError: the body is not JSON.
    """
    response = await client.get(url, headers={"Accept": ACCEPT_V1, **(headers or {})})
    if response.status_code != 200:
        raise httpx.HTTPStatusError(
            f"got response {response.status_code} {response.text[:200]!r}",
            request=response.request, response=response)
    return decode_v1(response.headers, response.content)


class LookupdPoller:
    """Round-robin /lookup queries for one topic.

    Args:
        addresses: lookupd HTTP addresses (``host:port`` or URLs).
        topic: the topic to look up.
        config: poll interval, jitter and timeout; the auth secret for lookupd.
        rng: randomness for the jitter.
        transport: an httpx transport for the queries (tests pass ``httpx.MockTransport``).
    """

    def __init__(self, addresses: Sequence[str], topic: str, config: Config,
                 rng: random.Random | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.transport = transport
        self.urls = list(dict.fromkeys(lookupd_url(a, topic=topic) for a in addresses))
        if not self.urls:
            raise ValueError("no lookupd address")
        self.config = config
        self.rng = rng or random.Random()
        self._index = 0
        self._recheck = trio.Event()
        self.headers: dict[str, str] = {}
        if config.auth_secret and config.lookupd_authorization:
            self.headers["Authorization"] = f"Bearer {config.auth_secret}"

    def recheck(self) -> None:
        """Query again now (a connection closed)."""
        self._recheck.set()

    def _next_url(self) -> str:
        url = self.urls[self._index % len(self.urls)]
        self._index = (self._index + 1) % len(self.urls)
        return url

    async def query(self, client: httpx.AsyncClient) -> list[str]:
        """One round: the producers' TCP addresses from the next lookupd that answers.

        Raises:
            DiscoveryError: every lookupd asked (three at most) failed.
        """
        errors = []
        for _ in range(min(_TRIES_PER_ROUND, len(self.urls))):
            url = self._next_url()
            log.debug("querying nsqlookupd %s", url)
            try:
                payload = await get_v1(client, url, self.headers)
            except (httpx.HTTPError, ValueError) as exc:
                log.warning("error querying nsqlookupd (%s) - %s", url, exc)
                errors.append(f"{url}: {exc}")
                continue
            return producer_tcp_addresses(payload)
        raise DiscoveryError("; ".join(errors))

    async def run(self, found: Callable[[list[str]], Any], *,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Poll forever, calling ``found(addresses)`` after each successful query.

        Reports started once the first query (and ``found``) is done.
        """
        config = self.config
        timeout = config.lookupd_poll_timeout or None
        async with httpx.AsyncClient(timeout=timeout, transport=self.transport) as client:
            await self._query_into(client, found)
            task_status.started()
            jitter = self.rng.random() * config.lookupd_poll_jitter * config.lookupd_poll_interval
            with trio.move_on_after(jitter):
                await self._recheck.wait()
            while True:
                self._recheck = trio.Event()
                await self._query_into(client, found)
                with trio.move_on_after(config.lookupd_poll_interval):
                    await self._recheck.wait()

    async def _query_into(self, client: httpx.AsyncClient, found: Callable[[list[str]], Any]) -> None:
        try:
            addresses = await self.query(client)
        except DiscoveryError:
            return
        result = found(addresses)
        if hasattr(result, "__await__"):
            await result
