"""A topic log's writes into its segments, and when they are fsynced (docs/design/storage.md).

``LogWriter`` decides how a batch of runs goes to disk: a new segment first when the active one
would pass ``--max-bytes-per-file``; an fsync with the write once ``--sync-every`` records have
been written since the last one (``sync`` does the periodic one, every ``--sync-timeout``);
and, for a small write with neither due, on the Trio thread (a page-cache copy) rather than in
a worker thread. ``LogFiles`` does the file work; ``topiclog`` decides what is written, and
calls this with its I/O lock held.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .logfiles import LogFiles

#: A write this small, with no fsync due, is done on the Trio thread (a page-cache copy).
INLINE_WRITE_BYTES = 256 << 10

#: Runs the file work in a worker thread (``TopicLog._in_thread``: shielded, ``busy`` held).
InThread = Callable[..., Awaitable[Any]]


class LogWriter:
    def __init__(self, files: LogFiles, in_thread: InThread, *, max_bytes_per_file: int,
                 sync_every: int) -> None:
        self.max_bytes_per_file = max_bytes_per_file
        self.sync_every = sync_every
        self._files = files
        self._in_thread = in_thread
        self._since_sync = 0  # records written since the last fsync

    @property
    def unsynced(self) -> bool:
        """Something was written since the last fsync."""
        return bool(self._since_sync) and bool(self._files.segments)

    async def write(self, runs: list[tuple[int, Sequence[bytes]]], *, sync: bool = False
                    ) -> None:
        """Write ``runs`` as one batch each into the active segment (a new one first when it
        is full); fsync when ``sync`` or the sync policy says so.

        Raises:
            OSError: nothing of ``runs`` was written.
        """
        files = self._files
        count = sum(len(r) for _, r in runs)
        nbytes = sum(sum(map(len, r)) for _, r in runs) + 32 * len(runs) + 4 * count
        sync = sync or self._since_sync + count >= self.sync_every
        active = files.segments[-1] if files.segments else None
        roll = active is None or (active.count > 0
                                  and active.size + nbytes > self.max_bytes_per_file)
        if not sync and not roll and nbytes <= INLINE_WRITE_BYTES:
            assert active is not None
            # (on the Trio thread, as ``detach`` is: never at once, so without ``busy``)
            active.append(runs)  # type: ignore[arg-type]
        else:
            await self._in_thread(files.write, runs, roll, sync)
        if sync:
            self._since_sync = 0
        else:
            self._since_sync += count

    async def sync(self) -> None:
        """fsync what was written since the last one (nothing if nothing was).

        Raises:
            OSError: the fsync failed (tried again at the next).
        """
        if self.unsynced:
            await self._in_thread(self._files.sync)
            self._since_sync = 0
