"""nsqd's and nsqlookupd's HTTP edge on the wire, answer for answer as Go's nsqd 1.3.0 and
nsqlookupd give them (each expected answer below was read from Go's daemons, built from
nsqio/nsq v1.3.0 with httprouter v1.3.0): methods and targets no route has, redirects,
and the bodies and heads Go's net/http refuses, with at most one log line each."""

from __future__ import annotations

import socket

import pytest
from nsq_testing import DEADLINE


def exchange(address: str, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request on its own connection, closed by the server or after the answer."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=DEADLINE) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)  # nothing more: the server answers, then closes
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    raw_head, _, body = out.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


NOT_ALLOWED = b'{"message":"METHOD_NOT_ALLOWED"}'


@pytest.mark.parametrize(("request_line", "status", "allow", "location", "body"), [
    (b"HEAD /ping", 405, "GET, OPTIONS", None, b""),
    (b"PROPFIND /ping", 405, "GET, OPTIONS", None, NOT_ALLOWED),
    (b"CONNECT /ping", 405, "GET, OPTIONS", None, NOT_ALLOWED),
    (b"CONNECT example.com:443", 404, None, None, b'{"message":"NOT_FOUND"}'),
    (b"OPTIONS /pub", 200, "OPTIONS, POST", None, b""),
    (b"OPTIONS *", 200, None, None, b""),
    (b"GET /nope", 404, None, None, b'{"message":"NOT_FOUND"}'),
    (b"GET /config/", 404, None, None, b'{"message":"NOT_FOUND"}'),
    (b"GET /ping/", 301, None, "/ping", b'<a href="/ping">Moved Permanently</a>.\n\n'),
    (b"GET //ping", 301, None, "/ping", b'<a href="/ping">Moved Permanently</a>.\n\n'),
    (b"GET /./ping", 301, None, "/ping", b'<a href="/ping">Moved Permanently</a>.\n\n'),
    (b"GET /PING", 301, None, "/ping", b'<a href="/ping">Moved Permanently</a>.\n\n'),
    (b"GET /Config/log_level", 301, None, "/config/log_level",
     b'<a href="/config/log_level">Moved Permanently</a>.\n\n'),
    (b"POST /pub/?topic=a", 307, None, "/pub?topic=a", b""),
])
def test_what_no_route_answers_as_go_s_nsqd(shared_nsqd, request_line, status, allow, location,
                                            body):
    got = exchange(shared_nsqd.http_address, request_line + b" HTTP/1.1\r\nHost: t\r\n"
                                                           b"Content-Length: 0\r\n\r\n")
    assert (got[0], got[1].get("allow"), got[1].get("location"), got[2]) == (
        status, allow, location, body)


@pytest.mark.parametrize("chunks", [b"zz\r\nabc\r\n0\r\n\r\n", b"-5\r\nabc\r\n0\r\n\r\n",
                                    b"ffffffffffffffffffff\r\nabc\r\n0\r\n\r\n", b"5\r\nab"],
                         ids=["zz", "negative", "huge", "cut-short"])
def test_a_body_that_cannot_be_read_is_go_s_500_without_a_traceback(shared_nsqd, chunks):
    before = len(shared_nsqd.log)
    status, headers, body = exchange(
        shared_nsqd.http_address,
        b"POST /pub?topic=edge_chunks HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunks)
    assert (status, body) == (500, b'{"message":"INTERNAL_ERROR"}')  # Go's nsqd: io.ReadAll
    assert headers["connection"] == "close"
    assert not any("Traceback" in line for line in shared_nsqd.log[before:])


@pytest.mark.parametrize(("head", "status", "body"), [
    (b"POST /pub?topic=t HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\nabc", 501,
     b"Unsupported transfer encoding"),
    (b"GET /ping HTTP/1.1\r\nHost: t\r\nHost: u\r\n\r\n", 400, b"400 Bad Request"),
    (b"FOO /ping HTTP/1.1\r\nHost: t\r\n\r\n", 400, b"400 Bad Request"),  # (Go: 405)
])
def test_heads_go_s_net_http_refuses(shared_nsqd, head, status, body):
    got = exchange(shared_nsqd.http_address, head)
    assert (got[0], got[2]) == (status, body)


def test_nsqlookupd_answers_the_same(run_daemon):
    lookupd = run_daemon("nsqlookupd")
    for request_line, status in ((b"HEAD /ping", 405), (b"POST /ping/", 404),
                                 (b"GET /ping/", 301), (b"CONNECT x:1", 404),
                                 (b"OPTIONS /lookup", 200)):
        got = exchange(lookupd.http_address, request_line + b" HTTP/1.1\r\nHost: t\r\n\r\n")
        assert got[0] == status, request_line
