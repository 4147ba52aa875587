"""The lifecycle table is obeyed: every move a channel makes of a message is one of
``lifecycle.TRANSITIONS``, every entry of the table is a move some operation makes, and a move
the table does not allow raises. Channels and topics in memory, on a clock set by hand."""

from __future__ import annotations

import itertools
import random

import pytest
from nsqd import lifecycle
from nsqd.client import Client
from nsqd.lifecycle import Event, IllegalTransition, State
from nsqd.message import QueuedMessage
from nsqd.record import new_records
from nsqd.state import State as ClientState

S = 1_000_000_000  # ns


def make_client(cid: int, rdy: int, msg_timeout: float = 60.0) -> Client:
    c = Client(cid, f"127.0.0.1:{1000 + cid}", msg_timeout=msg_timeout, heartbeat_interval=30,
               output_buffer_size=16384, output_buffer_timeout=0.25, clock=lambda: 0.0,
               connect_ts=0)
    c.state = ClientState.SUBSCRIBED
    c.rdy = rdy
    return c


class Messages:
    """New messages, each with a body of its own, on the world's clock."""

    def __init__(self, world) -> None:
        self.world = world
        self.n = 0

    def __call__(self, *, ttl: float = 0, delay: float = 0) -> QueuedMessage:
        self.n += 1
        now = self.world.clock.wall_ns()
        return QueuedMessage(b"%016x" % self.n, b"m%d" % self.n, now,
                             expires=now + int(ttl * S) if ttl else 0,
                             due=now + int(delay * S) if delay else 0)


def recording(channel, seen: list[tuple[State, Event, State]]) -> None:
    channel.states.observer = lambda state, event, to, n: seen.append((state, event, to))


async def test_a_workload_makes_every_move_of_the_table_and_no_other(world, monkeypatch):
    seen: list[tuple[State, Event, State]] = []
    clock = world.clock
    new = Messages(world)

    # -- TCP consumers: deliver, FIN, REQ, TOUCH, timeouts, a consumer gone, sampling, empty
    topic = world.topic()
    tcp = world.channel(topic, "tcp")
    recording(tcp, seen)
    tcp.configure(max_attempts=2)  # taken one by one: the attempts are looked at
    client = make_client(1, 10)
    tcp.add_client(client)
    await topic.put_records(new_records([b"a%d" % i for i in range(6)], 0, clock.wall_ns()))
    tcp.pump(clock.now())
    m0, m1, m2, m3, m4, _m5 = list(tcp.in_flight)
    tcp.finish(client, m0.id)
    assert tcp.finish_many(client, [m1.id]) == []
    tcp.requeue(client, m2.id, 0.0, clock.now())
    tcp.requeue(client, m3.id, 5.0, clock.now())
    tcp.touch(client, m4.id, clock.now())
    clock.advance(61)
    assert tcp.scan(clock.now())  # m4, m5 time out (a try left), m3 comes due
    tcp.pump(clock.now())  # m2..m5 a second time
    assert len(tcp.in_flight) == 4
    clock.advance(61)
    assert tcp.scan(clock.now())  # no try left: dead letters
    await tcp.store_dead_letters()
    assert tcp.dead_letter_count == 4
    await topic.put_records(new_records([b"b0", b"b1"], 0, clock.wall_ns()))
    tcp.pump(clock.now())
    tcp.remove_client(client)  # both waiting again
    sampler = make_client(2, 50)
    sampler.sample_rate = 1  # one in four drawn (below): the rest done with at once
    draws = itertools.cycle([0, 50, 50, 50])
    monkeypatch.setattr(random, "randrange", lambda _: next(draws))
    tcp.add_client(sampler)
    await topic.put_records(new_records([b"c%d" % i for i in range(40)], 0, clock.wall_ns()))
    tcp.pump(clock.now())
    await topic.put([new(delay=100)])  # a DPUB: deferred the moment it is published
    assert len(tcp.deferred) == 1 and tcp.depth == 0
    await topic.put_records(new_records([b"d0"], 0, clock.wall_ns()))
    assert sampler.in_flight == 11
    tcp.remove_client(sampler)
    third = make_client(3, 1)
    tcp.add_client(third)
    tcp.pump(clock.now())
    assert third.in_flight == 1
    tcp.remove_client(make_client(4, 1))  # not a subscriber: nothing
    gone = make_client(5, 1)
    tcp.add_client(gone)
    await topic.put_records(new_records([b"e0"], 0, clock.wall_ns()))
    tcp.pump(clock.now())
    tcp.remove_client(gone)
    assert tcp.depth >= 1 and len(tcp.deferred) == 1 and len(tcp.in_flight) == 1
    tcp.empty()  # waiting, in flight, deferred: done with
    assert (tcp.depth, len(tcp.in_flight), len(tcp.deferred)) == (0, 0, 0)

    # -- HTTP pulling and lmstfy: expiries, attempts, deletes, purge, rewind, dead letters
    topic = world.topic("jobs")
    jobs = world.channel(topic, "jobs")
    recording(jobs, seen)

    def pull(n: int = 10, ttr: float = 10) -> list[QueuedMessage]:
        return jobs.pull(n, ttr, clock.now())

    await topic.put([new(ttl=1), new()])
    clock.advance(2)
    (kept,) = pull()  # the first expired while waiting
    assert jobs.finish_pulled(kept.id)
    jobs.configure(dead_letter_expired=True)
    await topic.put([new(ttl=1)])
    clock.advance(2)
    assert pull() == []  # expired, kept as a dead letter
    jobs.configure(dead_letter_expired=False)
    await topic.put([new(delay=10, ttl=5)])
    clock.advance(11)
    jobs.scan(clock.now())  # its expiry came before its due time
    jobs.configure(dead_letter_expired=True)
    await topic.put([new(delay=10, ttl=5)])
    clock.advance(11)
    jobs.scan(clock.now())
    await topic.put([new(ttl=5)])
    assert len(pull(ttr=10)) == 1
    clock.advance(11)
    jobs.scan(clock.now())  # in flight past its expiry: kept as a dead letter
    jobs.configure(dead_letter_expired=False)
    await topic.put([new(ttl=5)])
    assert len(pull(ttr=10)) == 1
    clock.advance(11)
    jobs.scan(clock.now())  # in flight past its expiry: expired
    jobs.configure(max_attempts=1)
    await topic.put([new()])
    (once,) = pull()
    assert jobs.requeue_pulled(once.id, 0, clock.now())
    assert pull() == []  # its one try used up: a dead letter
    jobs.configure(max_attempts=0)
    await topic.put([new(), new(), new(delay=60), new(), new()])
    given_up, deleted = pull(2)
    assert jobs.dead_letter_pulled(given_up.id)
    assert await jobs.delete(deleted.id)  # in flight to a puller: finished
    deferred = next(iter(jobs.deferred))
    assert await jobs.delete(deferred.id)  # deferred: done with at once
    waiting = jobs.peek(5, clock.now())[0]
    assert await jobs.delete(waiting.id)  # waiting in the log: a tombstone ...
    assert jobs.pull(1, 10, clock.now(), stop_at_stale=True) == [] and jobs.stale_popped
    assert await jobs.purge_ready() == 1  # what waits: done with
    await topic.put([new(), new(delay=30)])
    (back,) = pull(1)
    assert jobs.requeue_pulled(back.id, 0, clock.now())
    assert len(jobs.deferred) == 1 and jobs.depth == 1
    jobs.rewind(0)  # requeued and deferred: from the log again
    await jobs.store_dead_letters()
    assert jobs.dead_letter_count == 5
    dead = await jobs.peek_dead(1)
    assert await jobs.delete(dead[0].id)  # a dead letter: gone, its entry left
    assert await jobs.respawn(2) == 2
    assert await jobs.drop_dead(1) == 1
    assert await jobs.empty_dead() == 2

    table = {(state, event, to) for (state, event), to in lifecycle.TRANSITIONS.items()}
    assert set(seen) <= table  # nothing the table does not allow
    assert table - set(seen) == set()  # and the table holds nothing no code does


