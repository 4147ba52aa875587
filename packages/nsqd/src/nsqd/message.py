"""A message inside nsqd: the wire fields plus its in-flight bookkeeping.

``QueuedMessage`` is named apart from ``nsq_common.Message`` (a decoded message frame, what a
consumer reads) and the client library's message (a consumer's handle to FIN or REQ it): this
one lives in nsqd's queues, waiting, deferred or in flight.

Kept as a plain ``__slots__`` class rather than attrs because one is made per message per
channel on the hot path; attribute access and construction must be as cheap as CPython allows.
A job (lmstfy's API, beyond NSQ) is a message with a few more fields, in a subclass, so that
plain messages pay nothing for them.
"""

from __future__ import annotations


class QueuedMessage:
    __slots__ = ("attempts", "body", "client_id", "deadline", "defer", "delivered", "expires",
                 "id", "timestamp")
    #: A class-level flag, so that telling a job from a message costs no slot.
    is_job = False

    def __init__(self, id: bytes, body: bytes, timestamp: int, attempts: int = 0,
                 defer: float = 0.0, expires: int = 0) -> None:
        self.id = id
        self.body = body
        self.timestamp = timestamp  # ns since the epoch, set at publish
        self.attempts = attempts
        self.defer = defer  # seconds to hold back before the first delivery (DPUB)
        self.client_id = 0  # owner while in flight
        self.deadline = 0.0  # in-flight timeout or deferred due time (trio clock)
        self.delivered = 0.0  # when it went in flight; TOUCH cannot extend past + max-msg-timeout
        self.expires = expires  # ns since the epoch after which it is never delivered; 0: never

    def copy(self) -> QueuedMessage:
        """A fresh copy for another channel: same id, body, timestamp, deferral and expiry."""
        return QueuedMessage(self.id, self.body, self.timestamp, 0, self.defer, self.expires)


class Job(QueuedMessage):
    """A message published through lmstfy's API: its own limit of deliveries, the delay its
    id carries, the wall-clock time it becomes ready, and its attributes."""

    __slots__ = ("attributes", "delay", "due", "tries")
    is_job = True

    def __init__(self, id: bytes, body: bytes, timestamp: int, attempts: int = 0, *,
                 expires: int = 0, tries: int = 1, delay: int = 0, due: int = 0,
                 attributes: bytes | None = None) -> None:
        super().__init__(id, body, timestamp, attempts, 0.0, expires)
        self.tries = tries  # most deliveries; then it is a dead letter
        self.delay = delay  # seconds, as published (part of the job id)
        self.due = due  # ns since the epoch before which it is not delivered; 0: at once
        self.attributes = attributes  # compact JSON object (a version 1 job), or None

    def copy(self) -> Job:
        return Job(self.id, self.body, self.timestamp, 0, expires=self.expires,
                   tries=self.tries, delay=self.delay, due=self.due, attributes=self.attributes)
