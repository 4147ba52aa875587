"""nsqd reads the time only through its one clock (``nsqd.clock``).

The rule, as clock.py states it: no module of nsqd but clock.py reads one of ``time``'s
clocks, ``datetime``'s "now", or Trio's current time (``trio.current_time``,
``trio.lowlevel.current_clock``), whether it calls them or hands them on (``now =
trio.current_time``). Waiting (``trio.sleep``, ``trio.move_on_after``) is Trio's clock, which a
MockClock drives, and is not reading. The check reads the source (nothing is imported), as
tests/integration/test_import_graph.py does for imports; then a broker on a clock whose wall
time the test sets shows that what it stamps and shows comes from that clock.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import httpx
import trio
from nsqd.broker import Broker
from nsqd.guid import TWEPOCH_MS
from nsqd.http_api import build_app
from nsqd.lmstfy import ids
from nsqd.lmstfy.admin import build_admin_app
from nsqd.lmstfy.queues import JobQueues
from nsqd.lmstfy.state import State
from nsqd.lmstfy.throttle import Throttle
from nsqd.options import Options
from nsqd.record import decode_record

SOURCE = Path(__file__).resolve().parents[1] / "src" / "nsqd"
NS = 1_000_000_000

#: What reads the time: every clock of ``time`` (and what formats "now"), datetime's "now",
#: Trio's current time.
READS_TIME = {
    *(f"time.{name}" for name in (
        "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
        "process_time", "process_time_ns", "thread_time", "thread_time_ns", "clock_gettime",
        "clock_gettime_ns", "localtime", "gmtime", "ctime", "asctime", "strftime")),
    "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today",
    "datetime.date.today", "trio.current_time", "trio.lowlevel.current_clock",
}

#: (module, function) -> why it may read the time itself. Each entry must still be needed.
ALLOWED = {
    ("clock.py", "*"): "the one clock",
    ("early_lookup.py", "*"): "the early start's registration runs before Trio and the broker "
                              "exist (plain sockets, a connect deadline of its own)",
    ("lmstfy/ids.py", "request_id"): "an answer's X-Request-ID, made where an lmstfy answer is "
                                     "built, with no broker at hand; nothing reads it back",
}


def _qualified(node: ast.expr, names: dict[str, str]) -> str | None:
    """The dotted name ``node`` stands for (``trio.current_time``), its head resolved through
    the module's imports; None when it is no name of an imported module."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in names:
        return None
    return ".".join([names[node.id], *reversed(parts)])


def time_reads(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, enclosing function's qualified name or ``<module>``, what) of every read of
    the time in ``source``."""
    tree = ast.parse(source)
    names: dict[str, str] = {}  # local name -> the module or object it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    names[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def visit(node: ast.AST, scope: list[str]) -> Iterator[tuple[int, str, str]]:
        where = ".".join(scope) or "<module>"
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in READS_TIME:
                    yield node.lineno, where, f"{node.module}.{alias.name}"
        elif isinstance(node, (ast.Attribute, ast.Name)):
            name = _qualified(node, names)
            if name in READS_TIME:
                yield node.lineno, where, name
                return  # not its parts again
        inner = ([*scope, node.name]
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 else scope)
        for child in ast.iter_child_nodes(node):
            yield from visit(child, inner)

    yield from visit(tree, [])


def test_the_check_finds_every_way_of_reading_the_time() -> None:
    source = """
import time
import time as t
import trio
from datetime import datetime, date
from time import monotonic
from trio import lowlevel

class A:
    def f(self):
        return time.time(), t.time_ns(), datetime.now(), date.today()

    def g(self):
        now = trio.current_time
        return lowlevel.current_clock(), now

def h():
    trio.sleep(1); time.sleep(0); datetime.fromtimestamp(0)  # waiting, converting: no read
"""
    assert sorted(time_reads(source)) == [
        (6, "<module>", "time.monotonic"),
        (11, "A.f", "datetime.date.today"),
        (11, "A.f", "datetime.datetime.now"),
        (11, "A.f", "time.time"),
        (11, "A.f", "time.time_ns"),
        (14, "A.g", "trio.current_time"),
        (15, "A.g", "trio.lowlevel.current_clock"),
    ]


def test_nsqd_reads_the_time_only_through_its_clock() -> None:
    found, used = [], set()
    for path in sorted(SOURCE.rglob("*.py")):
        module = path.relative_to(SOURCE).as_posix()
        for line, where, what in time_reads(path.read_text()):
            key = (module, "*") if (module, "*") in ALLOWED else (module, where)
            if key in ALLOWED:
                used.add(key)
            else:
                found.append(f"{module}:{line} ({where}): {what}")
    assert found == [], "read the broker's clock (nsqd.clock) instead"
    assert set(ALLOWED) - used == set(), "allowed, no longer needed: remove from ALLOWED"


class SetWall:
    """Trio's clock for deadlines (as every ``Clock``), and a wall time the test sets."""

    def __init__(self, wall_ns: int) -> None:
        self.wall = wall_ns

    @staticmethod
    def now() -> float:
        return trio.current_time()

    def wall_ns(self) -> int:
        return self.wall


async def test_what_the_broker_stamps_and_shows_is_its_clock_s(
        nursery: trio.Nursery, tmp_path: Path) -> None:
    """Its start time, a client's connection time, message timestamps and ids, /stats' uptime
    and ages, an lmstfy token's time: each from the broker's clock (not the system's, which
    is years away from this one)."""
    clock = SetWall(1_400_000_000 * NS + 500_000_000)
    broker = Broker(Options.defaults(data_path=str(tmp_path)), clock)
    await nursery.start(broker.run)
    assert broker.start_time == 1_400_000_000
    clock.wall += 90 * NS
    client = broker.new_client("127.0.0.1:5000")
    assert client.connect_ts == 1_400_000_090
    (record,) = broker.new_records([b"a"])
    (msg,) = broker.new_messages([b"b"])
    for stamped in (decode_record(record), msg):
        assert stamped.timestamp == clock.wall
        assert int(stamped.id, 16) >> 22 == clock.wall // 1_000_000 - TWEPOCH_MS
    await broker.publish("t", [msg])
    broker.subscribe(client, "t", "c")
    clock.wall += 60 * NS
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(broker)),
                                 base_url="http://nsqd.test") as http:
        text = (await http.get("/stats")).text
    assert "uptime 2m30s\n" in text
    assert "connected: 1m0s\n" in text
    state = State(str(tmp_path))
    admin = build_admin_app(JobQueues(broker, state), state, Throttle(state.limits, broker.now),
                            {})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=admin),
                                 base_url="http://lmstfy.test") as http:
        token = (await http.post("/token/ns?description=d")).json()["token"]
    raw = ids.decode_ulid(token)
    assert raw is not None and int.from_bytes(raw[:6], "big") == clock.wall // 1_000_000
    broker.remove_client(client)
