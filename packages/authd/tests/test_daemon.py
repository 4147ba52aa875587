"""The nsq_auth executable: start-up lines, answers over real HTTP, SIGHUP reloads, clean
exits, and nsqd asking it for a client's AUTH."""

import json
import signal
import subprocess
import sys
import time

import httpx
import pytest
from nsq_common import commands
from nsq_testing import WireClient, start_daemon

WAIT = 30.0  # seconds: the most any one step may take on a slow, busy machine


@pytest.fixture
def secrets(secret_entry):
    return secret_entry("alice", "^orders", ["publish", "subscribe"], secret="s3cret")


@pytest.fixture
def secrets_file(tmp_path, secrets):
    path = tmp_path / "secrets.toml"
    path.write_text(secrets)
    return path


@pytest.fixture
def authd(secrets_file):
    daemon = start_daemon("nsq_auth", ["--http-address=127.0.0.1:0",
                                       f"--secrets-file={secrets_file}"], expect=("HTTP",))
    yield daemon
    daemon.stop()


def status(daemon, secret: str) -> int:
    return httpx.get(f"http://{daemon.http_address}/auth",
                     params={"secret": secret, "remote_ip": "127.0.0.1", "tls": "false",
                             "common_name": ""}, timeout=WAIT).status_code


def wait_for(condition, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_serves_reloads_on_sighup_and_exits_cleanly(authd, secrets_file, secrets, secret_entry):
    assert httpx.get(f"http://{authd.http_address}/ping", timeout=WAIT).text == "OK"
    assert status(authd, "s3cret") == 200 and status(authd, "n3w") == 403
    secrets_file.write_text(secrets + secret_entry("dave", ".*", ["subscribe"], secret="n3w"))
    authd.process.send_signal(signal.SIGHUP)
    wait_for(lambda: status(authd, "n3w") == 200)
    secrets_file.write_text("this is not toml [")
    authd.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload failed" in authd.output())
    assert status(authd, "n3w") == 200  # the last good file stays in use
    assert authd.stop() == 0
    log = authd.output()
    assert "[nsq_auth] " in log and "INFO: HTTP: listening on 127.0.0.1:" in log
    assert "INFO: AUTH: alice (remote_ip=127.0.0.1" in log and "exiting" in log
    assert "s3cret" not in log and "n3w" not in log


def test_sigint_exits_zero(authd):
    assert authd.stop(signal.SIGINT) == 0


@pytest.mark.parametrize(("args", "error"), [
    ([], "FATAL: --secrets-file is required"),
    (["--secrets-file=/nonexistent/secrets.toml"], "FATAL: failed to load"),
])
def test_refuses_to_start_without_usable_secrets(args, error):
    out = subprocess.run([sys.executable, "-m", "nsq_authd", "--http-address=127.0.0.1:0",
                          *args], capture_output=True, timeout=30)
    assert out.returncode == 1 and error in out.stderr.decode()


async def identify(client: WireClient) -> bytes:
    # WireClient.identify() would wait only its default 5 s for the answer
    await client.send(commands.identify({"feature_negotiation": True}))
    return await client.response(WAIT)


async def test_nsqd_authorizes_clients_through_it(authd, run_daemon):
    nsqd = run_daemon("nsqd", f"--auth-http-address={authd.http_address}")
    client = await WireClient.connect(nsqd.tcp_address)
    try:
        assert json.loads(await identify(client))["auth_required"] is True
        await client.send(commands.auth("wrong"))
        assert (await client.error(WAIT)).startswith(b"E_AUTH_FAILED")
    finally:
        await client.aclose()
    client = await WireClient.connect(nsqd.tcp_address)
    try:
        await identify(client)
        await client.send(commands.auth("s3cret"))
        assert json.loads(await client.response(WAIT)) == {
            "identity": "alice", "identity_url": "", "permission_count": 1}
        await client.send(commands.pub("orders_eu", b"hello"))
        assert await client.response(WAIT) == b"OK"
        await client.send(commands.pub("payments", b"no"))
        assert (await client.error(WAIT)).startswith(b"E_UNAUTHORIZED")
    finally:
        await client.aclose()
