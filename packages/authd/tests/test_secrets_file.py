"""The secrets file: what loads, what is refused (with the entry named), and matching."""

import hashlib
import ipaddress
import tomllib

import pytest
from nsq_authd import Entry, SecretsError
from nsq_authd.secrets_file import parse


@pytest.fixture
def good(secret_entry):
    """Two secrets: one as written, one as the SHA-256 of its text, with every restriction."""
    alice = secret_entry("alice", "orders.*", ["publish", "subscribe"], secret="s3cret",
                         identity_url="https://example.com/alice")
    bob = secret_entry("bob", "^metrics$", ["subscribe"], channels=["^archive$", "^alerts$"],
                       secret_sha256=hashlib.sha256(b"bob-token").hexdigest(), ttl=60,
                       require_tls=True, remote_ips=["10.0.0.0/8", "::1"],
                       common_names=["bob.example"])
    return "ttl = 1800\n" + alice + bob


def load(text: str):
    return parse(tomllib.loads(text), "secrets.toml")


def test_loads_plain_and_hashed_secrets_with_their_ttls(good):
    secrets = load(good)
    assert len(secrets) == 2
    alice = secrets.lookup("s3cret")
    assert alice.answer() == {
        "ttl": 1800, "identity": "alice", "identity_url": "https://example.com/alice",
        "authorizations": [{"topic": "orders.*", "channels": [".*"],
                            "permissions": ["publish", "subscribe"]}],
    }
    bob = secrets.lookup("bob-token")
    assert (bob.identity, bob.ttl, bob.identity_url) == ("bob", 60, "")
    assert secrets.lookup("s3cre") is None and secrets.lookup("") is None


def test_restrictions(good):
    bob = load(good).lookup("bob-token")
    ok = {"remote_ip": "10.1.2.3", "tls": True, "common_name": "bob.example"}
    assert bob.refusal(**ok) is None
    assert bob.refusal(**{**ok, "remote_ip": "::1"}) is None
    assert bob.refusal(**{**ok, "remote_ip": "::ffff:10.0.0.7"}) is None
    assert bob.refusal(**{**ok, "tls": False}) == "TLS required"
    assert "not allowed" in bob.refusal(**{**ok, "remote_ip": "192.168.0.1"})
    assert "not allowed" in bob.refusal(**{**ok, "remote_ip": ""})
    assert "not allowed" in bob.refusal(**{**ok, "common_name": "eve"})
    anyone = Entry("x", "", 1, (), remote_ips=(ipaddress.ip_network("0.0.0.0/0"),))
    assert anyone.refusal(remote_ip="not an ip", tls=False, common_name="") is not None


SECRET = '[[secrets]]\nsecret = "s"\nidentity = "i"\n'
GRANT = '[[secrets.authorizations]]\ntopic = ".*"\nchannels = [".*"]\npermissions = ["publish"]\n'


@pytest.mark.parametrize(("text", "error"), [
    ("ttl = 0\n" + SECRET + GRANT, "ttl must be a whole number"),
    ("ttl = 1.5\n" + SECRET + GRANT, "ttl must be a whole number"),
    ("tll = 5\n", "unknown key(s) tll"),
    (SECRET + "require_tsl = true\n" + GRANT, "secrets #1 (i): unknown key(s) require_tsl"),
    (SECRET, "at least one [[secrets.authorizations]]"),
    (SECRET + GRANT.replace('"publish"', '"write"'), "permissions must be among"),
    (SECRET + GRANT.replace('["publish"]', "[]"), "permissions must be among"),
    (SECRET + GRANT.replace('channels = [".*"]', "channels = []"), "at least one pattern"),
    (SECRET + GRANT.replace('topic = ".*"', 'topic = "("'), "bad pattern '('"),
    (SECRET + GRANT + SECRET + GRANT, "secrets #2 (i): the same secret is listed twice"),
    ('[[secrets]]\nidentity = "i"\n' + GRANT, "exactly one of secret or secret_sha256"),
    ('[[secrets]]\nsecret_sha256 = "abc"\nidentity = "i"\n' + GRANT, "64 hex digits"),
    ('[[secrets]]\nsecret = ""\nidentity = "i"\n' + GRANT, "secret is empty"),
    ('[[secrets]]\nsecret = "s"\n' + GRANT, "identity is required"),
    (SECRET + 'remote_ips = ["10.0.0.300"]\n' + GRANT, "remote_ips"),
    (SECRET + "require_tls = 1\n" + GRANT, "require_tls must be true or false"),
])
def test_refuses_what_nsqd_would_or_a_typo(text, error):
    with pytest.raises(SecretsError) as caught:
        load(text)
    assert error in str(caught.value) and str(caught.value).startswith("secrets.toml")


def test_empty_file_is_no_secrets():
    assert len(load("")) == 0
