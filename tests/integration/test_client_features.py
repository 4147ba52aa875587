"""The client's IDENTIFY feature negotiation against a real nsqd: TLS, snappy, deflate (and
combinations) carry 1000 messages each way; AUTH against an auth server started here."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
from nsq_client import ConnectError, Consumer, Producer, PublishError
from nsq_testing import DEADLINE, Daemon


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, trustme.CA]:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    d = tmp_path_factory.mktemp("certs")
    server.private_key_pem.write_to_path(d / "server.key")
    server.cert_chain_pems[0].write_to_path(d / "server.pem")
    return d, ca


async def round_trip(nsqd: Daemon, topic: str, count: int, **options: Any) -> dict[str, Any]:
    """Publish and consume ``count`` messages; nsqd's view of the consumer connection."""
    async with Producer(nsqd.tcp_address, **options) as producer, \
            producer.pipeline(max_pending=100) as pipeline:
        for i in range(count):
            await pipeline.pub(topic, b"secret %d " % i + b"z" * 200)
    got = set()
    async with Consumer(topic, "c", nsqd_tcp_addresses=[nsqd.tcp_address], max_in_flight=100,
                        **options) as consumer:
        with trio.fail_after(30):
            async for message in consumer:
                got.add(message.body)
                if len(got) == count:
                    break
        async with httpx.AsyncClient(timeout=DEADLINE) as http:
            stats = (await http.get(f"http://{nsqd.http_address}/stats",
                                    params={"format": "json", "topic": topic})).json()
    assert got == {b"secret %d " % i + b"z" * 200 for i in range(count)}
    return stats["topics"][0]["channels"][0]["clients"][0]


@pytest.mark.parametrize("features", [
    {"tls_v1": True}, {"snappy": True}, {"deflate": True, "deflate_level": 3},
    {"tls_v1": True, "snappy": True}, {"tls_v1": True, "deflate": True},
], ids=["tls", "snappy", "deflate", "tls+snappy", "tls+deflate"])
async def test_negotiated_features_carry_messages(run_daemon: Callable[..., Daemon],
                                                  certs: tuple[Path, trustme.CA],
                                                  features: dict[str, Any]) -> None:
    directory, ca = certs
    nsqd = run_daemon("nsqd", f"--tls-cert={directory / 'server.pem'}",
                      f"--tls-key={directory / 'server.key'}")
    options = dict(features)
    if features.get("tls_v1"):
        context = ssl.create_default_context()
        ca.configure_trust(context)
        options["tls_context"] = context
    client = await round_trip(nsqd, "features", 1000, **options)
    assert client["tls"] is bool(features.get("tls_v1"))
    assert client["snappy"] is bool(features.get("snappy"))
    assert client["deflate"] is bool(features.get("deflate"))


class AuthServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _AuthHandler)
        self.secrets: list[str] = []


class _AuthHandler(BaseHTTPRequestHandler):
    server: AuthServer

    def do_GET(self) -> None:
        query = dict(part.split("=", 1) for part in self.path.split("?", 1)[1].split("&"))
        self.server.secrets.append(query.get("secret", ""))
        if query.get("secret") != "open-sesame":
            self.send_response(403)
            self.end_headers()
            return
        body = json.dumps({"ttl": 3600, "identity": "tester", "identity_url": "",
                           "authorizations": [{"topic": "^allowed$", "channels": [".*"],
                                               "permissions": ["subscribe", "publish"]}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def auth_server() -> Iterator[AuthServer]:
    server = AuthServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


async def test_auth(run_daemon: Callable[..., Daemon], auth_server: AuthServer) -> None:
    nsqd = run_daemon("nsqd", f"--auth-http-address=127.0.0.1:{auth_server.server_address[1]}")
    client = await round_trip(nsqd, "allowed", 10, auth_secret="open-sesame")
    assert client["authed"] is True and client["auth_identity"] == "tester"
    async with Producer(nsqd.tcp_address) as producer:
        with pytest.raises(ConnectError, match="Auth Required"):
            await producer.pub("allowed", b"x")
    async with Producer(nsqd.tcp_address, auth_secret="open-sesame") as producer:
        with pytest.raises(PublishError) as info:
            await producer.pub("forbidden", b"x")
    assert info.value.code == "E_UNAUTHORIZED"
    assert "open-sesame" in auth_server.secrets
