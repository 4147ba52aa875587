"""NsqLogFormatter: Go's log layout, its date and time text made once a second (a fake clock:
records stamped with chosen times, the converter counting its calls; no sleeps)."""

import logging
import random
import sys
import time
from datetime import datetime

import pytest
from nsq_common import NsqLogFormatter
from nsq_testing.clock import FakeClock, S


def _record(created: float, message: str = "hello %s", level: int = logging.INFO,
            ) -> logging.LogRecord:
    record = logging.LogRecord("nsqd", level, "", 0, message, ("there",), None)
    record.created = created
    return record


def _expected(created: float, rest: str) -> str:
    """The line as the formatter made it before its cache: ``datetime`` for every line."""
    when = datetime.fromtimestamp(created).strftime("%Y/%m/%d %H:%M:%S.%f")
    return f"[nsqd] {when} {rest}"


class _CountingConverter:
    def __init__(self) -> None:
        self.calls: list[float | None] = []

    def __call__(self, seconds: float | None) -> time.struct_time:
        self.calls.append(seconds)
        return time.localtime(seconds)


def test_layout_and_levels() -> None:
    formatter = NsqLogFormatter("[nsqd] ")
    created = FakeClock().now / S + 0.123456
    assert formatter.format(_record(created)) == _expected(created, "INFO: hello there")
    assert formatter.format(_record(created, level=logging.WARNING)) == _expected(
        created, "WARNING: hello there")
    assert formatter.format(_record(created, level=logging.CRITICAL)) == _expected(
        created, "FATAL: hello there")


def test_date_and_time_text_made_once_a_second() -> None:
    clock = FakeClock()
    formatter = NsqLogFormatter("[nsqd] ")
    formatter.converter = converter = _CountingConverter()
    lines = []
    for _ in range(25):  # 2.5 seconds of lines, 100 ms apart
        lines.append(formatter.format(_record(clock.now / S)))
        clock.advance(0.1)
    assert converter.calls == [1_700_000_000, 1_700_000_001, 1_700_000_002]
    assert lines[0] == _expected(1_700_000_000.0, "INFO: hello there")
    assert lines[-1] == _expected(1_700_000_002.4, "INFO: hello there")


def test_a_fraction_rounded_into_the_next_second() -> None:
    formatter = NsqLogFormatter("[nsqd] ")
    created = 1_700_000_000.9999996
    assert formatter.format(_record(created)) == _expected(created, "INFO: hello there")
    assert ".000000 " in formatter.format(_record(created))


def test_same_text_as_datetime_for_any_time() -> None:
    formatter = NsqLogFormatter("[nsqd] ")
    rng = random.Random(7)
    times = sorted(rng.uniform(0, 4e9) for _ in range(2000))
    times += [t + 0.5e-6 for t in times[:200]] + [1.5, 1e9 + 0.0000005, 1e9 + 0.0000015]
    for created in times:
        assert formatter.format(_record(created)) == _expected(created, "INFO: hello there")


def test_exception_text_follows_the_line() -> None:
    formatter = NsqLogFormatter("[nsqd] ")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = _record(1_700_000_000.0, level=logging.ERROR)
        record.exc_info = sys.exc_info()
    text = formatter.format(record)
    assert text.startswith(_expected(1_700_000_000.0, "ERROR: hello there\nTraceback"))
    assert text.endswith("RuntimeError: boom")


@pytest.mark.parametrize("created", [-0.25, -1.0000004])
def test_before_1970(created: float) -> None:
    assert NsqLogFormatter("[nsqd] ").format(_record(created)) == _expected(
        created, "INFO: hello there")


def test_line_without_a_record() -> None:
    formatter = NsqLogFormatter("[nsqlookupd] ")
    assert formatter.line(1_700_000_000.5, logging.WARNING, "x") == (
        f"[nsqlookupd] {datetime.fromtimestamp(1_700_000_000.5):%Y/%m/%d %H:%M:%S.%f} WARNING: x")
    assert formatter.line(1_700_000_000.5, 25, "x").endswith(" Level 25: x")
