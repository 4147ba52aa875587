"""``host:port`` text, both ways, as Go's ``net.JoinHostPort`` / ``net.SplitHostPort`` write and
read it: an IPv6 host goes in brackets (``[::1]:4150``), so the last colon is the port's."""

from __future__ import annotations


def join_host_port(host: str, port: int | str) -> str:
    """``host:port``; ``[host]:port`` when the host has a colon (an IPv6 address)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> ``(host, port)``.

    Raises:
        ValueError: no host, no port, or a port that is not a number.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)
