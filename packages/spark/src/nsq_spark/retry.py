"""HTTP calls to nsqd and nsqlookupd that ride out a restart and fail, named, after a time.

A call that cannot connect, times out, or is answered 5xx (nsqd answers ``503 EXITING``
while it stops) is tried again with a growing pause (0.1 s doubling to 2 s), logged when a run
of failures starts and when it ends, until the ``timeout`` option's time has passed since the
first failure: then :class:`.UnreachableError` names the address and the last failure. Any
other answer (a 404 for a topic an nsqd does not have, a 400) is the caller's to read.

Blocking (``httpx.Client``): the driver's planning thread and the executors' tasks call
these between Spark's calls, outside any event loop. Each process keeps one client per TLS
setting (Spark reuses its Python workers; making a client, with its SSL context, costs more
than a request).
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from nsq_common import ACCEPT_V1, decode_v1

from .errors import UnreachableError
from .options import Options

log = logging.getLogger("nsq_spark")

#: Longest one request may take (less when the timeout option is shorter).
REQUEST_TIMEOUT = 10.0
FIRST_PAUSE, MAX_PAUSE = 0.1, 2.0

T = TypeVar("T")

_clients: dict[tuple[int, Any, Any, float], httpx.Client] = {}


def client(options: Options) -> httpx.Client:
    """This process's HTTP client for the TLS settings of ``options`` (https:// addresses)."""
    config = options.client_config()
    verify: Any = True
    if config.tls_insecure_skip_verify:
        verify = False
    elif config.tls_root_ca_file:
        verify = config.tls_root_ca_file
    cert = (config.tls_cert, config.tls_key) if config.tls_cert else None
    timeout = min(REQUEST_TIMEOUT, options.timeout)
    key = (os.getpid(), verify, cert, timeout)  # a forked worker makes its own
    found = _clients.get(key)
    if found is None:
        if not _clients:
            atexit.register(_close_all)
        found = _clients[key] = httpx.Client(timeout=timeout, verify=verify, cert=cert,
                                             trust_env=False)
    return found


def _close_all() -> None:
    """At exit: the connections closed rather than left to the garbage collector."""
    for key in [k for k in _clients if k[0] == os.getpid()]:
        _clients.pop(key).close()


def url(address: str, path: str) -> str:
    """``path`` on an HTTP address (``host:port``, or a URL with its scheme)."""
    base = address.rstrip("/") if "://" in address else f"http://{address}"
    return base + path


class _Failed(Exception):
    """One attempt failed in a way worth trying again."""


