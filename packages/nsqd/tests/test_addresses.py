"""Addresses nsqd prints and reports: ``host:port``, IPv6 in brackets as Go's net.JoinHostPort."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing
from nsqd.tcp import _address


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize("host", ["127.0.0.1", pytest.param("::1", marks=pytest.mark.skipif(
    not _has_ipv6_loopback(), reason="no IPv6 loopback"))])
async def test_a_tcp_clients_remote_address(host: str) -> None:
    listeners = await trio.open_tcp_listeners(0, host=host)
    port = listeners[0].socket.getsockname()[1]
    async with (listeners[0], await trio.open_tcp_stream(host, port) as client,
                await listeners[0].accept() as server_side):
        local_port = client.socket.getsockname()[1]
        expected = f"[::1]:{local_port}" if host == "::1" else f"127.0.0.1:{local_port}"
        assert _address(server_side) == expected


def test_a_stream_without_a_socket_is_unknown() -> None:
    left, _ = trio.testing.memory_stream_pair()
    assert _address(left) == "unknown:0"
