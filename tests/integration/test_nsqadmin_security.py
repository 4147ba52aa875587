"""nsqadmin's protections, as real processes: basic auth for actions (reads stay open), the
Go ACL-header mode, and reaching nsqd that serve HTTPS only to trusted clients (certificates
made here with trustme)."""

import base64
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from nsq_testing import wait_until
from nsqadmin.auth import hash_password

from ._pki import write_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return write_pki(tmp_path_factory.mktemp("pki"), "nsqadmin.test")


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def topic_of(nsqd, topic: str, **tls) -> dict:
    scheme = "https" if tls else "http"
    address = nsqd.addresses["HTTPS"] if tls else nsqd.http_address
    stats = httpx.get(f"{scheme}://{address}/stats", params={"format": "json", "topic": topic},
                      **tls).json()
    return stats["topics"][0]


class Hook(BaseHTTPRequestHandler):
    """Takes admin-action notifications."""

    received: list[dict] = []

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        self.received.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    Hook.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", Hook.received
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_basic_auth_guards_actions_and_names_the_user(run_daemon, tmp_path, hook):
    endpoint, received = hook
    nsqd = run_daemon("nsqd")
    httpx.post(f"http://{nsqd.http_address}/topic/create", params={"topic": "sec_basic"})
    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('alice-pw', iterations=1000)}\n")
    admin = run_daemon("nsqadmin", f"--nsqd-http-address={nsqd.http_address}",
                       f"--admin-basic-auth-file={users}",
                       f"--notification-http-endpoint={endpoint}", expect=("HTTP",))
    base = f"http://{admin.http_address}"
    assert httpx.get(f"{base}/topics/sec_basic").status_code == 200
    assert httpx.get(f"{base}/api/topics").json()["topics"] == ["sec_basic"]
    refused = httpx.post(f"{base}/api/topics/sec_basic", json={"action": "pause"})
    assert (refused.status_code, refused.json()) == (401, {"message": "UNAUTHORIZED"})
    assert refused.headers["www-authenticate"].startswith('Basic realm="nsqadmin"')
    wrong = httpx.post(f"{base}/topics/sec_basic", data={"action": "pause"},
                       headers=basic("alice", "guess"))
    assert wrong.status_code == 401
    assert topic_of(nsqd, "sec_basic")["paused"] is False
    ok = httpx.post(f"{base}/api/topics/sec_basic", json={"action": "pause"},
                    headers=basic("alice", "alice-pw"))
    assert (ok.status_code, ok.json()) == (200, {"message": ""})
    assert topic_of(nsqd, "sec_basic")["paused"] is True
    wait_until(lambda: received, what="the notification")
    assert [(n["action"], n["user"]) for n in received] == [("pause_topic", "alice")]


def test_acl_header_mode_like_go(run_daemon):
    nsqd = run_daemon("nsqd")
    httpx.post(f"http://{nsqd.http_address}/topic/create", params={"topic": "sec_acl"})
    admin = run_daemon("nsqadmin", f"--nsqd-http-address={nsqd.http_address}",
                       "--admin-user=alice", "--acl-http-header=X-Remote-User", expect=("HTTP",))
    url = f"http://{admin.http_address}/api/topics/sec_acl"
    for headers in ({}, {"X-Remote-User": "bob"}, {"X-Forwarded-User": "alice"}):
        refused = httpx.post(url, json={"action": "pause"}, headers=headers)
        assert (refused.status_code, refused.json()) == (403, {"message": "FORBIDDEN"})
    page = httpx.get(f"http://{admin.http_address}/topics/sec_acl")
    assert page.status_code == 200 and "Pause topic" not in page.text
    ok = httpx.post(url, json={"action": "pause"}, headers={"X-Remote-User": "alice"})
    assert ok.status_code == 200
    assert topic_of(nsqd, "sec_acl")["paused"] is True


@pytest.fixture
def https_nsqd(run_daemon, pki):
    """An nsqd whose plain HTTP answers only 403 TLS_REQUIRED."""
    return run_daemon("nsqd", f"--tls-cert={pki / 'server.pem'}", f"--tls-key={pki / 'server.key'}",
                      "--https-address=127.0.0.1:0", "--tls-required=true",
                      expect=("TCP", "HTTP", "HTTPS"))


def test_https_nsqd_address(run_daemon, https_nsqd, pki):
    ca = {"verify": ssl.create_default_context(cafile=str(pki / "ca.pem"))}
    https = https_nsqd.addresses["HTTPS"]
    httpx.post(f"https://{https}/topic/create", params={"topic": "sec_tls"}, **ca)
    admin = run_daemon("nsqadmin", f"--nsqd-http-address=https://{https}",
                       f"--http-client-tls-root-ca-file={pki / 'ca.pem'}", expect=("HTTP",))
    base = f"http://{admin.http_address}"
    nodes = httpx.get(f"{base}/api/nodes").json()
    assert nodes["message"] == "" and [n["http_port"] for n in nodes["nodes"]] == [
        https_nsqd.http_port]
    assert httpx.get(f"{base}/api/topics").json() == {"topics": ["sec_tls"], "message": ""}
    assert "sec_tls" in httpx.get(f"{base}/topics/sec_tls").text
    ok = httpx.post(f"{base}/api/topics/sec_tls", json={"action": "pause"})
    assert (ok.status_code, ok.json()) == (200, {"message": ""})
    assert topic_of(https_nsqd, "sec_tls", **ca)["paused"] is True

    untrusting = run_daemon("nsqadmin", f"--nsqd-http-address=https://{https}", expect=("HTTP",))
    failed = httpx.get(f"http://{untrusting.http_address}/api/topics")
    assert failed.status_code == 502 and "UPSTREAM_ERROR" in failed.json()["message"]


def test_tls_required_redirect_and_client_certificates(run_daemon, pki):
    """Go's way: ask http://, follow the 403's https_port; nsqd wants a client certificate."""
    nsqd = run_daemon("nsqd", f"--tls-cert={pki / 'server.pem'}", f"--tls-key={pki / 'server.key'}",
                      "--https-address=127.0.0.1:0", "--tls-client-auth-policy=require-verify",
                      f"--tls-root-ca-file={pki / 'ca.pem'}", expect=("TCP", "HTTP", "HTTPS"))
    client_cert = [f"--http-client-tls-cert={pki / 'client.pem'}",
                   f"--http-client-tls-key={pki / 'client.key'}"]
    admin = run_daemon("nsqadmin", f"--nsqd-http-address={nsqd.http_address}",
                       f"--http-client-tls-root-ca-file={pki / 'ca.pem'}", *client_cert,
                       expect=("HTTP",))
    created = httpx.post(f"http://{admin.http_address}/api/topics", json={"topic": "sec_cert"})
    assert (created.status_code, created.json()) == (200, {"message": ""})
    nodes = httpx.get(f"http://{admin.http_address}/api/nodes").json()
    assert nodes["message"] == "" and nodes["nodes"][0]["topics"] == [
        {"topic": "sec_cert", "tombstoned": False}]

    anonymous = run_daemon("nsqadmin", f"--nsqd-http-address={nsqd.http_address}",
                           f"--http-client-tls-root-ca-file={pki / 'ca.pem'}", expect=("HTTP",))
    assert httpx.get(f"http://{anonymous.http_address}/api/topics").status_code == 502
