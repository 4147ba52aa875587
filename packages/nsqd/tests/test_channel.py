"""Channel and topic logic with explicit times and fake clients: no sockets, logs in memory."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nsq_common import MESSAGE_HEADER, FrameDecoder, FrameType, decode_message
from nsqd.channel import spread
from nsqd.client import Client
from nsqd.errors import NotInFlight, NotOwner
from nsqd.guid import TWEPOCH_MS, GuidFactory
from nsqd.message import QueuedMessage
from nsqd.output import record_frames
from nsqd.record import new_records
from nsqd.state import State


def make_client(cid: int, rdy: int, msg_timeout: float = 60.0) -> Client:
    c = Client(cid, f"127.0.0.1:{1000 + cid}", msg_timeout=msg_timeout, heartbeat_interval=30,
               output_buffer_size=16384, output_buffer_timeout=0.25, clock=lambda: 0.0,
               connect_ts=0)
    c.state = State.SUBSCRIBED
    c.rdy = rdy
    return c


def messages(n: int) -> list[QueuedMessage]:
    return [QueuedMessage(b"%016x" % i, b"body%d" % i, 0) for i in range(n)]


async def channel_with(world, *clients: Client, queued: int, name: str = "c",
                       max_msg_timeout: float = 900, as_records: bool = True):
    """A channel with ``clients`` subscribed, ``queued`` messages published and one pump
    done. ``as_records``: delivered as the log's records (the plain path); otherwise the
    channel looks at each message (an attempt limit on), as it does for jobs and expiries."""
    topic = world.topic()
    ch = world.channel(topic, name, max_msg_timeout=max_msg_timeout)
    if not as_records:
        ch.configure(default_max_attempts=1000)
    for client in clients:
        ch.add_client(client)
    await topic.put_records(new_records([b"body%d" % i for i in range(queued)], 0, 0))
    ch.pump(0.0)
    return ch


#: The tests of delivery and answers run both ways a channel delivers.
both_forms = pytest.mark.parametrize("as_records", [False, True], ids=["messages", "records"])


def delivered(client: Client) -> int:
    data = client.output.take()
    return data.count(b"body")


@both_forms
async def test_rdy_window_and_spread(world, as_records):
    a, b = make_client(1, 3), make_client(2, 3)
    ch = await channel_with(world, a, b, queued=10, as_records=as_records)
    assert (a.in_flight, b.in_flight) == (3, 3)
    assert ch.depth == 4 and len(ch.in_flight) == 6
    assert delivered(a) == 3 and delivered(b) == 3


@both_forms
async def test_one_pump_fills_every_window_it_can(world, as_records):
    # A small window beside a big one: the big one takes what the small one cannot, in the
    # same pump, rather than leaving it queued until some FIN or timeout wakes the channel.
    a, b = make_client(1, 1), make_client(2, 100)
    ch = await channel_with(world, a, b, queued=101, as_records=as_records)
    assert (a.in_flight, b.in_flight) == (1, 100)
    assert ch.depth == 0 and delivered(a) == 1 and delivered(b) == 100


@settings(deadline=None,  # examples are timed in wall-clock time: a busy machine breaks that
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # a class, not a world
@given(st.lists(st.integers(0, 50), min_size=1, max_size=6), st.integers(0, 400))
async def test_after_a_pump_nothing_waits_for_a_ready_client(world_class, windows, queued):
    clients = [make_client(i, rdy) for i, rdy in enumerate(windows, 1)]
    ch = await channel_with(world_class(), *clients, queued=queued)
    assert ch.depth == 0 or all(c.ready_slots() == 0 for c in clients)
    assert sum(c.in_flight for c in clients) == min(queued, sum(windows))
    assert all(c.in_flight <= c.rdy for c in clients)


@settings(deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=6), st.data())
def test_spread_gives_every_message_a_client_evenly(slots, data):
    total = data.draw(st.integers(0, sum(slots)))
    counts = spread(total, slots)
    assert sum(counts) == total
    assert all(0 <= n <= free for n, free in zip(counts, slots, strict=True))
    # even: a client gets less than another only when its own window is full
    for n, free in zip(counts, slots, strict=True):
        if n < free:
            assert all(other <= n + 1 for other in counts)


@both_forms
async def test_fin_req_touch_and_timeouts(world, as_records):
    a = make_client(1, 10, msg_timeout=2.0)
    ch = await channel_with(world, a, queued=3, max_msg_timeout=5.0, as_records=as_records)
    m0, m1, m2 = (b"%016x" % i for i in range(3))
    ch.finish(a, m0)
    with pytest.raises(NotInFlight, match=r"^ID not in flight$"):
        ch.finish(a, m0)
    ch.requeue(a, m1, 10.0, now=1.0)
    assert len(ch.deferred) == 1 and ch.requeue_count == 1
    ch.touch(a, m2, now=1.5)  # deadline 3.5
    assert not ch.scan(3.0)
    assert ch.scan(3.6)  # m2 timed out
    assert ch.timeout_count == 1 and a.in_flight == 0 and ch.depth == 1
    ch.pump(3.6)
    ch.touch(a, m2, now=6.0)  # capped at delivery 3.6 + max 5.0 = 8.6
    assert ch.in_flight.get(m2).deadline == 8.0
    assert ch.scan(11.0)  # the deferred one is due, and m2 timed out again at 8.0
    assert ch.depth == 2 and ch.timeout_count == 2


@both_forms
async def test_finished_offsets_move_the_cursor(world, as_records):
    a = make_client(1, 10)
    ch = await channel_with(world, a, queued=5, as_records=as_records)
    ids = [b"%016x" % i for i in range(5)]
    assert ch.finish_many(a, [ids[1], ids[0], ids[3]]) == []
    assert ch.cursor.mark_delete == 2 and 3 in ch.cursor.acked
    ch.finish(a, ids[2])
    assert ch.cursor.mark_delete == 4 and not ch.cursor.acked


@both_forms
async def test_other_client_cannot_answer(world, as_records):
    a, b = make_client(1, 1), make_client(2, 0)
    ch = await channel_with(world, a, b, queued=1, as_records=as_records)
    with pytest.raises(NotOwner, match=r"^client does not own message$"):
        ch.finish(b, b"%016x" % 0)


@both_forms
async def test_remove_client_requeues_its_messages_and_ephemeral_goes(world, as_records):
    a = make_client(1, 5)
    ch = await channel_with(world, a, queued=2, name="c#ephemeral", as_records=as_records)
    ch.remove_client(a)
    assert ch.depth == 2 and len(ch.in_flight) == 0
    assert world.owner.emptied == [ch]


async def test_paused_channel_holds_and_empty_clears(world):
    topic = world.topic()
    ch = world.channel(topic)
    a = make_client(1, 5)
    ch.add_client(a)
    ch.pause()
    await topic.put(messages(2))
    ch.pump(0.0)
    assert a.in_flight == 0
    ch.unpause()
    ch.pump(0.0)
    assert a.in_flight == 2
    ch.empty()
    assert a.in_flight == 0 and len(ch.in_flight) == 0 and ch.cursor.mark_delete == 2


async def test_a_topic_holds_for_its_first_channel_and_later_ones_start_at_the_end(world):
    topic = world.topic()
    await topic.put(messages(2))
    assert topic.depth == 2 and topic.message_count == 2
    one = world.channel(topic, "one")
    assert topic.depth == 0 and one.depth == 2 and one.message_count == 2
    two = world.channel(topic, "two")
    await topic.put(messages(1))
    assert one.depth == 3 and two.depth == 1
    early = world.channel(topic, "early", start="earliest")
    assert early.depth == 3
    assert world.channel(topic, "late", start="latest").depth == 0


async def test_a_paused_topic_holds_what_comes_then_for_every_channel(world):
    topic = world.topic()
    one = world.channel(topic, "one")
    await topic.put(messages(1))
    topic.pause()
    await topic.put(messages(2))
    assert (topic.depth, one.depth) == (2, 1)
    two = world.channel(topic, "two")  # made while paused: it gets what is held
    topic.empty()  # what the paused topic held goes, for every channel
    topic.unpause()
    assert (topic.depth, one.depth, two.depth) == (0, 1, 0)
    await topic.put(messages(1))
    assert (one.depth, two.depth) == (2, 1)


async def test_records_are_shared_by_the_channels_and_delivered_as_messages(world):
    topic = world.topic()
    records = new_records([b"x", b"%s", b"y" * 300], 0x1234, 77)
    assert records[1] == MESSAGE_HEADER.pack(77, 0) + b"0000000000001235%s"
    await topic.put_records(records)  # no channel yet: held by the topic
    assert topic.depth == 3 and topic.message_bytes == 303
    one = world.channel(topic, "one")
    two = world.channel(topic, "two", start="earliest")
    assert one.log is two.log and topic.log.read(0, 3)[0][1][0] is records[0]
    a = make_client(1, 2)
    one.add_client(a)
    one.pump(0.0)
    msgs = list(one.in_flight)
    assert [(m.id, m.body, m.timestamp, m.attempts) for m in msgs] == [
        (b"0000000000001234", b"x", 77, 1), (b"0000000000001235", b"%s", 77, 1)]
    assert [m.body for m in one.peek(5, 0.0)] == [b"y" * 300]
    assert await one.delete(b"0000000000001236")  # lmstfy's DELETE of a waiting one
    assert one.peek(5, 0.0) == []
    assert one.ready_count() == 1  # lmstfy counts it until a consume reaches it
    assert one.depth == 1 and two.depth == 3


def test_one_record_is_made_as_each_of_many_is():
    timestamp = int.from_bytes(b"%%b%016x", "big") >> 1  # a head with "%" in it
    for first_id in (0, 0x12ff, 0xffff_ffff_ffff_ffff):
        for body in (b"", b"%s%b%%", b"z" * 300):
            many = new_records([body, b"next"], first_id, timestamp)
            assert type(new_records([body], first_id, timestamp)) is type(many)
            assert new_records([body], first_id, timestamp) == many[:1]
            assert many[0] == MESSAGE_HEADER.pack(timestamp, 0) + b"%016x" % first_id + body


def frames_of(client: Client) -> list[tuple[bytes, int, bytes]]:
    """(id, attempts, body) of each message frame the client was sent."""
    decoder = FrameDecoder()
    decoder.receive_data(client.output.take())
    out = []
    while (frame := decoder.next_event()) is not None:
        msg = decode_message(frame[1])
        out.append((msg.id, msg.attempts, msg.body))
    return out


async def test_records_in_flight_answer_as_messages_do(world):
    # Delivered from records, the frames carry one attempt more than the record; FIN, REQ,
    # TOUCH, a timeout and a disconnect work on them as on messages, and the next delivery
    # counts one attempt more.
    a = make_client(1, 2, msg_timeout=2.0)
    ch = await channel_with(world, a, queued=4, as_records=True)
    m = [b"%016x" % i for i in range(4)]
    assert frames_of(a) == [(m[0], 1, b"body0"), (m[1], 1, b"body1")]
    failed = ch.finish_many(a, [m[0], m[2]])  # m2 is still waiting
    assert [(i, type(e)) for i, e in failed] == [(m[2], NotInFlight)]
    ch.requeue(a, m[1], 0.0, now=0.5)  # to the back of the queue
    ch.pump(0.5)
    assert frames_of(a) == [(m[2], 1, b"body2"), (m[3], 1, b"body3")]
    ch.touch(a, m[3], now=1.0)
    assert ch.in_flight.get(m[3]).deadline == 3.0
    assert ch.scan(2.5)  # m2 timed out
    assert ch.timeout_count == 1 and a.in_flight == 1
    ch.pump(2.5)
    assert frames_of(a) == [(m[1], 2, b"body1")]
    assert ch.scan(3.0)  # m3 too
    ch.pump(3.0)
    assert frames_of(a) == [(m[2], 2, b"body2")]
    assert ch.finish_many(a, [m[1], m[2]]) == [] and a.in_flight == 0
    ch.pump(3.0)
    assert frames_of(a) == [(m[3], 2, b"body3")]

    b, c = make_client(2, 3), make_client(3, 0)
    ch = await channel_with(world, b, c, queued=3, as_records=True)
    assert [attempts for _, attempts, _ in frames_of(b)] == [1, 1, 1]
    with pytest.raises(NotOwner):
        ch.finish(c, m[0])
    ch.remove_client(b)  # its records back to the queue, as messages
    assert ch.depth == 3 and len(ch.in_flight) == 0
    c.rdy = 3
    ch.pump(1.0)
    assert frames_of(c) == [(m[i], 2, b"body%d" % i) for i in range(3)]


def test_record_frames_are_the_message_frames_one_attempt_on():
    bodies = [b"", b"x", b"y" * 300]
    records = new_records(bodies, 0xABC, 5)
    spent = MESSAGE_HEADER.pack(6, 65535) + b"%016x" % 1 + b"z"  # stays at its limit
    got = FrameDecoder()
    got.receive_data(bytes(record_frames([*records, spent, records[1]])))
    frames = []
    while (frame := got.next_event()) is not None:
        frames.append((frame[0], decode_message(frame[1])))
    assert [(t, m.timestamp, m.attempts, m.id, m.body) for t, m in frames] == [
        (FrameType.MESSAGE, 5, 1, b"%016x" % (0xABC + i), body) for i, body in enumerate(bodies)
    ] + [(FrameType.MESSAGE, 6, 65535, b"%016x" % 1, b"z"),
         (FrameType.MESSAGE, 5, 1, b"%016x" % 0xABD, b"x")]



@pytest.mark.parametrize("attempts", [[0, 0, 0], [0, 254, 7], [3, 255, 0], [0, 65535, 256]])
def test_record_frames_of_one_size_are_the_frames_one_attempt_on(attempts):
    # records of one size take the column-at-a-time path unless a low byte would carry
    records = [MESSAGE_HEADER.pack(9, a) + b"%016x" % i + b"body" for i, a in enumerate(attempts)]
    got = FrameDecoder()
    got.receive_data(bytes(record_frames(records)))
    seen = []
    while (frame := got.next_event()) is not None:
        msg = decode_message(frame[1])
        seen.append((frame[0], msg.timestamp, msg.attempts, msg.id, msg.body))
    assert seen == [(FrameType.MESSAGE, 9, min(a + 1, 65535), b"%016x" % i, b"body")
                    for i, a in enumerate(attempts)]


async def test_sampling_drops_about_the_rest(world):
    a = make_client(1, 2500)
    a.sample_rate = 10
    ch = await channel_with(world, a, queued=2000)
    assert 100 < a.in_flight < 350 and ch.depth == 0


def test_guid_unique_monotonic_16_hex():
    """The ids carry the wall time given (the broker's clock), and keep increasing when it
    steps back."""
    g = GuidFactory(7)
    wall = 1_700_000_000_123_000_000
    ids = g.new_ids(10000, wall) + [g.new_id(wall - 5_000_000_000) for _ in range(100)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 16 for i in ids)
    assert [int(i, 16) for i in ids] == sorted(int(i, 16) for i in ids)
    assert (int(ids[0], 16) >> 12) & 0x3FF == 7
    assert int(ids[0], 16) >> 22 == wall // 1_000_000 - TWEPOCH_MS


@settings(deadline=None)
@given(st.integers(0, (1 << 63) - 1), st.lists(st.binary(max_size=4), max_size=600),
       st.integers(-(1 << 63), (1 << 63) - 1))
def test_new_records_are_the_header_the_hex_id_and_the_body(first, bodies, timestamp):
    expected = [MESSAGE_HEADER.pack(timestamp, 0) + b"%016x" % (first + i) + body
                for i, body in enumerate(bodies)]
    assert new_records(bodies, first, timestamp) == expected
    percent = int.from_bytes(b"%%%%%%%%")  # a timestamp of '%' bytes is no format to them
    assert new_records([b"%s"], first, percent) == [b"%%%%%%%%\0\0" + b"%016x%%s" % first]


# -- lmstfy's front door: deleting and destroying around deferred messages -------------------

def later(n: int, now: int, *, delay_s: int = 3600) -> QueuedMessage:
    return QueuedMessage(b"%016d" % n, b"later", now, due=now + delay_s * 10**9)


async def test_a_deferred_message_deleted_as_the_first_offset_is_not_counted(world):
    """Its offset was the cursor's mark-delete, ahead of its read position: the cursor moves
    both (``depth``, lmstfy's size, counted it forever before)."""
    topic = world.topic()
    ch = world.channel(topic)
    now = world.clock.wall_ns()
    await topic.put([later(0, now)])
    assert (ch.depth, len(ch.deferred)) == (0, 1)
    assert await ch.delete(b"%016d" % 0)
    assert (ch.depth, len(ch.deferred), ch.cursor.mark_delete, ch.cursor.read) == (0, 0, 1, 1)
    await topic.put([QueuedMessage(b"%016d" % 1, b"now", now)])
    assert ch.depth == 1 and [m.body for m in ch.pull(5, 30.0, 0.0)] == [b"now"]


async def test_purging_the_ready_messages_keeps_a_deferred_one_once(world):
    topic = world.topic()
    ch = world.channel(topic)
    now = world.clock.wall_ns()
    await topic.put([QueuedMessage(b"%016d" % 0, b"a", now), later(1, now),
                     QueuedMessage(b"%016d" % 2, b"b", now)])
    assert await ch.purge_ready() == 2
    assert (ch.depth, len(ch.deferred), ch.cursor.ahead) == (0, 1, set())
    world.clock.advance(3601)
    assert ch.scan(world.clock.now())
    assert [m.body for m in ch.pull(5, 30.0, world.clock.now())] == [b"later"]


async def test_a_rewind_never_puts_one_message_in_flight_twice(world):
    # Rewound while messages are in flight: a record read again while its message is in
    # flight is passed over (FIN of the one copy acknowledges it); one that comes back
    # (timeout, REQ) before the cursor reaches it again is delivered once, from the log.
    a = make_client(1, 10, msg_timeout=5.0)
    ch = await channel_with(world, a, queued=4)
    ids = [b"%016x" % i for i in range(4)]
    assert [i for i, _, _ in frames_of(a)] == ids
    ch.finish(a, ids[0])
    ch.rewind(0)
    ch.requeue(a, ids[1], 0.0, now=1.0)  # comes back before the cursor reaches it again
    a.rdy = 3  # room for one more beside the two in flight
    ch.pump(1.0)
    assert frames_of(a)[-1][0] == ids[0]  # replay: the finished one again
    ch.finish(a, ids[0])
    ch.pump(1.0)
    assert frames_of(a)[-1][0] == ids[1]  # once, from the log (the requeued copy dropped)
    ch.finish(a, ids[1])
    ch.pump(1.0)
    assert frames_of(a) == []  # 2 and 3 are still in flight: not read again
    ch.finish_many(a, [ids[2], ids[3]])
    assert ch.depth == 0 and len(ch.in_flight) == 0 and ch.cursor.mark_delete == 4


async def test_a_message_expiring_in_flight_is_dropped_at_its_timeout_and_frees_the_slot(world):
    """Past its TTL when its timeout comes: expired there and then (never waiting again),
    and the channel is pumped, since its consumer may take another."""
    a = make_client(1, 1, msg_timeout=30.0)
    ch = await channel_with(world, a, queued=0)
    now = world.clock.wall_ns()
    await ch.topic.put([QueuedMessage(b"%016d" % 0, b"short", now, expires=now + 10 * 10**9),
                        QueuedMessage(b"%016d" % 1, b"next", now)])
    ch.pump(world.clock.now())
    assert [body for _, _, body in frames_of(a)] == [b"short"]
    world.clock.advance(31)
    world.owner.dirty.clear()
    assert ch.scan(world.clock.now())
    assert (ch.expired_count, ch.timeout_count, ch.depth, a.in_flight) == (1, 1, 1, 0)
    assert ch in world.owner.dirty
    ch.pump(world.clock.now())
    assert [body for _, _, body in frames_of(a)] == [b"next"]
