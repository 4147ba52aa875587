"""A message as a consumer receives it, with the three answers nsqd understands.

``finish()`` sends ``FIN``, ``requeue()`` sends ``REQ`` (and feeds backoff), ``touch()`` sends
``TOUCH`` to reset the message's timeout. The answers do not block: they are queued on the
connection the message came from and leave with the next write, many FINs in one send.
A message takes exactly one FIN or REQ; a second raises ``MessageResponded``. If the
connection closed in the meantime the answer is dropped (nsqd requeues the message itself
once it times out), as go-nsq does.
"""

from __future__ import annotations

from typing import Protocol

from ._errors import MessageResponded


class Answerer(Protocol):
    """Where a message's answers go: the connection it came from."""

    address: str
    closed: bool
    queued: int

    def finish_message(self, message: Message) -> None: ...

    def requeue_message(self, message: Message, delay: float | None, backoff: bool) -> None: ...

    def touch_message(self, message: Message) -> None: ...


class Message:
    """A delivered message.

    Attributes:
        id: the 16-byte message ID (ASCII hex), as nsqd sent it.
        body: the payload.
        timestamp: when it was published, nanoseconds since the epoch.
        attempts: delivery attempts so far, this one included.
    """

    # A plain slotted class, not attrs: one is built per delivered message, on the hot path.
    __slots__ = ("_auto", "_conn", "_responded", "attempts", "body", "id", "timestamp")

    def __init__(self, id: bytes, body: bytes, timestamp: int, attempts: int,
                 conn: Answerer) -> None:
        self.id = id
        self.body = body
        self.timestamp = timestamp
        self.attempts = attempts
        self._conn = conn
        self._responded = False
        self._auto = True

    def __repr__(self) -> str:
        return (f"Message(id={self.id!r}, attempts={self.attempts}, "
                f"timestamp={self.timestamp}, body={self.body[:40]!r})")

    @property
    def nsqd_address(self) -> str:
        """``host:port`` of the nsqd that delivered it."""
        return self._conn.address

    @property
    def has_responded(self) -> bool:
        return self._responded

    @property
    def auto_response(self) -> bool:
        """False once ``disable_auto_response`` was called."""
        return self._auto

    def disable_auto_response(self) -> None:
        """Take over answering: the consumer will not FIN or REQ this message for you."""
        self._auto = False

    def finish(self) -> None:
        """Tell nsqd the message is done (FIN).

        Raises:
            MessageResponded: it was already finished or requeued.
        """
        if self._responded:
            raise MessageResponded(f"message {self.id!r} already responded")
        self._responded = True
        self._conn.finish_message(self)

    def requeue(self, delay: float | None = None, *, backoff: bool = True) -> None:
        """Give the message back to nsqd (REQ) to be delivered again after ``delay`` seconds.

        Args:
            delay: seconds before redelivery; None computes go-nsq's default,
                ``default_requeue_delay * attempts`` capped at ``max_requeue_delay``.
            backoff: also count this as a failure for the consumer's backoff (go-nsq's
                ``Requeue``); False is go-nsq's ``RequeueWithoutBackoff``.

        Raises:
            MessageResponded: it was already finished or requeued.
        """
        if self._responded:
            raise MessageResponded(f"message {self.id!r} already responded")
        self._responded = True
        self._conn.requeue_message(self, delay, backoff)

    def touch(self) -> None:
        """Reset the message's timeout on nsqd (TOUCH); only before it is answered."""
        if self._responded:
            raise MessageResponded(f"message {self.id!r} already responded")
        self._conn.touch_message(self)


# -- the consumer's automatic answers (for a message whose handler did not answer it) ---------------
def finish_unanswered(message: Message) -> None:
    """FIN ``message`` unless it was answered or its auto-response disabled."""
    if message._auto and not message._responded:
        message._responded = True  # Message.finish(), inlined: this runs once per message
        message._conn.finish_message(message)


def requeue_unanswered(message: Message, *, backoff: bool = True) -> None:
    """REQ ``message`` (go-nsq's default delay) unless it was answered or its auto-response
    disabled."""
    if message._auto and not message._responded:
        message.requeue(backoff=backoff)


def connection_of(message: Message) -> Answerer:
    """The connection ``message`` came from."""
    return message._conn
