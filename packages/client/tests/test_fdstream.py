"""FdStream (raw socket I/O behind a trio.abc.Stream) and the write queue, over a socket pair."""

import trio
import trio.testing
from nsq_client._fdstream import FdStream
from nsq_client._watchdog import watchdog
from nsq_client._writer import WriteQueue


async def socket_pair(lendable: bool = False) -> tuple[FdStream, trio.SocketStream]:
    a, b = trio.socket.socketpair()
    return FdStream(trio.SocketStream(a), lendable=lendable), trio.SocketStream(b)


async def test_bytes_go_both_ways() -> None:
    ours, peer = await socket_pair()
    async with ours, peer:
        got = b""
        async with trio.open_nursery() as nursery:
            async def read_all() -> None:
                nonlocal got
                while len(got) < 500_000:
                    got += await peer.receive_some(65536)
            nursery.start_soon(read_all)
            await ours.send_all(b"hello" * 100_000)  # more than the kernel takes at once
        assert got == b"hello" * 100_000
        await peer.send_all(b"answer")
        assert await ours.receive_some() == b"answer"
        assert ours.send_nowait(b"now") == 3
        assert await peer.receive_some() == b"now"


async def test_a_lent_socket_is_read_by_the_borrower_while_the_owner_waits() -> None:
    ours, peer = await socket_pair(lendable=True)
    async with ours, peer:
        owner_got: list[bytes] = []
        async with trio.open_nursery() as nursery:
            async def owner() -> None:
                owner_got.append(await ours.receive_some())
            nursery.start_soon(owner)
            await trio.testing.wait_all_tasks_blocked()
            assert ours.lend() and ours.lent
            assert not ours.lend()  # one borrower at a time
            await peer.send_all(b"for the borrower")
            assert await ours.receive_lent() == b"for the borrower"
            ours.give_back()
            assert not ours.lent
            await peer.send_all(b"for the owner")
        assert owner_got == [b"for the owner"]


async def test_the_write_queue_joins_fins_and_writes_in_order() -> None:
    ours, peer = await socket_pair()
    failures: list[BaseException] = []
    async with ours, peer:
        queue = WriteQueue(failures.append)
        queue.stream = ours
        queue.fin(b"a" * 16)
        queue.fin(b"b" * 16)
        queue.write(b"RDY 1\n")
        assert not queue.empty
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.run)
            queue.finish()  # flush, then end
        assert queue.empty
        expected = b"FIN " + b"a" * 16 + b"\nFIN " + b"b" * 16 + b"\nRDY 1\n"
        assert await peer.receive_some() == expected
        queue.write_through(b"NOP\n")  # nothing queued: straight to the kernel
        assert await peer.receive_some() == b"NOP\n"
    assert failures == []


async def test_the_watchdog_fails_a_silent_connection(autojump_clock: trio.abc.Clock) -> None:
    failures: list[BaseException] = []
    start = trio.current_time()
    with trio.move_on_after(100):
        await watchdog(5.0, 10.0, lambda: start, lambda: None, failures.append)
    assert failures and all(isinstance(f, trio.TooSlowError) for f in failures)
    assert str(failures[0]) == "no data for 5s"
