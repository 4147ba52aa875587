"""The nsqlookupd protocol V1, sans-IO, for both ends: nsqlookupd reads commands, nsqd writes them.

A session, client (nsqd) to server (nsqlookupd)::

    "  V1"                                        4-byte magic, once
    IDENTIFY\\n [ size: int32 BE ][ JSON body ]    who the nsqd is (once, before REGISTER/UNREGISTER)
    REGISTER <topic> [<channel>]\\n
    UNREGISTER <topic> [<channel>]\\n
    PING\\n                                        allowed at any time, even before IDENTIFY

Every answer, server to client, is a size-prefixed blob with NO frame type (unlike nsqd's V2)::

    [ size: int32 BE ][ data: size bytes ]       "OK", lookupd's own JSON for IDENTIFY,
                                                 or an error "<CODE> <description>"

nsqlookupd treats every error as fatal: it writes the error and closes. A wrong magic gets a
bare ``E_BAD_PROTOCOL`` (no description), then the close.

Line handling follows nsqlookupd: the line is trimmed of (Unicode) white space at both ends, as
Go's ``strings.TrimSpace`` does, then split on single spaces, so ``REGISTER t  c`` has an empty
second parameter (taken as "no channel"), and extra parameters are ignored.

Two limits nsqlookupd does not have, because an unbounded buffer is a memory leak waiting for a
peer to exploit it: a line longer than ``max_line`` aborts the connection (nsqd does the same
for its V2 lines), and an IDENTIFY body larger than ``max_identify_size`` is refused with
nsqd's ``E_BAD_BODY IDENTIFY body too big`` wording. A negative body size, on which Go's
nsqlookupd panics, gets nsqd's ``E_BAD_BODY IDENTIFY invalid body size``.

Server state table (``LookupReader``), every error moves to ERROR and ends the session::

    AWAIT_MAGIC --"  V1"--> AWAIT_LINE --IDENTIFY--> AWAIT_BODY --JSON ok--> AWAIT_LINE
                                 |  ^                                       (identified)
                                 +--+ REGISTER / UNREGISTER (identified only) / PING
    any state --EOF--> CLOSED (inside an IDENTIFY body: an E_BAD_BODY error instead)
"""

from __future__ import annotations

import enum

import attrs

from ._buffer import ReceiveBuffer
from ._errors import ConnectionAbort, ErrorCode, ProtocolError
from ._frames import FrameTooBig
from ._gojson import GoKind, decode_go_struct, go_json
from ._lookup_wire import MAGIC_V1, SIZE, identify_bytes, registration_bytes
from ._names import is_valid_name

LOOKUP_MAX_LINE = 16384
LOOKUP_MAX_IDENTIFY_SIZE = 1024 * 1024

# Go's unicode.IsSpace, which strings.TrimSpace uses (Python's str.strip also drops \x1c-\x1f).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


# --- events: what a client sends -------------------------------------------------------------


@attrs.frozen
class LookupIdentify:
    """``IDENTIFY``: the nsqd's addresses. lookupd requires every field but ``hostname``."""

    broadcast_address: str
    tcp_port: int
    http_port: int
    version: str
    hostname: str = ""


@attrs.frozen
class LookupRegister:
    """``REGISTER topic [channel]``; ``channel`` None registers the topic alone."""

    topic: str
    channel: str | None = None


@attrs.frozen
class LookupUnregister:
    """``UNREGISTER topic [channel]``; without a channel it drops the topic and its channels."""

    topic: str
    channel: str | None = None


@attrs.frozen
class LookupPing:
    """``PING``: keeps the producer active (lookupd hides producers silent for too long)."""


LookupCommand = LookupIdentify | LookupRegister | LookupUnregister | LookupPing


class LookupSignal(enum.Enum):
    """What ``LookupReader.next_event`` returns when it has no command to give."""

    NEED_DATA = "NEED_DATA"
    CLOSED = "CLOSED"


class LookupBadMagic(ProtocolError):
    """The first 4 bytes were not ``"  V1"``; lookupd answers a bare ``E_BAD_PROTOCOL``."""

    def __init__(self, magic: bytes) -> None:
        shown = magic.decode("utf-8", "surrogateescape")
        super().__init__(ErrorCode.E_BAD_PROTOCOL, f"bad protocol magic '{shown}'")

    @property
    def text(self) -> bytes:
        return ErrorCode.E_BAD_PROTOCOL.encode()


# --- encoders (client side) and the response encoder (server side) ------------------------------


def encode_lookup_command(command: LookupCommand) -> bytes:
    """The bytes of one command, as nsqd writes them (``_lookup_wire``)."""
    if isinstance(command, LookupIdentify):
        return identify_bytes(broadcast_address=command.broadcast_address,
                              tcp_port=command.tcp_port, http_port=command.http_port,
                              version=command.version, hostname=command.hostname)
    if isinstance(command, LookupPing):
        return b"PING\n"
    verb = "REGISTER" if isinstance(command, LookupRegister) else "UNREGISTER"
    return registration_bytes(verb, command.topic, command.channel)


