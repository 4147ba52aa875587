"""The benchmark clients: plain blocking sockets, one process per connection.

Everything on the hot path avoids per-message work: commands are encoded once and sent many at
a time, responses and messages are parsed by offset inside one big receive buffer, and the FINs
for a received chunk go out in a single send from a pre-built buffer (only the 16-byte ids are
copied in). Times come from ``time.monotonic`` (CLOCK_MONOTONIC, shared by every process of the
machine), so the parent can combine the first start and the last end of several clients.

``worker_main`` is the entry point of each child process: it connects and sets up, reports
``ready`` on its pipe, waits for the common start signal, runs, and reports the result.
"""

from __future__ import annotations

import socket
import struct
import time
import traceback
from typing import Any

from nsq_common import HEARTBEAT, MAGIC_V2, commands

FRAME = struct.Struct(">ii")
_unpack_frame = FRAME.unpack_from
TYPE_RESPONSE = 0
TYPE_ERROR = 1
TYPE_MESSAGE = 2
OK_SIZE = 4 + 2  # the size field of an ``OK`` response frame
HEARTBEAT_SIZE = 4 + len(HEARTBEAT)
NOP = b"NOP\n"
CLS = b"CLS\n"
MESSAGE_ID_START = 8 + 10  # frame header, then timestamp and attempts
FIN_LEN = len(b"FIN 0123456789abcdef\n")
MIN_MESSAGE_FRAME = 8 + 26
USER_AGENT = "nsq-bench/0.1"

RESPONSE_BUFFER = 256 * 1024
MESSAGE_BUFFER = 4 * 1024 * 1024
START_TIMEOUT = 300.0


class BenchError(Exception):
    """nsqd answered something a benchmark client did not expect."""


def _frame_text(buf: bytes | bytearray, pos: int, stop: int) -> str:
    return bytes(buf[pos + 8 : stop]).decode("utf-8", "replace")


def nsqd_said(sock: socket.socket) -> str:
    """After a failed send or receive: the text of any error frames nsqd managed to send."""
    try:
        sock.settimeout(0.5)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    except OSError:
        pass
    texts = []
    pos = 0
    while len(data) - pos >= 8:
        size, frame_type = FRAME.unpack_from(data, pos)
        if frame_type == TYPE_ERROR:
            texts.append(_frame_text(data, pos, pos + 4 + size))
        pos += 4 + size
    return "; ".join(texts)


def _unexpected(frame_type: int, text: str) -> str:
    if frame_type == TYPE_ERROR:
        return f"nsqd answered an error: {text}"
    return f"unexpected frame (type {frame_type}): {text[:200]!r}"


