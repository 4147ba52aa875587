"""The receive buffer of every sans-IO reader here, and the vocabulary they share (h11's).

::

    reader.receive_data(data)    bytes read from the peer; b"" means it closed its side
    reader.next_event()          the next whole frame / command / answer, or "need more data"

The readers: ``FrameDecoder`` (frames, the client's side of V2), ``CommandReader`` (commands,
nsqd's side of V2), ``LookupReader`` and ``LookupResponseReader`` (lookupd's V1, both sides).

Discipline: the unparsed bytes are ``_buf[_pos:]``. When everything before was parsed, a new
chunk becomes the buffer as it is, without a copy: the common case, whole frames or commands
in one read, is parsed straight from the bytes received, and what a reader slices out of them
is one copy. When a piece is left over, what happens depends on ``_need``, the unparsed size
the reader needs before it can make progress:

* the new chunk completes it: leftover and chunk are joined once into ``bytes``;
* it does not (a frame larger than a read): the buffer becomes a ``bytearray`` that later
  chunks are appended to (amortised, so a frame of many reads is copied once, not once per
  read); its parsed front is dropped on the next receive.
"""

from __future__ import annotations


class ReceiveBuffer:
    """The buffer half of a reader: ``receive_data`` and what was received but not parsed."""

    __slots__ = ("_buf", "_eof", "_need", "_pos")

    def __init__(self) -> None:
        self._buf: bytes | bytearray = b""
        self._pos = 0
        # Unparsed bytes the reader needs before its next event can come out (0: unknown).
        self._need = 0
        self._eof = False

    def receive_data(self, data: bytes | bytearray) -> None:
        """Add bytes read from the peer (what ``trio.abc.Stream.receive_some`` returns);
        ``b""`` means the peer closed its side."""
        if not data:
            self._eof = True
            return
        buf = self._buf
        pos = self._pos
        self._pos = 0
        if pos >= len(buf):
            self._buf = data if type(data) is bytes else bytes(data)
        elif type(buf) is bytearray:
            if pos:
                del buf[:pos]
            buf += data
        elif len(buf) - pos + len(data) >= self._need:
            self._buf = buf[pos:] + data
        else:
            grown = bytearray(memoryview(buf)[pos:])
            grown += data
            self._buf = grown

    @property
    def buffered(self) -> int:
        """How many bytes were received and not parsed yet."""
        return len(self._buf) - self._pos

    def take_buffered(self) -> bytes:
        """Hand over the bytes not yet parsed (at a connection upgrade they belong to the
        new layer: TLS records, compressed data)."""
        data = bytes(self._buf[self._pos :])
        self._buf = b""
        self._pos = 0
        self._need = 0
        return data
