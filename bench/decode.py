"""What the client library costs per read from nsqd, in one process, no sockets: the bytes of
a read handed to a connection's decoding (``Connection._feed``: frames decoded, messages
built, answers counted and reported to a handler that does nothing).

    .venv/bin/python -m bench.decode

Inputs: two 64 KiB reads of 134-byte message frames (a frame cut between them), a read of 200
``OK`` frames (pipelined publishes), a lone ``OK`` (a stop-and-wait publish) and a 1 MiB
message frame over 17 reads. Each is timed 5 times; the best is printed. It reaches into the
connection (``_feed``) so that the same script times earlier versions of the client, whose
decoding had no public entry either: run it with their ``nsq_common`` and ``nsq_client``
first on ``PYTHONPATH``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nsq_client import Config
from nsq_client._conn import Connection
from nsq_client._message import Message
from nsq_common import OK_FRAME, FrameDecoder, encode_message_frame


class _Counts:
    """A connection handler that counts what it is told."""

    def __init__(self) -> None:
        self.messages = 0
        self.oks = 0

    def on_messages(self, conn: Any, messages: list[Any]) -> None:
        self.messages += len(messages)

    def on_ok(self, conn: Any, count: int) -> None:
        self.oks += count

    def on_response(self, conn: Any, data: bytes) -> None: ...
    def on_error(self, conn: Any, error: Any) -> None: ...
    def on_answered(self, conn: Any, signal: Any) -> None: ...
    def on_finished(self, conn: Any) -> None: ...
    def on_close(self, conn: Any) -> None: ...


def _reads() -> dict[str, tuple[list[bytes], int, int]]:
    """Each input: its reads, and the messages and OKs they hold."""
    frame = encode_message_frame(1, 1, b"0123456789abcdef", b"x" * 100)
    n = 65536 // len(frame)
    big = encode_message_frame(1, 1, b"0123456789abcdef", b"y" * (1 << 20))
    return {
        f"sub: 2 reads of 64 KiB, {2 * n} message frames of {len(frame)} bytes":
            ([frame * n + frame[:50], frame[50:] + frame * (n - 1)], 2 * n, 0),
        "pub: a read of 200 OK frames": ([OK_FRAME * 200], 0, 200),
        "a lone OK frame": ([OK_FRAME], 0, 1),
        "a 1 MiB message frame over 17 reads":
            ([big[i : i + 65536] for i in range(0, len(big), 65536)], 1, 0),
    }


def _time(feed: Callable[[bytes], None], reads: list[bytes], reps: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            for data in reads:
                feed(data)
        best = min(best, time.perf_counter() - start)
    return best / reps


def main() -> None:
    counts = _Counts()
    conn = Connection("127.0.0.1:4150", Config(), counts)
    conn.write = lambda data: None  # type: ignore[method-assign]  # heartbeats: not timed
    if hasattr(conn, "_decoder"):  # set up by run() since the shared decoder
        conn._decoder = FrameDecoder(0, message=Message, context=conn)
    for name, (reads, messages, oks) in _reads().items():
        reps = max(1, 2_000_000 // sum(map(len, reads)))
        counts.messages = counts.oks = 0
        for data in reads:
            conn._feed(data)
        assert (counts.messages, counts.oks) == (messages, oks), name
        print(f"{name}: {_time(conn._feed, reads, reps) * 1e6:.2f} µs")


if __name__ == "__main__":
    main()
