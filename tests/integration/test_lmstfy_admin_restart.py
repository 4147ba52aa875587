"""The admin API's peek right after nsqd restarts: the jobs waiting are listed at once (it
reads the log from disk as a consume would), the same jobs in the same order as before, and
as many as ``/size`` says, after a clean stop and, with ``--sync-every=1``, a ``kill -9``."""

from __future__ import annotations

import signal

import httpx
import pytest
from nsq_testing import DEADLINE, wait_until
from nsq_testing.lmstfy import MODES, Lmstfy

JOBS = 5


def admin_ready(lmstfy: Lmstfy, queue: str) -> list[str]:
    r = lmstfy.admin("GET", f"/peek/ns/{queue}")
    assert r.status_code == 200, r.text
    return [job["job_id"] for job in r.json()["ready"]]


def pinged(lmstfy: Lmstfy) -> bool:
    try:
        r = httpx.get(f"http://{lmstfy.nsqd.http_address}/ping", timeout=DEADLINE)
    except httpx.TransportError:
        return False
    return r.status_code == 200 and r.text == "OK"


def restart_and_peek(lmstfy: Lmstfy, sig: int) -> None:
    jobs = [lmstfy.publish("emails", b"job %d" % i) for i in range(JOBS)]
    assert admin_ready(lmstfy, "emails") == jobs
    lmstfy.restart(sig)
    wait_until(lambda: pinged(lmstfy), what="/ping OK after the restart")
    assert admin_ready(lmstfy, "emails") == jobs  # at once: no wait for a read-ahead
    assert lmstfy.size("emails") == JOBS


@pytest.mark.parametrize("flags", MODES.values(), ids=MODES.keys())
def test_the_admin_peek_lists_the_jobs_at_once_after_a_restart(run_daemon, flags):
    restart_and_peek(Lmstfy(run_daemon, *flags), signal.SIGTERM)


def test_the_admin_peek_lists_the_jobs_at_once_after_a_kill(run_daemon):
    restart_and_peek(Lmstfy(run_daemon, "--sync-every=1"), signal.SIGKILL)
