"""The early start: a daemon's listeners bound, and ``GET /ping`` answered "not yet", while
it still imports its server.

A daemon needs Trio, its HTTP server and its app before it can serve anything: 100-400 ms of
imports against a 10-20 ms interpreter (docs/performance.md). So each command, once its
flags are parsed, binds its listeners here with the plain ``socket`` module (``listen``: TCP
clients are accepted by the kernel from then on, and wait there for the real server), and a
small thread answers ``/ping`` on the HTTP socket while the main thread imports the rest.
Then the real server takes over, as under systemd's socket activation::

    main thread   flags ─ listen() ─ answer_pings() ─ checks ─ import Trio, app ─ serve
    early thread                       accept; /ping: 500 "NOK - starting" ─── hand over ┘

- ``/ping`` is answered here with what Go's nsqd answers while it is not healthy (its
  ``pingHandler``: 500 and the health text, ``NOK - <why>``), never OK: OK comes from the
  real handler, once the daemon serves every listener it was given (a readiness probe or a
  test harness that waits for OK may use any of them at once).
- ``listen_tcp`` (``_listen``) takes the socket bound here for the same address, if any;
  ``serve_http`` (``_server``) stops the thread and serves every connection it accepted and
  did not finish (``take_connections``), with their unread bytes still in the kernel.
- The thread reads with ``MSG_PEEK`` and consumes only a ``/ping`` it answers: any other
  request, anything it does not understand, and whatever follows an answered ``/ping`` on a
  kept-alive connection, is left for the real server, byte for byte.
- A start that fails calls ``abandon()``, and the real path reports the error as it always
  did: a bind that fails here abandons the early start too, so the real bind fails again, in
  its own words.

Nothing here imports more than ``socket``, ``select`` and ``_thread``: the point
is to be quick (``threading`` and ``typing`` cost more than the rest of the early start).
"""

from __future__ import annotations

import _thread
import os
import select
import socket
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

#: The most of a request head looked at for ``/ping``; a longer head goes to the real server.
_MAX_HEAD = 8192
#: What a ping answer is sent within (GIL switches while the main thread imports); restored
#: when the real server takes over.
_SWITCH_INTERVAL = 0.0005

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def date_line(now: float) -> bytes:
    """``date: <IMF-fixdate>\\r\\n``, as the real server writes it (``_heads.DateHeader``),
    without ``email.utils``."""
    t = time.gmtime(now)
    return (f"date: {_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT\r\n").encode()


class PingAnswer:
    """An answer to ``GET <path>`` as the daemon's real server writes one: the status line
    and the app's headers (before the server's ``connection``/``date``), and the body."""

    __slots__ = ("body", "head", "path")

    def __init__(self, path: bytes, head: bytes, body: bytes) -> None:
        self.path = path
        self.head = head
        self.body = body

    def bytes_for(self, keep_alive: bool, http11: bool, now: float) -> bytes:
        """The whole answer: ``connection: close`` for an HTTP/1.1 request that asked to
        close (HTTP/1.0 gets none and is closed), then ``date``, as ``_connection._start``."""
        close = b"connection: close\r\n" if http11 and not keep_alive else b""
        return self.head + close + date_line(now) + b"\r\n" + self.body