def connect(address: str, timeout: float = 10.0) -> socket.socket:
    """A TCP connection to nsqd that has sent the protocol magic."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(MAGIC_V2)
    return sock


def next_frame(sock: socket.socket, pending: bytes, eof: str) -> tuple[int, bytes, bytes]:
    """The first frame of ``pending``, receiving until it is whole: (type, data, the rest).

    Set-up and close only (byte-wise buffering is fine there). Raises BenchError(``eof``) when
    nsqd closes the connection first.
    """
    while len(pending) < 8 or len(pending) < 4 + FRAME.unpack_from(pending)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise BenchError(eof)
        pending += chunk
    size, frame_type = FRAME.unpack_from(pending)
    return frame_type, pending[8 : 4 + size], pending[4 + size :]


def read_response(sock: socket.socket) -> bytes:
    """Read frames until one that is not a heartbeat (answering heartbeats); its data.

    Set-up only. Raises BenchError on an error frame.
    """
    pending = b""
    while True:
        frame_type, data, pending = next_frame(sock, pending, "nsqd closed the connection")
        if frame_type == TYPE_ERROR:
            raise BenchError(f"nsqd error: {data.decode('utf-8', 'replace')}")
        if frame_type == TYPE_RESPONSE and data == HEARTBEAT:
            sock.sendall(NOP)
            continue
        if pending:
            raise BenchError("unexpected extra frames during set-up")
        return data


def identify(sock: socket.socket, role: str, output_buffer_timeout: int = 0) -> None:
    """IDENTIFY without feature negotiation (answered ``OK``).

    ``output_buffer_timeout`` in ms as NSQ takes it: 0 leaves nsqd's default, -1 disables it.
    """
    sock.sendall(commands.identify({
        "client_id": f"bench-{role}", "hostname": "bench", "user_agent": USER_AGENT,
        "feature_negotiation": False, "output_buffer_timeout": output_buffer_timeout,
    }))
    data = read_response(sock)
    if data != b"OK":
        raise BenchError(f"IDENTIFY answered {data!r}")


def subscribe(sock: socket.socket, topic: str, channel: str) -> None:
    sock.sendall(commands.sub(topic, channel))
    data = read_response(sock)
    if data != b"OK":
        raise BenchError(f"SUB answered {data!r}")


# -- publishing ------------------------------------------------------------------------------

def publish(sock: socket.socket, cmd: bytes, units: int, per_send: int,
            window: int) -> tuple[float, float, float]:
    """Send ``cmd`` ``units`` times and wait for every ``OK``.

    Returns the time of the first send, the time of the last ``OK``, and the CPU time used.

    ``per_send`` commands go out in one send; a send happens only while no more than
    ``window`` commands would then be unanswered. Responses are read in bulk and counted by
    offset; heartbeats are answered, any error frame aborts.
    """
    per_send = max(1, min(per_send, window))
    chunk = cmd * per_send
    buf = bytearray(RESPONSE_BUFFER)
    view = memoryview(buf)
    unpack = _unpack_frame
    sendall = sock.sendall
    recv_into = sock.recv_into
    sent = acked = filled = 0
    cpu = time.process_time()
    start = time.monotonic()
    while acked < units:
        while sent < units and sent - acked + per_send <= window:
            n = units - sent
            if n >= per_send:
                sendall(chunk)
                sent += per_send
            else:
                sendall(cmd * n)
                sent += n
        nread = recv_into(view[filled:])
        if not nread:
            raise BenchError("nsqd closed the connection")
        end = filled + nread
        pos = 0
        while end - pos >= 8:
            size, frame_type = unpack(buf, pos)
            stop = pos + 4 + size
            if stop > end:
                break
            if frame_type == TYPE_RESPONSE and size == OK_SIZE:
                acked += 1
            elif frame_type == TYPE_RESPONSE and size == HEARTBEAT_SIZE:
                sendall(NOP)
            else:
                raise BenchError(_unexpected(frame_type, _frame_text(buf, pos, stop)))
            pos = stop
        filled = end - pos
        if filled:
            buf[:filled] = buf[pos:end]
    return start, time.monotonic(), time.process_time() - cpu


def publish_command(role: str, topic: str, body: bytes, batch: int) -> bytes:
    if role == "mpub":
        return commands.mpub(topic, [body] * batch)
    return commands.pub(topic, body)


def prefill(address: str, topic: str, count: int, size: int, batch: int) -> None:
    """Publish exactly ``count`` messages with MPUB (untimed set-up of the consume scenarios)."""
    body = b"x" * size
    with connect(address) as sock:
        identify(sock, "prefill")
        full, rest = divmod(count, batch)
        if full:
            publish(sock, commands.mpub(topic, [body] * batch), full, 1, 4)
        if rest:
            publish(sock, commands.mpub(topic, [body] * rest), 1, 1, 1)


# -- consuming -------------------------------------------------------------------------------

def _copy_run_of_ids(buf: bytearray, pos: int, end: int, fins: bytearray, k: int) -> int:
    """Copy the ids of the run of message frames of one size that starts at ``pos`` (and
    ends by ``end``) into the FIN lines of ``fins`` from line ``k``; how many frames the run
    held (0: the next two frames differ, or are not messages).

    Messages of one size (the benchmark's) arrive as a regular grid, so their heads are
    compared and their ids copied a column at a time by strided slices (24 C-level copies a
    run, however many frames it holds) rather than by a Python step per frame: that step
    cost the reader client about 0.5 us of CPU a message, which on 2 cores came out of
    nsqd's share (python -m bench.writer_reader, client us/msg).
    """
    if end - pos < 8:
        return 0
    size, frame_type = _unpack_frame(buf, pos)
    step = size + 4
    n = (end - pos) // step
    if (frame_type != TYPE_MESSAGE or size < MIN_MESSAGE_FRAME - 4 or n < 2
            or buf[pos : pos + 8] != buf[pos + step : pos + step + 8]):
        return 0
    grid = buf[pos : pos + n * step]
    head = grid[:8]
    run: int = n  # up to the first frame whose head differs, column by column
    for j in range(8):
        column = grid[j::step]
        if column.count(head[j]) != n:
            run = min(run, next(i for i, b in enumerate(column) if b != head[j]))
    first, last = k * FIN_LEN + 4, (k + run) * FIN_LEN
    for j in range(16):
        fins[first + j : last : FIN_LEN] = grid[MESSAGE_ID_START + j : run * step : step]
    return run


def collect_fins(buf: bytearray, end: int, fins: bytearray, sock: socket.socket
                 ) -> tuple[int, int]:
    """Go over the whole frames in ``buf[:end]``: copy each message's id into the next FIN
    line of ``fins``, answer heartbeats with NOP. Where the frames stopped (the start of a
    partial one, or ``end``) and how many messages there were.

    Raises:
        BenchError: a frame other than a message or a heartbeat.
    """
    pos = k = 0
    while end - pos >= 8:
        run = _copy_run_of_ids(buf, pos, end, fins, k)
        if run:
            pos += run * (_unpack_frame(buf, pos)[0] + 4)
            k += run
            continue
        size, frame_type = _unpack_frame(buf, pos)
        stop = pos + 4 + size
        if stop > end:
            break
        if frame_type == TYPE_MESSAGE:
            o = k * FIN_LEN + 4
            fins[o : o + 16] = buf[pos + MESSAGE_ID_START : pos + MESSAGE_ID_START + 16]
            k += 1
        elif frame_type == TYPE_RESPONSE and size == HEARTBEAT_SIZE:
            sock.sendall(NOP)
        else:
            raise BenchError(_unexpected(frame_type, _frame_text(buf, pos, stop)))
        pos = stop
    return pos, k


def consume(sock: socket.socket, rdy: int, target: int, counter: Any | None,
            size: int = 0) -> dict[str, Any]:
    """Take messages with RDY ``rdy`` and FIN each, until ``target`` have arrived.

    With ``counter`` (a shared ``multiprocessing.Value``), ``target`` counts the messages of
    every consumer together: each adds its chunk counts and stops once the sum reaches it
    (idle consumers look every 50 ms). Ends with CLS and waits for CLOSE_WAIT, so nsqd has
    handled every FIN before this returns; messages after the target count as ``extra``.
    ``size`` (the message body size) only makes sure the buffer holds a few whole frames.
    """
    buf = bytearray(max(MESSAGE_BUFFER, 4 * (MIN_MESSAGE_FRAME + size)))
    view = memoryview(buf)
    max_frames = len(buf) // MIN_MESSAGE_FRAME + 1
    fins = bytearray(b"FIN 0123456789abcdef\n" * max_frames)
    fins_view = memoryview(fins)
    sendall = sock.sendall
    recv_into = sock.recv_into
    if counter is not None:
        sock.settimeout(0.05)
    count = filled = 0
    cpu = time.process_time()
    start = time.monotonic()
    last = start
    cpu_last = cpu
    sendall(commands.rdy(rdy))
    while True:
        try:
            nread = recv_into(view[filled:])
        except TimeoutError:  # only with a counter (the socket's timeout is set for it)
            if counter is not None and counter.value >= target:
                break
            continue
        if not nread:
            raise BenchError("nsqd closed the connection")
        end = filled + nread
        pos, k = collect_fins(buf, end, fins, sock)
        filled = end - pos
        if filled:
            buf[:filled] = buf[pos:end]
        if k:
            sendall(fins_view[: k * FIN_LEN])
            last = time.monotonic()
            cpu_last = time.process_time()
            count += k
            if counter is None:
                total = count
            else:
                with counter.get_lock():
                    counter.value += k
                    total = counter.value
            if total >= target:
                break
    extra = close(sock, buf, filled)
    return {"start": start, "end": last, "messages": count, "extra": extra,
            "cpu": cpu_last - cpu}


def close(sock: socket.socket, buf: bytearray, filled: int) -> int:
    """CLS, then read up to CLOSE_WAIT; the message frames seen meanwhile (FINed too)."""
    sock.settimeout(10.0)
    sock.sendall(CLS)
    extra = 0
    pending = bytes(buf[:filled])
    while True:
        frame_type, data, pending = next_frame(sock, pending,
                                               "nsqd closed the connection before CLOSE_WAIT")
        if frame_type == TYPE_MESSAGE:
            extra += 1
            sock.sendall(commands.fin(data[10:26]))
        elif frame_type == TYPE_RESPONSE and data == HEARTBEAT:
            sock.sendall(NOP)
        elif frame_type == TYPE_RESPONSE and data == b"CLOSE_WAIT":
            return extra
        else:
            raise BenchError(f"unexpected frame {frame_type} while closing: {data!r}")


# -- process entry point ---------------------------------------------------------------------

def worker_main(conn: Any, go: Any, params: dict[str, Any], counter: Any = None) -> None:
    """Run one client: set up, say ready, wait for ``go``, run, send the result on ``conn``.

    ``params["client"] == "library"`` runs the ``nsq_client`` version (``bench.library``).
    """
    sock: socket.socket | None = None
    try:
        role = params["role"]
        if params.get("client", "raw") == "library":
            from . import library  # Trio and nsq_client: only in the library's processes

            conn.send(("done", library.run(conn, go, params, counter)))
            return
        sock = connect(params["address"])
        identify(sock, role, params.get("output_buffer_timeout", 0))
        if role in ("mpub", "pub"):
            cmd = publish_command(role, params["topic"], b"x" * params["size"], params["batch"])
        else:
            subscribe(sock, params["topic"], params["channel"])
        conn.send(("ready", None))
        if not go.wait(START_TIMEOUT):
            raise BenchError("no start signal")
        if role in ("mpub", "pub"):
            start, end, cpu = publish(sock, cmd, params["units"], params["per_send"],
                                      params["window"])
            result = {"start": start, "end": end, "cpu": cpu,
                      "messages": params["units"] * params["per_unit"]}
        else:
            result = consume(sock, params["rdy"], params["target"], counter, params["size"])
        conn.send(("done", result))
    except BaseException as exc:
        said = nsqd_said(sock) if isinstance(exc, OSError) and sock is not None else ""
        if said:
            text = f"{params.get('role')}: nsqd said {said} ({exc!r})"
        elif isinstance(exc, BenchError):
            text = f"{params.get('role')}: {exc}"
        else:
            text = f"{params.get('role')}: {exc!r}\n{traceback.format_exc()}"
        if params.get("client", "raw") != "raw":
            text = f"({params['client']}) {text}"
        conn.send(("error", text))
    finally:
        if sock is not None:
            sock.close()
        conn.close()
