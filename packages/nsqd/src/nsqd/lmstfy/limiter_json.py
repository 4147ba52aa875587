"""A limiter's JSON read as lmstfy reads it: Go's ``encoding/json`` into
``struct{Read, Write, Interval int64}`` (gin's ``BindJSON``), and its refusal as gin writes it.

Go decodes what fits and reports the first value that does not: a number that is not an
int64 (``1.5``, ``1e308``, ``1e999``, ``-1e999``, 2**63), a string, a bool, an array or an
object, as ``json.UnmarshalTypeError``; keys match the fields in any letter case, ``null``
leaves a field as it is, other keys are ignored. JSON that is not is refused where Go's scanner
stops (``goscan``). gin has written the 400 status before lmstfy
writes ``{"error": <the error as JSON>}``, so the answer goes out without its JSON content type
(Go sniffs ``text/plain; charset=utf-8``).
"""

from __future__ import annotations

import json
from typing import Any

from nsq_serving import HttpError

from .goscan import EndOfInput, SyntaxError_, scan_value

_FIELDS = ("read", "write", "interval")
_INT64 = range(-(1 << 63), 1 << 63)
_SPACE = " \t\r\n"


class _Number(str):
    """A number's literal as it was written."""


def _decoder() -> json.JSONDecoder:
    return json.JSONDecoder(parse_int=_Number, parse_float=_Number, parse_constant=_invalid)


def _invalid(name: str) -> Any:
    raise ValueError(f"invalid literal {name}")


def decode_limiter(body: bytes) -> tuple[int, int, int]:
    """``(read, write, interval)`` from a limiter's JSON (absent fields are 0).

    Raises:
        HttpError: 400 with gin's text/plain body for JSON Go would not decode into it.
    """
    try:  # the first value only, as Go's json.Decoder reads it (what follows is not read)
        scan_value(body)
    except SyntaxError_ as exc:
        raise _refused_error({"Offset": exc.offset}) from None
    except EndOfInput:
        raise _refused_error({}) from None
    text = body.decode("latin-1")  # offsets are Go's byte offsets; Go reads bytes, not UTF-8
    decoder = _decoder()
    start = _skip(text, 0)
    values = dict.fromkeys(_FIELDS, 0)
    first: dict[str, Any] | None = None
    if text.startswith("null", start):
        return values["read"], values["write"], values["interval"]
    if text[start] != "{":
        value, end = _value(decoder, body, text, start)
        return _refused(_type_error(value, start, end, "", ""))
    pos = _skip(text, start + 1)
    while text[pos] != "}":
        key, pos = decoder.raw_decode(text, pos)
        pos = _skip(text, _skip(text, pos) + 1)  # past ':'
        value_start = pos
        value, pos = _value(decoder, body, text, pos)
        field = next((f for f in _FIELDS if f == key), None) or next(
            (f for f in _FIELDS if f.lower() == str(key).lower()), None)
        if field is not None and value is not None:
            number = _int64(value)
            if number is None:
                first = first or _type_error(value, value_start, pos, "Limiter", field)
            else:
                values[field] = number
        pos = _skip(text, pos)
        if text[pos] == ",":
            pos = _skip(text, pos + 1)
    if first is not None:
        return _refused(first)
    return values["read"], values["write"], values["interval"]


def _value(decoder: json.JSONDecoder, body: bytes, text: str, pos: int) -> tuple[Any, int]:
    """The value at ``pos`` and its end; an array or object (however deep) as an empty one,
    all a limiter's fields need to know of it."""
    if text[pos] == "[":
        return [], scan_value(body, pos)
    if text[pos] == "{":
        return {}, scan_value(body, pos)
    return decoder.raw_decode(text, pos)


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _SPACE:
        pos += 1
    return pos


def _int64(value: Any) -> int | None:
    if not isinstance(value, _Number):
        return None
    digits = value[1:] if value.startswith("-") else value
    if not digits.isdigit() or int(value) not in _INT64:
        return None
    return int(value)


def _type_error(value: Any, start: int, end: int, struct: str, field: str) -> dict[str, Any]:
    """Go's ``UnmarshalTypeError`` as ``json.Marshal`` writes it (its ``Type`` is ``{}``)."""
    if isinstance(value, _Number):
        kind, offset = f"number {value}", end
    elif isinstance(value, str):
        kind, offset = "string", end
    elif isinstance(value, bool):
        kind, offset = "bool", end
    elif isinstance(value, list):
        kind, offset = "array", start + 1
    else:
        kind, offset = "object", start + 1
    return {"Value": kind, "Type": {}, "Offset": offset, "Struct": struct, "Field": field}


def _refused(error: dict[str, Any]) -> tuple[int, int, int]:
    raise _refused_error(error)


def _refused_error(error: dict[str, Any]) -> HttpError:
    body = json.dumps({"error": error}, separators=(",", ":")).encode()
    return HttpError(400, body=body)
