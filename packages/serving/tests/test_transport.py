"""SocketTransport over a real socket pair: reads that find bytes waiting yield to the
scheduler every READY_READS-th time in a row, so other tasks still run."""

from __future__ import annotations

import socket

import trio
from nsq_serving._transport import READY_READS, SocketTransport


async def _append(ran: list[int], value: int) -> None:
    ran.append(value)


async def _send(sock: socket.socket, data: bytes) -> None:
    sock.send(data)


async def test_ready_reads_let_other_tasks_run_every_few_reads() -> None:
    ours, theirs = socket.socketpair()  # theirs: a plain socket, its sends never yield
    transport = SocketTransport(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
    ran: list[int] = []
    try:
        async with trio.open_nursery() as nursery:
            for round_ in range(2):
                nursery.start_soon(_append, ran, round_)
                for i in range(READY_READS):
                    assert ran == list(range(round_)), i  # not yet: no read has yielded
                    theirs.send(b"x")
                    assert await transport.receive() == b"x"
                assert ran == list(range(round_ + 1))  # the last read in a row yielded
    finally:
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
