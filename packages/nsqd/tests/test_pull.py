"""HTTP pulling on a channel, with explicit times: no sockets, memory queues only."""

import trio
import trio.testing
from nsqd.channel import PULLER
from nsqd.client import Client
from nsqd.message import QueuedMessage
from nsqd.state import State


def messages(n: int) -> list[QueuedMessage]:
    return [QueuedMessage(b"%016x" % i, b"body%d" % i, 0) for i in range(n)]


def new_channel(world, *, max_msg_timeout=900):
    topic = world.topic()
    return topic, world.channel(topic, max_msg_timeout=max_msg_timeout)


async def test_pulled_messages_are_in_flight_for_their_ttr_then_come_back(world):
    topic, ch = new_channel(world, max_msg_timeout=900)
    await topic.put(messages(3))
    pulled = ch.pull(2, ttr=30.0, now=10.0)
    assert [m.body for m in pulled] == [b"body0", b"body1"]
    assert all(m.client_id == PULLER and m.attempts == 1 and m.deadline == 40.0 for m in pulled)
    assert (ch.depth, len(ch.in_flight)) == (1, 2)
    assert not ch.scan(39.9)
    assert ch.scan(40.0)  # the ttr passed: both back, counted as timed out
    assert (ch.depth, len(ch.in_flight), ch.timeout_count) == (3, 0, 2)
    again = ch.pull(3, ttr=30.0, now=41.0)
    assert sorted(m.attempts for m in again) == [1, 2, 2]


async def test_fin_req_touch_of_pulled_messages(world):
    topic, ch = new_channel(world, max_msg_timeout=100)
    await topic.put(messages(3))
    a, b, c = ch.pull(3, ttr=10.0, now=0.0)
    assert ch.finish_pulled(a.id)
    assert not ch.finish_pulled(a.id)  # no longer in flight
    assert not ch.finish_pulled(b"0123456789abcdef")
    assert ch.requeue_pulled(b.id, 0.0, now=1.0) and ch.depth == 1
    assert ch.requeue_pulled(c.id, 5.0, now=1.0) and len(ch.deferred) == 1
    assert ch.requeue_count == 2 and len(ch.in_flight) == 0
    (d,) = ch.pull(1, ttr=10.0, now=2.0)
    assert ch.touch_pulled(d.id, now=8.0) and d.deadline == 18.0
    assert ch.touch_pulled(d.id, now=95.0) and d.deadline == 102.0  # delivered + max (100)


async def test_a_tcp_delivery_is_not_answered_over_http(world):
    topic, ch = new_channel(world, max_msg_timeout=900)
    client = Client(1, "127.0.0.1:1001", msg_timeout=60.0, heartbeat_interval=30,
                    output_buffer_size=16384, output_buffer_timeout=0.25, clock=lambda: 0.0,
                    connect_ts=0)
    client.state, client.rdy = State.SUBSCRIBED, 1
    ch.add_client(client)
    await topic.put(messages(1))
    ch.pump(0.0)
    (msg,) = ch.in_flight
    assert not ch.finish_pulled(msg.id) and not ch.touch_pulled(msg.id, 1.0)
    assert len(ch.in_flight) == 1


async def test_a_waiting_puller_wakes_when_a_message_arrives(world):
    topic, ch = new_channel(world, max_msg_timeout=900)
    got = []

    async def puller():
        while not (msgs := ch.pull(1, 30.0, 0.0)):
            await ch.wait_pullable()
        got.extend(msgs)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(puller)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        await topic.put(messages(1))
    assert [m.body for m in got] == [b"body0"]


async def test_a_paused_channel_gives_nothing_to_pull(world):
    topic, ch = new_channel(world, max_msg_timeout=900)
    await topic.put(messages(2))
    ch.pause()
    assert ch.pull(2, 30.0, 0.0) == []
    ch.unpause()
    assert len(ch.pull(2, 30.0, 0.0)) == 2


async def test_peek_shows_what_would_be_delivered_and_takes_nothing(world):
    topic, ch = new_channel(world, max_msg_timeout=900)
    await topic.put(messages(3))
    (first,) = ch.pull(1, ttr=5.0, now=0.0)
    assert ch.requeue_pulled(first.id, 10.0, now=0.0)  # deferred until 10
    assert [m.body for m in ch.peek(5, now=9.0)] == [b"body1", b"body2"]
    assert [m.body for m in ch.peek(5, now=10.0)] == [b"body1", b"body2", b"body0"]  # due
    assert [m.body for m in ch.peek(1, now=10.0)] == [b"body1"]
    assert (ch.depth, len(ch.in_flight), len(ch.deferred)) == (2, 0, 1)
    assert [m.body for m in ch.pull(2, 5.0, now=10.0)] == [b"body1", b"body2"]


async def test_peek_places_a_deferral_come_due_where_it_comes_back(world):
    # a deferred message whose time has come but that the scan has not met yet is shown
    # where it will wait: behind what the memory queue holds (--mem-queue-size=1 here), not
    # after everything; peek and the pull after the scan agree
    topic = world.topic()
    ch = world.channel(topic, mem_queue_size=1)
    await topic.put(messages(4))
    (first,) = ch.pull(1, ttr=5.0, now=0.0)
    assert ch.requeue_pulled(first.id, 10.0, now=0.0)
    peeked = [m.body for m in ch.peek(4, now=10.0)]
    assert peeked == [b"body1", b"body0", b"body2", b"body3"]
    assert ch.scan(10.0) is not None
    assert [m.body for m in ch.pull(4, 5.0, now=10.0)] == peeked
