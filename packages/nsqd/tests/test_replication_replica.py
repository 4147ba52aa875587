"""A replicated topic's high watermark, acknowledgements and in-sync bookkeeping
(nsqd.replication.replica) on a real topic and log in memory: the HW is the lowest of the
leader's end and its ISR followers' fetch offsets and only moves up; a publish waits for it
with the ISR at its minimum; channels read no further than it; a follower delivers nothing."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from nsqd.clock import SystemClock
from nsqd.errors import StoreFailed
from nsqd.record import new_records
from nsqd.replication.replica import Replica
from nsqd.topic import Topic
from nsqd.topiclog import TopicLog

ME, A, B = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"


def replicated(min_insync: int = 2, lag_max: float = 10.0) -> tuple[Topic, Replica]:
    clock = SystemClock()
    topic = Topic("t", TopicLog("t", None, mem_queue_size=1 << 20, clock=clock), clock=clock)
    replica = Replica(topic, node=ME, min_insync=min_insync, lag_max=lag_max)
    topic.replicate(replica)
    return topic, replica


async def publish(topic: Topic, n: int) -> int:
    await topic.log.append(new_records([b"x"] * n, 0, 1), plain=True)
    assert topic.replica is not None
    topic.replica.published()
    return topic.log.end


async def test_the_hw_is_the_lowest_isr_fetch_offset_and_the_channels_stop_there() -> None:
    topic, replica = replicated()
    replica.lead(1, (ME, A, B), 3)
    assert replica.epochs.lines == [(1, 0)]  # (memory only: no file)
    await publish(topic, 5)
    assert replica.hw == 0 and topic.visible_end == 0  # nobody else has them yet
    replica.fetched(A, 3, 0)
    assert replica.hw == 0  # B has not fetched: counted at the HW it had
    replica.fetched(B, 5, 0)
    assert replica.hw == 3 and topic.visible_end == 3
    replica.fetched(A, 5, 0)
    assert replica.hw == 5 and topic.visible_end == 5
    replica.fetched(A, 2, 0)  # (a follower cut back: the HW never goes down)
    assert replica.hw == 5
    assert replica.lag() == {A: 3, B: 0}
    replica.set_isr((ME, B), 3)  # A shrunk out: only B counts
    await publish(topic, 1)
    replica.fetched(B, 6, 0)
    assert replica.hw == 6


async def test_a_topic_whose_isr_is_the_leader_alone_commits_on_its_write() -> None:
    topic, replica = replicated(min_insync=1)
    replica.lead(1, (ME,), 2)
    end = await publish(topic, 2)
    assert replica.hw == end == 2
    await replica.committed(end)


async def test_a_publish_waits_for_the_hw_and_fails_below_the_minimum() -> None:
    topic, replica = replicated()
    replica.lead(1, (ME, A), 2)
    end = await publish(topic, 1)
    done = []

    async def wait() -> None:
        await replica.committed(end)
        done.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        assert not done
        replica.fetched(A, end, 0)
    assert done

    replica.set_isr((ME,), 2)  # below min(2, N=2)
    with pytest.raises(StoreFailed, match="1 in-sync replicas, 2 needed"):
        replica.check_publish()


async def test_a_waiting_publish_fails_when_the_isr_shrinks_below_the_minimum() -> None:
    topic, replica = replicated()
    replica.lead(1, (ME, A), 2)
    end = await publish(topic, 1)
    failed: list[StoreFailed] = []

    async def wait() -> None:
        try:
            await replica.committed(end)
        except StoreFailed as exc:
            failed.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        assert not failed
        replica.set_isr((ME,), 2)
    assert "1 in-sync replicas, 2 needed" in str(failed[0])


async def test_a_publish_not_replicated_in_twice_the_lag_max_fails(
        autojump_clock: trio.testing.MockClock) -> None:
    topic, replica = replicated(lag_max=10.0)
    replica.lead(1, (ME, A), 2)
    end = await publish(topic, 1)
    start = trio.current_time()
    with pytest.raises(StoreFailed, match="within 20s"):
        await replica.committed(end)
    assert trio.current_time() - start == pytest.approx(20.0)


async def test_a_follower_delivers_nothing_and_takes_no_publish() -> None:
    topic, replica = replicated()
    replica.follow(A, 1, (A, ME), 2)
    await topic.log.append_at(0, new_records([b"x"] * 3, 0, 1))
    replica.follower_hw(3)
    assert replica.hw == 3 and topic.visible_end == 0
    with pytest.raises(StoreFailed, match="not the leader"):
        replica.check_publish()
    with pytest.raises(StoreFailed, match="no leader"):  # (no forwarder given)
        await replica.forward(new_records([b"y"], 0, 1))
    replica.lead(2, (ME,), 2)  # elected: delivers below its HW, its epoch from its end
    assert topic.visible_end == 3 and replica.epochs.lines == [(2, 3)]


async def test_lagging_and_caught_up_followers(autojump_clock: trio.testing.MockClock
                                               ) -> None:
    topic, replica = replicated(lag_max=10.0)
    replica.lead(1, (ME, A), 3)
    await publish(topic, 4)
    assert replica.lagging(trio.current_time()) == []
    await trio.sleep(11)  # A never fetched since the leadership began
    assert replica.lagging(trio.current_time()) == [A]
    replica.fetched(A, 4, 0)
    assert replica.lagging(trio.current_time()) == []
    replica.set_isr((ME,), 3)
    replica.fetched(B, 2, 0)  # B placed, behind the HW (4): not yet
    assert replica.caught_up((ME, A, B)) == [A]
    replica.fetched(B, 4, 0)
    assert replica.caught_up((ME, A, B)) == [A, B]


async def test_at_its_fence_a_leader_acknowledges_and_delivers_nothing_unless_etcd_is_down_for_all(
        ) -> None:
    topic, replica = replicated()
    fence = [float("inf")]
    replica.fence_from = lambda: fence[0]
    replica.lead(1, (ME, A, B), 3)
    await publish(topic, 2)
    replica.fetched(A, 2, 0)
    replica.fetched(B, 2, 0)
    assert topic.visible_end == 2
    fence[0] = topic.clock.now()  # its lease may have expired from now on
    assert replica.fenced() and topic.visible_end == 0
    with pytest.raises(StoreFailed, match="fenced"):
        replica.check_publish()
    replica.fetched(A, 2, 1)  # A cannot reach etcd either; B has not said so
    assert replica.fenced()
    replica.fetched(B, 2, 1)  # nobody who could be elected reaches etcd: it serves on
    assert not replica.fenced() and topic.visible_end == 2
    replica.check_publish()
    replica.fetched(B, 2, 0)  # B reaches etcd again: it may be elected
    assert replica.fenced()


async def test_a_follower_being_added_to_the_isr_holds_the_hw_from_the_moment_it_is_decided(
        ) -> None:
    # The expansion is written to etcd before the leader hears back; meanwhile the HW must
    # not pass the joining follower, or etcd's ISR (which an election picks from) would hold
    # a replica lacking acknowledged records.
    topic, replica = replicated()
    replica.lead(1, (ME, A), 3, revision=5)
    await publish(topic, 4)
    replica.fetched(A, 4, 0)
    replica.fetched(B, 4, 0)
    assert replica.hw == 4 and replica.caught_up((ME, A, B)) == [B]
    replica.adding([B])
    end = await publish(topic, 3)
    replica.fetched(A, end, 0)
    assert replica.hw == 4  # B has not fetched them: not committed
    replica.fetched(B, end, 0)
    assert replica.hw == end
    replica.isr_written((ME, A, B), 7)
    assert replica.isr == (ME, A, B) and not replica.joining


async def test_an_isr_read_from_an_older_etcd_revision_is_not_taken() -> None:
    # the watch's view may still show the state before the leader's own expansion when the
    # answer to it has come: taking it would count one replica fewer than etcd's ISR holds
    topic, replica = replicated()
    replica.lead(1, (ME, A), 3, revision=5)
    replica.adding([B])
    replica.isr_written((ME, A, B), 7)
    replica.lead(1, (ME, A), 3, revision=5)  # a reconcile on the older view
    assert replica.isr == (ME, A, B)
    end = await publish(topic, 2)
    replica.fetched(A, end, 0)
    assert replica.hw == 0  # B still counts
    replica.lead(1, (ME, B), 3, revision=9)  # a newer state is taken
    assert replica.isr == (ME, B)
    replica.fetched(B, end, 0)
    assert replica.hw == end


async def test_an_expansion_not_answered_keeps_counting_its_follower_until_one_is(
        autojump_clock: trio.testing.MockClock) -> None:
    # etcd may have written an expansion whose answer was lost: the follower still counts,
    # and, stuck, it is taken out as an ISR member would be
    topic, replica = replicated(lag_max=10.0)
    replica.lead(1, (ME, A), 3, revision=5)
    replica.fetched(B, 0, 0)
    replica.adding([B])
    end = await publish(topic, 2)
    replica.fetched(A, end, 0)
    assert replica.hw == 0
    await trio.sleep(11)
    replica.fetched(A, end, 0)
    assert replica.lagging(trio.current_time()) == [B]
    replica.isr_written((ME, A), 8)  # the shrink that takes it out, answered
    assert replica.hw == end
