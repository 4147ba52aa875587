"""lmstfy's query as gin's ``c.Query`` reads it: the split without unescaping gives what
``parse_qsl`` gives, for every query it is taken for."""

from __future__ import annotations

import random
from urllib.parse import parse_qsl

from nsqd.lmstfy.api import query_params
from starlette.requests import Request


def _query(raw: bytes) -> dict[str, str]:
    return query_params(Request({"type": "http", "query_string": raw}))


def _parse_qsl_first(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
        out.setdefault(key, value)
    return out


def test_the_usual_queries() -> None:
    assert _query(b"") == {}
    assert _query(b"token=abc&delay=5&ttl=60&tries=3") == {
        "token": "abc", "delay": "5", "ttl": "60", "tries": "3"}
    assert _query(b"delay=1&delay=2") == {"delay": "1"}  # the first, as gin's c.Query
    assert _query(b"a&b=&=c&&d=e=f") == {"a": "", "b": "", "": "c", "d": "e=f"}
    assert _query(b"token=a%3Ab+c") == {"token": "a:b c"}  # unescaped where there is some


def test_as_parse_qsl_gives_it() -> None:
    rng = random.Random(42)
    alphabet = b"ab=&;%+2F\xe9 09"
    for _ in range(5000):
        raw = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 16)))
        assert _query(raw) == _parse_qsl_first(raw), raw
