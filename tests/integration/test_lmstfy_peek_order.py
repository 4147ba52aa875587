"""lmstfy's peek is exactly the job the next consume gets, here too: for ready jobs, delayed
jobs come due (lmstfy's timer pushes them onto the ready list when due, so behind the jobs
already there) and respawned dead letters; the admin API's ready list (nsqadmin's "Next
jobs, in order") is the order consumes of one, or one consume of a count, hand them out."""

from __future__ import annotations

import pytest
from nsq_testing import wait_until
from nsq_testing.lmstfy import Lmstfy


@pytest.fixture
def lmstfy(run_daemon):
    return Lmstfy(run_daemon)


def peek(lmstfy: Lmstfy, queue: str) -> str | None:
    r = lmstfy.api("GET", f"/{queue}/peek")
    return r.json()["job_id"] if r.status_code == 200 else None


def admin_ready(lmstfy: Lmstfy, queue: str) -> list[str]:
    r = lmstfy.admin("GET", f"/peek/ns/{queue}")
    assert r.status_code == 200, r.text
    return [job["job_id"] for job in r.json()["ready"]]


def test_a_delayed_job_come_due_is_behind_those_ready(lmstfy):
    m1 = lmstfy.publish("order3", b"m1", delay="1")
    m2 = lmstfy.publish("order3", b"m2")
    wait_until(lambda: lmstfy.size("order3") == 2)  # m1 due: on the ready list now
    assert admin_ready(lmstfy, "order3") == [m2, m1]
    for expected in (m2, m1):
        assert peek(lmstfy, "order3") == expected
        r = lmstfy.consume("order3")
        assert (r.status_code, r.json()["job_id"]) == (200, expected)
    assert peek(lmstfy, "order3") is None


def test_a_count_takes_the_jobs_in_the_order_peek_lists_them(lmstfy):
    k1 = lmstfy.publish("q3", b"k1", delay="1")
    k2 = lmstfy.publish("q3", b"k2")
    wait_until(lambda: lmstfy.size("q3") == 2)
    k3 = lmstfy.publish("q3", b"k3")  # after k1 came due: behind it
    listed = admin_ready(lmstfy, "q3")
    assert listed == [k2, k1, k3]
    assert peek(lmstfy, "q3") == k2
    r = lmstfy.consume("q3", count="3")
    assert [job["job_id"] for job in r.json()] == listed


def test_a_respawned_job_is_peeked_when_consumed(lmstfy):
    dead = lmstfy.publish("r", b"dead", tries="1")
    r = lmstfy.consume("r", ttr="1")
    assert r.json()["job_id"] == dead
    wait_until(lambda: lmstfy.dead_size("r") == 1)
    later = lmstfy.publish("r", b"later")
    r = lmstfy.api("PUT", "/r/deadletter", params={"limit": "1"})
    assert r.json() == {"msg": "respawned", "count": 1}
    listed = admin_ready(lmstfy, "r")
    assert len(listed) == 2
    for expected in listed:
        assert peek(lmstfy, "r") == expected
        r = lmstfy.consume("r")
        assert r.json()["job_id"] == expected
    assert later in listed


def test_a_count_peeks_past_a_delayed_job_at_the_read_position(lmstfy):
    # the delayed job is the next record the queue would read: peeking 3 still shows the
    # 3 ready jobs behind it, as 3 consumes would take them
    lmstfy.publish("d", b"later", delay="600")
    ready = [lmstfy.publish("d", f"r{i}".encode()) for i in range(4)]
    assert admin_ready(lmstfy, "d")[:3] == ready[:3]
    r = lmstfy.admin("GET", "/peek/ns/d", params={"count": "3"})
    assert [job["job_id"] for job in r.json()["ready"]] == ready[:3]
    r = lmstfy.consume("d", count="3")
    assert [job["job_id"] for job in r.json()] == ready[:3]
