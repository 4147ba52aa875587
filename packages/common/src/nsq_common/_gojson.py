"""JSON as Go's encoding/json writes and reads it: the one codec of NSQ's JSON wire bodies.

Writing (``go_json``): compact, and ``<``, ``>``, ``&``, U+2028 and U+2029 escaped, as Go's
``json.Marshal`` does; the caller gives the keys in the order Go's struct declares them.

Reading (``decode_go_struct``): a body decoded into a flat struct of strings, bools and ints
as ``json.Unmarshal`` fills one, which is how nsqd reads IDENTIFY and how nsqlookupd and nsqd
read each other's IDENTIFY bodies::

    {"Heartbeat_Interval": -1, "client_id": null, "unknown": [1]}
      |                          |                 +-- unknown keys: ignored (syntax checked)
      |                          +-- null: the field keeps its value (zero unless set before)
      +-- a key matches its field exactly, else case-insensitively (Go's field matching)

The last of duplicate keys wins; a top-level ``null`` is no error and leaves every field zero;
anything else at the top level, or a value of the wrong JSON type for its field (a string for
an int, ``1.5`` or ``1e2`` for an int, ``1`` for a bool, an int out of its Go type's range),
fails the whole body. ``NaN`` and ``Infinity``, which Python's json reads, are not JSON and
fail too. Invalid UTF-8 and lone surrogates in strings become U+FFFD, as Go's decoder makes
them.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from typing import Any

_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_GO_ESCAPED = re.compile("[<>&\u2028\u2029]")
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
               "\u2029": "\\u2029"}


def go_json(value: Any) -> bytes:
    """Compact JSON as Go's encoding/json writes it (``<``, ``>``, ``&`` escaped)."""
    text = _JSON.encode(value)
    if _GO_ESCAPED.search(text) is not None:
        text = _GO_ESCAPED.sub(lambda match: _GO_ESCAPES[match.group()], text)
    return text.encode()


class GoKind(enum.Enum):
    """The Go type of a struct field: which JSON values it takes, and its zero value."""

    STRING = "string"
    BOOL = "bool"
    INT32 = "int32"
    INT64 = "int64"  # Go's int on the 64-bit platforms NSQ runs on

    @property
    def zero(self) -> Any:
        return _ZERO[self]


_ZERO: dict[GoKind, Any] = {GoKind.STRING: "", GoKind.BOOL: False, GoKind.INT32: 0,
                            GoKind.INT64: 0}
_INT_RANGE = {GoKind.INT32: (-(2**31), 2**31 - 1), GoKind.INT64: (-(2**63), 2**63 - 1)}
_SURROGATE = re.compile("[\ud800-\udfff]")
# Go folds a key to the smallest rune of each letter's case orbit (encoding/json's foldName):
# for the ASCII names of NSQ's structs that is upper case, and the two other runes that fold
# to ASCII letters, the Kelvin sign and the long s (so "ß" never matches "ss", unlike casefold).
_FOLD = str.maketrans({**{chr(c): chr(c - 32) for c in range(ord("a"), ord("z") + 1)},
                       "\u212a": "K", "\u017f": "S"})


def decode_go_struct(data: bytes, fields: Mapping[str, GoKind]) -> dict[str, Any]:
    """Decode ``data`` into ``fields`` (JSON name -> Go type; ASCII names) as
    ``json.Unmarshal`` fills a struct (the rules are in the module's docstring).

    Returns:
        Every field of ``fields`` by its name, at its zero value when the body has none.

    Raises:
        ValueError: not JSON, not an object (nor ``null``), a value of the wrong type.
    """
    values: dict[str, Any] = {name: _ZERO[kind] for name, kind in fields.items()}
    try:
        pairs = json.loads(data.decode("utf-8", "replace"), object_pairs_hook=_Pairs,
                           parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if pairs is None:
        return values
    if not isinstance(pairs, _Pairs):
        raise ValueError("JSON body is not an object")
    folded: dict[str, str] | None = None
    for key, value in pairs:
        if key in fields:
            name = key
        else:
            if folded is None:
                folded = {field.translate(_FOLD): field for field in fields}
            found = folded.get(key.translate(_FOLD))
            if found is None:
                continue
            name = found
        if value is None:
            continue
        kind = fields[name]
        if kind is GoKind.STRING:
            if not isinstance(value, str):
                raise ValueError(f"cannot use {value!r} as string for {name}")
            value = _SURROGATE.sub("\ufffd", value)
        elif kind is GoKind.BOOL:
            if not isinstance(value, bool):
                raise ValueError(f"cannot use {value!r} as bool for {name}")
        else:
            low, high = _INT_RANGE[kind]
            if type(value) is not int or not low <= value <= high:
                raise ValueError(f"cannot use {value!r} as {kind.value} for {name}")
        values[name] = value
    return values


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON literal {name}")


class _Pairs(list[tuple[str, Any]]):
    """A decoded JSON object kept as its ordered key/value pairs."""
