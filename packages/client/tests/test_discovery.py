import json

import httpx
import pytest
import trio
from nsq_client import Config, DiscoveryError, LookupdPoller, lookupd_url
from nsq_client._discovery import producer_tcp_addresses
from nsq_common import decode_v1

V1 = {"X-NSQ-Content-Type": "nsq; version=1.0"}


def producers(*ports: int, host: str = "127.0.0.1") -> dict:
    return {"channels": [], "producers": [
        {"remote_address": f"{host}:1", "hostname": "h", "broadcast_address": host,
         "tcp_port": p, "http_port": p + 1, "version": "1.3.0"} for p in ports]}


@pytest.mark.parametrize(("address", "url"), [
    ("127.0.0.1:4161", "http://127.0.0.1:4161/lookup?topic=t"),
    ("http://127.0.0.1:4161", "http://127.0.0.1:4161/lookup?topic=t"),
    ("http://127.0.0.1:4161/", "http://127.0.0.1:4161/lookup?topic=t"),
    ("https://lookupd:443/custom/path?b=1", "https://lookupd:443/custom/path?b=1&topic=t"),
    ("lookupd:4161?z=2", "http://lookupd:4161/lookup?topic=t&z=2"),
])
def test_lookupd_url_is_built_like_go_nsq(address: str, url: str) -> None:
    assert lookupd_url(address, topic="t") == url


def test_lookupd_url_needs_a_port() -> None:
    with pytest.raises(ValueError, match="missing port"):
        lookupd_url("lookupd", topic="t")


def test_v1_replies_and_old_envelopes() -> None:
    body = json.dumps(producers(4150)).encode()
    assert decode_v1(V1, body)["producers"][0]["tcp_port"] == 4150
    wrapped = json.dumps({"status_code": 200, "status_txt": "OK", "data": producers(4150)}).encode()
    assert decode_v1({}, wrapped)["producers"][0]["tcp_port"] == 4150
    assert decode_v1({}, body) == {}  # not V1 and no envelope: nothing, as go-nsq
    assert decode_v1(V1, b"") == {}


def test_producer_addresses_join_host_and_port() -> None:
    assert producer_tcp_addresses(producers(4150, 4250)) == ["127.0.0.1:4150", "127.0.0.1:4250"]
    assert producer_tcp_addresses(producers(4150, host="::1")) == ["[::1]:4150"]
    assert producer_tcp_addresses({"producers": [{"hostname": "x"}]}) == []
    assert producer_tcp_addresses({"producers": None}) == []


async def test_queries_rotate_and_retry_the_next_lookupd() -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers["accept"], request.headers.get("authorization")))
        if request.url.host == "bad":
            return httpx.Response(500, text="boom")
        return httpx.Response(200, json=producers(4150), headers=V1)

    poller = LookupdPoller(["good:1", "bad:2"], "t", Config(auth_secret="s3"),
                           transport=httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=poller.transport) as client:
        assert await poller.query(client) == ["127.0.0.1:4150"]
        assert await poller.query(client) == ["127.0.0.1:4150"]  # bad, then good
    assert [s[0] for s in seen] == ["good", "bad", "good"]
    assert seen[0][1] == "application/vnd.nsq; version=1.0"
    assert seen[0][2] == "Bearer s3"


async def test_every_lookupd_failing_once_makes_a_discovery_error() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.host)
        raise httpx.ConnectError("refused")

    poller = LookupdPoller(["a:1", "b:2"], "t", Config(), transport=httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=poller.transport) as client:
        with pytest.raises(DiscoveryError):
            await poller.query(client)
        assert calls == ["a", "b"]  # each once a round
        poller = LookupdPoller(["a:1", "b:2", "c:3", "d:4"], "t", Config(),
                               transport=poller.transport)
        calls.clear()
        with pytest.raises(DiscoveryError):
            await poller.query(client)
        assert calls == ["a", "b", "c"]  # three at most


async def test_polling_queries_at_once_then_every_interval_and_on_recheck(
        autojump_clock: trio.abc.Clock) -> None:
    times = []

    def handler(request: httpx.Request) -> httpx.Response:
        times.append(trio.current_time())
        return httpx.Response(200, json=producers(len(times)), headers=V1)

    config = Config(lookupd_poll_interval=10.0, lookupd_poll_jitter=0.5)
    poller = LookupdPoller(["l:1"], "t", config, transport=httpx.MockTransport(handler))
    found = []
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        await nursery.start(poller.run, found.append)
        assert found == [["127.0.0.1:1"]]
        await trio.sleep(26.0)
        poller.recheck()
        await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    offsets = [t - start for t in times]
    assert offsets[0] == 0
    jitter = offsets[1]
    assert 0 <= jitter < 5.0
    assert offsets[2] == pytest.approx(jitter + 10.0)
    assert offsets[-1] == pytest.approx(26.0, abs=0.01)  # the recheck
