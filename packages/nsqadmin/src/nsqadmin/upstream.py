"""HTTP requests to nsqd and nsqlookupd, the way NSQ's own tools make them (cf. the Go
internal/http_api client): ``Accept: application/vnd.nsq; version=1.0``, JSON bodies, and a
retry over HTTPS when a daemon answers 403 with its ``https_port`` (``--tls-required``).

How a daemon is reached over HTTPS: the Go nsqadmin always starts with ``http://<address>``
and switches only on that 403 (nsqd's ``/info`` does not advertise an HTTPS port). We do the
same, and also take an address written ``https://host:port`` (or ``http://host:port``) as is,
for an nsqd that serves HTTPS only. Certificates are checked against
``--http-client-tls-root-ca-file`` (the system store without it), and
``--http-client-tls-cert``/``--http-client-tls-key`` are offered to nsqd that ask for a client
certificate (``--tls-client-auth-policy``).

Errors::

    UpstreamError   one daemon did not answer as asked: refused, timed out, a status other
                    than 200, a body that is not JSON. Carries the daemon's address, so a
                    page can name the node that failed and still render the others.
    ClusterError    not one daemon of the kind asked answered (the API's 502 UPSTREAM_ERROR).

Fan-out results are ``Partial`` values: what the reachable daemons said, plus the errors of
the ones that did not answer.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode, urlsplit, urlunsplit

import attrs
import httpx
from nsq_common import ACCEPT_V1, join_host_port

from .options import Options

log = logging.getLogger("nsqadmin")
T = TypeVar("T")


class UpstreamError(Exception):
    """One daemon at ``address`` failed to answer; ``str()`` says how."""

    def __init__(self, address: str, message: str, status: int | None = None,
                 reply: str = "") -> None:
        super().__init__(message)
        self.address = address
        self.message = message
        self.status = status  # the HTTP status, when the daemon answered at all
        self.reply = reply  # the V1 ``message`` of its answer, e.g. ``TOPIC_NOT_FOUND``


class ClusterError(Exception):
    """Every daemon asked failed; the message lists why, as the Go nsqadmin words it."""

    def __init__(self, kind: str, errors: Iterable[UpstreamError]) -> None:
        self.kind = kind
        self.errors = tuple(errors)
        super().__init__(f"failed to query any {kind}: " + "\n".join(map(str, self.errors)))


@attrs.frozen
class Partial(Generic[T]):
    """A fan-out answer: ``value`` from the daemons that answered, ``errors`` from the rest."""

    value: T
    errors: tuple[UpstreamError, ...] = ()

    @property
    def failed_addresses(self) -> set[str]:
        return {e.address for e in self.errors}


def warning_message(errors: Iterable[UpstreamError]) -> str:
    """The API's ``message`` field: empty, or ``WARNING: e1; e2``."""
    texts = [str(e) for e in errors]
    return "WARNING: " + "; ".join(texts) if texts else ""


def tls_context(options: Options) -> ssl.SSLContext | None:
    """The client TLS settings of ``options``; None when none is set (system CAs, no cert).

    Raises:
        ValueError: a CA file, certificate or key that cannot be loaded, worded as the Go
            nsqadmin words it.
    """
    root_ca = options.http_client_tls_root_ca_file
    cert, key = options.http_client_tls_cert, options.http_client_tls_key
    if not (root_ca or cert or options.http_client_tls_insecure_skip_verify):
        return None
    try:
        context = ssl.create_default_context(cafile=root_ca or None)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"failed to read TLS root CA file {root_ca} - {exc}") from None
    if options.http_client_tls_insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert:
        try:
            context.load_cert_chain(cert, key or None)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"failed to LoadX509KeyPair {cert}, {key} - {exc}") from None
    return context


def build_client(options: Options) -> httpx.AsyncClient:
    """An HTTP client with the connect/request timeouts and TLS settings of ``options``.

    Raises:
        ValueError: see ``tls_context``.
    """
    verify: ssl.SSLContext | bool = tls_context(options) or True
    timeout = httpx.Timeout(options.http_client_request_timeout,
                            connect=options.http_client_connect_timeout)
    return httpx.AsyncClient(timeout=timeout, verify=verify, headers={"Accept": ACCEPT_V1},
                             follow_redirects=False, trust_env=False)


