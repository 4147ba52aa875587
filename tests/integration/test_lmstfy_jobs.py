"""lmstfy's jobs under load and beside NSQ: 10,000 delayed jobs through four consumers, and
one channel shared by lmstfy's API and NSQ's TCP protocol both ways."""

import base64
import random
import struct
import threading
import time

import httpx
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient
from nsq_testing.lmstfy import Lmstfy

JOBS = 10_000


def delay_of(job_id: str) -> int:
    """The delay lmstfy writes into the last 4 bytes of a job id (Crockford base32 ULID)."""
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    value = 0
    for char in job_id[-26:]:
        value = value * 32 + alphabet.index(char)
    return struct.unpack("<I", value.to_bytes(16, "big")[12:])[0]


def test_ten_thousand_delayed_jobs_four_consumers(run_daemon):
    service = Lmstfy(run_daemon)
    rng = random.Random(7)
    by_delay: dict[int, int] = {}
    for _ in range(JOBS):
        delay = rng.randint(0, 3)
        by_delay[delay] = by_delay.get(delay, 0) + 1
    published: dict[str, int] = {}
    with httpx.Client(timeout=DEADLINE, headers={"X-Token": service.token}) as http:
        for delay, count in by_delay.items():
            while count:
                n = min(count, 64)
                body = "[" + ",".join(f'"job {len(published) + i}"' for i in range(n)) + "]"
                r = http.put(f"{service.data_url}/api/ns/q/bulk", content=body.encode(),
                             params={"delay": str(delay)})
                assert r.status_code == 201, r.text
                published.update((job_id, delay) for job_id in r.json()["job_ids"])
                count -= n
    assert len(published) == JOBS

    seen: dict[str, int] = {}
    early: list[tuple[str, int]] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 30 * DEADLINE
    errors: list[BaseException] = []

    def consumer() -> None:
        try:
            with httpx.Client(timeout=DEADLINE, headers={"X-Token": service.token}) as http:
                while time.monotonic() < deadline:
                    with lock:
                        if len(seen) >= JOBS:
                            return
                    r = http.get(f"{service.data_url}/api/ns/q",
                                 params={"count": "10", "timeout": "1", "ttr": "600"})
                    if r.status_code == 404:
                        continue
                    assert r.status_code == 200, r.text
                    for job in r.json():
                        if job["elapsed_ms"] < delay_of(job["job_id"]) * 1000:
                            early.append((job["job_id"], job["elapsed_ms"]))
                        with lock:
                            seen[job["job_id"]] = seen.get(job["job_id"], 0) + 1
                        d = http.delete(f"{service.data_url}/api/ns/q/job/{job['job_id']}")
                        assert d.status_code == 204
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consumer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]
    assert seen.keys() == published.keys()  # every job, none lost
    assert set(seen.values()) == {1}  # each once (ttr 600 s: none timed out)
    assert not early, early[:5]
    assert all(delay_of(job_id) == delay for job_id, delay in published.items())
    assert service.api("GET", "/q/size").json()["size"] == 0


async def test_jobs_and_nsq_messages_share_the_channel(run_daemon):
    service = Lmstfy(run_daemon)
    job_id = service.publish(body=b"from lmstfy", tries="3")
    async with await WireClient.connect(service.nsqd.tcp_address) as consumer:
        await consumer.subscribe("lmstfy.ns.q", "jobs", rdy=1)
        msg = await consumer.message()
        assert (msg.body, msg.attempts) == (b"from lmstfy", 1)
        await consumer.send(commands.fin(msg.id))
    r = httpx.post(f"http://{service.nsqd.http_address}/pub", params={"topic": "lmstfy.ns.q"},
                   content=b"from nsq")
    assert r.text == "OK"
    job = service.consume().json()
    assert base64.b64decode(job["data"]) == b"from nsq" and job["job_id"] != job_id
    assert service.api("DELETE", f"/q/job/{job['job_id']}").status_code == 204
    stats = httpx.get(f"http://{service.nsqd.http_address}/stats",
                      params={"format": "json", "topic": "lmstfy.ns.q"}).json()
    channel = stats["topics"][0]["channels"][0]
    assert (channel["depth"], channel["in_flight_count"], channel["message_count"]) == (0, 0, 2)
