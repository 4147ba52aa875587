"""lmstfy's answers at the HTTP edge, against a real nsqd, compared with the real lmstfy
(bitleak/lmstfy 1.0.10 on its gin of 2017): routing (empty names, trailing slashes where
httprouter's tree recommends them, unknown routes),
malformed, cut and oversized bodies, and a limiter's JSON read as Go's encoding/json reads it
(the texts below are those Go 1.19's encoding/json gives for lmstfy's ``Limiter``)."""

from __future__ import annotations

import socket

import httpx
import pytest
from nsq_testing import DEADLINE
from nsq_testing.lmstfy import Lmstfy


@pytest.fixture
def lmstfy(run_daemon):
    return Lmstfy(run_daemon)


def raw(url: str, data: bytes, *, half_close: bool = False) -> tuple[int, bytes, bytes]:
    """Send ``data`` (then, with ``half_close``, no more), read to the server's close."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), head.lower(), body


def test_routing_as_gin_does(lmstfy):
    status, _, body = raw(lmstfy.data_url, b"PUT /api//q1 HTTP/1.1\r\nHost: x\r\n"
                                           b"Content-Length: 1\r\nConnection: close\r\n\r\nx")
    assert (status, body) == (400, b'{"error":"namespace name contains forbidden characters"}')
    r = lmstfy.api("GET", "/q/size/", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (301, "/api/ns/q/size")
    assert "x-request-id" not in r.headers  # gin redirects before its middleware runs
    for method, path in (("PUT", "/api/ns/q/"), ("GET", "/api/ns"), ("GET", "/api/ns/q/"),
                         ("DELETE", "/api/ns/q/job/"), ("GET", "/nope/"), ("GET", "/api/")):
        # httprouter's tree recommends no slash here: lmstfy 1.0.10's own 404
        r = httpx.request(method, lmstfy.data_url + path, content=b"x", timeout=DEADLINE,
                          headers={"X-Token": lmstfy.token}, follow_redirects=False)
        assert (r.status_code, r.json()) == (404, {"error": "api not found"}), (method, path)
        assert r.headers["content-type"] == "application/json; charset=utf-8"
        assert len(r.headers["x-request-id"]) == 26
    for method, path, status, location in (("GET", "/api/ns/", 301, "/api/ns"),
                                           ("PUT", "/api/ns/?x=1", 307, "/api/ns?x=1"),
                                           ("DELETE", "/api/ns/q/job/j/", 307, "/api/ns/q/job/j"),
                                           ("GET", "/api/ns/q/deadletter/", 301,
                                            "/api/ns/q/deadletter")):
        r = httpx.request(method, lmstfy.data_url + path, timeout=DEADLINE,
                          follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (status, location), (method, path)
        assert "x-request-id" not in r.headers
    r = lmstfy.admin("GET", "/pools/", follow_redirects=False)
    assert (r.status_code, r.headers["location"]) == (301, "/pools")
    r = lmstfy.api("POST", "/q")  # a method the path lacks: gin's 404, not a 405
    assert (r.status_code, r.json()) == (404, {"error": "api not found"})
    r = lmstfy.admin("GET", "/nope")
    assert (r.status_code, r.text) == (404, "404 page not found")
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert len(r.headers["x-request-id"]) == 26


def test_a_null_bulk_body_is_no_jobs(lmstfy):
    r = lmstfy.api("PUT", "/q/bulk", content=b"null")
    assert (r.status_code, r.json()) == (400, {"error": "no jobs"})


@pytest.mark.parametrize("chunks", [b"zz\r\nabc\r\n0\r\n\r\n", b"-5\r\nabc\r\n0\r\n\r\n",
                                    b"ffffffffffffffffffff\r\nabc\r\n0\r\n\r\n"],
                         ids=["zz", "negative", "huge"])
def test_a_malformed_chunked_publish_is_400_and_one_log_line_at_most(lmstfy, chunks):
    before = len(lmstfy.nsqd.log)
    status, _, body = raw(lmstfy.data_url, b"PUT /api/ns/q?token=%s HTTP/1.1\r\nHost: x\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n%s" % (lmstfy.token.encode(), chunks))
    assert (status, body) == (400, b'{"error":"failed to read body"}')
    assert not any("Traceback" in line for line in lmstfy.nsqd.log[before:])
    assert lmstfy.api("GET", "/q/size").json()["size"] == 0


def test_bodies_cut_short_too_large_and_badly_framed(lmstfy):
    token = lmstfy.token.encode()
    status, _, body = raw(lmstfy.data_url, b"PUT /api/ns/q?token=%s HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 50\r\n\r\nten bytes." % token, half_close=True)
    assert (status, body) == (400, b'{"error":"failed to read body"}')  # gin's GetRawData
    status, head, body = raw(lmstfy.data_url, b"PUT /api/ns/q?token=%s HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Length: 50000000\r\nExpect: 100-continue\r\n\r\n" % token)
    assert (status, body) == (413, b'{"error":"body too large"}')  # no 100 Continue first
    assert b"100 continue" not in head
    status, _, body = raw(lmstfy.data_url, b"PUT /api/ns/q HTTP/1.1\r\nHost: x\r\n"
                          b"Transfer-Encoding: gzip\r\n\r\nabc")
    assert (status, body) == (501, b"Unsupported transfer encoding")  # Go's net/http
    status, _, _ = raw(lmstfy.data_url, b"CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 404


@pytest.mark.parametrize(("body", "error"), [
    (b'{"read":1e999,"write":1,"interval":1}',
     b'{"error":{"Value":"number 1e999","Type":{},"Offset":13,"Struct":"Limiter","Field":"read"}}'),
    (b'{"read":1,"write":1,"interval":1e999}',
     b'{"error":{"Value":"number 1e999","Type":{},"Offset":36,"Struct":"Limiter",'
     b'"Field":"interval"}}'),
    (b'{"read":-1e999,"write":1,"interval":1}',
     b'{"error":{"Value":"number -1e999","Type":{},"Offset":14,"Struct":"Limiter",'
     b'"Field":"read"}}'),
    (b'{"read":1e308,"write":1,"interval":1}',
     b'{"error":{"Value":"number 1e308","Type":{},"Offset":13,"Struct":"Limiter","Field":"read"}}'),
    (b'{"read":1.5,"write":1,"interval":1}',
     b'{"error":{"Value":"number 1.5","Type":{},"Offset":11,"Struct":"Limiter","Field":"read"}}'),
    (b'{"read":"1","write":1,"interval":1}',
     b'{"error":{"Value":"string","Type":{},"Offset":11,"Struct":"Limiter","Field":"read"}}'),
    (b'{"read":1,', b'{"error":{}}'),
    (b"not json", b'{"error":{"Offset":2}}'),  # Go's offset: the bytes read, the bad one too
    (b'{"read":tru}', b'{"error":{"Offset":12}}'),
])
def test_a_limiter_lmstfy_cannot_decode(lmstfy, body, error):
    for method in ("PUT", "POST"):
        r = lmstfy.admin(method, f"/token/ns/{lmstfy.token}/limit", content=body)
        assert (r.status_code, r.content) == (400, error)
        assert r.headers["content-type"] == "text/plain; charset=utf-8"
        assert len(r.headers["x-request-id"]) == 26
    assert lmstfy.admin("GET", "/limits").json() == []
    r = lmstfy.admin("PUT", f"/token/ns/{lmstfy.token}/limit", content=b"null")
    assert (r.status_code, r.json()) == (400, {"limiter": {"read": 0, "write": 0, "interval": 0}})


def test_a_wait_abandoned_by_its_client_takes_nothing(lmstfy):
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(f"{lmstfy.data_url}/api/ns/q", params={"timeout": "60", "token": lmstfy.token},
                  timeout=0.5)
    lmstfy.publish(tries="1")
    assert lmstfy.consume().status_code == 200  # not taken (and dead) for the gone client


def test_info_says_where_lmstfy_listens_and_config_hides_its_accounts(run_daemon):
    """/info names the addresses lmstfy's listeners bound (a port 0 too), only when served;
    /config never shows the admin accounts' passwords."""
    service = Lmstfy(run_daemon, "--lmstfy-admin-account=ops:s3cret",
                     auth=("ops", "s3cret"))
    info = httpx.get(f"http://{service.nsqd.http_address}/info", timeout=DEADLINE).json()
    assert f"http://{info['lmstfy_http_address']}" == service.data_url
    assert f"http://{info['lmstfy_admin_http_address']}" == service.admin_url
    r = httpx.get(f"http://{service.nsqd.http_address}/config/lmstfy_admin_accounts",
                  timeout=DEADLINE)
    assert r.status_code == 400 and "s3cret" not in r.text
    plain = run_daemon("nsqd")
    info = httpx.get(f"http://{plain.http_address}/info", timeout=DEADLINE).json()
    assert not any(key.startswith("lmstfy") for key in info)
