"""NSQ's error codes and the one exception that carries them.

Error tree::

    ProtocolError            an error frame the server sends: ``<CODE> <description>``
        .fatal               True unless the code is E_FIN_FAILED, E_REQ_FAILED or E_TOUCH_FAILED;
                             nsqd closes the connection after writing a fatal one

A peer that breaks the framing so badly that no error frame makes sense (an over-long
command line) raises ``ConnectionAbort``: close, say nothing.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.StrEnum):
    E_INVALID = "E_INVALID"
    E_BAD_PROTOCOL = "E_BAD_PROTOCOL"
    E_BAD_BODY = "E_BAD_BODY"
    E_BAD_TOPIC = "E_BAD_TOPIC"
    E_BAD_CHANNEL = "E_BAD_CHANNEL"
    E_BAD_MESSAGE = "E_BAD_MESSAGE"
    E_PUB_FAILED = "E_PUB_FAILED"
    E_MPUB_FAILED = "E_MPUB_FAILED"
    E_DPUB_FAILED = "E_DPUB_FAILED"
    E_FIN_FAILED = "E_FIN_FAILED"
    E_REQ_FAILED = "E_REQ_FAILED"
    E_TOUCH_FAILED = "E_TOUCH_FAILED"
    E_SUB_FAILED = "E_SUB_FAILED"
    E_IDENTIFY_FAILED = "E_IDENTIFY_FAILED"
    E_AUTH_FAILED = "E_AUTH_FAILED"
    E_AUTH_DISABLED = "E_AUTH_DISABLED"
    E_AUTH_FIRST = "E_AUTH_FIRST"
    E_AUTH_ERROR = "E_AUTH_ERROR"
    E_UNAUTHORIZED = "E_UNAUTHORIZED"


NON_FATAL_CODES = frozenset({ErrorCode.E_FIN_FAILED, ErrorCode.E_REQ_FAILED, ErrorCode.E_TOUCH_FAILED})


class ProtocolError(Exception):
    """An NSQ error: a machine code plus a human description, as sent in an error frame."""

    def __init__(self, code: ErrorCode | str, description: str) -> None:
        super().__init__(f"{code} {description}")
        self.code = str(code)
        self.description = description

    @property
    def fatal(self) -> bool:
        return self.code not in NON_FATAL_CODES

    @property
    def text(self) -> bytes:
        """The error frame's payload: ``<CODE> <description>``."""
        return f"{self.code} {self.description}".encode("utf-8", "surrogateescape")


class ConnectionAbort(Exception):
    """The peer broke the stream; close the connection without an error frame."""
