"""A channel's internal logs, its dead letters and own queue, shipped from a leader's broker
to a follower's (``nsqd.replication.private``, through ``cursors.Shipped``): two real
brokers on temporary data paths, no network; the channel records of each ``DATA`` decoded
and applied in order, as the fetcher does. The channel's cursor, which has the dead letters'
originals done with, goes only once every dead letter is sent; a new connection sends the
logs again from their mark-delete, and the follower's copy is cut back to it."""

from __future__ import annotations

from pathlib import Path

import trio
from nsqd.broker import Broker
from nsqd.channel import Channel
from nsqd.options import Options
from nsqd.record import decode_record
from nsqd.replication import wire
from nsqd.replication.cursors import Shipped, apply_record
from nsqd.replication.replica import Replica


async def start(nursery: trio.Nursery, path: Path) -> Broker:
    path.mkdir()
    broker = Broker(Options.defaults(data_path=str(path)))
    await nursery.start(broker.run)
    return broker


async def published(broker: Broker) -> Channel:
    """Topic ``t``, its channel ``c``, and three messages in it."""
    channel = broker.get_channel(broker.get_topic("t"), "c")
    await broker.publish("t", broker.new_messages([b"a", b"b", b"c"]))
    return channel


async def ship(shipped: Shipped, leader: Broker, follower: Broker, replica: Replica,
               now: float, budget: int = 1 << 20) -> list[int]:
    """One ``DATA``'s channel records, applied on the follower in order; their kinds."""
    topic = leader.topics["t"]
    data = await shipped.due(topic, topic.log.end, now, epoch=1, budget=budget)
    records = wire.decode_channel_records(data)
    for name, kind, payload in records:
        await apply_record(follower, replica, name, kind, payload)
    return [kind for _, kind, _ in records]


async def test_a_channels_cursor_goes_only_with_its_dead_letters(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        await _run(nursery, tmp_path)
        nursery.cancel_scope.cancel()


async def _run(nursery: trio.Nursery, tmp_path: Path) -> None:
    leader = await start(nursery, tmp_path / "leader")
    follower = await start(nursery, tmp_path / "follower")
    source = await published(leader)
    copy = await published(follower)  # (the follower's log holds the same records)
    replica = Replica(follower.topics["t"], node="follower", min_insync=1, lag_max=10.0)
    # the three messages out of attempts: dead letters stored, then done with on the cursor
    runs = await leader.topics["t"].log.read_at(0, 3)
    dead = source.states.dead_letters
    dead.pending += [decode_record(r, first + i) for first, records, _ in runs
                     for i, r in enumerate(records)]
    await source.states.store_dead_letters()
    assert source.cursor.mark_delete == 3 and source.dead_letter_count == 3

    shipped = Shipped()
    # one dead letter fits: neither the channel's cursor nor the dead letters' goes yet
    kinds = await ship(shipped, leader, follower, replica, 0.0, budget=1)
    assert wire.CURSOR not in kinds and wire.PRIVATE_CURSOR not in kinds
    assert copy.dead_letter_count == 1 and copy.cursor.mark_delete == 0
    kinds = await ship(shipped, leader, follower, replica, 1.0)
    assert kinds == [wire.PRIVATE_RECORDS, wire.PRIVATE_CURSOR, wire.CURSOR]
    assert copy.dead_letter_count == 3 and copy.cursor.mark_delete == 3
    assert [m.body for m in await copy.peek_dead(5)] == [b"a", b"b", b"c"]

    # one respawned on the leader: in its own queue, then done with in its dead letters
    assert await source.respawn(1) == 1
    await ship(shipped, leader, follower, replica, 2.0)
    assert copy.dead_letter_count == 2 and copy.own is not None and len(copy.own) == 1

    # a new connection: each log sent again from its mark-delete, the follower's copy cut
    # back to it first (it holds what it held: the same records, the same counts)
    kinds = await ship(Shipped(), leader, follower, replica, 3.0)
    assert kinds.count(wire.PRIVATE_RECORDS) == 2 and wire.CURSOR in kinds
    assert copy.dead_letter_count == 2 and len(copy.own) == 1
    assert [m.body for m in await copy.peek_dead(5)] == [b"b", b"c"]
    assert [m.body for m in copy.own.peek(5)] == [b"a"]
