"""Reading Spark's own checkpoint: which batch did the query commit last, and where did our
source's part of it end?

Spark calls a source's ``commit`` lazily, when it plans the next batch, so when a query stops
the source has not been told about the last batch Spark finished. Its checkpoint says it:
``commits/<N>`` exists once batch N is done, and ``offsets/<N>`` holds, after a version line
and a metadata line, one line per source with the end offset it returned. Our offsets carry
the topic and channel, which tells our line from another source's.
"""

from __future__ import annotations

import json
from pathlib import Path


def _batch_ids(directory: Path) -> list[int]:
    try:
        return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return []


def committed_end(checkpoint: str, topic: str, channel: str) -> int | None:
    """The end offset of the last batch the query committed, or None if it committed none
    (or the checkpoint is not a local directory this process can read)."""
    root = Path(checkpoint.removeprefix("file://").removeprefix("file:"))
    for batch in reversed(_batch_ids(root / "commits")):
        try:
            lines = (root / "offsets" / str(batch)).read_text().splitlines()
        except FileNotFoundError:
            continue
        for line in lines[2:]:
            try:
                offset = json.loads(line)
            except ValueError:
                continue
            if (isinstance(offset, dict) and offset.get("topic") == topic
                    and offset.get("channel") == channel):
                return int(offset["offset"])
        return None
    return None
