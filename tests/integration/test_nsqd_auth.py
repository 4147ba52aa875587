"""AUTH against an auth server (a small one run by this test on loopback), and the HTTPS
listener with --tls-required."""

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
import trio
import trustme
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient, free_port

SECRETS = {
    "pub-orders": {"ttl": 3600, "identity": "alice", "identity_url": "https://example.com/alice",
                   "authorizations": [{"topic": "^orders$", "channels": [".*"],
                                       "permissions": ["publish"]}]},
    "short": {"ttl": 1, "identity": "bob",
              "authorizations": [{"topic": ".*", "channels": [".*"],
                                  "permissions": ["publish", "subscribe"]}]},
    "nothing": {"ttl": 60, "identity": "carol", "authorizations": []},
}


class AuthServer:
    def __init__(self):
        self.queries = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                outer.queries.append(query)
                reply = SECRETS.get(query.get("secret", ""))
                body = json.dumps(reply or {"message": "NOT_AUTHORIZED"}).encode()
                self.send_response(200 if reply else 403)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def auth_server():
    server = AuthServer()
    yield server
    server.close()


async def authed(daemon, secret):
    client = await WireClient.connect(daemon.tcp_address)
    reply = json.loads(await client.identify())
    assert reply["auth_required"] is True
    await client.send(commands.auth(secret))
    return client


async def test_publish_allowed_on_one_topic_refused_on_another(run_daemon, auth_server):
    daemon = run_daemon("nsqd", f"--auth-http-address={auth_server.address}")
    client = await authed(daemon, "pub-orders")
    assert json.loads(await client.response()) == {
        "identity": "alice", "identity_url": "https://example.com/alice", "permission_count": 1}
    query = auth_server.queries[-1]
    assert query == {"common_name": "", "remote_ip": "127.0.0.1", "secret": "pub-orders",
                     "tls": "false"}
    await client.pub("orders", b"ok")
    await client.send(commands.mpub("orders", [b"a", b"b"]))
    assert await client.response() == b"OK"
    await client.send(commands.pub("payments", b"no"))
    assert await client.error() == b'E_UNAUTHORIZED AUTH failed for PUB on "payments" ""'
    assert await client.closed()
    await client.aclose()
    stats = httpx.get(f"http://{daemon.http_address}/stats", params={"format": "json"},
                      timeout=DEADLINE).json()
    assert stats["topics"][0]["topic_name"] == "orders"
    assert stats["topics"][0]["message_count"] == 3


async def test_subscribe_refused_and_auth_first(run_daemon, auth_server):
    daemon = run_daemon("nsqd", f"--auth-http-address={auth_server.address}")
    client = await authed(daemon, "pub-orders")
    await client.response()
    await client.send(commands.sub("orders", "c"))
    assert await client.error() == b'E_UNAUTHORIZED AUTH failed for SUB on "orders" "c"'
    await client.aclose()
    anonymous = await WireClient.connect(daemon.tcp_address)
    await anonymous.send(commands.pub("orders", b"x"))
    assert await anonymous.error() == b"E_AUTH_FIRST AUTH required before PUB"
    await anonymous.aclose()
    empty = await authed(daemon, "nothing")
    assert await empty.error() == b"E_UNAUTHORIZED AUTH no authorizations found"
    await empty.aclose()
    unknown = await authed(daemon, "who?")
    assert await unknown.error() == b"E_AUTH_FAILED AUTH failed"
    await unknown.aclose()


async def test_expired_authorization_is_fetched_again(run_daemon, auth_server):
    daemon = run_daemon("nsqd", f"--auth-http-address={auth_server.address}")
    started = trio.current_time()  # before the AUTH: nsqd's 1 s TTL starts later
    client = await authed(daemon, "short")
    await client.response()
    before = len(auth_server.queries)
    # publish until nsqd asks the auth server again: that must be the TTL running out (no
    # sooner than 1 s after the AUTH), and one PUB asks once
    n = 0
    with trio.fail_after(DEADLINE):
        while len(auth_server.queries) == before:
            n += 1
            await client.pub("any", b"%d" % n)
            await trio.sleep(0.05)
    assert trio.current_time() - started >= 1.0
    assert len(auth_server.queries) == before + 1
    await client.subscribe("any", "c")
    doc = httpx.get(f"http://{daemon.http_address}/stats", params={"format": "json"}, timeout=DEADLINE).json()
    c = doc["topics"][0]["channels"][0]["clients"][0]
    assert (c["authed"], c["auth_identity"]) == (True, "bob")
    await client.aclose()


async def test_auth_server_down_gives_auth_failed_and_nsqd_keeps_serving(run_daemon):
    daemon = run_daemon("nsqd", f"--auth-http-address=127.0.0.1:{free_port()}")
    client = await authed(daemon, "anything")
    assert await client.error() == b"E_AUTH_FAILED AUTH failed"
    assert await client.closed()
    await client.aclose()
    assert httpx.get(f"http://{daemon.http_address}/ping", timeout=DEADLINE).text == "OK"
    again = await authed(daemon, "anything")
    assert await again.error() == b"E_AUTH_FAILED AUTH failed"
    await again.aclose()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    d = tmp_path_factory.mktemp("https-certs")
    ca.cert_pem.write_to_path(d / "ca.pem")
    server.private_key_pem.write_to_path(d / "server.key")
    server.cert_chain_pems[0].write_to_path(d / "server.pem")
    return d


def test_https_listener_and_tls_required_over_plain_http(run_daemon, certs):
    daemon = run_daemon("nsqd", f"--tls-cert={certs / 'server.pem'}", f"--tls-key={certs / 'server.key'}",
                        "--https-address=127.0.0.1:0", "--tls-required=true", expect=("TCP", "HTTP", "HTTPS"))
    https = daemon.addresses["HTTPS"]
    ca = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    r = httpx.get(f"https://{https}/ping", verify=ca, timeout=DEADLINE)
    assert (r.status_code, r.text) == (200, "OK")
    info = httpx.get(f"https://{https}/info", verify=ca, timeout=DEADLINE).json()
    assert info["tcp_port"] == daemon.tcp_port
    plain = httpx.get(f"http://{daemon.http_address}/stats", timeout=DEADLINE)
    port = int(https.rsplit(":", 1)[1])
    assert plain.status_code == 403
    assert plain.text == f'{{"message": "TLS_REQUIRED", "https_port": {port}}}'
