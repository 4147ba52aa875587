"""Go formatting that shows up in NSQ's wire texts: ``%q`` quoting, durations, errno texts
(Go's JSON is ``_gojson``)."""

from __future__ import annotations

import os

_ESCAPES = {
    "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
    "\\": "\\\\", '"': '\\"',
}


def go_quote(value: str | bytes) -> str:
    """Quote like Go's ``strconv.Quote`` (``%q``): bytes that are not UTF-8 become ``\\xNN``."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "surrogateescape")
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, carried by surrogateescape
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0,
          "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float:
    """Parse a Go duration (``1m30s``, ``250ms``, ``-1.5h``, ``0``) into seconds.

    Raises:
        ValueError: with Go's wording, ``time: invalid duration "<text>"``.
    """
    original = text
    error = ValueError(f"time: invalid duration {go_quote(original)}")
    sign = 1.0
    if text[:1] in ("+", "-"):
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise error
    total = 0.0
    while text:
        i = 0
        while i < len(text) and (text[i].isdigit() or text[i] == "."):
            i += 1
        number, text = text[:i], text[i:]
        if not number or number == "." or number.count(".") > 1:
            raise error
        j = 0
        while j < len(text) and not (text[j].isdigit() or text[j] == "."):
            j += 1
        unit, text = text[:j], text[j:]
        if unit not in _UNITS:
            raise error
        total += float(number) * _UNITS[unit]
    return sign * total


def format_go_duration(seconds: float) -> str:
    """Format seconds as Go's ``time.Duration.String()`` does (``1m0s``, ``250ms``, ``0s``)."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000_000_000:  # as a decimal of ms, µs or ns, cut from the digits of ns
        if ns < 1_000:
            return f"{sign}{ns}ns"
        digits, unit = (6, "ms") if ns >= 1_000_000 else (3, "\u00b5s")
        text = str(ns)
        fraction = text[-digits:].rstrip("0")
        return f"{sign}{text[:-digits]}{'.' if fraction else ''}{fraction}{unit}"
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    secs = _trim(rest / 1e9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}"
    if minutes:
        return f"{sign}{minutes}m{secs}"
    return sign + secs


def _trim(value: float) -> str:
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return text or "0"


def go_errno_text(exc: OSError) -> str:
    """The text Go's ``syscall.Errno`` gives for ``exc``: the C library's, starting lower case
    (``address already in use``, ``no such file or directory``)."""
    if exc.errno is None:
        return str(exc)
    text = os.strerror(exc.errno)
    return text[:1].lower() + text[1:]
