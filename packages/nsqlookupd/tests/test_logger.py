"""The logger: NSQ's line format, and lines of one scheduler pass written together."""

import io
import re

import trio
import trio.testing
from nsqlookupd.logger import Logger, LogLevel

LINE = re.compile(r"\[nsqlookupd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} (INFO|WARNING): .*")


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_lines_in_nsq_format_below_the_level_dropped():
    stream = CountingStream()
    log = Logger(level=LogLevel.INFO, stream=stream)
    log.debug("hidden")
    log.info("one")
    log.warn("two")
    lines = stream.getvalue().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == ["one", "two"]
    assert all(LINE.fullmatch(line) for line in lines)
    assert stream.writes == 2  # without the batching task, one write per line


async def test_lines_logged_in_one_pass_are_written_together_and_none_is_lost():
    stream = CountingStream()
    log = Logger(stream=stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(log.write_batched)
        await trio.testing.wait_all_tasks_blocked()
        for n in range(5):
            log.info(f"request {n}")
        assert stream.getvalue() == ""  # waiting for the writer task
        await trio.testing.wait_all_tasks_blocked()
        assert stream.writes == 1
        assert [line.rsplit(" ", 1)[1] for line in stream.getvalue().splitlines()] == [
            "0", "1", "2", "3", "4"]
        log.info("last")  # pending when the writer is cancelled: written then
        nursery.cancel_scope.cancel()
    assert stream.getvalue().splitlines()[-1].endswith("INFO: last")
    log.info("after")  # no writer any more: written at once
    assert stream.getvalue().splitlines()[-1].endswith("INFO: after")
