"""What the stream reader keeps on the driver between Spark's calls.

:class:`Driver` holds what both ways of reading share: the batches planned and not yet
committed, the ids of recently committed ones (to drop late redeliveries), the batch log, and
a thread that FINishes a batch as soon as Spark's own commit log has it. Its two kinds:

* :class:`TcpDriver`: the driver holds TCP consumers (:mod:`.tcp`) and puts the messages
  themselves in the partitions; works against any nsqd, Go's included.
* :class:`HttpDriver`: the executors pull the messages over HTTP (:mod:`.pull`), when every
  nsqd offers it and the checkpoint is a local path; the driver only plans and finishes.

Spark's calls come from one thread; the watcher and HTTP's toucher are others, so every
public method takes ``lock``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from . import pull, retry
from .batchlog import Batch, BatchLog, Key, Messages, Part
from .discovery import consumes_over_http, topic_nsqd_http
from .errors import BatchLogError, OptionError
from .options import Options
from .sparklog import committed_end
from .touch import touch_all

log = logging.getLogger("nsq_spark")

POLL_WAIT = 0.5  # seconds latestOffset waits for a first message before saying "nothing new"
PARTITION_SIZE = 2000  # messages per input partition (over TCP)
MAX_PARTITIONS = 64
#: Ids of committed messages remembered (to drop their late redeliveries), the newest
#: batches' first: over TCP every committed id (a FIN has no answer), over HTTP only those
#: whose FIN nsqd did not confirm (none, unless nsqd restarted or a timeout passed), which
#: may come back many batches later.
KEEP_COMMITTED_KEYS = 100_000
COMMIT_POLL = 0.25  # seconds between looks at Spark's commit log
DEFAULT_MSG_TIMEOUT = 60.0  # asked of nsqd when the msgTimeout option does not say
DISCOVER_EVERY = 5.0  # seconds between asking (over HTTP) which nsqd have the topic


@dataclass(repr=False)
class MessagesPartition(InputPartition):
    """A slice of one batch's messages, carried to the executor in the partition itself (as
    columns: a few byte strings to pickle, whatever the number of messages)."""

    topic: str
    channel: str
    messages: Messages

    def __repr__(self) -> str:
        return f"MessagesPartition({self.topic}/{self.channel}, {len(self.messages)} messages)"


def open_driver(options: Options) -> Driver:
    """The driver side for these options: over HTTP when it can (``transport`` auto or http)."""
    if options.transport != "tcp":
        reason = HttpDriver.unusable(options)
        if reason is None:
            return HttpDriver(options)
        if options.transport == "http":
            raise OptionError(f"transport http: {reason}")
        log.info("nsq_spark: %s/%s read through TCP consumers on the driver: %s",
                 options.topic, options.channel, reason)
    return TcpDriver(options)


class Driver:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.channel = options.channel or ""
        self.msg_timeout = options.msg_timeout or DEFAULT_MSG_TIMEOUT
        self.log = BatchLog.under_checkpoint(options.checkpoint) if options.checkpoint else None
        if self.log is None:
            log.warning("nsq_spark: no checkpointLocation option for %s/%s: batches are kept in "
                        "memory only; after a driver restart the batch in progress is not "
                        "replayed (its messages are delivered again by nsqd instead)",
                        options.topic, options.channel)
        self.batches: dict[int, Batch] = {}  # end -> planned, not committed
        self.pending: dict[Key, int] = {}  # key -> end of its uncommitted batch
        self.committed_keys: set[Key] = set()
        self.committed_batches: deque[list[Key]] = deque()
        self.remembered = 0  # keys in committed_batches
        self.committed = 0
        if self.log is not None:
            # Spark's commit log may be ahead of ours: the driver died before telling us.
            self.committed = max(self.log.committed(), self._spark_committed() or 0)
            for batch in self.log.batches():
                self._remember(batch, committed=batch.end <= self.committed)
        self.lock = threading.Lock()
        self.closed = threading.Event()

    def start_threads(self) -> None:
        if self.log is not None:
            threading.Thread(target=self._watch, name="nsq-commit-watch", daemon=True).start()

    # -- Spark's calls ---------------------------------------------------------------------------
    def plan(self, start: int, at_most: float, available_now: bool) -> int:
        """Commit what ``start`` says is done, then plan the next batch; its end offset."""
        with self.lock:
            self._commit(start)
            if self.log is not None:
                for dropped in self.log.discard_after(start):
                    self._forget(dropped)
            for end in [e for e in self.batches if e > start]:
                self._forget(self.batches[end])
            batch = self._next_batch(start, at_most, available_now)
            if batch is None:
                return start
            if self.log is not None:
                self.log.write(batch)
            self._remember(batch, committed=False)
            return batch.end

    def partitions(self, start: int, end: int) -> Sequence[InputPartition]:
        with self.lock:
            batch = self._batch(start, end)
            return [] if batch is None else self._partitions(batch)

    def commit(self, end: int) -> None:
        with self.lock:
            self._commit(end)

    def close(self) -> None:
        """FIN what Spark committed without telling us yet, then let go of the rest."""
        try:
            with self.lock:
                self.closed.set()
                if self.log is not None:
                    end = self._spark_committed()
                    if end is not None:
                        self._commit(end)
        finally:
            self._close()

    # -- for the two kinds ------------------------------------------------------------------------
    def _next_batch(self, start: int, at_most: float, available_now: bool) -> Batch | None:
        raise NotImplementedError

    def _partitions(self, batch: Batch) -> list[InputPartition]:
        raise NotImplementedError

    def _finish(self, batches: list[Batch]) -> tuple[list[Key], list[Key]]:
        """FIN the messages of these committed batches; their keys, and the keys of those
        nsqd may still deliver again (no confirmed FIN), to drop if it does."""
        raise NotImplementedError

    def _release(self, batch: Batch) -> None:
        """A batch Spark will never ask for: give back what is held for it."""

    def _close(self) -> None:
        raise NotImplementedError

    # -- bookkeeping --------------------------------------------------------------------------------
    def _remember(self, batch: Batch, *, committed: bool) -> None:
        if committed:
            keys = batch.messages.key_list()
            if self.log is not None and batch.parts:  # pulled over HTTP: in its part files
                keys += [key for _, messages in self.log.pulled(batch)
                         for key in messages.key_list()]
            self._committed_keys(keys)
        else:
            self.batches[batch.end] = batch
            self.pending.update(dict.fromkeys(batch.messages.key_list(), batch.end))

    def _batch(self, start: int, end: int) -> Batch | None:
        """The batch from ``start`` to ``end``: planned in this process, or replayed from the log."""
        if end <= start:
            return None
        batch = self.batches.get(end)
        if batch is None and self.log is not None:
            batch = self.log.read(end)
            if batch is not None:
                self._remember(batch, committed=False)
        if batch is None:
            log.warning("nsq_spark: batch %d..%d of %s/%s is not in the batch log: it is empty "
                        "here, and nsqd delivers its messages again", start, end,
                        self.options.topic, self.options.channel)
            return None
        if batch.start != start:
            raise BatchLogError(f"batch log mismatch: batch ending at {end} starts at "
                                f"{batch.start}, Spark asked for {start}")
        return batch

    def _commit(self, end: int) -> None:
        done = sorted(e for e in self.batches if e <= end)
        if not done and end <= self.committed:
            return
        batches = [self.batches.pop(e) for e in done]
        keys, unconfirmed = self._finish(batches)
        for key in keys:
            self.pending.pop(key, None)
        self._committed_keys(unconfirmed)
        self.committed = max(self.committed, end)
        if self.log is not None:
            self.log.commit(self.committed)

    def _committed_keys(self, keys: list[Key]) -> None:
        self.committed_batches.append(keys)
        self.committed_keys.update(keys)
        self.remembered += len(keys)
        while self.remembered > KEEP_COMMITTED_KEYS and len(self.committed_batches) > 1:
            old = self.committed_batches.popleft()
            self.remembered -= len(old)
            self.committed_keys.difference_update(old)

    def _forget(self, batch: Batch) -> None:
        self.batches.pop(batch.end, None)
        for key in batch.messages.key_list():
            if self.pending.get(key) == batch.end:
                del self.pending[key]
        self._release(batch)

    def _spark_committed(self) -> int | None:
        assert self.options.checkpoint is not None
        return committed_end(self.options.checkpoint, self.options.topic, self.channel)

    def _watch(self) -> None:
        """FIN a batch as soon as Spark's commit log has it, instead of when Spark plans the
        next batch: messages are held for less time, and a query stopped right after a batch
        (whose reader Spark may end without calling ``stop``) leaves nothing committed in flight."""
        while not self.closed.wait(COMMIT_POLL):
            try:
                end = self._spark_committed()
                if end is not None and end > self.committed:
                    with self.lock:
                        if not self.closed.is_set():
                            self._commit(end)
            except Exception:  # the planning thread's next commit covers it
                log.exception("nsq_spark: reading Spark's commit log failed")


class TcpDriver(Driver):
    """The driver holds TCP consumers; partitions carry the messages."""

    def __init__(self, options: Options) -> None:
        from .tcp import TcpConsumers

        super().__init__(options)
        self.deliveries: dict[int, list[Any]] = {}  # end -> live messages to FIN when committed
        # Half of what may be in flight, so the next batch fills while this one is processed.
        self.capacity = max(1, options.max_in_flight // 2)
        self.consumers = TcpConsumers(options, self.msg_timeout)
        log.info("nsq_spark: the driver holds TCP consumers of %s/%s (%s)", options.topic,
                 options.channel, options.sources)
        self.start_threads()

    def _next_batch(self, start: int, at_most: float, available_now: bool) -> Batch | None:
        room = int(min(at_most, self.capacity))
        wait = self.options.idle_timeout if available_now else POLL_WAIT
        taken: list[Any] = []
        while len(taken) < room:
            got = self.consumers.take(room - len(taken), wait, self._accept)
            if not got:
                break
            taken.extend(got)
            if not available_now:
                break
        if not taken:
            return None
        end = start + len(taken)
        self.deliveries[end] = taken
        return Batch(start, end, Messages.of_messages(taken))

    def _accept(self, message: Any) -> bool:
        """Runs on the consumer loop for each message taken (while the planning thread waits
        for it): False keeps a redelivery of an already planned message out of the batch."""
        key = (message.nsqd_address, message.id)
        if key in self.committed_keys:
            message.finish()
            return False
        end = self.pending.get(key)
        if end is not None:
            self.deliveries.setdefault(end, []).append(message)
            return False
        return True

    def _partitions(self, batch: Batch) -> list[InputPartition]:
        messages = batch.messages
        if not len(messages):
            return []
        count = min(MAX_PARTITIONS, math.ceil(len(messages) / PARTITION_SIZE))
        return [MessagesPartition(self.options.topic, self.channel, piece)
                for piece in messages.split(count)]

    def _finish(self, batches: list[Batch]) -> tuple[list[Key], list[Key]]:
        messages: list[Any] = []
        for batch in batches:
            messages.extend(self.deliveries.pop(batch.end, ()))
        self.consumers.finish(messages)
        keys = [key for batch in batches for key in batch.messages.key_list()]
        return keys, keys  # a FIN over TCP has no answer

    def _release(self, batch: Batch) -> None:
        self.consumers.release(self.deliveries.pop(batch.end, ()))

    def _close(self) -> None:
        self.consumers.close()


class HttpDriver(Driver):
    """Executors pull over HTTP; the driver plans parts by depth, TOUCHes and FINishes by id.

    nsqd answers a FIN over HTTP: the ids of a batch it confirmed finished cannot come back,
    so only the others (and those of batches committed before a restart) are remembered as
    committed and sent to the executors to drop."""

    @staticmethod
    def unusable(options: Options) -> str | None:
        """Why HTTP consumption cannot be used here, or None if it can."""
        if not options.checkpoint or "://" in options.checkpoint.removeprefix("file://"):
            return "the executors log their parts under checkpointLocation, a local path"
        if not (options.lookupd or options.nsqd_http):
            return "the nsqd HTTP addresses are not known (give lookupd or nsqdHttp)"
        nodes = topic_nsqd_http(options)
        if not nodes:
            return "no nsqd has the topic yet"
        without = [http for http, _ in nodes if not consumes_over_http(options, http)]
        if without:
            return f"nsqd {', '.join(without)} do not offer HTTP consumption"
        return None

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        assert self.log is not None
        self.http = retry.client(options)
        self.nodes: list[tuple[str, str]] = []
        self.discovered = 0.0
        self.pulled: dict[tuple[int, int], Messages] = {}  # (end, part) -> logged messages
        self._discover()
        log.info("nsq_spark: executors consume %s/%s over HTTP from %s", options.topic,
                 options.channel, ", ".join(http for http, _ in self.nodes))
        self.start_threads()
        threading.Thread(target=self._touch_loop, name="nsq-touch", daemon=True).start()

    def _discover(self) -> None:
        """Which nsqd have the topic: asked again once DISCOVER_EVERY seconds have passed."""
        now = time.monotonic()
        if self.nodes and now < self.discovered + DISCOVER_EVERY:
            return
        self.discovered = now
        nodes = topic_nsqd_http(self.options)
        known = set(self.nodes)
        for http, tcp in nodes:
            if (http, tcp) not in known:
                pull.create_channel(self.options, http, self.options.topic, self.channel)
        self.nodes = nodes

    def _next_batch(self, start: int, at_most: float, available_now: bool) -> Batch | None:
        room = int(min(at_most, self.options.max_in_flight))
        idle = self.options.idle_timeout if available_now else POLL_WAIT
        waited = 0.0
        while True:
            self._discover()
            depths = [(http, tcp, pull.depth(self.options, http, self.options.topic, self.channel))
                      for http, tcp in self.nodes]
            total = sum(d for _, _, d in depths)
            if total or waited >= idle:
                break
            self.closed.wait(0.1)  # nothing queued: look again shortly, up to the idle wait
            waited += 0.1
        if not total:
            return None
        parts: list[Part] = []
        left = min(room, total)
        for http, tcp, d in depths:
            share = min(d, left)
            left -= share
            while share > 0:
                piece = min(share, pull.MAX_PULL)  # one /channel/consume each
                parts.append(Part(http, tcp, piece))
                share -= piece
        count = sum(p.count for p in parts)
        return Batch(start, start + count, parts=parts)

    def _partitions(self, batch: Batch) -> list[InputPartition]:
        assert self.log is not None
        for other in self.batches.values():
            self._logged(other)  # their keys join ``pending``
        committed = _ids_by_nsqd(self.committed_keys)
        pending = _ids_by_nsqd(key for key, end in self.pending.items() if end != batch.end)
        return [pull.PullPartition(self.options.topic, self.channel, str(self.log.directory),
                                   batch.end, i, part, self.msg_timeout,
                                   committed.get(part.nsqd, b""), pending.get(part.nsqd, b""))
                for i, part in enumerate(batch.parts)]

    def _logged(self, batch: Batch) -> list[tuple[Part, Messages]]:
        """The parts of a batch the executors pulled, remembered once read."""
        assert self.log is not None
        found = []
        for i, part in enumerate(batch.parts):
            messages = self.pulled.get((batch.end, i))
            if messages is None:
                messages = self.log.read_part(batch.end, i)
                if messages is None:
                    continue
                self.pulled[(batch.end, i)] = messages
                self.pending.update(dict.fromkeys(messages.key_list(), batch.end))
            found.append((part, messages))
        return found

    def _finish(self, batches: list[Batch]) -> tuple[list[Key], list[Key]]:
        keys: list[Key] = []
        unconfirmed: list[Key] = []
        for batch in batches:
            for part, messages in self._logged(batch):
                missed = pull.finish(self.options, part.nsqd_http, self.options.topic,
                                     self.channel, messages.id_list())
                keys.extend(messages.key_list())
                unconfirmed.extend((part.nsqd, id) for id in missed)
            for i in range(len(batch.parts)):
                self.pulled.pop((batch.end, i), None)
        return keys, unconfirmed

    def _touch_loop(self) -> None:
        """TOUCH every logged message of an uncommitted batch each third of the timeout,
        counted from the start of the last round (so a slow round does not stretch it)."""
        interval = self.msg_timeout / 3
        due = time.monotonic() + interval
        while not self.closed.wait(max(0.0, due - time.monotonic())):
            due = time.monotonic() + interval
            try:
                with self.lock:
                    work = [(part, messages.id_list()) for batch in self.batches.values()
                            for part, messages in self._logged(batch)]
                for part, ids in work:
                    touched = touch_all(self.http, part.nsqd_http, self.options.topic,
                                        self.channel, ids)
                    if touched < len(ids):
                        log.info("nsq_spark: %d of %d messages of %s/%s were no longer in "
                                 "flight on %s when touched", len(ids) - touched, len(ids),
                                 self.options.topic, self.channel, part.nsqd_http)
            except Exception:
                log.exception("nsq_spark: touching messages in flight failed")

    def _close(self) -> None:
        pass  # the HTTP client is the process's (retry.client)


def _ids_by_nsqd(keys: Iterable[Key]) -> dict[str, bytes]:
    """The ids of these keys, back to back, by nsqd address."""
    ids: dict[str, list[bytes]] = {}
    for address, id in keys:
        ids.setdefault(address, []).append(id)
    return {address: b"".join(some) for address, some in ids.items()}
