"""go-nsq's read and write deadlines for a connection, kept by one task.

A cancel scope per read and per write costs more than the I/O on a busy connection, so
instead a watchdog looks a few times per timeout how long the last read and the current send
have been waiting, and fails the connection when one waited too long: ``read_timeout`` without
a byte (nsqd heartbeats every 30 s by default) or a send not done within ``write_timeout``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio


def timeout(seconds: float) -> float:
    """A configured timeout, 0 or less meaning none."""
    return seconds if seconds > 0 else math.inf


async def watchdog(read_timeout: float, write_timeout: float, last_read: Callable[[], float],
                   send_started: Callable[[], float | None],
                   fail: Callable[[BaseException], None]) -> None:
    """Run until cancelled.

    Args:
        read_timeout, write_timeout: seconds (``math.inf``: none).
        last_read: when the last bytes arrived (``trio.current_time()``).
        send_started: when the send in progress started; None when nothing is being sent.
        fail: called with ``trio.TooSlowError`` when a deadline passed.
    """
    tick = min(read_timeout, write_timeout) / 4
    while True:
        await trio.sleep(tick)
        now = trio.current_time()
        started = send_started()
        if now - last_read() > read_timeout:
            fail(trio.TooSlowError(f"no data for {read_timeout:g}s"))
        elif started is not None and now - started > write_timeout:
            fail(trio.TooSlowError(f"write timed out after {write_timeout:g}s"))
