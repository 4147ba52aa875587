"""An nsqd serving lmstfy's API, for tests: both listeners on free ports, a namespace ``ns``
and a token for it, and short helpers for its routes."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any, cast

import httpx

from .daemon import Daemon
from .wait import DEADLINE

LMSTFY = ("--lmstfy-http-address=127.0.0.1:0", "--lmstfy-admin-http-address=127.0.0.1:0")
EXPECT = ("TCP", "HTTP", "LMSTFY", "LMSTFY_ADMIN")
#: nsqd's three storage modes, by name: lmstfy's semantics must be the same in each.
MODES: dict[str, tuple[str, ...]] = {
    "default": (),
    "mem-queue-size=0": ("--mem-queue-size=0",),
    "sync-every=1": ("--sync-every=1",),
}
#: The modes in which a ``kill -9`` loses nothing that was answered (201, 204).
DURABLE_MODES = ("sync-every=1",)


class Lmstfy:
    """One nsqd with both lmstfy listeners, a namespace ``ns`` and a token for it."""

    def __init__(self, run_daemon: Callable[..., Daemon], *args: str, auth: Any = None) -> None:
        self.run_daemon, self.args = run_daemon, args
        self.start()
        self.token: str = self.admin("POST", "/token/ns", params={"description": "tests"},
                                auth=auth).json()["token"]

    def start(self) -> None:
        self.nsqd = self.run_daemon("nsqd", *LMSTFY, *self.args, expect=EXPECT)
        self.data_url = f"http://{self.nsqd.addresses['LMSTFY']}"
        self.admin_url = f"http://{self.nsqd.addresses['LMSTFY_ADMIN']}"

    def restart(self, sig: int = signal.SIGTERM) -> None:
        started = cast("list[str]", self.nsqd.process.args)  # start_daemon's argument list
        data_path = next(a for a in started if "--data-path" in a)
        self.nsqd.stop(sig)
        self.args = (*self.args, data_path)
        self.start()

    def api(self, method: str, path: str, *, token: str | bool | None = None,
            **kwargs: Any) -> httpx.Response:
        headers = kwargs.pop("headers", {})
        if token is not False:
            headers.setdefault("X-Token", token or self.token)
        return httpx.request(method, f"{self.data_url}/api/ns{path}", headers=headers,
                             timeout=DEADLINE, **kwargs)

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, f"{self.admin_url}{path}", timeout=DEADLINE, **kwargs)

    def publish(self, queue: str = "q", body: bytes = b"job", **params: Any) -> str:
        r = self.api("PUT", f"/{queue}", content=body, params=params)
        assert r.status_code == 201, r.text
        job_id: str = r.json()["job_id"]
        return job_id

    def consume(self, queue: str = "q", **params: Any) -> httpx.Response:
        return self.api("GET", f"/{queue}", params=params)

    def size(self, queue: str = "q") -> int:
        r = self.api("GET", f"/{queue}/size")
        assert r.status_code == 200, r.text
        size: int = r.json()["size"]
        return size

    def dead_size(self, queue: str = "q") -> int:
        r = self.api("GET", f"/{queue}/deadletter/size")
        assert r.status_code == 200, r.text
        size: int = r.json()["size"]
        return size

    def channel_stats(self, queue: str = "q") -> dict[str, Any]:
        """nsqd's ``/stats`` of the queue's channel (its topic ``lmstfy.ns.<queue>``)."""
        r = httpx.get(f"http://{self.nsqd.http_address}/stats", timeout=DEADLINE,
                      params={"format": "json", "topic": f"lmstfy.ns.{queue}"})
        (topic,) = r.json()["topics"]
        (channel,) = topic["channels"]
        return cast("dict[str, Any]", channel)
