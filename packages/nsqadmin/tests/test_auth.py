"""--admin-basic-auth-file: hashes, the file, the passwd helper, and which requests need a
password, through the ASGI app with a fake nsqd (httpx.MockTransport)."""

import base64
import io

import httpx
import pytest
from nsqadmin import Options, create_app
from nsqadmin.auth import (
    BasicAuth,
    PasswordFileError,
    hash_password,
    load_password_file,
    verify_password,
)
from nsqadmin.passwd import main as passwd_main

FAST = 1000  # iterations: tests need no brute-force resistance


def test_hash_format_and_rfc7914_vector():
    # RFC 7914 section 11: PBKDF2-HMAC-SHA256, P="passwd", S="salt", c=1 (first 32 bytes)
    vector = bytes.fromhex("55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc")
    encoded = hash_password("passwd", iterations=1, salt="salt")
    assert encoded == f"pbkdf2_sha256$1$salt${base64.b64encode(vector).decode()}"
    assert verify_password("passwd", encoded)
    assert not verify_password("passwd!", encoded)
    salted = hash_password("pw", iterations=FAST)
    assert salted != hash_password("pw", iterations=FAST) and verify_password("pw", salted)
    for broken in ("", "pw", "md5$1$salt$AAAA", "pbkdf2_sha256$0$salt$AAAA",
                   "pbkdf2_sha256$x$salt$AAAA", "pbkdf2_sha256$1$salt$not base64!"):
        assert not verify_password("pw", broken)


def test_password_file(tmp_path):
    path = tmp_path / "users"
    alice = hash_password("a-pass", iterations=FAST)
    path.write_text(f"# admins\n\nalice:{alice}\n  bob:{hash_password('b', iterations=FAST)}\n")
    users = load_password_file(str(path))
    assert list(users) == ["alice", "bob"] and users["alice"] == alice


@pytest.mark.parametrize(("text", "error"), [
    ("alice:secret\n", ":1: the password of 'alice' is not a pbkdf2_sha256 hash; make one "
                       "with: python -m nsqadmin.passwd alice"),
    ("just-a-name\n", ":1: expected user:hash"),
    ("# nobody\n", ": no users"),
    (f"a:{hash_password('x', iterations=1)}\na:{hash_password('y', iterations=1)}\n",
     ":2: 'a' is listed twice"),
])
def test_password_file_refusals(tmp_path, text, error):
    path = tmp_path / "users"
    path.write_text(text)
    with pytest.raises(PasswordFileError) as caught:
        load_password_file(str(path))
    assert str(caught.value) == f"{path}{error}"
    with pytest.raises(PasswordFileError, match="failed to read --admin-basic-auth-file"):
        load_password_file(str(tmp_path / "missing"))


