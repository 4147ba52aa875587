import pytest
from nsq_common import join_host_port, split_address


def test_join_host_port_brackets_ipv6_as_go_does():
    assert join_host_port("127.0.0.1", 4150) == "127.0.0.1:4150"
    assert join_host_port("::1", 4150) == "[::1]:4150"
    assert join_host_port("nsqd.local", "4151") == "nsqd.local:4151"


def test_split_address():
    assert split_address("127.0.0.1:4150") == ("127.0.0.1", 4150)
    assert split_address("[::1]:4150") == ("::1", 4150)
    for bad in ("localhost", ":4150", "host:", "host:port"):
        with pytest.raises(ValueError):
            split_address(bad)
