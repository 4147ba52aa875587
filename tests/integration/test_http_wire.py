"""HTTP/1.1 on the wire of the real daemons, over raw sockets: keep-alive, pipelining, chunked
bodies, ``Expect: 100-continue``, limits answered before the body, HEAD, bad requests, closing.
The bytes that matter (status, body, the headers NSQ's clients read) are checked; ``Date`` is
not, as it changes."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from nsq_testing import DEADLINE, wait_until

NSQ = "nsq; version=1.0"


class Raw:
    """A blocking HTTP/1.1 client on one socket that reads whole answers."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=DEADLINE)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _more(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def answer(self, *, head: bool = False) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._more(), f"closed before an answer: {self.buffer!r}"
        raw, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = 0 if head else int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            assert self._more()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def closed(self) -> bool:
        try:
            while self._more():
                pass
        except ConnectionResetError:
            pass
        return True

    def close(self) -> None:
        self.sock.close()


@contextmanager
def raw(address: str) -> Iterator[Raw]:
    client = Raw(address)
    try:
        yield client
    finally:
        client.close()


def post(path: str, body: bytes, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n%s" % (
        path.encode(), len(body), extra, body)


PING = b"GET /ping HTTP/1.1\r\nHost: t\r\n\r\n"


def depth(nsqd, topic: str) -> int:
    with raw(nsqd.http_address) as client:
        client.send(b"GET /stats?format=json&topic=%s HTTP/1.1\r\nHost: t\r\n\r\n" % topic.encode())
        topics = json.loads(client.answer()[2])["topics"]
    return sum(t["message_count"] for t in topics if t["topic_name"] == topic)


@pytest.fixture
def small_nsqd(run_daemon):
    return run_daemon("nsqd", "--max-msg-size=100", "--max-body-size=1000")


def test_keep_alive_and_pipelining(shared_nsqd):
    with raw(shared_nsqd.http_address) as client:
        for _ in range(3):  # one request at a time
            client.send(PING)
            status, headers, body = client.answer()
            assert (status, body) == (200, b"OK")
            assert headers["content-type"] == "text/plain; charset=utf-8"
        client.send(PING + post("/pub?topic=wire_keep", b"hello") + PING)  # three in one send
        answers = [client.answer() for _ in range(3)]
        assert [(a[0], a[2]) for a in answers] == [(200, b"OK")] * 3
        assert answers[1][1]["x-nsq-content-type"] == NSQ
    assert depth(shared_nsqd, "wire_keep") == 1


