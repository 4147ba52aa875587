"""Start-up failures read as Go's NSQ daemons write them, and exit 1.

Every listener of every daemon that cannot bind names itself and its address, in Go's words
(nsqd/nsqd.go New(), nsqlookupd/nsqlookupd.go New(), nsqadmin/nsqadmin.go New(), and the
``failed to instantiate <daemon> - `` of each apps/*/main.go)::

    FATAL: failed to instantiate nsqd - listen (127.0.0.1:4150) failed - listen tcp
    127.0.0.1:4150: bind: address already in use

and a --data-path that does not exist is refused, not created: a typo must not start an
empty broker.
"""

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

BIN = Path(sys.executable).parent
FATAL = r"\[{daemon}\] \d{{4}}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{{6}} FATAL: "


@pytest.fixture
def taken():
    """A port on 127.0.0.1 that something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def run(daemon, *argv):
    return subprocess.run([str(BIN / daemon), *argv], capture_output=True, text=True, timeout=60)


def assert_listen_fatal(done, daemon, address):
    assert done.returncode == 1, done.stderr
    expected = (f"failed to instantiate {daemon} - listen ({address}) failed - "
                f"listen tcp {address}: bind: address already in use\n")
    assert re.search(FATAL.format(daemon=daemon) + re.escape(expected), done.stderr), done.stderr
    assert "Errno" not in done.stderr and "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    ca = trustme.CA()
    d = tmp_path_factory.mktemp("certs")
    server = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(d / "server.pem")
    server.private_key_pem.write_to_path(d / "server.key")
    return d


@pytest.mark.parametrize("listener", ["tcp", "http", "https"])
def test_nsqd_listener_taken(listener, taken, tmp_path, certs):
    addresses = {"tcp": "127.0.0.1:0", "http": "127.0.0.1:0", "https": "127.0.0.1:0"}
    addresses[listener] = taken
    done = run("nsqd", f"--data-path={tmp_path}", *(f"--{k}-address={v}" for k, v in
                                                     addresses.items()),
               f"--tls-cert={certs / 'server.pem'}", f"--tls-key={certs / 'server.key'}")
    assert_listen_fatal(done, "nsqd", taken)


@pytest.mark.parametrize("listener", ["tcp", "http"])
def test_nsqlookupd_listener_taken(listener, taken):
    addresses = {"tcp": "127.0.0.1:0", "http": "127.0.0.1:0"}
    addresses[listener] = taken
    done = run("nsqlookupd", *(f"--{k}-address={v}" for k, v in addresses.items()))
    assert_listen_fatal(done, "nsqlookupd", taken)


def test_nsqadmin_listener_taken(taken):
    done = run("nsqadmin", "--nsqd-http-address=127.0.0.1:1", f"--http-address={taken}")
    assert_listen_fatal(done, "nsqadmin", taken)


def test_nsq_auth_listener_taken(taken, tmp_path):
    secrets = tmp_path / "secrets.toml"
    secrets.write_text("")
    done = run("nsq_auth", f"--secrets-file={secrets}", f"--http-address={taken}")
    assert_listen_fatal(done, "nsq_auth", taken)


def test_nsqd_refuses_a_missing_data_path(tmp_path):
    missing = tmp_path / "typo" / "data"
    done = run("nsqd", f"--data-path={missing}", "--tcp-address=127.0.0.1:0",
               "--http-address=127.0.0.1:0")
    assert done.returncode == 1
    expected = (f"failed to instantiate nsqd - failed to lock data-path: open {missing}: "
                "no such file or directory\n")
    assert re.search(FATAL.format(daemon="nsqd") + re.escape(expected), done.stderr), done.stderr
    assert not missing.exists() and not missing.parent.exists()


def test_nsqd_refuses_a_data_path_in_use(run_daemon, tmp_path):
    run_daemon("nsqd", f"--data-path={tmp_path}")
    done = run("nsqd", f"--data-path={tmp_path}", "--tcp-address=127.0.0.1:0",
               "--http-address=127.0.0.1:0")
    assert done.returncode == 1
    expected = (f"failed to instantiate nsqd - failed to lock data-path: cannot flock directory "
                f"{tmp_path} - resource temporarily unavailable (possibly in use by another "
                "instance of nsqd)\n")
    assert re.search(FATAL.format(daemon="nsqd") + re.escape(expected), done.stderr), done.stderr


def test_nsqd_refuses_a_data_path_that_is_a_file(tmp_path):
    # Go's nsqd locks a file as readily as a directory, then fails reading nsqd.dat in it
    not_a_dir = tmp_path / "data"
    not_a_dir.write_text("")
    done = run("nsqd", f"--data-path={not_a_dir}", "--tcp-address=127.0.0.1:0",
               "--http-address=127.0.0.1:0")
    assert done.returncode == 1
    dat = not_a_dir / "nsqd.dat"
    expected = (f"failed to load metadata - failed to read metadata from {dat} - open {dat}: "
                "not a directory\n")
    assert re.search(FATAL.format(daemon="nsqd") + re.escape(expected), done.stderr), done.stderr
    assert "Errno" not in done.stderr and "Traceback" not in done.stderr


def test_nsqd_refuses_unreadable_metadata_and_leaves_it_as_it_was(tmp_path):
    # an empty nsqd.dat written over a damaged one would orphan every queue it listed
    dat = tmp_path / "nsqd.dat"
    dat.write_text('{"topics": [{"name": "kept"')
    done = run("nsqd", f"--data-path={tmp_path}", "--tcp-address=127.0.0.1:0",
               "--http-address=127.0.0.1:0")
    assert done.returncode == 1
    expected = f"failed to load metadata - failed to parse metadata in {dat} - "
    assert re.search(FATAL.format(daemon="nsqd") + re.escape(expected), done.stderr), done.stderr
    assert dat.read_text() == '{"topics": [{"name": "kept"'
