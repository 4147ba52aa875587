"""nsqlookupd helpers for tests: see what it knows, and register an nsqd's topics with it.

``registered`` makes sure lookupd lists an nsqd as a producer of some topics. An nsqd started
with ``--lookupd-tcp-address`` registers itself; when it has not done so within
``native_wait`` seconds (an nsqd without that feature), the helper registers on its behalf
over lookupd's TCP protocol V1 (IDENTIFY, then REGISTER per topic) and unregisters by closing
that connection at the end, as an nsqd that goes away does.
"""

from __future__ import annotations

import json
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from nsq_common import MAGIC_V1, LookupIdentify, LookupRegister, encode_lookup_command

from .daemon import Daemon


def lookup_producers(lookupd_http_address: str, topic: str) -> list[dict[str, Any]]:
    """lookupd's producers of ``topic`` (``[]`` when it does not know the topic)."""
    url = f"http://{lookupd_http_address}/lookup?topic={topic}"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return list(json.loads(response.read()).get("producers") or [])
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise


def _lists(lookupd: Daemon, nsqd: Daemon, topics: Sequence[str]) -> bool:
    return all(any(p.get("tcp_port") == nsqd.tcp_port for p in lookup_producers(lookupd.http_address, t))
               for t in topics)


def _read_response(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("nsqlookupd closed the connection")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


@contextmanager
def registered(lookupd: Daemon, nsqd: Daemon, topics: Sequence[str], *,
               broadcast_address: str = "127.0.0.1", native_wait: float = 1.0) -> Iterator[None]:
    """lookupd lists ``nsqd`` for every topic in ``topics`` while the block runs."""
    deadline = time.monotonic() + native_wait
    while time.monotonic() < deadline:
        if _lists(lookupd, nsqd, topics):
            yield
            return
        time.sleep(0.05)
    host, port = lookupd.tcp_address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    try:
        sock.sendall(MAGIC_V1 + encode_lookup_command(LookupIdentify(
            broadcast_address=broadcast_address, tcp_port=nsqd.tcp_port, http_port=nsqd.http_port,
            version="1.3.0", hostname="test-stand-in")))
        _read_response(sock)
        for topic in topics:
            sock.sendall(encode_lookup_command(LookupRegister(topic, None)))
            answer = _read_response(sock)
            if answer != b"OK":
                raise RuntimeError(f"nsqlookupd refused REGISTER {topic}: {answer!r}")
        yield
    finally:
        sock.close()
