"""``python -m bench.segment``: a topic log segment's append and read, in process, no server.

    .venv/bin/python -m bench.segment [--records N] [--size 100] [--vary 0] [--batches 1,200,2500]
                                      [--sync] [--repeat 3] [--json]

For each batch size: ``--records`` records of ``--size`` bytes (NSQ records: a timestamp,
attempts, an id and a body; with ``--vary``, sizes spread over ``--size`` to ``--size +
vary``: reads then parse record by record, where records of one size are sliced in one
comprehension) are appended to a fresh segment in a temporary directory, one batch per
``append()`` (the log writes what it holds past its memory tail as one batch); then read back
from offset 0 to the end in ``read(offset, 1 MiB)`` steps (the read-ahead's size); then the
segment is opened again by scanning it (the active one at start) and from its ``.index`` (a
closed one). Appends go to the page cache (``--sync``: an fdatasync after each, as
``--sync-every=1``). Each is timed ``--repeat`` times and the best kept: records/s and MB/s
of records from the wall time, us per record (per batch for the scan) and the opens' ms from
the CPU time (user + system) of this process, which a busy machine does not inflate.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

from nsqd.segment import Segment

MIB = 1 << 20


def _records(n: int, size: int, vary: int) -> list[bytes]:
    stamp = time.time_ns()
    head = struct.Struct(">qH16s")
    body = b"b" * (size - head.size + vary)
    return [head.pack(stamp + i, 0, b"%016x" % i) + body[: size - head.size + i * 7919 % (vary + 1)]
            for i in range(n)]


def _best(repeat: int, setup: Any, action: Any) -> tuple[float, float]:
    """The best (wall, CPU) seconds of ``repeat`` runs of ``action(setup())``, each the least
    of its kind: on a shared machine the wall time includes waiting for a CPU."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        state = setup()
        start, start_cpu = time.perf_counter(), time.process_time()
        action(state)
        cpu = min(cpu, time.process_time() - start_cpu)
        wall = min(wall, time.perf_counter() - start)
    return wall, cpu


def run(records: int, size: int, batch: int, repeat: int, sync: bool, vary: int = 0) -> dict[str, Any]:
    data = _records(records, size, vary)
    batches = [(i, data[i : i + batch]) for i in range(0, records, batch)]
    work = Path(tempfile.mkdtemp(prefix="bench-segment-"))
    try:
        state: dict[str, Segment] = {}

        def fresh() -> Segment:
            if "seg" in state:
                state["seg"].remove()
            state["seg"] = Segment.create(work, 0)
            return state["seg"]

        def append_all(seg: Segment) -> None:
            append = seg.append
            for b in batches:
                append([b])
                if sync:
                    seg.sync()

        t_append = _best(repeat, fresh, append_all)
        seg = state["seg"]
        file_bytes = seg.size

        def read_all(seg: Segment) -> None:
            offset, got = 0, 0
            while True:
                runs = seg.read(offset, MIB)
                if not runs:
                    break
                first, recs = runs[-1]
                offset = first + len(recs)
                got += sum(len(r) for _, r in runs)
            assert got == records, got

        t_read = _best(repeat, lambda: seg, read_all)
        seg.write_index()
        seg.close()
        opened: list[Segment] = []

        def open_as(active: bool) -> Any:
            def action(_: object) -> None:
                opened.append(Segment.open(seg.path, active=active))
            return action

        def reset() -> None:
            while opened:
                opened.pop().close()

        t_index = _best(repeat, reset, open_as(False))
        reset()
        t_scan = _best(1, reset, open_as(True))  # it removes the index: once, last
        reset()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mb = sum(map(len, data)) / 1e6
    nbatches = len(batches)
    return {
        "batch": batch,
        "file_mb": round(file_bytes / 1e6, 1),
        "append_rec_s": round(records / t_append[0]),
        "append_mb_s": round(mb / t_append[0], 1),
        "append_us_rec": round(t_append[1] / records * 1e6, 3),
        "read_rec_s": round(records / t_read[0]),
        "read_mb_s": round(mb / t_read[0], 1),
        "read_us_rec": round(t_read[1] / records * 1e6, 3),
        "scan_ms": round(t_scan[1] * 1e3, 1),
        "scan_us_batch": round(t_scan[1] / nbatches * 1e6, 3),
        "index_ms": round(t_index[1] * 1e3, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=100, help="record size in bytes (>= 26)")
    parser.add_argument("--vary", type=int, default=0,
                        help="records of sizes from --size to --size + VARY (spread evenly)")
    parser.add_argument("--batches", default="1,200,2500", help="records per batch, comma separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sync", action="store_true", help="fdatasync after every append")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args()
    if args.size < 26:
        parser.error("--size must be at least 26 (an NSQ record's header)")
    columns = ["batch", "file_mb", "append_rec_s", "append_mb_s", "append_us_rec", "read_rec_s",
               "read_mb_s", "read_us_rec", "scan_ms", "scan_us_batch", "index_ms"]
    if not args.json:
        sizes = f"{args.size}-{args.size + args.vary}" if args.vary else f"{args.size}"
        print(f"{args.records} records of {sizes} B{', fdatasync per append' if args.sync else ''}"
              "; records/s and MB/s by the wall clock, us and ms of CPU")
        print("  ".join(f"{c:>13}" for c in columns))
    for batch in (int(b) for b in args.batches.split(",") if b):
        records = args.records if not args.sync else min(args.records, 20_000 * batch)
        result = run(records, args.size, batch, args.repeat, args.sync, args.vary)
        if args.json:
            print(json.dumps(result))
        else:
            print("  ".join(f"{result[c]:>13}" for c in columns))


if __name__ == "__main__":
    main()
