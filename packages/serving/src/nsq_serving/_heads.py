"""The bytes of response heads: status lines, the ``Date`` header, and ready-made answers.

Everything here is computed once (status lines) or once a second (the date), so that writing
a response head is joining a few byte strings.
"""

from __future__ import annotations

import time
from email.utils import formatdate
from http import HTTPStatus

_STATUS_LINES = {status.value: b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode())
                 for status in HTTPStatus}


def status_line(status: int) -> bytes:
    """``HTTP/1.1 200 OK\\r\\n``; a code without a standard phrase gets none, as Go writes it."""
    line = _STATUS_LINES.get(status)
    return line if line is not None else b"HTTP/1.1 %d \r\n" % status


class DateHeader:
    """``date: <IMF-fixdate>\\r\\n`` for now, formatted at most once a second."""

    __slots__ = ("_line", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._line = b""

    def line(self) -> bytes:
        second = int(time.time())
        if second != self._second:
            self._second = second
            self._line = b"date: %s\r\n" % formatdate(second, usegmt=True).encode()
        return self._line


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def plain_answer(status: int, text: bytes) -> bytes:
    """A whole ``text/plain`` answer after which the server closes the connection, as Go's
    net/http answers a request it cannot parse (``400 Bad Request``)."""
    return (status_line(status) + b"content-type: text/plain; charset=utf-8\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text))