def _describe(exc: httpx.HTTPError) -> str:
    """Why a request failed, in a few words (``connection refused``, ``timed out``)."""
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    seen: BaseException | None = exc
    while seen is not None:  # find the socket error under httpx's and trio's wrappers
        if isinstance(seen, BaseExceptionGroup) and seen.exceptions:
            seen = seen.exceptions[0]
            continue
        if isinstance(seen, OSError) and seen.errno:
            return os.strerror(seen.errno).lower()
        seen = seen.__cause__ or seen.__context__
    return str(exc) or type(exc).__name__


@attrs.define(eq=False)
class Upstream:
    """Requests to daemons by ``host:port``; every failure becomes an ``UpstreamError``."""

    client: httpx.AsyncClient

    async def get_json(self, address: str, path: str, params: dict[str, str] | None = None
                       ) -> dict[str, Any]:
        """GET a V1 endpoint that answers a JSON object."""
        body = await self._request("GET", address, path, params)
        try:
            value = json.loads(body)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise UpstreamError(address, f"GET {_url(address, path, params)}: response is not "
                                         "a JSON object")
        return value

    async def post(self, address: str, path: str, params: dict[str, str] | None = None) -> None:
        await self._request("POST", address, path, params)

    async def send(self, method: str, address: str, path: str,
                   params: dict[str, str] | None = None, *, json: Any = None,
                   form: dict[str, str] | None = None, auth: tuple[str, str] | None = None,
                   headers: dict[str, str] | None = None) -> httpx.Response:
        """Any request, answered with any status (the caller reads it: lmstfy's APIs have
        their own conventions); only a request that gets no answer is an ``UpstreamError``."""
        url = _url(address, path, params)
        log.debug("CI: %s %s", method, url)
        try:
            return await self.client.request(method, url, json=json, data=form, auth=auth,
                                             headers=headers)
        except httpx.HTTPError as exc:
            raise UpstreamError(address, f"{method} {url}: {_describe(exc)}") from exc

    async def _request(self, method: str, address: str, path: str,
                       params: dict[str, str] | None) -> bytes:
        url = _url(address, path, params)
        log.debug("CI: querying %s", url)
        for _ in range(2):
            try:
                response = await self.client.request(method, url)
            except httpx.HTTPError as exc:
                raise UpstreamError(address, f"{method} {url}: {_describe(exc)}") from exc
            if response.status_code == 200:
                return response.content
            if response.status_code == 403 and url.startswith("http:"):
                https = _https_url(url, response.content)
                if https is not None:
                    url = https
                    continue
            break
        status = response.status_code
        reply = _v1_message(response.content)
        phrase = response.reason_phrase or (HTTPStatus(status).phrase if status in _KNOWN else "")
        raise UpstreamError(address, f"{method} {url}: got response {status} {phrase}: {reply}",
                            status, reply)


_KNOWN = {s.value for s in HTTPStatus}


def _v1_message(body: bytes) -> str:
    """The ``message`` of a V1 error body, else the body as text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        value = json.loads(text)
    except ValueError:
        return text[:500]
    message = value.get("message") if isinstance(value, dict) else None
    return message if isinstance(message, str) else text[:500]


def _url(address: str, path: str, params: dict[str, str] | None) -> str:
    """``http://<address><path>?<query>``; an address with a scheme is kept as it is."""
    query = f"?{urlencode(params)}" if params else ""
    base = address.rstrip("/") if "://" in address else f"http://{address}"
    return f"{base}{path}{query}"


def _https_url(url: str, body: bytes) -> str | None:
    """The HTTPS twin of ``url`` named by a ``TLS_REQUIRED`` answer, if it names one."""
    try:
        port = int(json.loads(body)["https_port"])
    except (ValueError, KeyError, TypeError):
        return None
    parts = urlsplit(url)
    return urlunsplit(("https", join_host_port(parts.hostname or "", port), parts.path,
                       parts.query, ""))
