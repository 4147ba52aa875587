"""nsq_testing's fork server (the model-based crash test starts nsqd through it hundreds of
times): a forked nsqd is a whole nsqd in a process of its own, ended by a signal as any
other, with its exit status; and two forks do not share what a module drew at import."""

from __future__ import annotations

import base64
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from nsq_testing import start_daemon
from nsq_testing.forkserver import ForkServer
from nsqd.lmstfy.ids import message_id

ARGS = ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
        "--lmstfy-http-address=127.0.0.1:0", "--lmstfy-admin-http-address=127.0.0.1:0"]
EXPECT = ("TCP", "HTTP", "LMSTFY", "LMSTFY_ADMIN")


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    server = ForkServer("nsqd")
    yield server
    server.close()


def test_a_forked_nsqd_keeps_what_it_acknowledged_across_kill_and_stop(
        forks: ForkServer, tmp_path: Path) -> None:
    args = [*ARGS, f"--data-path={tmp_path}", "--sync-every=1"]
    nsqd = start_daemon("nsqd", args, expect=EXPECT, forks=forks)
    http = f"http://{nsqd.http_address}"
    assert httpx.post(f"{http}/topic/create", params={"topic": "t"}).status_code == 200
    assert httpx.post(f"{http}/channel/create", params={"topic": "t", "channel": "c"}
                      ).status_code == 200
    assert httpx.post(f"{http}/pub", params={"topic": "t"}, content=b"one").text == "OK"
    assert nsqd.stop(signal.SIGKILL) == -signal.SIGKILL
    nsqd = start_daemon("nsqd", args, expect=EXPECT, forks=forks)
    stats = httpx.get(f"http://{nsqd.http_address}/stats",
                      params={"format": "json", "topic": "t"}).json()
    assert stats["topics"][0]["channels"][0]["depth"] == 1
    assert nsqd.stop(signal.SIGTERM) == 0
    assert "exiting" in nsqd.output()


def test_forked_nsqds_draw_their_own_job_ids(forks: ForkServer, tmp_path: Path) -> None:
    """lmstfy's ids come from a generator made at import: each fork reseeds it."""
    ids = []
    for n in range(2):
        (tmp_path / str(n)).mkdir()
        nsqd = start_daemon("nsqd", [*ARGS, f"--data-path={tmp_path / str(n)}"],
                            expect=EXPECT, forks=forks)
        admin = f"http://{nsqd.addresses['LMSTFY_ADMIN']}"
        token = httpx.post(f"{admin}/token/ns", params={"description": "x"}).json()["token"]
        r = httpx.put(f"http://{nsqd.addresses['LMSTFY']}/api/ns/q",
                      headers={"X-Token": token}, content=b"job")
        assert r.status_code == 201, r.text
        ids.append(r.json()["job_id"])
        nsqd.stop(signal.SIGTERM)
    # the random part of a job's message id (after its 6 bytes of time): without the reseed,
    # two forks of one server drew the same
    drawn = [base64.urlsafe_b64decode(message_id(job) or b"")[6:] for job in ids]
    assert len(drawn[0]) == 6
    assert drawn[0] != drawn[1]