def encode_lookup_response(data: bytes) -> bytes:
    """One answer: ``[ size: int32 BE ][ data ]``; for errors pass ``ProtocolError.text``."""
    return SIZE.pack(len(data)) + data


@attrs.frozen
class LookupdInfo:
    """nsqlookupd's answer to IDENTIFY: where it listens, as JSON with sorted keys."""

    broadcast_address: str
    hostname: str
    http_port: int
    tcp_port: int
    version: str

    def encode(self) -> bytes:
        return go_json({
            "broadcast_address": self.broadcast_address,
            "hostname": self.hostname,
            "http_port": self.http_port,
            "tcp_port": self.tcp_port,
            "version": self.version,
        })


def decode_lookupd_info(data: bytes) -> LookupdInfo:
    """Parse lookupd's IDENTIFY answer; missing keys read as zero values, like Go's decoder.

    Raises:
        ValueError: not a JSON object, or a field of the wrong type.
    """
    fields = decode_go_struct(data, _INFO_FIELDS)
    return LookupdInfo(**fields)


# --- server side: bytes in, commands out ------------------------------------------------------


class _State(enum.Enum):
    AWAIT_MAGIC = enum.auto()
    AWAIT_LINE = enum.auto()
    AWAIT_BODY = enum.auto()
    CLOSED = enum.auto()
    ERROR = enum.auto()


class LookupReader(ReceiveBuffer):
    """nsqlookupd's side of a V1 connection: feed bytes, take validated commands.

    ``next_event`` returns a command, ``LookupSignal.NEED_DATA`` (feed more) or
    ``LookupSignal.CLOSED`` (the peer closed cleanly). It raises ``ProtocolError`` with NSQ's
    code and text for anything nsqlookupd refuses (send ``encode_lookup_response(err.text)``
    and close), and ``ConnectionAbort`` for a line over ``max_line`` (just close).

    Args:
        max_line: longest command line, without its newline.
        max_identify_size: largest IDENTIFY body.
    """

    def __init__(self, max_line: int = LOOKUP_MAX_LINE,
                 max_identify_size: int = LOOKUP_MAX_IDENTIFY_SIZE) -> None:
        super().__init__()
        self._max_line = max_line
        self._max_body = max_identify_size
        self._state = _State.AWAIT_MAGIC
        self._body_size = -1
        self.magic: bytes | None = None
        self.identified = False

    def next_event(self) -> LookupCommand | LookupSignal:
        """The next command, or a signal; see the class docstring for errors."""
        if self._state is _State.ERROR:
            raise ProtocolError(ErrorCode.E_INVALID, "connection already failed")
        try:
            return self._next()
        except (ProtocolError, ConnectionAbort):
            self._state = _State.ERROR
            raise

    def _next(self) -> LookupCommand | LookupSignal:
        if self._state is _State.AWAIT_MAGIC:
            if len(self._buf) - self._pos < 4:
                return self._need_data()
            self.magic = bytes(self._buf[self._pos : self._pos + 4])
            self._pos += 4
            if self.magic != MAGIC_V1:
                raise LookupBadMagic(self.magic)
            self._state = _State.AWAIT_LINE
        if self._state is _State.AWAIT_BODY:
            return self._read_identify_body()
        if self._state is _State.AWAIT_LINE:
            line = self._read_line()
            if line is None:
                return self._need_data()
            return self._command(line)
        return LookupSignal.CLOSED

    def _need_data(self) -> LookupSignal:
        # An unfinished magic or line at EOF is dropped without a word, as nsqlookupd does.
        if self._eof:
            self._state = _State.CLOSED
            return LookupSignal.CLOSED
        return LookupSignal.NEED_DATA

    def _read_line(self) -> str | None:
        nl = self._buf.find(b"\n", self._pos)
        end = len(self._buf) if nl < 0 else nl
        if end - self._pos > self._max_line:
            raise ConnectionAbort("command line too long")
        if nl < 0:
            return None
        raw = bytes(self._buf[self._pos : nl])
        self._pos = nl + 1
        return raw.decode("utf-8", "surrogateescape").strip(_GO_SPACE)

    def _command(self, line: str) -> LookupCommand | LookupSignal:
        params = line.split(" ")
        name = params.pop(0)
        if name == "PING":
            return LookupPing()
        if name == "IDENTIFY":
            # Checked before the body is read, so a second IDENTIFY is refused at once.
            if self.identified:
                raise ProtocolError(ErrorCode.E_INVALID, "cannot IDENTIFY again")
            self._state = _State.AWAIT_BODY
            self._body_size = -1
            return self._read_identify_body()
        if name in ("REGISTER", "UNREGISTER"):
            if not self.identified:
                raise ProtocolError(ErrorCode.E_INVALID, "client must IDENTIFY")
            topic, channel = _topic_channel(name, params)
            if name == "REGISTER":
                return LookupRegister(topic, channel)
            return LookupUnregister(topic, channel)
        raise ProtocolError(ErrorCode.E_INVALID, f"invalid command {name}")

    def _read_identify_body(self) -> LookupIdentify | LookupSignal:
        available = len(self._buf) - self._pos
        if self._body_size < 0:
            if available < 4:
                if self._eof:
                    raise ProtocolError(ErrorCode.E_BAD_BODY, "IDENTIFY failed to read body size")
                return LookupSignal.NEED_DATA
            (size,) = SIZE.unpack_from(self._buf, self._pos)
            if size < 0:
                raise ProtocolError(ErrorCode.E_BAD_BODY, f"IDENTIFY invalid body size {size}")
            if size > self._max_body:
                raise ProtocolError(
                    ErrorCode.E_BAD_BODY, f"IDENTIFY body too big {size} > {self._max_body}")
            self._pos += 4
            available -= 4
            self._body_size = size
        if available < self._body_size:
            if self._eof:
                raise ProtocolError(ErrorCode.E_BAD_BODY, "IDENTIFY failed to read body")
            return LookupSignal.NEED_DATA
        body = bytes(self._buf[self._pos : self._pos + self._body_size])
        self._pos += self._body_size
        self._state = _State.AWAIT_LINE
        event = decode_lookup_identify(body)
        self.identified = True
        return event


