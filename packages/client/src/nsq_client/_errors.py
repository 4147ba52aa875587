"""The client's exceptions: one tree, translated from lower layers at the edges.

Error tree::

    NSQError                       anything this library raises on purpose
    ├── ConnectError               dialling, the magic, IDENTIFY, AUTH or SUB failed
    ├── ConnectionClosed           the connection went away with a request unanswered
    ├── ServerError                an error frame from nsqd; ``.code`` is NSQ's (E_BAD_TOPIC ...)
    │   └── PublishError           ... in answer to PUB, MPUB or DPUB
    ├── DiscoveryError             no nsqlookupd could be queried
    └── MessageResponded           FIN / REQ on a message that already has its answer

``ServerError`` is also an ``nsq_common.ProtocolError``, so ``.code``, ``.description`` and
``.fatal`` read the same as on the server side. Socket and TLS errors (``OSError``,
``trio.BrokenResourceError``, ``ssl.SSLError``) are wrapped in ``ConnectError`` or
``ConnectionClosed`` with the original as ``__cause__``.
"""

from __future__ import annotations

from nsq_common import ProtocolError


class NSQError(Exception):
    """Base class of every error this library raises on purpose."""


class ConnectError(NSQError):
    """A connection could not be opened or set up (dial, IDENTIFY, AUTH, SUB)."""


class ConnectionClosed(NSQError):
    """The connection closed before the server answered."""


class ServerError(NSQError, ProtocolError):
    """An error frame: ``<CODE> <description>``.

    Attributes:
        code: NSQ's machine code, e.g. ``"E_BAD_TOPIC"`` (compare with ``nsq_common.ErrorCode``).
        description: the human text after the code.
        fatal: False only for E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED; nsqd closes
            the connection after a fatal one.
    """

    @classmethod
    def from_frame(cls, data: bytes) -> ServerError:
        text = data.decode("utf-8", "replace")
        code, _, description = text.partition(" ")
        return cls(code, description)


class PublishError(ServerError):
    """nsqd refused a PUB, MPUB or DPUB."""


class DiscoveryError(NSQError):
    """No nsqlookupd answered a /lookup query."""


class MessageResponded(NSQError):
    """The message was already finished or requeued; each message gets one answer."""