@pytest.mark.parametrize("entry", [(State.WAITING, Event.DELIVER), (State.IN_FLIGHT, Event.FIN),
                                   (State.IN_FLIGHT, Event.REQ),
                                   (State.IN_FLIGHT, Event.REQ_DELAYED),
                                   (State.IN_FLIGHT, Event.TOUCH),
                                   (State.IN_FLIGHT, Event.TIMEOUT),
                                   (State.IN_FLIGHT, Event.GONE)],
                         ids=lambda e: f"{e[0].name}-{e[1].name}")
async def test_a_move_the_table_does_not_allow_raises(world, monkeypatch, entry):
    # The table without one entry: the channel refuses that move (it asks the table), as
    # h11 refuses an event its state machine does not allow.
    topic = world.topic()
    ch = world.channel(topic)
    client = make_client(1, 10, msg_timeout=5)
    ch.add_client(client)
    await topic.put_records(new_records([b"x0", b"x1"], 0, world.clock.wall_ns()))
    monkeypatch.delitem(lifecycle.TRANSITIONS, entry)
    operations = {
        Event.DELIVER: lambda: ch.pump(0.0),
        Event.FIN: lambda: ch.finish(client, next(iter(ch.in_flight)).id),
        Event.REQ: lambda: ch.requeue(client, next(iter(ch.in_flight)).id, 0.0, 0.0),
        Event.REQ_DELAYED: lambda: ch.requeue(client, next(iter(ch.in_flight)).id, 1.0, 0.0),
        Event.TOUCH: lambda: ch.touch(client, next(iter(ch.in_flight)).id, 0.0),
        Event.TIMEOUT: lambda: ch.scan(10.0),
        Event.GONE: lambda: ch.remove_client(client),
    }
    if entry[1] is not Event.DELIVER:
        ch.pump(0.0)
        assert len(ch.in_flight) == 2
    with pytest.raises(IllegalTransition, match=entry[1].value):
        operations[entry[1]]()


def test_after_says_where_a_move_goes_and_refuses_one_the_table_has_not():
    assert lifecycle.after(State.IN_FLIGHT, Event.FIN) is State.DONE
    assert lifecycle.after(State.DEFERRED, Event.DUE) is State.WAITING
    with pytest.raises(IllegalTransition, match="fin cannot happen to a message done"):
        lifecycle.after(State.DONE, Event.FIN)
    with pytest.raises(IllegalTransition):
        lifecycle.after(State.DEFERRED, Event.TOUCH)
