"""A message inside nsqd: the wire fields plus its in-flight bookkeeping.

Kept as a plain ``__slots__`` class rather than attrs because one is made per message per
channel on the hot path; attribute access and construction must be as cheap as CPython allows.
"""

from __future__ import annotations

from nsq_common import MESSAGE_FRAME_PREFIX

_pack_prefix = MESSAGE_FRAME_PREFIX.pack


class Message:
    __slots__ = ("attempts", "body", "client_id", "deadline", "defer", "delivered", "expires",
                 "id", "timestamp")

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

    def copy(self) -> Message:
        """A fresh copy for another channel: same id, body, timestamp, deferral and expiry."""
        return Message(self.id, self.body, self.timestamp, 0, self.defer, self.expires)

    def frame_parts(self) -> tuple[bytes, bytes, bytes]:
        """The message frame as three parts for ``b"".join``: prefix, id, body."""
        body = self.body
        return (_pack_prefix(30 + len(body), 2, self.timestamp, self.attempts), self.id, body)
