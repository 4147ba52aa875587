"""NSQ's HTTP "V1" conventions (Go's internal/http_api), for every daemon, nsqadmin and the
client; plain values and functions, no HTTP library, so each side builds its own responses.

Server side::

    200 OK
    X-NSQ-Content-Type: nsq; version=1.0            on every API answer (not on /ping)
    Content-Type: application/json; charset=utf-8  an object: compact JSON in Go's field order
    {"message":"TOPIC_NOT_FOUND"}                   an error: its status and NSQ's text

    POST /pub?topic=t&defer=1000                    the query as Go's url.ParseQuery reads it:
                                                    a ";" or a bad "%" escape refuses the whole
                                                    query (NSQ's 400 INVALID_REQUEST); the first
                                                    of repeated keys is the one NSQ reads

Client side: a request sends ``Accept: application/vnd.nsq; version=1.0``; an answer with the
``X-NSQ-Content-Type`` header is the object itself, an older server's is wrapped in
``{"status_code":200,"status_txt":"OK","data":{...}}`` (``decode_v1`` unwraps either).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from ._goflags import NSQ_LOG_LEVELS
from ._gojson import go_json

NSQ_CONTENT_TYPE = "X-NSQ-Content-Type"
NSQ_CONTENT_TYPE_V1 = "nsq; version=1.0"
ACCEPT_V1 = "application/vnd.nsq; version=1.0"
JSON_CONTENT_TYPE = "application/json; charset=utf-8"
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"


def v1_headers() -> dict[str, str]:
    """The headers of a V1 answer (a new dict: the caller may add to it)."""
    return {NSQ_CONTENT_TYPE: NSQ_CONTENT_TYPE_V1}


def put_config(option: str, body: bytes, addresses_option: str,
               set_addresses: Callable[[list[str]], None],
               set_log_level: Callable[[str], None]) -> str | None:
    """``PUT /config/<option>`` as nsqd and nsqadmin take it (Go's ``doConfig``): their
    lookupd address list (``addresses_option``) from a JSON list of strings, ``log_level``
    from a level name (any case, spaces around it); the value goes to its setter.

    Returns:
        None once set, else the text of NSQ's 400 answer: ``INVALID_VALUE`` for a bad value,
        ``INVALID_OPTION`` for an option that cannot be set.
    """
    if option == addresses_option:
        try:
            addresses = json.loads(body)
        except ValueError:
            return "INVALID_VALUE"
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            return "INVALID_VALUE"
        set_addresses(addresses)
    elif option == "log_level":
        level = body.decode("utf-8", "replace").strip().lower()
        if level not in NSQ_LOG_LEVELS:
            return "INVALID_VALUE"
        set_log_level(level)
    else:
        return "INVALID_OPTION"
    return None


def error_json(text: str) -> bytes:
    """A V1 error body: ``{"message":"<TEXT>"}``."""
    return go_json({"message": text})


def parse_query(raw: bytes) -> dict[str, list[str]]:
    """Go's ``url.ParseQuery``: every value of every key, in order. Values are str, bytes that
    are not UTF-8 kept as surrogates (``surrogateescape``), as Go keeps them.

    Raises:
        ValueError: a ``;`` in a pair, or a ``%`` not followed by two hex digits (the whole
            query is refused, as Go's callers in NSQ refuse it).
    """
    values: dict[str, list[str]] = {}
    error: ValueError | None = None
    for pair in raw.split(b"&"):
        if b";" in pair:
            error = error or ValueError("invalid semicolon separator in query")
            continue
        if not pair:
            continue
        key, _, value = pair.partition(b"=")
        try:
            values.setdefault(_unescape(key), []).append(_unescape(value))
        except ValueError as exc:
            error = error or exc
    if error is not None:
        raise error
    return values


def query_first(raw: bytes) -> dict[str, str]:
    """The query as NSQ's handlers read it (``reqParams.Get``): the first value of each key.

    A query with nothing to unescape (the usual ``topic=t``) is split without ``parse_query``'s
    work, as it is read on nsqd's hot routes (/pub, /mpub, /channel/consume, /message/fin).

    Raises:
        ValueError: as ``parse_query``.
    """
    out: dict[str, str] = {}
    text = raw.decode("utf-8", "surrogateescape")
    if "%" in text or "+" in text or ";" in text:  # (str's `in` is ~10x faster than bytes')
        for key, values in parse_query(raw).items():
            out[key] = values[0]
        return out
    for pair in text.split("&"):
        if pair:
            key, _, value = pair.partition("=")
            out.setdefault(key, value)
    return out


_HEX = b"0123456789abcdefABCDEF"


def _unescape(text: bytes) -> str:
    if 0x25 not in text and 0x2B not in text:  # no "%", no "+": nothing to unescape
        return text.decode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(text):
        byte = text[i]
        if byte == 0x25:  # "%"
            pair = text[i + 1 : i + 3]
            if len(pair) < 2 or pair[0] not in _HEX or pair[1] not in _HEX:
                bad = text[i : i + 3].decode("latin-1")
                raise ValueError(f'invalid URL escape "{bad}"')
            out.append(int(pair, 16))
            i += 3
            continue
        out.append(0x20 if byte == 0x2B else byte)  # "+" is a space
        i += 1
    return out.decode("utf-8", "surrogateescape")


def decode_v1(headers: Mapping[str, str], body: bytes) -> Any:
    """The payload of a V1 answer, ``{"data": ...}`` envelopes of pre-1.0 servers unwrapped.

    Args:
        headers: the answer's headers, looked up as ``X-NSQ-Content-Type`` (pass a
            case-insensitive mapping, as HTTP clients give).
        body: the answer's body; empty reads as ``{}``.

    Raises:
        ValueError: the body is not JSON.
    """
    data = json.loads(body or b"{}")
    if headers.get(NSQ_CONTENT_TYPE) == NSQ_CONTENT_TYPE_V1:
        return data
    if isinstance(data, dict):
        return data.get("data") or {}
    return {}
