from nsq_common import MESSAGE_HEADER
from nsqd.inflight import DeferredQueue, Delivery, InFlightQueue, entry_id, entry_timestamp
from nsqd.message import QueuedMessage


def msg(i: int, deadline: float) -> QueuedMessage:
    m = QueuedMessage(b"%016x" % i, b"x", 0)
    m.deadline = deadline
    return m


def test_in_order_adds_pop_in_order_and_remove():
    q = InFlightQueue()
    for i in range(5):
        q.add(msg(i, float(i)))
    assert q.remove(b"%016x" % 1) is not None
    assert q.remove(b"%016x" % 1) is None
    assert [m.deadline for m in q.pop_due(3.0)] == [0.0, 2.0, 3.0]
    assert len(q) == 1 and q.next_deadline() == 4.0


def test_out_of_order_adds_use_the_heap():
    q = InFlightQueue()
    q.add(msg(1, 10.0))
    q.add(msg(2, 5.0))  # shorter timeout than the newest: heap
    q.add(msg(3, 12.0))
    assert q.next_deadline() == 5.0
    assert [m.deadline for m in q.pop_due(11.0)] == [10.0, 5.0]
    assert len(q) == 1


def test_touch_re_add_is_not_popped_twice():
    q = InFlightQueue()
    m = msg(1, 10.0)
    q.add(msg(0, 20.0))
    q.add(m)  # heap
    q.remove(m.id)
    m.deadline = 30.0
    q.add(m)
    assert [x.deadline for x in q.pop_due(25.0)] == [20.0]
    assert [x.deadline for x in q.pop_due(40.0)] == [30.0]
    assert len(q) == 0


def test_heap_of_dead_entries_is_compacted():
    q = InFlightQueue()
    q.add(msg(0, 1e9))
    for i in range(1, 5000):
        q.add(msg(i, float(i)))
        q.remove(b"%016x" % i)
    assert len(q._heap) < 2100
    assert len(q) == 1


def test_deferred():
    q = DeferredQueue()
    for i, d in enumerate([3.0, 1.0, 2.0]):
        q.add(msg(i, d))
    assert b"%016x" % 1 in q
    assert [m.deadline for m in q.pop_due(2.0)] == [1.0, 2.0]
    assert len(q) == 1


def owned(i: int, deadline: float, owner: int) -> QueuedMessage:
    m = msg(i, deadline)
    m.client_id = owner
    return m


def record_of(m: QueuedMessage) -> bytes:
    return MESSAGE_HEADER.pack(m.timestamp, m.attempts) + m.id + m.body


def test_records_in_flight_are_made_messages_when_asked_for():
    q = InFlightQueue()
    records = [MESSAGE_HEADER.pack(70 + i, i) + b"%016x" % i + b"body" for i in range(3)]
    q.add_records(records, Delivery(7, 1.0, 10.0), 0)
    assert len(q) == 3 and q.next_deadline() == 10.0 and b"%016x" % 2 in q
    taken, failed = q.take_owned([b"%016x" % 0, b"%016x" % 1], 8)  # another owner's
    assert taken == [] and failed == [(b"%016x" % 0, True), (b"%016x" % 1, True)]
    taken, failed = q.take_owned([b"%016x" % 0], 7)
    assert [(entry_id(e), entry_timestamp(e)) for e in taken] == [(b"%016x" % 0, 70)]
    assert failed == []
    msg = q.get(b"%016x" % 1)
    assert (msg.id, msg.body, msg.timestamp, msg.attempts, msg.client_id, msg.delivered,
            msg.deadline) == (b"%016x" % 1, b"body", 71, 2, 7, 1.0, 10.0)
    assert q.get(b"%016x" % 1) is msg  # made once, kept in its place
    q.add_records([MESSAGE_HEADER.pack(0, 65535) + b"%016x" % 9 + b""], Delivery(8, 2.0, 5.0), 9)
    assert q.next_deadline() == 5.0  # an earlier deadline than the newest: the heap
    assert [(m.id, m.attempts) for m in q.take_all_owned(8)] == [(b"%016x" % 9, 65535)]
    assert [(m.id, m.attempts) for m in q.pop_due(10.0)] == [(b"%016x" % 1, 2),
                                                              (b"%016x" % 2, 3)]
    assert len(q) == 0 and q.next_deadline() is None


