"""Listening TCP sockets that fail the way Go's ``net.Listen`` does in NSQ's daemons.

Every daemon binds its sockets itself, before it serves anything, so a taken port stops it
at once with the line an operator of Go's NSQ knows, naming the address::

    listen (127.0.0.1:4150) failed - listen tcp 127.0.0.1:4150: bind: address already in use

The daemon puts its own ``failed to instantiate <daemon> - `` in front, as Go's do.

A socket the daemon's early start bound for the same address (``_early``) is taken instead of
binding again.
"""

from __future__ import annotations

import socket

from nsq_common import go_errno_text, join_host_port

#: Sockets the daemon's early start bound (``_early.listen``), by the address given for each, in
#: the order they were bound: a daemon given the same address twice (``127.0.0.1:0`` for TCP
#: and HTTP, as tests do) gets them back in that order, which is the order it binds them in.
PREBOUND: dict[str, list[socket.socket]] = {}


class ListenError(OSError):
    """An address that cannot be listened on; ``str()`` is Go's whole ``listen (...)`` text."""


def split_host_port(address: str) -> tuple[str, str]:
    """Go's ``net.SplitHostPort``: ``host:port`` or ``[v6host]:port``.

    Raises:
        ValueError: no port, or misplaced brackets, in Go's words.
    """
    if address.startswith("["):
        host, sep, rest = address[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"address {address}: missing port in address")
        return host, rest[1:]
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"address {address}: missing port in address")
    if ":" in host:
        raise ValueError(f"address {address}: too many colons in address")
    return host, port


def _shown(host: str, sockaddr: tuple[object, ...]) -> str:
    """The address as Go's ``*net.TCPAddr`` prints it: no host when none was given."""
    if not host:
        return f":{sockaddr[1]}"
    return join_host_port(str(sockaddr[0]), str(sockaddr[1]))


def bound_address(sock: socket.socket) -> str:
    """``host:port`` of a bound socket (port 0 resolved), IPv6 in brackets, as Go prints it."""
    host, port = sock.getsockname()[:2]
    return join_host_port(host, port)


def listen_tcp(address: str, backlog: int = 1024) -> socket.socket:
    """A listening TCP socket on ``address``: the one the early start bound for it, else one
    bound now (``bind_listener``).

    Raises:
        ListenError: ``listen (<address>) failed - listen tcp <addr>: bind: <reason>``.
    """
    early = take_prebound(address)
    return early if early is not None else bind_listener(address, backlog)


def take_prebound(address: str) -> socket.socket | None:
    """The first socket the early start bound for ``address`` and nobody took yet, if any."""
    sockets = PREBOUND.get(address)
    if not sockets:
        return None
    sock = sockets.pop(0)
    if not sockets:
        del PREBOUND[address]
    return sock


def bind_listener(address: str, backlog: int = 1024) -> socket.socket:
    """A listening (blocking) TCP socket on ``address``; port 0 takes any free port.

    An empty host listens on every IPv4 address (``0.0.0.0``), an empty port on any free one;
    a name listens on its first IPv4 address (IPv6 when it has none). SO_REUSEADDR is set,
    as Go sets it, so a restarted daemon gets its port back.

    Raises:
        ListenError: ``listen (<address>) failed - listen tcp <addr>: bind: <reason>``.
    """
    def failed(detail: str) -> ListenError:
        return ListenError(f"listen ({address}) failed - listen tcp{detail}")

    try:
        host, port_text = split_host_port(address)
    except ValueError as exc:
        raise failed(f": {exc}") from None
    port: int | str = int(port_text) if port_text.isdigit() else (port_text or 0)
    if isinstance(port, int) and port > 65535:
        raise failed(f": address {port_text}: invalid port")
    if isinstance(port, str):
        try:
            port = socket.getservbyname(port, "tcp")
        except OSError:
            raise failed(f": lookup tcp/{port}: unknown port") from None
    try:
        # an ASCII host as bytes: a str would load the idna codec (and re), a few ms of start
        name = host or "0.0.0.0"
        infos = socket.getaddrinfo(name.encode() if name.isascii() else name, port,
                                   type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        reason = "no such host" if exc.errno == socket.EAI_NONAME else str(exc.strerror)
        raise failed(f": lookup {host}: {reason}") from None
    # as Go does, a name with IPv4 and IPv6 addresses listens on its first IPv4 one
    family, kind, proto, _, sockaddr = min(infos, key=lambda info: info[0] != socket.AF_INET)
    shown = _shown(host, sockaddr)
    try:
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise failed(f" {shown}: socket: {go_errno_text(exc)}") from None
    step = "bind"
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        step = "listen"
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise failed(f" {shown}: {step}: {go_errno_text(exc)}") from None
    return sock
