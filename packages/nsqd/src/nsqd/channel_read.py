"""Reading a channel's topic log from its cursor: the records it takes next, without those it
passes over (acknowledged, held ahead, still in flight from before a rewind), and what it
would take next, without taking (peek). Records only: what becomes of each message is
``channel_state``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .runs import cut, pass_gaps, without_acked

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .cursor import Cursor
    from .inflight import InFlightQueue
    from .message import QueuedMessage
    from .runs import Run
    from .topiclog import TopicLog


class Source(Protocol):
    """What a channel needs of its topic: the log, and how far it may read in it."""

    name: str
    log: TopicLog
    sync_every: int

    @property
    def visible_end(self) -> int:
        """The log's end, or where the topic was paused."""
        ...

    @property
    def delivers_own(self) -> bool:
        """Whether its channels' own queues may be delivered from (``Topic.delivers_own``)."""
        ...

    def persist_soon(self) -> None: ...

    async def persist_cursors(self, *, in_flight: bool = False) -> None: ...


class LogReader:
    """A channel's reading of its topic's log, from its cursor's read position."""

    def __init__(self, topic: Source, cursor: Cursor, in_flight: InFlightQueue, *,
                 ephemeral: bool, mem_queue_size: int) -> None:
        self.topic = topic
        self.cursor = cursor
        self.in_flight = in_flight
        self.ephemeral = ephemeral
        self.mem_queue_size = mem_queue_size
        # A rewind while messages of the log are in flight: their offsets (to their ids). A
        # record read again while its message is still in flight is passed over (its one
        # copy is the one in flight, which its FIN acknowledges or its timeout requeues); one
        # coming back before the cursor reads it again is dropped (the log delivers it).
        self.rewound: dict[int, bytes] = {}

    def read(self, n: int) -> list[Run] | None:
        """Up to ``n`` records from the cursor on, the cursor moved past them (those it
        passes over skipped: acknowledged, or held ahead); empty at the end of what it may
        read; None while they are read from disk (the log wakes the channel)."""
        cursor = self.cursor
        log = self.topic.log
        end = self.topic.visible_end
        while True:
            read = cursor.read
            if read >= end:
                return []
            if self.ephemeral and end - read > self.mem_queue_size:
                read = end - self.mem_queue_size  # past its memory: dropped
                cursor.advance_read(read)
            runs = log.read(read, min(n, end - read))
            if not runs:
                if runs is not None:  # never stored (lost to a crash or a torn write): passed
                    cursor.skip(read, end)
                    cursor.advance_read(end)
                return runs
            last_first, last_records, _ = runs[-1]
            stop = last_first + len(last_records)
            if stop > end:  # never past where the topic was paused
                runs = cut(runs, end)
                stop = end
                if not runs:  # nothing stored before it (a crash's gap): passed
                    cursor.skip(read, end)
                    cursor.advance_read(end)
                    return []
            if runs[0][0] > read or len(runs) > 1:
                pass_gaps(runs, read, cursor)
            cursor.advance_read(stop)
            if self.rewound:
                runs = self._without_in_flight(runs)
            acked = cursor.acked
            if not cursor.ahead and not (acked and acked.count_in(read, stop)):
                if runs:
                    return runs
                continue
            runs = without_acked(runs, cursor)
            cursor.passed(stop)
            if runs:
                return runs

    def _without_in_flight(self, runs: list[Run]) -> list[Run]:
        """``runs`` without the records whose messages are still in flight from before a
        rewind (see ``rewound``)."""
        rewound = self.rewound
        out: list[Run] = []
        for first, records, plain in runs:
            start = 0
            for i in range(len(records)):
                message_id = rewound.pop(first + i, None)
                if message_id is not None and message_id in self.in_flight:
                    if i > start:
                        out.append((first + start, records[start:i], plain))
                    start = i + 1
            if start < len(records):
                out.append((first + start, records[start:] if start else records, plain))
        return out

    def unread(self, batch: int) -> Iterator[Run]:
        """The records the cursor has not reached yet that are in memory, without those it
        passes over (acknowledged, or held ahead), read ``batch`` at a time as they are
        asked for (never reads the disk, never moves the cursor): so a look at the next n
        finds n however many records held ahead stand among them."""
        cursor = self.cursor
        end = self.topic.visible_end
        log = self.topic.log
        read = cursor.read
        while read < end:
            runs = log.read(read, min(batch, end - read))
            if not runs:
                return
            runs = cut(runs, end)
            if not runs:
                return
            last_first, last_records, _ = runs[-1]
            read = last_first + len(last_records)
            if cursor.acked or cursor.ahead:
                runs = without_acked(runs, cursor)
            yield from runs

    def coming_back(self, msgs: list[QueuedMessage]) -> list[QueuedMessage]:
        """Of ``msgs``, coming back to wait, those the log will not deliver again (see
        ``rewound``)."""
        rewound = self.rewound
        if not rewound:
            return msgs
        read = self.cursor.read
        return [m for m in msgs if m.offset < read or rewound.pop(m.offset, None) is None]

    def forget_rewound(self) -> None:
        self.rewound.clear()

    def rewind(self, offset: int) -> None:
        """Read again from ``offset``: every position of the cursor there, what is in flight
        from it on passed over when read again (see ``rewound``)."""
        self.rewound = {o: i for o, i in self.in_flight.ids_by_offset() if o >= offset}
        self.cursor.move_to(offset)
