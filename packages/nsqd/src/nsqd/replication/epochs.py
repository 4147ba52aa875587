"""A replica's leader-epoch file (docs/design/replication.md, "The leader epoch on disk",
Kafka's KIP-101): ``<topic directory>/epochs``, one line ``<epoch> <start offset>`` per
epoch, the first offset written at it, in increasing order of both.

Rewritten whole (temp file, fsync, rename, fsync of the directory) when a line is added or
the log is cut back; small (a line per leadership change). An unreadable file is logged and
read as empty: the replica then asks its leader as one with no epoch (it fetches on from its
end, and never leads before it is in the ISR again).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..gofiles import sync_path

log = logging.getLogger("nsqd")

NAME = "epochs"


class Epochs:
    def __init__(self, directory: Path | None) -> None:
        self.path = directory / NAME if directory is not None else None
        self.lines: list[tuple[int, int]] = []

    def load(self) -> Epochs:
        if self.path is None or not self.path.exists():
            return self
        try:
            lines = [tuple(map(int, line.split())) for line in self.path.read_text().split("\n")
                     if line.strip()]
            if any(len(line) != 2 for line in lines):
                raise ValueError("a line is not two numbers")
            self.lines = [(e, s) for e, s in lines]
        except (OSError, ValueError) as exc:
            log.error("replication: %s unreadable, read as empty - %s", self.path, exc)
            self.lines = []
        return self

    @property
    def latest(self) -> int:
        """The last epoch written at (0: none)."""
        return self.lines[-1][0] if self.lines else 0

    def start_of(self, epoch: int) -> int | None:
        for e, start in self.lines:
            if e == epoch:
                return start
        return None

    def add(self, epoch: int, start: int) -> bool:
        """Writing at ``epoch`` begins at ``start``: a line, unless an epoch as high is there
        already. Whether one was added.

        Raises:
            OSError: it could not be written (the lines are as they were).
        """
        if epoch <= self.latest:
            return False
        start = max(start, self.lines[-1][1]) if self.lines else start
        self._write([*self.lines, (epoch, start)])
        return True

    def mark(self) -> None:
        """The file written (empty) if it does not exist: the mark of a topic that is a
        replica here, before any line.

        Raises:
            OSError: it could not be written.
        """
        if self.path is not None and not self.path.exists():
            self._write(self.lines)

    def end_of(self, epoch: int, log_end: int) -> tuple[int, int]:
        """``EPOCH_END(epoch)`` on a leader: the highest epoch held at or below ``epoch``,
        and where it ends (the next epoch's start, or ``log_end`` for the last). (0, the
        first start or ``log_end``) when none is that low."""
        found = None
        for i, (e, _) in enumerate(self.lines):
            if e > epoch:
                if found is None:
                    return 0, self.lines[0][1]
                return found, self.lines[i][1]
            found = e
        return (found, log_end) if found is not None else (0, log_end)

    def cut(self, offset: int) -> None:
        """The log was cut back to ``offset``: lines starting at or past it go.

        Raises:
            OSError: it could not be written.
        """
        kept = [(e, s) for e, s in self.lines if s < offset]
        if kept != self.lines:
            self._write(kept)

    def _write(self, lines: list[tuple[int, int]]) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temp = self.path.with_name(NAME + ".tmp")
            with open(temp, "w") as f:
                f.write("".join(f"{e} {s}\n" for e, s in lines))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, self.path)
            sync_path(self.path.parent)
        self.lines = lines