def test_chunked_bodies_to_pub_and_mpub(shared_nsqd):
    with raw(shared_nsqd.http_address) as client:
        client.send(b"POST /pub?topic=wire_chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"3\r\none\r\n0\r\n\r\n")
        assert client.answer()[2] == b"OK"
        client.send(b"POST /mpub?topic=wire_chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"4\r\ntwo\n\r\n5\r\nthree\r\n0\r\n\r\n")
        assert client.answer()[2] == b"OK"
    assert depth(shared_nsqd, "wire_chunked") == 3


def test_expect_continue(shared_nsqd):
    with raw(shared_nsqd.http_address) as client:
        client.send(b"POST /pub?topic=wire_expect HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
                    b"Expect: 100-continue\r\n\r\n")
        assert client.answer()[0] == 100
        client.send(b"hello")
        assert client.answer()[:1] == (200,)
    assert depth(shared_nsqd, "wire_expect") == 1


@pytest.mark.parametrize(("path", "length", "message"), [
    ("/pub?topic=wire_big", 101, b"MSG_TOO_BIG"),
    ("/mpub?topic=wire_big", 1001, b"BODY_TOO_BIG"),
])
def test_a_body_over_the_limit_is_refused_before_it_is_sent(small_nsqd, path, length, message):
    with raw(small_nsqd.http_address) as client:
        client.send(b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % (path.encode(), length))
        status, headers, body = client.answer()  # not a byte of the body was sent
        assert (status, body) == (413, b'{"message":"%s"}' % message)
        assert headers["x-nsq-content-type"] == NSQ
        assert client.closed()


def test_a_chunked_body_growing_over_the_limit_is_refused(small_nsqd):
    with raw(small_nsqd.http_address) as client:
        client.send(b"POST /pub?topic=wire_big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + b"40\r\n" + b"x" * 64 + b"\r\n" + b"40\r\n" + b"x" * 64 + b"\r\n")
        status, _, body = client.answer()
        assert (status, body) == (413, b'{"message":"MSG_TOO_BIG"}')


def test_head_is_405_without_a_body_as_in_go_s_nsqd(shared_nsqd):
    # Go's nsqd (httprouter v1.3.0) has no implicit HEAD: 405 with Allow, as nsqlookupd
    with raw(shared_nsqd.http_address) as client:
        client.send(b"HEAD /ping HTTP/1.1\r\nHost: t\r\n\r\n" + PING)
        status, headers, _ = client.answer(head=True)
        assert (status, headers["content-length"], headers["allow"]) == (405, "32", "GET, OPTIONS")
        assert client.answer()[2] == b"OK"  # the HEAD answer had no body bytes


@pytest.mark.parametrize("request_bytes", [
    b"GARBAGE\r\n\r\n",
    b"GET /ping HTTP/1.1\r\nHost: t\r\nno colon here\r\n\r\n",
    b"POST /pub?topic=t HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n\r\n",
], ids=["request-line", "header-line", "content-length", "no-host"])
def test_a_bad_request_gets_400_and_nsqd_goes_on(shared_nsqd, request_bytes):
    with raw(shared_nsqd.http_address) as client:
        client.send(request_bytes)
        assert client.answer()[0] == 400
        assert client.closed()
    with raw(shared_nsqd.http_address) as client:
        client.send(PING)
        assert client.answer()[2] == b"OK"


@pytest.mark.parametrize("request_bytes", [
    b"GET /ping HTTP/1.0\r\n\r\n",
    b"GET /ping HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
], ids=["http1.0", "connection-close"])
def test_the_connection_closes_after_the_answer_when_asked(shared_nsqd, request_bytes):
    with raw(shared_nsqd.http_address) as client:
        client.send(request_bytes)
        assert client.answer()[2] == b"OK"
        assert client.closed()


def test_a_client_gone_mid_body_leaves_nsqd_serving(shared_nsqd):
    with raw(shared_nsqd.http_address) as client:
        client.send(b"POST /pub?topic=wire_gone HTTP/1.1\r\nHost: t\r\nContent-Length: 50\r\n\r\nten bytes.")
    with raw(shared_nsqd.http_address) as client:
        client.send(post("/topic/create?topic=wire_gone", b""))
        assert client.answer()[0] == 200
    assert depth(shared_nsqd, "wire_gone") == 0


def test_not_found_and_method_not_allowed(shared_nsqd):
    with raw(shared_nsqd.http_address) as client:
        client.send(b"GET /nope HTTP/1.1\r\nHost: t\r\n\r\nGET /pub HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, body = client.answer()
        assert (status, body, headers["x-nsq-content-type"]) == (
            404, b'{"message":"NOT_FOUND"}', NSQ)
        status, headers, body = client.answer()
        assert (status, body) == (405, b'{"message":"METHOD_NOT_ALLOWED"}')
        assert headers["content-type"] == "application/json; charset=utf-8"


def test_nsqlookupd_keep_alive(run_daemon):
    lookupd = run_daemon("nsqlookupd")
    with raw(lookupd.http_address) as client:
        client.send(PING + b"GET /lookup?topic=missing HTTP/1.1\r\nHost: t\r\n\r\n" + PING)
        assert client.answer()[2] == b"OK"
        status, headers, body = client.answer()
        assert (status, body) == (404, b'{"message":"TOPIC_NOT_FOUND"}')
        assert headers["x-nsq-content-type"] == NSQ
        assert client.answer()[2] == b"OK"
    wait_until(lambda: any("/lookup?topic=missing" in line for line in lookupd.log),
               what="nsqlookupd's log line for the request")
