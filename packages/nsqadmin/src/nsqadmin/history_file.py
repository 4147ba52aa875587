"""``--history-file``: the graphs' history kept across restarts.

The file is gzip-compressed JSON (``zcat FILE`` shows it): ``{"version": 1, "saved": <unix
time>, "series": [{"key": [metric, topic, channel, node], "tiers": [[times, values] x 3]}],
"counters": [[metric, topic, channel, node, part, last count, seen at], ...]}`` (a part: the nsqd
or, in a node's series, "<nsqd> <topic>", whose counter it is), where times and
values are base64 of little-endian float64 arrays: encoding and decoding are then memory copies
done in C (a full history of 1,000 series in a fraction of a second, instead of seconds of
holding the GIL turning 2.6 million numbers into text and back).

It is written every ``--history-save-interval`` and when nsqadmin stops, to ``FILE.tmp`` first,
flushed to disk and renamed over ``FILE``, so a crash mid-write leaves the previous file whole.
The state is copied in the event loop (one consistent snapshot, a memory copy); encoding,
compressing and writing happen in a worker thread. A file that cannot be read or parsed is
logged and ignored: nsqadmin starts with an empty history rather than not at all.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import logging
import sys
import time
from array import array
from pathlib import Path
from typing import Any

import trio
from nsq_common import write_atomically

from .history import History

log = logging.getLogger("nsqadmin")
VERSION = 1


def encode(state: dict[str, Any], saved: float) -> bytes:
    """The file's bytes for a ``History.dump()``."""
    for entry in state["series"]:
        entry["tiers"] = [[_pack(times), _pack(values)] for times, values in entry["tiers"]]
    document = {"version": VERSION, "saved": saved, **state}
    text = json.dumps(document, separators=(",", ":"))
    return gzip.compress(text.encode(), compresslevel=1, mtime=0)


def _pack(numbers: array[float]) -> str:
    if sys.byteorder != "little":
        numbers = array("d", numbers)
        numbers.byteswap()
    return base64.b64encode(numbers.tobytes()).decode("ascii")


def unpack(text: str) -> array[float]:
    """
    Raises:
        ValueError: not base64 of float64s.
    """
    numbers = array("d")
    try:
        numbers.frombytes(base64.b64decode(text, validate=True))
    except (TypeError, binascii.Error) as exc:
        raise ValueError(f"bad numbers ({exc})") from None
    if sys.byteorder != "little":
        numbers.byteswap()
    return numbers


def decode(data: bytes) -> dict[str, Any]:
    """
    Raises:
        ValueError: not a history file of this version.
    """
    try:
        document = json.loads(gzip.decompress(data))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a history file ({exc})") from None
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise ValueError("not a history file of version 1")
    for entry in document.get("series") or ():
        if isinstance(entry, dict) and isinstance(entry.get("tiers"), list):
            entry["tiers"] = [[unpack(times), unpack(values)] for times, values in entry["tiers"]]
    return document


def load(history: History, path: str) -> int:
    """Restore ``history`` from ``path`` (missing: nothing to do); returns the series count."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        log.warning("history: cannot read %s - %s; starting empty", path, exc)
        return 0
    try:
        count = history.restore(decode(data))
    except ValueError as exc:
        log.warning("history: ignoring %s - %s; starting empty", path, exc)
        return 0
    log.info("history: %d series restored from %s", count, path)
    return count


async def save(history: History, path: str) -> bool:
    """Write ``history`` to ``path``; ``False`` (logged) when the file cannot be written."""
    state = history.dump()
    try:
        await trio.to_thread.run_sync(_save_sync, state, Path(path), history.clock())
    except OSError as exc:
        log.error("history: cannot write %s - %s", path, exc)
        return False
    return True


def _save_sync(state: dict[str, Any], path: Path, saved: float) -> None:
    write_atomically(path, encode(state, saved), sync_directory=True)


async def run_saver(history: History, path: str, interval: float) -> None:
    """Save every ``interval`` seconds, and once more when cancelled (shutdown)."""
    try:
        while True:
            await trio.sleep(interval)
            started = time.perf_counter()
            if await save(history, path):
                log.debug("history: saved %d series to %s in %.0f ms", len(history), path,
                          (time.perf_counter() - started) * 1e3)
    finally:
        with trio.CancelScope(shield=True):
            await save(history, path)
