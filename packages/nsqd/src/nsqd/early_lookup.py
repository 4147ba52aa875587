"""nsqd registered with its lookupds in the early start, before its first ``/ping`` says OK.

The command (``__main__``), once its listeners are bound and its start checked, calls
``register``: for each ``--lookupd-tcp-address`` a plain socket connects, sends the magic,
``IDENTIFY`` (the body ``Lookup`` sends: ``nsq_common.identify_bytes``) and a ``REGISTER``
of each topic or channel nsqd will load (sent together, ``PIPELINED`` at a time), every
answer read. Only then may ``/ping`` say OK,
as ``Lookup.run`` has the real server wait::

    early start   bind ─ checks ─ register(lookupds) ─ ready() ─ import Trio, app ─ serve
    Lookup (Trio)                                                     take(address) ┘

A connection registered here is kept for ``Lookup`` (``take``), which carries on over it (so
nsqlookupd sees one peer, never two: the same connection, its registrations made). An attempt
that fails (refused, an error answer, too slow) is closed and counts as the first attempt
that ``Lookup.run`` waits for: ``Lookup`` then tries that lookupd again itself, as after any
failed attempt. Every step waits at most ``IO_TIMEOUT``, all of them ``FIRST_ATTEMPT_TIMEOUT``.

No attrs and no Trio here: the point is to be done before they load (docs/performance.md).
"""

from __future__ import annotations

import socket
import time

from nsq_common import (
    MAGIC_V1,
    NSQ_VERSION,
    identify_bytes,
    lookup_answer_size,
    lookup_response_error,
    split_address,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence

IO_TIMEOUT = 1.0  # seconds each step (connect, IDENTIFY, each REGISTER) may take
FIRST_ATTEMPT_TIMEOUT = 5.0  # seconds start-up waits at most for the lookupds' registration
#: Commands sent together before their answers are read: a lookupd answers each in order
#: and goes on after an error answer, so one round trip serves many; a bounded batch, so
#: that its answers never fill both sockets' buffers while a send waits.
PIPELINED = 256


class Attempt:
    """How the early attempt with one lookupd went: its connection and its answer to
    IDENTIFY if registered, None and nothing if it failed."""

    __slots__ = ("reply", "sock")

    def __init__(self, sock: socket.socket | None, reply: bytes = b"") -> None:
        self.sock = sock
        self.reply = reply


_attempts: dict[str, Attempt] = {}


def identify(*, broadcast_address: str, tcp_port: int, http_port: int) -> bytes:
    """nsqd's ``IDENTIFY`` to every lookupd, early or not: where clients reach it (the
    broadcast ports if given, else the ports it listens on)."""
    return identify_bytes(broadcast_address=broadcast_address, tcp_port=tcp_port,
                          http_port=http_port, version=NSQ_VERSION, hostname=socket.gethostname())


def registrations(topics: Iterable[tuple[str, Collection[str]]]) -> list[tuple[str, str | None]]:
    """What nsqd registers of ``topics`` (each a name and its channels' names): a topic
    with channels through its channels, a topic without any alone (as Go's nsqd does)."""
    commands: list[tuple[str, str | None]] = []
    for topic, channels in topics:
        if channels:
            commands.extend((topic, channel) for channel in channels)
        else:
            commands.append((topic, None))
    return commands


def register(addresses: Sequence[str], identify: bytes, registrations: Sequence[bytes],
             max_answer: int) -> None:
    """Identify and register with every lookupd of ``addresses``, one after the other, for
    ``Lookup`` to ``take``. ``identify`` and ``registrations`` are the commands' bytes; an
    answer over ``max_answer`` bytes (nsqd's ``--max-body-size``) fails the attempt."""
    deadline = time.monotonic() + FIRST_ATTEMPT_TIMEOUT
    for address in dict.fromkeys(addresses):
        _attempts[address] = _attempt(address, [MAGIC_V1 + identify, *registrations],
                                      max_answer, deadline)


def take(address: str) -> Attempt | None:
    """The early attempt with ``address`` (once); None if there was none."""
    return _attempts.pop(address, None)


def close_untaken() -> None:
    """Close the connections ``Lookup`` did not take (it has every peer it will have)."""
    for attempt in _attempts.values():
        if attempt.sock is not None:
            attempt.sock.close()
    _attempts.clear()


def _attempt(address: str, commands: list[bytes], max_answer: int, deadline: float) -> Attempt:
    try:
        sock = _connect(*split_address(address), _step(deadline))
    except (OSError, ValueError):
        return Attempt(None)
    try:
        replies = []
        for start in range(0, len(commands), PIPELINED):
            batch = commands[start:start + PIPELINED]
            sock.settimeout(_step(deadline))
            sock.sendall(b"".join(batch))
            for _ in batch:
                sock.settimeout(_step(deadline))
                replies.append(_answer(sock, max_answer))
    except (OSError, ValueError):  # the network, too slow, an error or a broken answer
        sock.close()
        return Attempt(None)
    return Attempt(sock, replies[0])


def _connect(host: str, port: int, timeout: float) -> socket.socket:
    """A connection to the first of ``host``'s addresses that takes one (as
    ``socket.create_connection``, but an ASCII host goes to getaddrinfo as bytes: a str
    one is encoded with the "idna" codec, whose import costs the early start more than
    the connection).

    Raises:
        OSError: no address took the connection.
    """
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(
            host.encode() if host.isascii() else host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error


def _step(deadline: float) -> float:
    """How long the next step may take.

    Raises:
        TimeoutError: the time for the whole attempt is up.
    """
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the first attempt's time is up")
    return min(IO_TIMEOUT, left)


def _answer(sock: socket.socket, max_answer: int) -> bytes:
    """lookupd's next answer (``[ size ][ data ]``).

    Raises:
        OSError: the connection failed or closed, or timed out.
        ValueError: an error answer, or a size that cannot be.
    """
    size = lookup_answer_size(_exactly(sock, 4))
    if size < 0 or (max_answer and size > max_answer):
        raise ValueError(f"answer size {size}")
    data = _exactly(sock, size)
    error = lookup_response_error(data)
    if error is not None:
        raise ValueError(str(error))
    return data


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed by lookupd")
        data += chunk
    return data
