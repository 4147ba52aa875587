"""Frames, server to client (protocol V2): the encoders and the one incremental decoder.

::

    [ size: uint32 BE ][ frame type: int32 BE ][ data: size - 4 bytes ]
                         0 = response, 1 = error, 2 = message

Responses and errors carry text (``OK``, ``_heartbeat_``, ``CLOSE_WAIT``, JSON, or
``<CODE> <description>``); message frames carry an encoded message (see ``_message``).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

from ._buffer import ReceiveBuffer
from ._message import MESSAGE_FRAME_HEAD, WireMessage

FRAME_HEADER = struct.Struct(">ii")
MAGIC_V2 = b"  V2"
HEARTBEAT = b"_heartbeat_"


class FrameType(enum.IntEnum):
    RESPONSE = 0
    ERROR = 1
    MESSAGE = 2


def encode_frame(frame_type: int, data: bytes) -> bytes:
    """One frame: size, type, data."""
    return FRAME_HEADER.pack(len(data) + 4, frame_type) + data


def encode_response(data: bytes) -> bytes:
    return encode_frame(FrameType.RESPONSE, data)


def encode_error(text: bytes) -> bytes:
    return encode_frame(FrameType.ERROR, text)


OK_FRAME = encode_response(b"OK")
HEARTBEAT_FRAME = encode_response(HEARTBEAT)
CLOSE_WAIT_FRAME = encode_response(b"CLOSE_WAIT")

_RESPONSE, _ERROR, _MESSAGE = int(FrameType.RESPONSE), int(FrameType.ERROR), int(FrameType.MESSAGE)
_OK_FRAME_SIZE = len(OK_FRAME)
_OK_SIZE = _OK_FRAME_SIZE - 4  # the size field of an OK frame
_HEAD = MESSAGE_FRAME_HEAD.size  # a message frame up to its body


class FrameTooBig(Exception):
    """A frame declared larger than the decoder's limit (or smaller than its type field)."""


def count_oks(data: bytes, start: int, end: int) -> int:
    """How many whole ``OK`` frames follow one another in ``data[start:end]`` from ``start``.

    One C-level ``count`` decides the common case, a run of nothing but OKs: n occurrences of
    the 10-byte frame, not overlapping, in 10 * n bytes can only be the frames back to back.
    Otherwise (a heartbeat or an error among them) they are stepped over one by one.
    """
    n = (end - start) // _OK_FRAME_SIZE
    if not n:
        return 0
    if data.count(OK_FRAME, start, start + n * _OK_FRAME_SIZE) == n:
        return n
    k = 0
    while k < n and data.startswith(OK_FRAME, start):
        k += 1
        start += _OK_FRAME_SIZE
    return k


M = TypeVar("M")
#: Makes a decoder's message objects: ``(id, body, timestamp, attempts, context)``.
MessageFactory = Callable[[bytes, bytes, int, int, Any], M]
#: What ``next_events`` reports besides messages, in order: an ``int`` is that many ``OK``
#: responses in a row; a pair is any other response or an error, ``(frame type, data)``.
Answer = int | tuple[int, bytes]


def _wire_message(message_id: bytes, body: bytes, timestamp: int, attempts: int,
                  context: object) -> WireMessage:
    return WireMessage(timestamp, attempts, message_id, body)


