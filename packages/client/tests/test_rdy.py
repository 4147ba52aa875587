import random

from hypothesis import given, settings
from hypothesis import strategies as st
from nsq_client._rdy import Mode, RdyController


def controller(max_in_flight: int, seed: int = 1) -> RdyController:
    return RdyController(max_in_flight, low_rdy_idle_timeout=10.0, low_rdy_timeout=30.0,
                         rng=random.Random(seed))


def rdys(c: RdyController) -> dict:
    return {k: v.rdy for k, v in c.conns.items()}


def test_share_is_go_nsqs_per_conn_max_in_flight() -> None:
    c = controller(10)
    for n, expected in [(1, 10), (2, 5), (3, 3), (4, 2), (10, 1), (20, 1)]:
        c.conns.clear()
        for i in range(n):
            c.add(i, 2500, 0.0)
        assert c.share() == expected
    c.max_in_flight = 0
    assert c.share() == 0


def test_one_connection_gets_everything() -> None:
    c = controller(100)
    c.add("a", 2500, 0.0)
    assert c.rebalance(0.0) == [("a", 100)]
    assert c.rebalance(0.0) == []  # unchanged: not sent again


def test_a_new_connection_takes_half_lowering_first() -> None:
    c = controller(100)
    c.add("a", 2500, 0.0)
    c.rebalance(0.0)
    c.add("b", 2500, 1.0)
    assert c.rebalance(1.0) == [("a", 50), ("b", 50)]
    assert c.total == 100


def test_a_lost_connection_gives_its_share_back() -> None:
    c = controller(90)
    for key in "abc":
        c.add(key, 2500, 0.0)
    c.rebalance(0.0)
    assert rdys(c) == {"a": 30, "b": 30, "c": 30}
    assert c.remove("b", 1.0) == [("a", 45), ("c", 45)]
    assert c.remove("zzz", 1.0) == []


def test_max_rdy_count_caps_a_connection() -> None:
    c = controller(1000)
    c.add("a", 200, 0.0)
    c.add("b", 2500, 0.0)
    c.rebalance(0.0)
    assert rdys(c) == {"a": 200, "b": 500}


def test_changing_max_in_flight_resends_only_changes() -> None:
    c = controller(10)
    c.add("a", 2500, 0.0)
    c.add("b", 2500, 0.0)
    c.rebalance(0.0)
    assert c.set_max_in_flight(10, 1.0) == []
    assert c.set_max_in_flight(4, 1.0) == [("a", 2), ("b", 2)]
    assert c.set_max_in_flight(0, 1.0) == [("a", 0), ("b", 0)]


def test_fewer_max_in_flight_than_connections_rotates() -> None:
    c = controller(2)
    for key in "abcde":
        c.add(key, 2500, 0.0)
    c.rebalance(0.0)
    assert c.total == 2 and sorted(rdys(c).values()) == [0, 0, 0, 1, 1]
    holders = {k for k, v in rdys(c).items() if v}
    assert c.needs_redistribution()
    # holders receiving messages keep their RDY until low_rdy_timeout
    for key in holders:
        c.message(key, 5.0)
    assert c.redistribute(6.0) == []
    # idle for longer than low_rdy_idle_timeout: given to the others
    plan = c.redistribute(16.0)
    new_holders = {k for k, v in rdys(c).items() if v}
    assert c.total == 2 and new_holders.isdisjoint(holders)
    assert [count for _, count in plan] == [0, 0, 1, 1]
    # a busy holder still gives up after low_rdy_timeout
    for key in new_holders:
        c.message(key, 46.5)
    c.redistribute(46.5)
    assert {k for k, v in rdys(c).items() if v}.isdisjoint(new_holders)


def test_leaving_rotation_gives_everyone_a_share() -> None:
    c = controller(2)
    for key in "abc":
        c.add(key, 2500, 0.0)
    c.rebalance(0.0)
    c.remove("c", 1.0)
    assert rdys(c) == {"a": 1, "b": 1}
    assert not c.needs_redistribution()


def test_backoff_pauses_probes_one_and_resumes() -> None:
    c = controller(10)
    for key in "ab":
        c.add(key, 2500, 0.0)
    c.rebalance(0.0)
    assert c.pause(1.0) == [("a", 0), ("b", 0)]
    assert c.mode is Mode.PAUSED
    c.add("c", 2500, 1.5)
    assert c.rebalance(1.5) == []  # a new connection waits at 0 during backoff
    plan = c.probe(2.0)
    assert plan is not None and len(plan) == 1 and plan[0][1] == 1
    assert c.total == 1 and c.mode is Mode.PROBING
    assert c.resume(3.0) and rdys(c) == {"a": 3, "b": 3, "c": 3}


def test_probe_without_connections_says_so() -> None:
    c = controller(10)
    assert c.probe(0.0) is None


def test_probing_connection_lost_probes_another() -> None:
    c = controller(10)
    for key in "ab":
        c.add(key, 2500, 0.0)
    c.pause(0.0)
    plan = c.probe(1.0)
    assert plan is not None
    (prober, _), = plan
    other = "b" if prober == "a" else "a"
    assert c.remove(prober, 2.0) == [(other, 1)]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 12), st.lists(st.tuples(st.sampled_from(
    ["add", "remove", "max", "pause", "probe", "resume", "redistribute", "message"]),
    st.integers(0, 7)), max_size=60), st.integers(0, 1000))
def test_total_never_exceeds_the_budget_at_any_step(max_in_flight: int, ops: list, seed: int) -> None:
    c = controller(max_in_flight, seed)
    sent = {}
    now = 0.0
    for op, arg in ops:
        now += 3.0
        before = sum(sent.values())
        if op == "add" and arg not in c.conns:
            c.add(arg, 1 + arg * 3, now)
            plan = c.rebalance(now)
        elif op == "remove":
            sent.pop(arg, None)
            plan = c.remove(arg, now)
        elif op == "max":
            plan = c.set_max_in_flight(arg, now)
        elif op == "pause":
            plan = c.pause(now)
        elif op == "probe":
            plan = c.probe(now) or []
        elif op == "resume":
            plan = c.resume(now)
        elif op == "redistribute":
            plan = c.redistribute(now)
        else:
            c.message(arg, now)
            plan = []
        budget = c.max_in_flight if c.mode is Mode.NORMAL else 1
        for key, count in plan:  # apply in order, as the wire would see it
            sent[key] = count
            # lowering comes first: the wire never sees more than the old or the new budget
            assert sum(sent.values()) <= max(before, budget)
            assert count <= c.conns[key].max_rdy
        assert sent == {k: v.rdy for k, v in c.conns.items() if k in sent}
        assert c.total == sum(v.rdy for v in c.conns.values())
        assert c.total <= budget or op == "max"
