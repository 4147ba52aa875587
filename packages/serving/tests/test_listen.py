"""listen_tcp: the listening socket every daemon binds, failing in Go's net.Listen words."""

import socket

import pytest
from nsq_common import go_errno_text
from nsq_serving import ListenError, listen_tcp, split_host_port


@pytest.fixture
def taken():
    sock = listen_tcp("127.0.0.1:0")
    yield sock.getsockname()[1]
    sock.close()


def test_listens_on_a_free_port():
    sock = listen_tcp("127.0.0.1:0")
    with sock:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port > 0
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
        with socket.create_connection((host, port), timeout=30):
            pass


@pytest.mark.parametrize(("given", "shown"), [
    ("127.0.0.1:{port}", "127.0.0.1:{port}"),
    (":{port}", ":{port}"),  # no host: Go prints none either
    ("localhost:{port}", "127.0.0.1:{port}"),  # a name: its (IPv4) address
])
def test_a_taken_port_reads_as_go_writes_it(taken, given, shown):
    address = given.format(port=taken)
    with pytest.raises(ListenError) as caught:
        listen_tcp(address)
    assert str(caught.value) == (f"listen ({address}) failed - listen tcp "
                                 f"{shown.format(port=taken)}: bind: address already in use")
    assert isinstance(caught.value, OSError)


@pytest.mark.parametrize(("address", "detail"), [
    ("127.0.0.1", "address 127.0.0.1: missing port in address"),
    ("1:2:3", "address 1:2:3: too many colons in address"),
    ("127.0.0.1:99999", "address 99999: invalid port"),
    ("127.0.0.1:no-such-service", "lookup tcp/no-such-service: unknown port"),
    ("no-such-host.invalid:1", "lookup no-such-host.invalid: no such host"),
])
def test_bad_addresses(address, detail):
    with pytest.raises(ListenError) as caught:
        listen_tcp(address)
    assert str(caught.value) == f"listen ({address}) failed - listen tcp: {detail}"


def test_go_errno_text():
    import errno

    assert go_errno_text(OSError(errno.EADDRINUSE, "x")) == "address already in use"
    assert go_errno_text(OSError(errno.ENOENT, "x")) == "no such file or directory"
    assert go_errno_text(OSError(errno.EWOULDBLOCK, "x")) == "resource temporarily unavailable"


def test_split_host_port():
    assert split_host_port("127.0.0.1:4150") == ("127.0.0.1", "4150")
    assert split_host_port("[::1]:4150") == ("::1", "4150")
    assert split_host_port(":4150") == ("", "4150")