def test_passwd_helper_prints_or_updates_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("first\n"))
    passwd_main(["alice", "--stdin", f"--iterations={FAST}"])
    user, _, encoded = capsys.readouterr().out.strip().partition(":")
    assert user == "alice" and encoded.startswith(f"pbkdf2_sha256${FAST}$")
    assert verify_password("first", encoded)
    path = tmp_path / "users"
    path.write_text(f"alice:{encoded}\nbob:{hash_password('b', iterations=1)}\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("second\n"))
    passwd_main(["alice", "--stdin", f"--iterations={FAST}", f"--file={path}"])
    users = load_password_file(str(path))
    assert list(users) == ["bob", "alice"] and verify_password("second", users["alice"])
    assert path.stat().st_mode & 0o077 == 0
    with pytest.raises(SystemExit):
        passwd_main(["a:b", "--stdin"])


async def test_basic_auth_checks_and_remembers():
    auth = BasicAuth({"alice": hash_password("pw", iterations=FAST)})
    assert await auth.authenticate("alice", "pw")
    assert await auth.authenticate("alice", "pw")  # remembered
    assert not await auth.authenticate("alice", "nope")
    assert not await auth.authenticate("mallory", "pw")
    assert len(auth._remembered) == 1


# --- the app ---------------------------------------------------------------------------

STATS = {"version": "1.3.0", "health": "OK", "start_time": 0, "producers": None, "topics": [
    {"topic_name": "t", "depth": 0, "backend_depth": 0, "message_count": 1, "paused": False,
     "channels": []}]}
INFO = {"version": "1.3.0", "broadcast_address": "n1", "hostname": "n1", "http_port": 4151,
        "tcp_port": 4150, "start_time": 0}


@pytest.fixture
async def make_app(tmp_path):
    posts: list[str] = []

    def nsqd(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posts.append(request.url.path)
            return httpx.Response(200)
        if request.url.path == "/info":
            return httpx.Response(200, json=INFO)
        return httpx.Response(200, json=STATS)

    users = tmp_path / "users"
    users.write_text(f"alice:{hash_password('alice-pw', iterations=FAST)}\n"
                     f"bob:{hash_password('bob-pw', iterations=FAST)}\n")
    clients = []

    def make(**overrides):
        options = Options(nsqd_http_addresses=["n1:4151"], admin_basic_auth_file=str(users),
                          **overrides)
        upstream = httpx.AsyncClient(transport=httpx.MockTransport(nsqd))
        app = create_app(options, client=upstream, sampling=False)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                   base_url="http://admin.test")
        clients.extend((client, upstream))
        return client

    make.posts = posts
    yield make
    for client in clients:
        await client.aclose()


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


ALICE = basic("alice", "alice-pw")


async def test_reads_stay_open_and_actions_need_a_password(make_app):
    admin = make_app()
    page = await admin.get("/topics/t")
    assert page.status_code == 200 and "Pause topic" in page.text  # pressing it asks
    assert (await admin.get("/api/topics")).json()["topics"] == ["t"]
    for headers in ({}, basic("alice", "wrong"), basic("eve", "alice-pw"),
                    {"Authorization": "Basic !!!"}, {"Authorization": "Bearer x"}):
        api = await admin.post("/api/topics/t", json={"action": "pause"}, headers=headers)
        assert api.status_code == 401 and api.json() == {"message": "UNAUTHORIZED"}
        assert api.headers["www-authenticate"] == 'Basic realm="nsqadmin", charset="UTF-8"'
    form = await admin.post("/topics/t", data={"action": "pause"})
    assert form.status_code == 401 and "www-authenticate" in form.headers
    for method, path in (("DELETE", "/api/topics/t"), ("PUT", "/config/log_level")):
        assert (await admin.request(method, path, content=b"warn")).status_code == 401
    assert make_app.posts == []
    ok = await admin.post("/api/topics/t", json={"action": "pause"}, headers=ALICE)
    assert (ok.status_code, ok.json()) == (200, {"message": ""})
    done = await admin.post("/topics/t", data={"action": "unpause"}, headers=ALICE)
    assert done.status_code == 303
    assert make_app.posts == ["/topic/pause", "/topic/unpause"]


async def test_other_sites_cannot_use_remembered_credentials(make_app):
    admin = make_app()
    for headers in ({"Origin": "http://evil.test"}, {"Sec-Fetch-Site": "cross-site"}):
        api = await admin.post("/api/topics/t", json={"action": "pause"},
                               headers={**ALICE, **headers})
        assert (api.status_code, api.json()) == (403, {"message": "FORBIDDEN"})
    same = await admin.post("/api/topics/t", json={"action": "pause"},
                            headers={**ALICE, "Origin": "http://admin.test"})
    assert same.status_code == 200


async def test_admin_users_narrow_who_may_act(make_app):
    admin = make_app(admin_users=["alice"])
    bob = basic("bob", "bob-pw")
    assert "Pause topic" not in (await admin.get("/topics/t", headers=bob)).text
    assert "Pause topic" in (await admin.get("/topics/t", headers=ALICE)).text
    assert "Pause topic" in (await admin.get("/topics/t")).text  # not signed in yet
    refused = await admin.post("/api/topics/t", json={"action": "pause"}, headers=bob)
    assert (refused.status_code, refused.json()) == (403, {"message": "FORBIDDEN"})
    assert (await admin.post("/topics/t", data={"action": "pause"}, headers=bob)
            ).status_code == 403
    # the ACL header names nobody in basic-auth mode
    spoofed = await admin.post("/api/topics/t", json={"action": "pause"},
                               headers={**bob, "X-Forwarded-User": "alice"})
    assert spoofed.status_code == 403
    assert (await admin.post("/api/topics/t", json={"action": "pause"}, headers=ALICE)
            ).status_code == 200