class FrameDecoder(ReceiveBuffer, Generic[M]):
    """The client's side of V2: bytes in (``receive_data``), frames out.

    Two ways to take them, over the same buffer:

    * ``next_event()``: one frame, ``(frame type, data)``, or None when more bytes are needed;
    * ``next_events()``: every whole frame buffered, in one pass, for a client's hot path.
      Messages come out as objects of ``message(id, body, timestamp, attempts, context)``
      (default: ``WireMessage``), built straight from the received bytes (one
      ``unpack_from`` for everything but the body, one slice for the body); a run of ``OK``
      answers to pipelined publishes is counted, not parsed (``count_oks``).

    Args:
        max_size: largest frame size field accepted (0: no limit).
        message: the message factory of ``next_events``.
        context: passed to every ``message`` call (the client's connection).
    """

    __slots__ = ("_context", "_error", "_make_message", "_max_size")

    @overload
    def __init__(self: FrameDecoder[WireMessage], max_size: int = 0) -> None: ...
    @overload
    def __init__(self, max_size: int = 0, *, message: MessageFactory[M],
                 context: object = None) -> None: ...

    def __init__(self, max_size: int = 0, *, message: MessageFactory[Any] = _wire_message,
                 context: object = None) -> None:
        super().__init__()
        self._max_size = max_size
        self._make_message = message
        self._context = context
        self._need = 8
        self._error: Exception | None = None

    def missing(self) -> int:
        """How many more bytes the frame ``next_event`` waits for needs (after a None): for
        a reader that must not read past a frame (a handshake, where the stream may change)."""
        return max(self._need - (len(self._buf) - self._pos), 0)

    def _too_big(self, size: int) -> FrameTooBig:
        limit = self._max_size
        return FrameTooBig(f"frame size {size} out of range" + (f" (at most {limit})" if limit else ""))

    def next_event(self) -> tuple[int, bytes] | None:
        """The next complete ``(frame type, data)``, or None when more bytes are needed.

        Raises:
            FrameTooBig: the declared size exceeds ``max_size`` (when set) or is below 4.
        """
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 8:
            self._need = 8
            return None
        size, frame_type = FRAME_HEADER.unpack_from(buf, pos)
        if size < 4 or (self._max_size and size > self._max_size):
            raise self._too_big(size)
        end = pos + 4 + size
        if len(buf) < end:
            self._need = 4 + size
            return None
        self._pos = end
        self._need = 8
        return frame_type, bytes(buf[pos + 8 : end])

    def _take_gathered(self, buf: bytearray, pos: int, messages: list[M]) -> bytes | None:
        """Take a message frame larger than a read out of the bytearray it was gathered in,
        its body with one copy (through a memoryview), into ``messages``; return the bytes that
        follow it, to scan as usual (all of them, the first frame too, when it is another
        kind), or None when the first frame is not whole yet."""
        with memoryview(buf) as view:
            if len(buf) - pos >= _HEAD:
                size, frame_type, timestamp, attempts, message_id = MESSAGE_FRAME_HEAD.unpack_from(
                    buf, pos)
                stop = pos + 4 + size
                if frame_type == _MESSAGE and stop - pos >= _HEAD and (
                        not self._max_size or size <= self._max_size):
                    if stop > len(buf):
                        self._need = 4 + size
                        return None
                    messages.append(self._make_message(message_id, bytes(view[pos + _HEAD : stop]),
                                                       timestamp, attempts, self._context))
                    pos = stop
            rest = self._buf = bytes(view[pos:])
        self._pos = 0
        return rest

    def next_events(self) -> tuple[list[Answer], list[M]]:
        """Every whole frame buffered: ``(answers, messages)``; both empty when more bytes are
        needed. A bad frame raises once the frames before it were returned (the next call).

        Raises:
            FrameTooBig: a frame size over ``max_size`` or below 4.
            ValueError: a message frame shorter than a message header, or an unknown type.
        """
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        received, pos = self._buf, self._pos
        end = len(received)
        if end - pos < self._need:
            return [], []
        answers: list[Answer] = []
        messages: list[M] = []
        if isinstance(received, bytearray):  # gathered over several reads (a frame larger than a read)
            rest = self._take_gathered(received, pos, messages)
            if rest is None:
                return answers, messages
            buf, pos, end = rest, 0, len(rest)
        else:
            buf = received
        make, context, max_size = self._make_message, self._context, self._max_size
        unpack_message = MESSAGE_FRAME_HEAD.unpack_from
        need = 8
        oks = 0
        try:
            while end - pos >= 8:
                if end - pos >= _HEAD:
                    size, frame_type, timestamp, attempts, message_id = unpack_message(buf, pos)
                else:
                    size, frame_type = FRAME_HEADER.unpack_from(buf, pos)
                if size < 4 or (max_size and size > max_size):
                    raise self._too_big(size)
                stop = pos + 4 + size
                if stop > end:
                    need = 4 + size
                    break
                if frame_type == _MESSAGE:
                    if stop - pos < _HEAD:
                        raise ValueError(f"message frame of {size - 4} bytes")
                    messages.append(make(message_id, buf[pos + _HEAD : stop], timestamp,
                                         attempts, context))
                elif frame_type == _RESPONSE:
                    if size == _OK_SIZE and buf.startswith(b"OK", pos + 8):
                        n = count_oks(buf, stop, end) + 1  # a run of answers to publishes
                        oks += n
                        stop += (n - 1) * _OK_FRAME_SIZE
                    else:
                        if oks:
                            answers.append(oks)
                            oks = 0
                        answers.append((_RESPONSE, buf[pos + 8 : stop]))
                elif frame_type == _ERROR:
                    if oks:
                        answers.append(oks)
                        oks = 0
                    answers.append((_ERROR, buf[pos + 8 : stop]))
                else:
                    raise ValueError(f"unknown frame type {frame_type}")
                pos = stop
        except (FrameTooBig, ValueError) as exc:
            if not (answers or messages or oks):
                raise
            self._error = exc
        if oks:
            answers.append(oks)
        self._pos = pos
        self._need = need
        return answers, messages
