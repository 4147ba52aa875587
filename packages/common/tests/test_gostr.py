import pytest
from nsq_common import format_go_duration, go_json, go_quote, parse_go_duration


@pytest.mark.parametrize(("raw", "quoted"), [
    ("abc", '"abc"'), ("a b", '"a b"'), ('q"', '"q\\""'), ("\t\n", '"\\t\\n"'),
    (b"\x00", '"\\x00"'), (b"\xff", '"\\xff"'), ("\x7f", '"\\x7f"'), ("é", '"é"'),
])
def test_go_quote(raw, quoted):
    assert go_quote(raw) == quoted


def test_go_json_is_compact_and_escapes_html():
    assert go_json({"a": [1, "<&>"], "b": None}) == b'{"a":[1,"\\u003c\\u0026\\u003e"],"b":null}'


@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0), ("60s", 60.0), ("1m30s", 90.0), ("250ms", 0.25), ("1h", 3600.0), ("-2s", -2.0),
    ("1.5s", 1.5), ("100us", 1e-4), ("10ns", 1e-8),
])
def test_parse_duration(text, seconds):
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "10", "1x", "1..2s", "-"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="time: invalid duration"):
        parse_go_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (60, "1m0s"), (0.25, "250ms"), (900, "15m0s"), (3600, "1h0m0s"), (2, "2s"),
    (1.5, "1.5s"), (5400.5, "1h30m0.5s"),
])
def test_format_duration(seconds, text):
    assert format_go_duration(seconds) == text
