"""The reference model and the operation generator of the model-based crash test
(``test_nsqd_model.py``; docs/design/storage.md, "How storage is crash-tested").

A sequence is a list of plain operations (lists of strings and ints, JSON as they are) made
from a seed before it runs, so that a failure is replayed from its seed, or from the sequence
itself once shrunk. The model says, for each channel, which bodies it is *owed* (each must be
delivered at least once before the channel can be empty), which it may get (any body published
to its topic: rewinds, redelivery after a crash, a reset cursor) and which it finished; a
delivery of a finished body is counted against the mode's bound after a kill -9 and is an
error otherwise.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

#: The storage modes and what a ``kill -9`` may lose in each (docs/design/storage.md, "When
#: things are written"): with ``--sync-every=1`` nothing acknowledged; otherwise what was
#: acknowledged (published, finished, made) since the last clean shutdown.
MODES: dict[str, tuple[str, ...]] = {
    "default": (),
    "mem-queue-size=0": ("--mem-queue-size=0",),
    "sync-every=1": ("--sync-every=1",),
}
DURABLE = {"sync-every=1"}

#: The most FIN-confirmed messages a channel may get again after one kill -9 with
#: ``--sync-every=1`` (storage.md: acknowledgements under way in the last cursor writes, about a
#: consumer's RDY; the model's consumers hold at most ``MAX_RDY``). Generous on purpose.
MAX_RDY = 8
REDELIVERY_BOUND = 100

TOPICS = ("t0", "t1")
CHANNELS = ("c0", "c1")
QUEUE = "q"  # the lmstfy queue (topic lmstfy.ns.q)
DAMAGE = ("seg_truncate", "seg_flip", "journal_flip", "journal_delete")


def body(tag: str, topic: str, seq: int) -> bytes:
    """Unique and self-describing; the ';' ends it, so no body is a prefix of another."""
    return b"%s|%s|%06d;" % (tag.encode(), topic.encode(), seq)


def body_topic(data: bytes) -> str:
    return data.split(b"|")[1].decode()


@dataclass
class Channel:
    owed: set[bytes] = field(default_factory=set)
    finished: set[bytes] = field(default_factory=set)
    #: finished before the last kill -9: each delivery of one is counted against the bound
    finished_before_kill: set[bytes] = field(default_factory=set)
    redelivered: int = 0
    paused: bool = False
    #: its cursor may have been reset to the earliest offset: anything of its topic may come
    reset: bool = False


@dataclass
class Topic:
    channels: dict[str, Channel] = field(default_factory=dict)
    held: set[bytes] = field(default_factory=set)  # published while it had no channel
    paused: bool = False
    paused_held: set[bytes] = field(default_factory=set)  # published while paused
    #: the log kept everything since the topic was made (a retention from the start): a
    #: rewind to the earliest offset brings back every stored body
    retained: bool = False
    stored: set[bytes] = field(default_factory=set)  # in its log (acknowledged, not lost)


@dataclass
class Model:
    mode: str
    topics: dict[str, Topic] = field(default_factory=dict)
    published: set[bytes] = field(default_factory=set)  # sent, acknowledged or not
    #: bodies acknowledged since the last clean shutdown (a lossy kill may lose them)
    unstable: set[bytes] = field(default_factory=set)
    jobs_owed: set[bytes] = field(default_factory=set)
    jobs_acked: set[bytes] = field(default_factory=set)
    jobs_acked_before_kill: set[bytes] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    # -- publishing ---------------------------------------------------------------------

    def acknowledged(self, topic: str, data: bytes) -> None:
        t = self.topics.setdefault(topic, Topic())
        t.stored.add(data)
        self.unstable.add(data)
        if not t.channels:
            t.held.add(data)
        for c in t.channels.values():
            c.owed.add(data)
        if t.paused:
            t.paused_held.add(data)

    def make_channel(self, topic: str, name: str) -> None:
        t = self.topics.setdefault(topic, Topic())
        if name in t.channels:
            return
        c = t.channels[name] = Channel()
        if len(t.channels) == 1:  # the topic's first channel gets what it held
            c.owed |= t.held
            t.held.clear()
        if t.paused:  # what the paused topic holds back may or may not reach it
            c.owed -= t.paused_held

    # -- delivery ------------------------------------------------------------------------

    def delivered(self, topic: str, channel: str, data: bytes) -> None:
        """A message received on a channel: never a body never published to that topic; a
        finished one only as the mode allows."""
        if data not in self.published or body_topic(data) != topic:
            self.errors.append(f"{topic}/{channel}: got {data!r}, never published to it")
            return
        c = self.topics[topic].channels[channel]
        if data in c.finished and data not in c.owed and not c.reset:
            if data in c.finished_before_kill:
                c.redelivered += 1
                if self.mode in DURABLE and c.redelivered > REDELIVERY_BOUND:
                    self.errors.append(
                        f"{topic}/{channel}: {c.redelivered} finished messages delivered "
                        f"again after a kill -9 (bound {REDELIVERY_BOUND})")
            else:
                self.errors.append(f"{topic}/{channel}: {data!r} finished, delivered again")

    def finished(self, topic: str, channel: str, data: bytes) -> None:
        c = self.topics[topic].channels[channel]
        c.owed.discard(data)
        c.finished.add(data)
        self.unstable.add(data)  # (a finish is also undone by a lossy kill)

    # -- crashes ---------------------------------------------------------------------------

    def clean_restart(self) -> None:
        self.unstable.clear()

    def killed(self) -> None:
        durable = self.mode in DURABLE
        for t in self.topics.values():
            for c in t.channels.values():
                c.finished_before_kill |= c.finished
                c.redelivered = 0
                if not durable:
                    c.owed -= self.unstable
            if not durable:
                t.held -= self.unstable
                t.stored -= self.unstable
        self.jobs_acked_before_kill |= self.jobs_acked
        for t in self.topics.values():
            t.retained = False  # (a retention is in nsqd.dat, written after its answer)
        if not durable:
            self.jobs_owed -= self.unstable
        self.unstable.clear()

    def lost(self, bodies: set[bytes]) -> None:
        """Bodies in a damaged batch: no longer owed to anyone (but may still come)."""
        self.jobs_owed -= bodies
        for t in self.topics.values():
            t.held -= bodies
            t.stored -= bodies
            for c in t.channels.values():
                c.owed -= bodies


# -- the generator ---------------------------------------------------------------------------


def generate(seed: int, length: int) -> list[list[object]]:
    """A sequence of ``length`` operations from ``seed``, valid for the names it made itself
    (the driver passes over an operation on something a crash took away)."""
    rng = random.Random(seed)
    topics: dict[str, set[str]] = {}
    ops: list[list[object]] = []
    while len(ops) < length:
        kind = rng.choices(
            ["topic", "channel", "pub", "mpub", "dpub", "hpub", "hmpub", "consume", "timeout",
             "delete_topic", "delete_channel", "empty_channel", "empty_topic", "pause",
             "rewind", "rewind_past_end", "retention", "lm_pub", "lm_consume", "lm_respawn",
             "restart", "kill", "kill_writing", "damage"],
            [3, 4, 8, 5, 2, 3, 2, 8, 1,
             1, 1, 1, 1, 2,
             2, 1, 1, 3, 3, 1,
             2, 3, 2, 2])[0]
        t = rng.choice(TOPICS)
        c = rng.choice(CHANNELS)
        if kind == "topic":
            ops.append(["topic", t, rng.choice(["", "24h"])])
            topics.setdefault(t, set())
        elif kind == "channel":
            ops.append(["channel", t, c])
            topics.setdefault(t, set()).add(c)
        elif kind in ("pub", "hpub"):
            ops.append([kind, t])
            topics.setdefault(t, set())
        elif kind in ("mpub", "hmpub"):
            ops.append([kind, t, rng.randint(2, 30)])
            topics.setdefault(t, set())
        elif kind == "dpub":
            ops.append(["dpub", t, rng.choice([0, 50, 300])])
            topics.setdefault(t, set())
        elif kind in ("consume", "timeout", "delete_channel", "empty_channel", "rewind",
                      "rewind_past_end"):
            if not topics.get(t):
                continue
            c = rng.choice(sorted(topics[t]))
            if kind == "consume":
                # n to take; of those: FIN (f), REQ (r), TOUCH then FIN (h), left (the rest)
                ops.append(["consume", t, c, rng.randint(1, MAX_RDY),
                            "".join(rng.choice("fffrhl") for _ in range(MAX_RDY))])
            elif kind == "rewind_past_end":
                ops.append([kind, t, c, rng.choice([10**12, 2**63 - 1])])
            else:
                ops.append([kind, t, c])
            if kind == "delete_channel":
                topics[t].discard(c)
        elif kind in ("delete_topic", "empty_topic", "pause", "retention"):
            if t not in topics:
                continue
            if kind == "pause":
                names = ["", *sorted(topics[t])]
                ops.append(["pause", t, rng.choice(names), rng.choice(["pause", "unpause"])])
            elif kind == "retention":
                ops.append(["retention", t, rng.choice(["0s", "24h"])])
            else:
                ops.append([kind, t])
            if kind == "delete_topic":
                del topics[t]
        elif kind == "lm_pub":
            ops.append(["lm_pub", rng.randint(1, 5)])
        elif kind == "lm_consume":
            ops.append(["lm_consume", rng.randint(1, 4), rng.choice(["ack", "ack", "leave"])])
        elif kind == "lm_respawn":
            ops.append(["lm_respawn"])
        elif kind == "kill_writing":
            ops.append(["kill_writing", t, rng.randint(5, 60), rng.randint(0, 60)])
            topics.setdefault(t, set())
        elif kind == "damage":
            ops.append(["damage", rng.choice(DAMAGE), rng.randrange(1 << 30)])
        else:
            ops.append([kind])
    return ops
