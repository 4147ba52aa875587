"""Server side of protocol V2: bytes in, whole commands out (sans-IO).

Give it whatever the socket returned (``receive_data``); take commands until ``next_event``
returns None. Partial reads and pipelined commands both work because nothing is consumed until
a command is whole.

A command is a line (``NAME param param\\n``, a trailing ``\\r`` stripped, split on single
spaces). Whether a body follows, and how large it may be, is the server's decision, made by
the ``header_hook`` as soon as the line is complete. That is how NSQ orders its checks: a PUB
with a bad topic is refused before its body is read, and an oversized body is refused from its
4-byte size alone, before any of it is buffered.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Protocol

import attrs

from ._buffer import ReceiveBuffer
from ._errors import ConnectionAbort, ProtocolError

_SIZE = struct.Struct(">i")
# NSQ reads lines through a 16 KiB bufio.Reader; a longer line is a read error.
MAX_LINE_LENGTH = 16384
# A run of FINs whose ids ``next_event`` would read as the same 16 bytes: no space or newline
# in them (those split the line otherwise) and no "\r" before the "\n" (it would be stripped).
_FIN_LINE = 21  # b"FIN " + 16-byte id + b"\n"
_FIN_RUN = re.compile(rb"(?:FIN [^ \n]{15}[^ \n\r]\n)+")


class PartialCheck(Protocol):
    def check(self, buf: bytes | bytearray, start: int, available: int) -> None:
        """Look at the body's first ``available`` bytes (from ``buf[start]``); raise
        ProtocolError to refuse the command before the rest arrives."""


@attrs.frozen
class BodySpec:
    """How to read a command's body: its limit and NSQ's texts for a bad size.

    ``partial``, when given, makes a checker that looks at a body while it is still
    incomplete (MPUB: each message's size is refused as soon as it is in).
    """

    max_size: int
    code: str
    invalid: str  # "%d" <- the size, e.g. "PUB invalid message body size %d"
    too_big: str  # "%d > %d" <- size, limit, e.g. "PUB message too big %d > %d"
    partial: Callable[[], PartialCheck] | None = None


class Command:
    """One parsed command. ``body`` is None for commands without one."""

    __slots__ = ("body", "name", "params")

    def __init__(self, name: bytes, params: list[bytes], body: bytes | None) -> None:
        self.name = name
        self.params = params
        self.body = body

    def __repr__(self) -> str:
        return f"Command({self.name!r}, {self.params!r}, {self.body!r})"


HeaderHook = Callable[[bytes, list[bytes]], BodySpec | None]


class CommandReader(ReceiveBuffer):
    """Incremental command parser (the buffer and ``receive_data``: ``ReceiveBuffer``).

    Args:
        header_hook: called with ``(name, params)`` for each complete line; returns the body
            spec for commands with a body, None otherwise, or raises ``ProtocolError``.
        max_line: longest line accepted; beyond it ``ConnectionAbort`` is raised.
    """

    __slots__ = ("_body_size", "_hook", "_max_line", "_partial", "_pending")

    def __init__(self, header_hook: HeaderHook, max_line: int = MAX_LINE_LENGTH) -> None:
        super().__init__()
        self._hook = header_hook
        self._max_line = max_line
        self._pending: tuple[bytes, list[bytes], BodySpec] | None = None
        self._body_size = -1
        self._partial: PartialCheck | None = None

    def next_event(self) -> Command | None:
        """The next whole command, or None when more bytes are needed.

        Raises:
            ProtocolError: from the hook, or a body size out of range (NSQ's text).
            ConnectionAbort: a line longer than ``max_line``.
        """
        buf = self._buf
        if self._pending is None:
            pos = self._pos
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if len(buf) - pos > self._max_line:
                    raise ConnectionAbort("command line too long")
                self._need = 0
                return None
            if nl - pos > self._max_line:
                raise ConnectionAbort("command line too long")
            end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl  # strip "\r"
            parts = bytes(buf[pos:end]).split(b" ")
            self._pos = nl + 1
            name = parts[0]
            del parts[0]
            spec = self._hook(name, parts)
            if spec is None:
                return Command(name, parts, None)
            self._pending = (name, parts, spec)
            self._body_size = -1
            self._partial = None
        return self._read_body()

    def next_fins(self) -> list[bytes]:
        """The ids of the plain ``FIN <id>`` commands at the front of the buffer, taken out of
        it; ``[]`` when the next command is anything else (read it with ``next_event``).

        A consumer sends one FIN per message, many per read. Each would cost ``next_event`` a
        ``Command`` and a parameter list and its caller a dispatch; here one regular
        expression match finds the whole run and only the ids are sliced out (16 bytes each:
        one object per FIN instead of about six). The ids are exactly what ``next_event``
        would give as ``params[0]``; a FIN it would parse differently (a short id, extra
        parameters, ``\r\n``) is left to it. The caller applies the same checks as to a
        FIN from ``next_event``: the header hook is not called.
        """
        buf = self._buf
        if self._pending is not None or type(buf) is not bytes:
            return []
        pos = self._pos
        n = (len(buf) - pos) // _FIN_LINE
        if not n or not buf.startswith(b"FIN ", pos):
            return []
        # Usually every whole line left is a FIN: check that a column at a time (strided
        # slices and counts, in C) and split the ids out with two more C passes, about 90 ns
        # a FIN where the regular expression and a slice per id took 310 (3,000 FINs, in
        # process). Spaces and newlines only where a FIN line has them, no "\r" before a
        # newline: what _FIN_RUN checks byte by byte.
        region = buf[pos : pos + n * _FIN_LINE]
        if (region.count(b"\n") == n and region.count(b" ") == n
                and region[20::_FIN_LINE] == b"\n" * n and region[3::_FIN_LINE] == b" " * n
                and region[0::_FIN_LINE] == b"F" * n and region[1::_FIN_LINE] == b"I" * n
                and region[2::_FIN_LINE] == b"N" * n and b"\r" not in region[19::_FIN_LINE]):
            self._pos = pos + n * _FIN_LINE
            ids = region.replace(b"FIN ", b"").split(b"\n")
            del ids[-1]
            return ids
        run = _FIN_RUN.match(buf, pos)  # something else follows the FINs, or is among them
        if run is None:
            return []
        end = run.end()
        self._pos = end
        return [buf[i + 4 : i + 20] for i in range(pos, end, _FIN_LINE)]

    def _read_body(self) -> Command | None:
        assert self._pending is not None
        name, params, spec = self._pending
        buf, pos = self._buf, self._pos
        if self._body_size < 0:
            if len(buf) - pos < 4:
                self._need = 4
                return None
            (size,) = _SIZE.unpack_from(buf, pos)
            if size <= 0:
                raise ProtocolError(spec.code, spec.invalid % size)
            if size > spec.max_size:
                raise ProtocolError(spec.code, spec.too_big % (size, spec.max_size))
            self._body_size = size
            pos += 4
            self._pos = pos
        size = self._body_size
        available = len(buf) - pos
        if available < size:
            if spec.partial is not None and available:
                if self._partial is None:
                    self._partial = spec.partial()
                self._partial.check(buf, pos, available)
            self._need = size
            return None
        body = bytes(buf[pos : pos + size])
        self._pos = pos + size
        self._pending = None
        return Command(name, params, body)