def test_add_many_is_add_of_each():
    q = InFlightQueue()
    q.add_many([owned(i, 10.0, 1) for i in range(3)], 10.0)
    q.add_many([owned(i, 5.0, 1) for i in range(3, 5)], 5.0)  # earlier than the newest: heap
    q.add_many([owned(i, 12.0, 1) for i in range(5, 7)], 12.0)
    assert len(q) == 7 and q.next_deadline() == 5.0
    assert sorted(m.deadline for m in q.pop_due(11.0)) == [5.0, 5.0, 10.0, 10.0, 10.0]
    assert [m.deadline for m in q.pop_due(12.0)] == [12.0, 12.0]


def test_take_owned_takes_in_order_and_says_why_not():
    q = InFlightQueue()
    q.add_many([owned(i, 10.0, 1) for i in range(3)], 10.0)
    q.add(owned(3, 5.0, 2))  # in the heap, another owner
    q.add(owned(4, 6.0, 1))  # in the heap
    ids = [b"%016x" % i for i in (0, 3, 9, 4, 0, 2)]
    taken, failed = q.take_owned(ids, 1)
    assert [m.id for m in taken] == [ids[0], ids[3], ids[5]]
    assert failed == [(ids[1], True), (ids[2], False), (ids[4], False)]
    assert len(q) == 2 and q.next_deadline() == 5.0
    assert [m.deadline for m in q.pop_due(20.0)] == [10.0, 5.0]
    assert len(q) == 0


def test_in_flight_agrees_with_a_plain_model():
    # Random adds (in order and not), batches, removals, FINs of many and scans, against a
    # dict of id -> (deadline, owner): same contents, same messages due.
    import random

    rng = random.Random(7)
    q = InFlightQueue()
    model: dict[bytes, tuple[float, int]] = {}
    next_id = 0
    now = 0.0
    for _ in range(3000):
        op = rng.random()
        if op < 0.3:
            m = owned(next_id, now + rng.choice([1.0, 5.0, 10.0]), rng.choice([1, 2]))
            next_id += 1
            q.add(m)
            model[m.id] = (m.deadline, m.client_id)
        elif op < 0.45:
            deadline = now + rng.choice([5.0, 10.0])
            batch = [owned(next_id + i, deadline, 1) for i in range(rng.randrange(1, 5))]
            next_id += len(batch)
            if rng.random() < 0.5:
                q.add_many(batch, deadline)
            else:  # as records, kept as records where they are in deadline order
                q.add_records([record_of(m) for m in batch], Delivery(1, now, deadline), 0)
            model.update((m.id, (deadline, 1)) for m in batch)
        elif op < 0.6 and next_id:
            mid = b"%016x" % rng.randrange(next_id)
            if rng.random() < 0.3 and mid in model:  # a TOUCH: made a message, same deadline
                assert q.get(mid).deadline == model[mid][0]
            assert (q.remove(mid) is not None) == (mid in model)
            model.pop(mid, None)
        elif op < 0.8 and next_id:
            ids = [b"%016x" % rng.randrange(next_id) for _ in range(rng.randrange(1, 6))]
            taken, failed = q.take_owned(ids, 1)
            want_taken, want_failed = [], []
            for mid in ids:
                if mid in model and model[mid][1] == 1:
                    want_taken.append(mid)
                    del model[mid]
                else:
                    want_failed.append((mid, mid in model))
            assert [entry_id(m) for m in taken] == want_taken and failed == want_failed
        else:
            now += rng.choice([0.5, 2.0])
            due = {m.id for m in q.pop_due(now)}
            assert due == {mid for mid, (d, _) in model.items() if d <= now}
            for mid in due:
                del model[mid]
        assert len(q) == len(model)
        assert {m.id for m in q} == set(model)
        if model:
            assert q.next_deadline() <= min(d for d, _ in model.values())
