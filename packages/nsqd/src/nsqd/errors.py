"""Every error nsqd raises on purpose, in one tree (as httpx's ``_exceptions.py``).

::

    NsqdError                  an error of nsqd's own making (anything else is a bug)
    ├── Exiting                nsqd is shutting down: nothing more is accepted
    ├── StoreFailed            messages could not be stored (the log's error, chained);
    │                          nsqd reports itself unhealthy until a store succeeds again
    ├── SubscribeRefused       SUB refused: too many consumers on the channel
    ├── InFlightError          FIN/REQ/TOUCH of a message this client cannot answer
    │   ├── NotInFlight        no message with that id is in flight
    │   └── NotOwner           it is in flight to another client
    ├── LogError               a log's append/close/delete failed (a topic's, or a channel's
    │   │                      private log: its own queue, its dead letters)
    │   ├── LogClosed          ... because the log is closed (nsqd is exiting, the topic
    │   │                      deleted)
    │   ├── OffsetOverlap      a follower's append (``TopicLog.append_at``) at offsets the log
    │   │                      holds or has given already
    │   └── SegmentError       a segment of a topic's log is damaged (a wrong magic, a bad
    │                          crc in a batch read, damage inside a closed segment)
    ├── AuthError              the auth servers could not be asked, or answered nonsense
    ├── StartError             nsqd cannot start (a port taken, the data path locked, ...)
    └── ExportError            --export-go-data-path cannot be made (a directory not empty, ...)

The broker, channels, logs and auth raise these; each boundary translates them once
and only there:

- TCP (``protocol.py``): ``ProtocolError`` with NSQ's code and text, e.g. ``E_PUB_FAILED PUB
  failed exiting``, ``E_SUB_FAILED SUB failed consumers for t:c exceeds limit of 2``,
  ``E_FIN_FAILED FIN <id> failed ID not in flight``, ``E_AUTH_FAILED AUTH failed``.
- HTTP: ``Exiting`` is 503 and ``StoreFailed`` 500 on every route, by one ``translate`` given
  to nsq_serving's router: ``http_api.py`` answers 503 ``EXITING`` / 500 ``INTERNAL_ERROR``,
  ``lmstfy`` 503 ``{"error":"exiting"}`` / 500 ``{"error":"internal error"}``.
- the command line (``__main__.py``): one ``FATAL`` line per ``StartError`` or ``OSError``.

Anything that is not an ``NsqdError`` (nor an ``OSError`` at start-up) is a bug: it is never
turned into an error frame or an answer carrying its text; the edge that catches it logs it
at ERROR with its traceback (``tcp.handle_stream`` then closes that one connection, the HTTP
router answers 500 in the API's shape).

Each error's text (``str(exc)``) is NSQ's reason, which the boundaries quote as is.
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "Exiting",
    "InFlightError",
    "LogClosed",
    "LogError",
    "NotInFlight",
    "NotOwner",
    "NsqdError",
    "OffsetOverlap",
    "SegmentError",
    "StartError",
    "StoreFailed",
    "SubscribeRefused",
]


class NsqdError(Exception):
    """Base of every error nsqd raises on purpose."""


class Exiting(NsqdError):
    """nsqd is shutting down and accepts nothing more."""

    def __init__(self, text: str = "exiting") -> None:
        super().__init__(text)


class StoreFailed(NsqdError):
    """Messages could not be stored; the log's (or disk queue's) error is the cause (``__cause__``)."""


class SubscribeRefused(NsqdError):
    """A SUB refused for a reason of the channel's (NSQ's text for E_SUB_FAILED)."""


class InFlightError(NsqdError):
    """A FIN, REQ or TOUCH for a message the client cannot answer."""


class NotInFlight(InFlightError):
    def __init__(self) -> None:
        super().__init__("ID not in flight")


class NotOwner(InFlightError):
    def __init__(self) -> None:
        super().__init__("client does not own message")


class LogError(NsqdError):
    """A log's append/close/delete that failed (an I/O error, the log closed): a topic's,
    or a channel's private log (its own queue, its dead letters)."""


class LogClosed(LogError):
    """The log is closed: nsqd is exiting, or its topic (or channel) was deleted."""

    def __init__(self) -> None:
        super().__init__("exiting")


class OffsetOverlap(LogError):
    """An append at given offsets (a follower's: ``TopicLog.append_at``) that overlaps what
    the log holds or has given: nothing of it is stored. The text names both."""


class SegmentError(LogError):
    """A segment of a topic's log (``nsqd.segment``) is damaged; the text names the file and
    the position. Raised by opening or reading it; the caller decides what to do with it."""


class AuthError(NsqdError):
    """The auth servers could not be asked, or answered nonsense."""


class StartError(NsqdError):
    """nsqd cannot start; the text is Go's: ``failed to instantiate nsqd - <why>``."""


class ExportError(NsqdError):
    """``--export-go-data-path`` cannot be made (the text says why)."""