def parse_ping(head: bytes, path: bytes) -> tuple[bool, bool] | None:
    """``(keep_alive, http11)`` if ``head`` (a whole request head, through its blank line) is a
    plain ``GET <path>`` the real server would answer with its ``/ping`` handler; None for
    anything else, left to the real server (a body, a query, an upgrade, a head it might
    refuse: missing or repeated Host, odd bytes...)."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[0] != b"GET" or parts[1] != path:
        return None
    if parts[2] == b"HTTP/1.1":
        http11 = True
    elif parts[2] == b"HTTP/1.0":
        http11 = False
    else:
        return None
    hosts = 0
    close = False
    if len(lines) > 100:  # the real server's limit on header lines (a 431)
        return None
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or not name.isascii() or not value.isascii():
            return None
        if not name.replace(b"-", b"").isalnum():
            return None
        name = name.lower()
        value = value.strip().lower()
        if name == b"host":
            hosts += 1
        elif name in (b"content-length", b"transfer-encoding", b"expect", b"upgrade"):
            if name != b"content-length" or value != b"0":
                return None
        elif name == b"connection":
            tokens = [token.strip() for token in value.split(b",")]
            close = b"close" in tokens
            if b"upgrade" in tokens:
                return None
    if hosts > 1 or (http11 and hosts == 0):
        return None
    # the real server keeps HTTP/1.1 open unless asked to close, and never keeps HTTP/1.0
    return (http11 and not close), http11


class _Responder:
    """The thread that answers ``/ping`` on one listening socket until told to stop."""

    def __init__(self, listener: socket.socket, answer: PingAnswer) -> None:
        self.listener = listener
        self.answer = answer
        self.stopping = False
        self.watched: dict[int, socket.socket] = {}  # accepted, their first request not seen
        self.handed: list[socket.socket] = []  # for the real server
        self.closing: dict[int, socket.socket] = {}  # answered and closing: read until EOF
        self.answered: list[tuple[str, int, float]] = []  # (client host, port, seconds)
        self.wake_r, self.wake_w = os.pipe()
        self.running = _thread.allocate_lock()
        self.running.acquire()

    def wake(self) -> None:
        os.write(self.wake_w, b"x")

    def run(self) -> None:
        try:
            self._loop()
        except Exception:  # never a traceback from here: the real server serves all left
            pass
        finally:
            self.running.release()

    def _loop(self) -> None:
        poller = select.poll()
        poller.register(self.wake_r, select.POLLIN)
        poller.register(self.listener.fileno(), select.POLLIN)
        listening = self.listener.fileno()
        while True:
            for fd, _ in poller.poll():
                if fd == self.wake_r:
                    os.read(self.wake_r, 64)
                elif fd == listening:
                    self._accept(poller)
                elif fd in self.closing:
                    self._drain(poller, fd)
                elif fd in self.watched:
                    self._look(poller, fd)
            if self.stopping:
                return

    def _accept(self, poller: select.poll) -> None:
        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        conn.setblocking(False)
        self.watched[conn.fileno()] = conn
        poller.register(conn.fileno(), select.POLLIN)

    def _look(self, poller: select.poll, fd: int) -> None:
        """A watched connection sent something: a whole ``/ping`` is answered; anything else
        is handed over untouched."""
        conn = self.watched[fd]
        try:
            data = conn.recv(_MAX_HEAD, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # gone before asking anything
            poller.unregister(fd)
            del self.watched[fd]
            conn.close()
            return
        poller.unregister(fd)
        del self.watched[fd]
        # A head not whole in the first read goes to the real server: waiting for the rest
        # here would mean polling a socket whose peeked bytes keep it readable.
        end = data.find(b"\r\n\r\n")
        parsed = None if end < 0 else parse_ping(data[:end + 4], self.answer.path)
        if parsed is None:
            self.handed.append(conn)
        else:
            self._answer(poller, conn, end + 4, *parsed)

    def _answer(self, poller: select.poll, conn: socket.socket, end: int, keep_alive: bool,
                http11: bool) -> None:
        """Consume the ``/ping`` head (``end`` bytes) at the front of ``conn`` and answer it;
        the connection then goes to the real server (kept alive) or is closed gently (as the
        server lingers: stop sending, read until the client closes)."""
        began = time.perf_counter()
        conn.recv(end)  # exactly the head: whatever follows stays for the real server
        conn.setblocking(True)
        try:
            peer = conn.getpeername()
            conn.sendall(self.answer.bytes_for(keep_alive, http11, time.time()))
        except OSError:
            conn.close()
            return
        self.answered.append((str(peer[0]), int(peer[1]), time.perf_counter() - began))
        conn.setblocking(False)
        if keep_alive:
            self.handed.append(conn)
            return
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            conn.close()
            return
        self.closing[conn.fileno()] = conn
        poller.register(conn.fileno(), select.POLLIN)

    def _drain(self, poller: select.poll, fd: int) -> None:
        conn = self.closing[fd]
        try:
            data = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            poller.unregister(fd)
            del self.closing[fd]
            conn.close()

    def stop(self) -> list[socket.socket]:
        """Stop the thread; the connections the real server is to serve."""
        self.stopping = True
        self.wake()
        self.running.acquire()
        for conn in self.closing.values():
            conn.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        return self.handed + list(self.watched.values())


class _EarlyStart:
    """What the early start holds until the real server takes it: the responders by
    listening socket (the sockets by address are ``_listen.PREBOUND``)."""

    def __init__(self) -> None:
        self.responders: dict[int, _Responder] = {}
        self.switch_interval: float | None = None
        self.access_log: Callable[[str], object] | None = None


_state = _EarlyStart()


#: The health text of a daemon that does not serve yet, as Go's nsqd words an unhealthy one
#: (``NOK - <why>``).
STARTING = b"NOK - starting"
#: ``GET /ping`` until the daemon serves: Go's nsqd's answer while it is not healthy (500,
#: the health text), as the real server writes ``plain_text(health, 500)``.
STARTING_HEAD = (b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: %d\r\n"
                 b"content-type: text/plain; charset=utf-8\r\n" % len(STARTING))


def start(http_address: str, addresses: Sequence[str], *, ping_path: str = "/ping",
          ) -> list[socket.socket] | None:
    """A daemon's early start: listen on ``addresses`` and on ``http_address`` (none if
    empty), and answer ``GET <ping_path>`` there with "not yet" (``STARTING``) until the
    real server takes over. The sockets, in that order (the real start takes them in the
    same order); None, with nothing bound, if an address cannot be listened on (the real
    start then fails on it)."""
    every = [*addresses, http_address] if http_address else list(addresses)
    bound = listen(every)
    if bound is None:
        return None
    if http_address:
        answer_pings(bound[-1], PingAnswer(ping_path.encode(), STARTING_HEAD, STARTING))
    return bound


def listen(addresses: Sequence[str], backlog: int = 1024) -> list[socket.socket] | None:
    """Bind and listen on every one of ``addresses`` (as ``listen_tcp`` does: the same
    function binds them), keeping them for the real server's ``listen_tcp``; None, with
    nothing left bound, if any of them fails (the real start then fails on it, in its words).
    """
    from ._listen import PREBOUND, ListenError, bind_listener

    bound: list[socket.socket] = []
    for address in addresses:
        try:
            sock = bind_listener(address, backlog)
        except ListenError:
            for done in bound:
                done.close()
            PREBOUND.clear()
            return None
        bound.append(sock)
        PREBOUND.setdefault(address, []).append(sock)
    return bound


def answer_pings(listener: socket.socket, answer: PingAnswer) -> None:
    """Answer ``GET /ping`` on ``listener`` with ``answer``, from a thread, until the real
    server takes the socket over."""
    listener.setblocking(False)
    responder = _Responder(listener, answer)
    _state.responders[listener.fileno()] = responder
    if _state.switch_interval is None:
        _state.switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(_SWITCH_INTERVAL)
    _thread.start_new_thread(responder.run, ())


def access_log(write: Callable[[str], object]) -> None:
    """Log the ``/ping``s answered early as the daemon logs its requests
    (``500 GET /ping (<ip>:<port>) <elapsed>``), with ``write``: called by the real server
    as it takes over (in its own thread, not this one's), so their time stamps are that
    moment's."""
    _state.access_log = write


def take_listener(address: str) -> socket.socket | None:
    """The first socket bound early for ``address`` and not taken yet, as ``listen_tcp``
    takes it."""
    from ._listen import take_prebound

    return take_prebound(address)


def take_connections(listener: socket.socket) -> list[socket.socket]:
    """Stop answering on ``listener``; the connections accepted early and not finished, for
    the real server to serve (their unread bytes are still in the kernel)."""
    responder = _state.responders.pop(listener.fileno(), None)
    if responder is None:
        return []
    connections = responder.stop()
    if _state.access_log is not None and responder.answered:
        from nsq_common import format_go_duration

        path = responder.answer.path.decode()
        status = responder.answer.head.split(b" ", 2)[1].decode()
        for host, port, seconds in responder.answered:
            _state.access_log(f"{status} GET {path} ({host}:{port}) "
                              f"{format_go_duration(seconds)}")
    if not _state.responders and _state.switch_interval is not None:
        sys.setswitchinterval(_state.switch_interval)
        _state.switch_interval = None
    return connections


def abandon() -> None:
    """The start failed: stop answering, close every connection and socket bound early."""
    for fd in list(_state.responders):
        responder = _state.responders[fd]
        for conn in take_connections(responder.listener):
            conn.close()
    from ._listen import PREBOUND

    for sockets in PREBOUND.values():
        for sock in sockets:
            sock.close()
    PREBOUND.clear()

