"""PUT /config/<option> as nsqd and nsqadmin take it (nsq_common.put_config)."""

import pytest
from nsq_common import put_config


@pytest.mark.parametrize(("option", "body", "error", "set_to"), [
    ("lookupd", b'["a:1", "b:2"]', None, ("addresses", ["a:1", "b:2"])),
    ("lookupd", b"[]", None, ("addresses", [])),
    ("lookupd", b"{bad", "INVALID_VALUE", None),
    ("lookupd", b'["a", 1]', "INVALID_VALUE", None),
    ("lookupd", b'"a:1"', "INVALID_VALUE", None),
    ("log_level", b" WARN\n", None, ("log_level", "warn")),
    ("log_level", b"loud", "INVALID_VALUE", None),
    ("mem_queue_size", b"5", "INVALID_OPTION", None),
])
def test_put_config(option, body, error, set_to):
    done = []
    assert put_config(option, body, "lookupd", lambda a: done.append(("addresses", a)),
                      lambda level: done.append(("log_level", level))) == error
    assert done == ([set_to] if set_to else [])
