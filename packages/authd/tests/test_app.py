"""/auth and /ping through the ASGI app: what nsqd gets for known and unknown secrets."""

import tomllib

import httpx
import pytest
from nsq_authd import SecretStore, build_app
from nsq_authd.secrets_file import parse

ACCEPT = {"Accept": "application/vnd.nsq; version=1.0"}


@pytest.fixture
async def client(secret_entry):
    alice = secret_entry("alice", "orders.*", ["publish", "subscribe"], secret="s3cret",
                         identity_url="https://example.com/alice")
    carol = secret_entry("carol", ".*", ["subscribe"], secret="tls-only", require_tls=True)
    store = SecretStore("secrets.toml", parse(tomllib.loads("ttl = 3600\n" + alice + carol)))
    transport = httpx.ASGITransport(app=build_app(store))
    async with httpx.AsyncClient(transport=transport, base_url="http://auth.test") as http:
        yield http


def query(secret: str, *, tls: bool = False, remote_ip: str = "127.0.0.1") -> dict[str, str]:
    # the keys nsqd sends, in its (sorted) order
    return {"common_name": "", "remote_ip": remote_ip, "secret": secret,
            "tls": "true" if tls else "false"}


async def test_known_secret_answers_what_nsqd_reads(client):
    reply = await client.get("/auth", params=query("s3cret"), headers=ACCEPT)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("application/json")
    assert reply.text == ('{"ttl":3600,"identity":"alice","identity_url":"https://example.com/'
                          'alice","authorizations":[{"topic":"orders.*","channels":[".*"],'
                          '"permissions":["publish","subscribe"]}]}')
    assert isinstance(reply.json()["ttl"], int)


async def test_unknown_or_missing_secret_is_403_not_authorized(client):
    for params in (query("nope"), query(""), {}):
        reply = await client.get("/auth", params=params)
        assert (reply.status_code, reply.json()) == (403, {"message": "NOT_AUTHORIZED"})


async def test_restricted_secret_needs_tls(client):
    refused = await client.get("/auth", params=query("tls-only"))
    assert (refused.status_code, refused.json()) == (403, {"message": "NOT_AUTHORIZED"})
    allowed = await client.get("/auth", params=query("tls-only", tls=True))
    assert allowed.status_code == 200
    assert allowed.json()["identity"] == "carol" and allowed.json()["identity_url"] == ""


async def test_post_with_nsqd_json_body(client):
    body = {k: [v] for k, v in query("s3cret").items()}
    reply = await client.post("/auth", json=body)
    assert reply.status_code == 200 and reply.json()["identity"] == "alice"
    assert (await client.post("/auth", content=b"not json")).status_code == 403


async def test_ping(client):
    reply = await client.get("/ping")
    assert (reply.status_code, reply.text) == (200, "OK")