def retrying(attempt: Callable[[], T], what: str, timeout: float, *,
             sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> T:
    """``attempt()`` until it returns, while it raises :class:`httpx.TransportError` or
    answers 5xx (:func:`call` turns those into a retry), for ``timeout`` seconds.

    Raises:
        UnreachableError: still failing after ``timeout`` seconds; names ``what``.
    """
    started: float | None = None
    pause = FIRST_PAUSE
    while True:
        try:
            result = attempt()
        except (_Failed, httpx.TransportError) as exc:
            now = clock()
            if started is None:
                started = now
                log.warning("nsq_spark: %s: %s; retrying for up to %g s", what, _say(exc),
                            timeout)
            elif now - started >= timeout:
                raise UnreachableError(f"{what}: no answer for {now - started:.0f} s (option "
                                       f"timeout is {timeout:g} s): {_say(exc)}") from exc
            sleep(min(pause, max(0.0, started + timeout - now)))
            pause = min(pause * 2, MAX_PAUSE)
            continue
        if started is not None:
            log.warning("nsq_spark: %s: answering again after %.1f s", what, clock() - started)
        return result


def _say(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, _Failed | NotYet) else text


def call(http: httpx.Client, method: str, address: str, path: str, *, who: str, timeout: float,
         params: dict[str, str] | None = None, content: bytes | None = None,
         headers: dict[str, str] | None = None) -> httpx.Response:
    """One request to ``address`` (``who`` says what it is: ``nsqd``, ``nsqlookupd``),
    retried as :func:`retrying` says; any answer below 500 is returned.

    Raises:
        UnreachableError: no answer below 500 for ``timeout`` seconds.
    """
    def attempt() -> httpx.Response:
        return request(http, method, address, path, params=params, content=content,
                       headers=headers)

    return retrying(attempt, f"{who} {address} ({method} {path})", timeout)


def request(http: httpx.Client, method: str, address: str, path: str, *,
            params: dict[str, str] | None = None, content: bytes | None = None,
            headers: dict[str, str] | None = None) -> httpx.Response:
    """One request, not retried (an attempt of :func:`retrying`, :func:`one_of` or
    :func:`first_of`): a 5xx answer fails it as not connecting does."""
    response = http.request(method, url(address, path), params=params, content=content,
                            headers=headers)
    if response.status_code >= 500:
        raise _Failed(f"{response.status_code} {response.text.strip()[:200]}")
    return response


class NotYet(Exception):
    """An attempt of :func:`first_of` found an answer this address cannot give yet (a
    replica whose high watermark is behind the offset asked): the next address is asked,
    and the round again later, as for one that does not answer."""


def first_of(addresses: tuple[str, ...] | list[str], attempt: Callable[[str], T | None], *,
             who: str, timeout: float, sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> T | None:
    """``attempt(address)`` on each address in turn, until one gives a result: the replicas
    of a topic, any of which can answer. One that cannot be reached, answers 5xx or raises
    :class:`NotYet` passes the call to the next; one that gives None does not have what is
    asked. A round in which none gave a result is retried (as :func:`retrying`) if any of
    them failed; if every one answered None, so is the answer.

    Raises:
        UnreachableError: no result for ``timeout`` seconds; names them all.
    """
    def round_() -> T | None:
        failures: list[str] = []
        for address in addresses:
            try:
                found = attempt(address)
            except (_Failed, NotYet, httpx.TransportError) as exc:
                failures.append(f"{address}: {_say(exc)}")
                continue
            if found is not None:
                for failure in failures:
                    log.info("nsq_spark: %s %s; asked the next", who, failure)
                return found
        if failures:
            raise _Failed("; ".join(failures))
        return None

    return retrying(round_, f"{who} {', '.join(addresses)}", timeout, sleep=sleep, clock=clock)


def one_of(addresses: tuple[str, ...] | list[str], attempt: Callable[[str], T], *, who: str,
           timeout: float) -> list[T]:
    """``attempt(address)`` on every address, once each per round; the results of those that
    answered. Rounds are retried (as :func:`retrying`) only while none answers: one nsqlookupd
    of several being down costs nothing but a log line.

    Raises:
        UnreachableError: none answered for ``timeout`` seconds; names them all.
    """
    def round_() -> list[T]:
        results: list[T] = []
        failures: list[str] = []
        for address in addresses:
            try:
                results.append(attempt(address))
            except (_Failed, httpx.TransportError) as exc:
                failures.append(f"{address}: {_say(exc)}")
        if failures and not results:
            raise _Failed("; ".join(failures))
        for failure in failures:
            log.warning("nsq_spark: %s %s", who, failure)
        return results

    return retrying(round_, f"{who} {', '.join(addresses)}", timeout)


def get_json(http: httpx.Client, target: str, *, params: dict[str, str] | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One GET of a URL without retries (for :func:`one_of`): the status and, for 200, the
    JSON payload (NSQ's V1 answers, and the older enveloped ones, unwrapped)."""
    response = http.get(target, params=params, headers={"Accept": ACCEPT_V1, **(headers or {})})
    if response.status_code >= 500:
        raise _Failed(f"{response.status_code} {response.text.strip()[:200]}")
    if response.status_code != 200:
        return response.status_code, None
    try:
        return 200, decode_v1(response.headers, response.content)
    except ValueError as exc:
        raise _Failed(f"{target}: not JSON ({exc})") from None
