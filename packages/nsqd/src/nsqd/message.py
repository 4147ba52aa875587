"""A message inside nsqd: the wire fields plus its in-flight bookkeeping.

``QueuedMessage`` is named apart from ``nsq_common.Message`` (a decoded message frame, what a
consumer reads) and the client library's message (a consumer's handle to FIN or REQ it): this
one lives in a channel, requeued, deferred or in flight. A message waiting in a topic's log is
only its record (``nsqd.record``); a channel makes the ``QueuedMessage`` when it has to look at
the message (an expiry, a due time, an attempt limit) or keep it apart (REQ, a timeout).

Kept as a plain ``__slots__`` class rather than attrs because one is made per message per
channel on the hot path; attribute access and construction must be as cheap as CPython allows.
A job (lmstfy's API, beyond NSQ) is a message with a few more fields, in a subclass, so that
plain messages pay nothing for them.
"""

from __future__ import annotations

#: ``QueuedMessage.offset`` of a message that is not in the topic's log (a channel's own
#: queue: respawned dead letters, messages brought from Go's per-channel files).
OWN = -1


class QueuedMessage:
    __slots__ = ("attempts", "body", "client_id", "deadline", "delivered", "due", "expires",
                 "id", "offset", "timestamp")
    #: A class-level flag, so that telling a job from a message costs no slot.
    is_job = False

    def __init__(self, id: bytes, body: bytes, timestamp: int, attempts: int = 0, *,
                 expires: int = 0, due: int = 0, offset: int = OWN) -> None:
        self.id = id
        self.body = body
        self.timestamp = timestamp  # ns since the epoch, set at publish
        self.attempts = attempts
        self.offset = offset  # in the topic's log, or OWN
        self.client_id = 0  # owner while in flight
        self.deadline = 0.0  # in-flight timeout or deferred due time (the monotonic clock)
        self.delivered = 0.0  # when it went in flight; TOUCH cannot extend past + max-msg-timeout
        self.expires = expires  # ns since the epoch after which it is never delivered; 0: never
        self.due = due  # ns since the epoch before which it is not delivered (DPUB); 0: at once

    @property
    def extended(self) -> bool:
        """Its record needs our extension (Go's format has no place for these fields)."""
        return bool(self.expires or self.due or self.is_job)


class Job(QueuedMessage):
    """A message published through lmstfy's API: its own limit of deliveries, the delay its
    id carries, and its attributes (its due time is the message's)."""

    __slots__ = ("attributes", "delay", "tries")
    is_job = True

    def __init__(self, id: bytes, body: bytes, timestamp: int, attempts: int = 0, *,
                 expires: int = 0, tries: int = 1, delay: int = 0, due: int = 0,
                 attributes: bytes | None = None, offset: int = OWN) -> None:
        super().__init__(id, body, timestamp, attempts, expires=expires, due=due,
                         offset=offset)
        self.tries = tries  # most deliveries; then it is a dead letter
        self.delay = delay  # seconds, as published (part of the job id)
        self.attributes = attributes  # compact JSON object (a version 1 job), or None
