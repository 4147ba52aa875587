"""The first JSON value of a body as Go's ``json.Decoder`` reads it (gin's ``BindJSON``): its
end, or where Go's scanner (``encoding/json/scanner.go``) refuses it.

Go's scanner steps byte by byte and counts each byte before it steps, so a
``SyntaxError.Offset`` is the number of bytes read up to and including the first one that
cannot continue the value: ``x`` is 1, ``nul!`` 4, ``{"a" 1}`` 6, ``1.x`` 3. Bytes are not
checked as UTF-8 (a string may hold any byte from 0x20 up). The input ending inside the value
is ``io.ErrUnexpectedEOF``, nothing but spaces ``io.EOF``; a top-level number ends at the first
byte that cannot continue it (what follows is left unread, as the Decoder leaves it), an
object or array at its closing bracket.
"""

from __future__ import annotations

_SPACE = b" \t\r\n"
_DIGITS = b"0123456789"
_HEX = b"0123456789abcdefABCDEF"
_ESCAPES = b'bfnrt\\/"'
_LITERALS = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}
MAX_DEPTH = 10000  # Go's maxNestingDepth


class SyntaxError_(ValueError):
    """Go's ``*json.SyntaxError``: ``offset`` as its ``Offset``."""

    def __init__(self, offset: int) -> None:
        super().__init__(f"invalid JSON at offset {offset}")
        self.offset = offset


class EndOfInput(ValueError):
    """Go's ``io.EOF`` or ``io.ErrUnexpectedEOF`` (both marshal as ``{}``)."""


def scan_value(data: bytes, pos: int = 0) -> int:
    """The end of the JSON value starting at or after ``pos`` (past leading spaces).

    Raises:
        SyntaxError_: where Go's scanner stops, with its offset (counted from 0, not ``pos``).
        EndOfInput: the data ends first.
    """
    stack: list[int] = []  # 0: in an object, 1: in an array
    n = len(data)
    while True:
        # a value begins
        while pos < n and data[pos] in _SPACE:
            pos += 1
        if pos >= n:
            raise EndOfInput
        c = data[pos]
        if c == 0x7B or c == 0x5B:  # { [
            stack.append(0 if c == 0x7B else 1)
            if len(stack) > MAX_DEPTH:
                raise SyntaxError_(pos + 1)
            pos += 1
            while pos < n and data[pos] in _SPACE:
                pos += 1
            if pos >= n:
                raise EndOfInput
            if data[pos] == (0x7D if c == 0x7B else 0x5D):  # empty
                stack.pop()
                pos += 1
            elif c == 0x7B:
                pos = _key(data, pos)
                continue
            else:
                continue
        elif c == 0x22:
            pos = _string(data, pos + 1)
        elif c == 0x2D or c in _DIGITS:
            pos = _number(data, pos)
            if not stack:  # a top-level number ends at the first byte not its own
                return pos
        elif c in _LITERALS:
            literal = _LITERALS[c]
            for i in range(1, len(literal)):
                if pos + i >= n:
                    raise EndOfInput
                if data[pos + i] != literal[i]:
                    raise SyntaxError_(pos + i + 1)
            pos += len(literal)
        else:
            raise SyntaxError_(pos + 1)
        # a value ended: what may follow it
        while True:
            if not stack:
                return pos
            while pos < n and data[pos] in _SPACE:
                pos += 1
            if pos >= n:
                raise EndOfInput
            c = data[pos]
            if c == 0x2C:  # ,
                pos += 1
                if stack[-1] == 0:
                    pos = _key(data, pos)
                break
            if c == (0x7D if stack[-1] == 0 else 0x5D):
                stack.pop()
                pos += 1
                continue
            raise SyntaxError_(pos + 1)


def _key(data: bytes, pos: int) -> int:
    """Past an object's key string and its ``:``."""
    n = len(data)
    while pos < n and data[pos] in _SPACE:
        pos += 1
    if pos >= n:
        raise EndOfInput
    if data[pos] != 0x22:
        raise SyntaxError_(pos + 1)
    pos = _string(data, pos + 1)
    while pos < n and data[pos] in _SPACE:
        pos += 1
    if pos >= n:
        raise EndOfInput
    if data[pos] != 0x3A:  # :
        raise SyntaxError_(pos + 1)
    return pos + 1


def _string(data: bytes, pos: int) -> int:
    """Past a string's closing quote (``pos`` just after the opening one)."""
    n = len(data)
    while pos < n:
        c = data[pos]
        if c == 0x22:
            return pos + 1
        if c < 0x20:
            raise SyntaxError_(pos + 1)
        if c == 0x5C:  # backslash
            pos += 1
            if pos >= n:
                raise EndOfInput
            if data[pos] == 0x75:  # \u and four hex digits
                for i in range(1, 5):
                    if pos + i >= n:
                        raise EndOfInput
                    if data[pos + i] not in _HEX:
                        raise SyntaxError_(pos + i + 1)
                pos += 4
            elif data[pos] not in _ESCAPES:
                raise SyntaxError_(pos + 1)
        pos += 1
    raise EndOfInput


def _number(data: bytes, pos: int) -> int:
    """Past a number; a byte that cannot follow where a number needs more is refused."""
    n = len(data)

    def digits(at: int) -> int:
        while at < n and data[at] in _DIGITS:
            at += 1
        return at

    def need_digit(at: int) -> None:
        if at >= n:
            raise EndOfInput
        if data[at] not in _DIGITS:
            raise SyntaxError_(at + 1)

    if data[pos] == 0x2D:
        pos += 1
        need_digit(pos)
    pos = pos + 1 if data[pos] == 0x30 else digits(pos)
    if pos < n and data[pos] == 0x2E:  # .
        need_digit(pos + 1)
        pos = digits(pos + 1)
    if pos < n and data[pos] in b"eE":
        pos += 1
        if pos < n and data[pos] in b"+-":
            pos += 1
        need_digit(pos)
        pos = digits(pos)
    return pos