def _topic_channel(command: str, params: list[str]) -> tuple[str, str | None]:
    if not params:
        raise ProtocolError(ErrorCode.E_INVALID, f"{command} insufficient number of params")
    topic = params[0]
    channel = params[1] if len(params) > 1 else ""
    if not is_valid_name(topic):
        raise ProtocolError(ErrorCode.E_BAD_TOPIC, f"{command} topic name '{topic}' is not valid")
    if channel and not is_valid_name(channel):
        raise ProtocolError(
            ErrorCode.E_BAD_CHANNEL, f"{command} channel name '{channel}' is not valid")
    return topic, channel or None


# --- IDENTIFY body: Go's encoding/json rules, as nsqlookupd decodes into its PeerInfo ------------

_IDENTIFY_FIELDS = {"remote_address": GoKind.STRING, "hostname": GoKind.STRING,
                    "broadcast_address": GoKind.STRING, "tcp_port": GoKind.INT64,
                    "http_port": GoKind.INT64, "version": GoKind.STRING}
_INFO_FIELDS = {"broadcast_address": GoKind.STRING, "hostname": GoKind.STRING,
                "http_port": GoKind.INT64, "tcp_port": GoKind.INT64, "version": GoKind.STRING}


def decode_lookup_identify(body: bytes) -> LookupIdentify:
    """Decode and check an IDENTIFY body as nsqlookupd does.

    Raises:
        ProtocolError: ``E_BAD_BODY IDENTIFY failed to decode JSON body`` (not JSON, not an
            object, a field of the wrong type) or ``E_BAD_BODY IDENTIFY missing fields``
            (``broadcast_address``, ``tcp_port``, ``http_port`` or ``version`` empty or zero).
    """
    try:
        fields = decode_go_struct(body, _IDENTIFY_FIELDS)
    except ValueError:
        raise ProtocolError(ErrorCode.E_BAD_BODY, "IDENTIFY failed to decode JSON body") from None
    if not (fields["broadcast_address"] and fields["tcp_port"] and fields["http_port"]
            and fields["version"]):
        raise ProtocolError(ErrorCode.E_BAD_BODY, "IDENTIFY missing fields")
    del fields["remote_address"]  # lookupd takes it from the socket, never from the peer
    return LookupIdentify(**fields)


# --- client side: answers in ------------------------------------------------------------------


class LookupResponseReader(ReceiveBuffer):
    """nsqd's side: bytes from lookupd in (``receive_data``), whole answers (``[size][data]``)
    out (``next_event``).

    Args:
        max_size: largest answer accepted (nsqd uses its ``--max-body-size``); 0 for no limit.
    """

    def __init__(self, max_size: int = 0) -> None:
        super().__init__()
        self._max_size = max_size

    def next_event(self) -> bytes | None:
        """The next answer's data, or None when more bytes are needed.

        Raises:
            FrameTooBig: a size over ``max_size``.
            ConnectionAbort: a negative size.
        """
        if len(self._buf) - self._pos < 4:
            self._need = 4
            return None
        (size,) = SIZE.unpack_from(self._buf, self._pos)
        if size < 0:
            raise ConnectionAbort(f"negative response size {size}")
        if self._max_size and size > self._max_size:
            raise FrameTooBig(f"response size {size} > {self._max_size}")
        start = self._pos + 4
        if len(self._buf) - start < size:
            self._need = 4 + size
            return None
        self._pos = start + size
        return bytes(self._buf[start : self._pos])
