"""The registration DB on its own, with a clock the tests move."""

from __future__ import annotations

import pytest
from nsq_testing.clock import FakeClock, S
from nsqlookupd.registry import (
    GO_ZERO_TIME_NS,
    PeerInfo,
    Registration,
    RegistrationDB,
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(clock: FakeClock) -> RegistrationDB:
    return RegistrationDB(inactive_timeout=300 * S, tombstone_lifetime=45 * S, clock=clock)


def peer(n: int = 1, http_port: int = 4151) -> PeerInfo:
    return PeerInfo(id=f"127.0.0.1:{5000 + n}", remote_address=f"127.0.0.1:{5000 + n}",
                    hostname=f"host{n}", broadcast_address=f"nsqd{n}", tcp_port=4150,
                    http_port=http_port, version="1.3.0")


def connect(db: RegistrationDB, n: int = 1) -> PeerInfo:
    p = peer(n)
    db.identify(p)
    return p


def test_identify_joins_client_registration(db: RegistrationDB, clock: FakeClock) -> None:
    p = peer()
    assert db.identify(p) is True
    assert p.last_update == clock.now
    assert db.lookup_registrations(p.id) == [Registration("client", "", "")]


def test_register_channel_adds_topic_too(db: RegistrationDB) -> None:
    p = connect(db)
    assert db.register(p, "t", "c") == [Registration("channel", "t", "c"),
                                        Registration("topic", "t", "")]
    assert db.register(p, "t", "c") == []  # re-adding is a no-op
    assert db.topics() == ["t"]
    assert db.channels("t") == ["c"]
    found = db.lookup("t")
    assert found is not None and found[0] == ["c"] and found[1] == [p]


def test_re_register_keeps_tombstone(db: RegistrationDB) -> None:
    p = connect(db)
    db.register(p, "t", None)
    assert db.tombstone_topic_producer("t", "nsqd1:4151") == 1
    db.register(p, "t", None)
    assert db.lookup("t") == ([], [])


def test_unregister_channel(db: RegistrationDB) -> None:
    p = connect(db)
    db.register(p, "t", "c")
    assert db.unregister(p, "t", "c") == [Registration("channel", "t", "c")]
    assert db.channels("t") == ["c"]  # the registration stays, empty
    assert db.lookup("t") == (["c"], [p])  # still a topic producer


def test_unregister_ephemeral_channel_drops_it_when_empty(db: RegistrationDB) -> None:
    a, b = connect(db, 1), connect(db, 2)
    db.register(a, "t", "c#ephemeral")
    db.register(b, "t", "c#ephemeral")
    db.unregister(a, "t", "c#ephemeral")
    assert db.channels("t") == ["c#ephemeral"]
    db.unregister(b, "t", "c#ephemeral")
    assert db.channels("t") == []


def test_unregister_topic_leaves_its_channels(db: RegistrationDB) -> None:
    p = connect(db)
    db.register(p, "t", "c1")
    db.register(p, "t", "c2")
    left = db.unregister(p, "t", None)
    assert set(left) == {Registration("channel", "t", "c1"), Registration("channel", "t", "c2"),
                         Registration("topic", "t", "")}
    assert db.topics() == ["t"]
    assert db.channels("t") == ["c1", "c2"]
    assert db.lookup("t") == (["c1", "c2"], [])


def test_unregister_ephemeral_topic(db: RegistrationDB) -> None:
    p = connect(db)
    db.register(p, "t#ephemeral", "c")
    db.unregister(p, "t#ephemeral", None)
    assert db.topics() == []
    assert db.channels("t#ephemeral") == ["c"]  # channel registrations with 0 producers remain


def test_unregister_unknown_is_harmless(db: RegistrationDB) -> None:
    p = connect(db)
    assert db.unregister(p, "nope", None) == []
    assert db.unregister(p, "nope", "c") == []


def test_disconnect_removes_peer_everywhere_but_keeps_registrations(db: RegistrationDB) -> None:
    a, b = connect(db, 1), connect(db, 2)
    db.register(a, "t", "c")
    db.register(a, "e#ephemeral", "c#ephemeral")
    db.register(b, "t", None)
    assert len(db.remove_peer(a)) == 5
    assert db.lookup_registrations(a.id) == []
    assert sorted(db.topics()) == ["e#ephemeral", "t"]
    assert db.lookup("t") == (["c"], [b])
    assert db.lookup("e#ephemeral") == (["c#ephemeral"], [])


def test_disconnect_spares_a_newer_peer_with_the_same_id(db: RegistrationDB) -> None:
    old = connect(db, 1)
    db.remove_peer(old)
    new = connect(db, 1)
    db.register(new, "t", None)
    assert db.remove_peer(old) == []
    assert db.lookup("t") == ([], [new])


def test_inactive_producers_are_hidden(db: RegistrationDB, clock: FakeClock) -> None:
    p = connect(db)
    db.register(p, "t", None)
    clock.advance(300)
    assert db.lookup("t") == ([], [p])  # exactly the timeout is still active
    clock.advance(0.001)
    assert db.lookup("t") == ([], [])
    assert db.nodes() == []
    assert db.touch(p) == 300_001_000_000
    assert db.lookup("t") == ([], [p])
    assert [n[0] for n in db.nodes()] == [p]


def test_tombstone_hides_for_its_lifetime(db: RegistrationDB, clock: FakeClock) -> None:
    a, b = connect(db, 1), connect(db, 2)
    for p in (a, b):
        db.register(p, "t", None)
        db.register(p, "u", None)
    assert db.tombstone_topic_producer("t", "nsqd1:4151") == 1
    assert db.tombstone_topic_producer("t", "nsqd1:9999") == 0
    assert db.lookup("t") == ([], [b])
    assert db.lookup("u") == ([], [a, b])  # only that topic
    # /nodes still shows the tombstoned node, flagged
    assert db.nodes() == [(a, ["t", "u"], [True, False]), (b, ["t", "u"], [False, False])]
    clock.advance(44.9)
    assert db.lookup("t") == ([], [b])
    clock.advance(0.1)
    assert db.lookup("t") == ([], [a, b])
    assert db.nodes()[0] == (a, ["t", "u"], [False, False])


def test_create_and_delete(db: RegistrationDB) -> None:
    db.create_topic("t")
    assert db.topics() == ["t"]
    assert db.lookup("t") == ([], [])
    db.create_channel("u", "c")
    assert db.topics() == ["t", "u"]
    assert db.channels("u") == ["c"]
    assert db.delete_channel("u", "c") is True
    assert db.delete_channel("u", "c") is False
    assert db.topics() == ["t", "u"]
    p = connect(db)
    db.register(p, "u", "c")
    gone = db.delete_topic("u")
    assert set(gone) == {Registration("channel", "u", "c"), Registration("topic", "u", "")}
    assert db.topics() == ["t"]
    assert db.lookup("u") is None
    assert db.delete_topic("nope") == []


def test_wildcards_span_every_topic(db: RegistrationDB) -> None:
    p = connect(db)
    db.register(p, "a", "x")
    db.register(p, "b", "y")
    assert db.channels("*") == ["x", "y"]
    assert db.lookup("*") == (["x", "y"], [p])  # one entry per peer
    db.delete_topic("*")
    assert db.topics() == []
    assert db.channels("*") == []


def test_debug_dump(db: RegistrationDB, clock: FakeClock) -> None:
    db.create_topic("empty")
    p = connect(db)
    db.register(p, "t", None)
    db.tombstone_topic_producer("t", "nsqd1:4151")
    dump = db.debug()
    assert list(dump) == ["client::", "topic:t:"]  # sorted, empty registrations left out
    client = dump["client::"][0]
    assert list(client) == sorted(client)
    assert client == {"broadcast_address": "nsqd1", "hostname": "host1", "http_port": 4151,
                      "id": "127.0.0.1:5001", "last_update": clock.now, "tcp_port": 4150,
                      "tombstoned": False, "tombstoned_at": GO_ZERO_TIME_NS, "version": "1.3.0"}
    topic = dump["topic:t:"][0]
    assert topic["tombstoned"] is True and topic["tombstoned_at"] == clock.now


def test_peer_json_field_order() -> None:
    assert list(peer().to_json()) == ["remote_address", "hostname", "broadcast_address",
                                      "tcp_port", "http_port", "version"]
