import pytest
from nsq_common import is_ephemeral, is_valid_name


@pytest.mark.parametrize("name", ["a", "topic", "a.b_c-d", "x" * 64, "t#ephemeral",
                                  "x" * 54 + "#ephemeral", b"bytes-ok"])
def test_valid_names(name):
    assert is_valid_name(name)


@pytest.mark.parametrize("name", ["", "x" * 65, "x" * 55 + "#ephemeral", "a b", "a/b", "#ephemeral",
                                  "t#eph", "t#ephemeral#ephemeral", "t\n", "é", b"\xff", "a:b", "a*"])
def test_invalid_names(name):
    assert not is_valid_name(name)


def test_ephemeral():
    assert is_ephemeral("x#ephemeral")
    assert not is_ephemeral("x")
