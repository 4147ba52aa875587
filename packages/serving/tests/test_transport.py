"""SocketTransport over a real socket pair: reads that find bytes waiting yield to the
scheduler every READY_READS-th time in a row (counted by an instrument: Trio's order of
runnable tasks is random), so other tasks still run."""

from __future__ import annotations

import socket

import trio
from nsq_serving._transport import READY_READS, SocketTransport


class _Steps(trio.abc.Instrument):
    """Counts the times Trio resumes one task (each schedule point it passes is one)."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def _send(sock: socket.socket, data: bytes) -> None:
    sock.send(data)


async def test_ready_reads_yield_every_few_reads() -> None:
    ours, theirs = socket.socketpair()  # theirs: a plain socket, its sends never yield
    transport = SocketTransport(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
    steps = _Steps(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(steps)
    try:
        for _ in range(2):
            before = steps.steps
            for i in range(READY_READS):
                theirs.send(b"x")
                assert await transport.receive() == b"x"
                # no schedule point until the READY_READS-th read in a row, then one
                assert steps.steps == before + (i == READY_READS - 1), i
    finally:
        trio.lowlevel.remove_instrument(steps)
        theirs.close()
        await transport.aclose()


async def test_a_read_that_waits_starts_the_count_again() -> None:
    ours, theirs = socket.socketpair()  # theirs: a plain socket, its sends never yield
    transport = SocketTransport(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
    try:
        async with trio.open_nursery() as nursery:
            for _ in range(READY_READS - 1):
                theirs.send(b"x")
                await transport.receive()
            nursery.start_soon(_send, theirs, b"y")
            assert await transport.receive() == b"y"  # waited: the sender ran meanwhile
            assert transport.ready_reads == 0
    finally:
        theirs.close()
        await transport.aclose()
