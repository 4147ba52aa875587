"""An nsqd serving lmstfy's API, for tests: both listeners on free ports, a namespace ``ns``
and a token for it, and short helpers for its routes."""

import signal

import httpx

from .wait import DEADLINE

LMSTFY = ("--lmstfy-http-address=127.0.0.1:0", "--lmstfy-admin-http-address=127.0.0.1:0")
EXPECT = ("TCP", "HTTP", "LMSTFY", "LMSTFY_ADMIN")


class Lmstfy:
    """One nsqd with both lmstfy listeners, a namespace ``ns`` and a token for it."""

    def __init__(self, run_daemon, *args, auth=None):
        self.run_daemon, self.args = run_daemon, args
        self.start()
        self.token = self.admin("POST", "/token/ns", params={"description": "tests"},
                                auth=auth).json()["token"]

    def start(self):
        self.nsqd = self.run_daemon("nsqd", *LMSTFY, *self.args, expect=EXPECT)
        self.data_url = f"http://{self.nsqd.addresses['LMSTFY']}"
        self.admin_url = f"http://{self.nsqd.addresses['LMSTFY_ADMIN']}"

    def restart(self, sig=signal.SIGTERM):
        data_path = next(a for a in self.nsqd.process.args if "--data-path" in a)
        self.nsqd.stop(sig)
        self.args = (*self.args, data_path)
        self.start()

    def api(self, method, path, *, token=None, **kwargs):
        headers = kwargs.pop("headers", {})
        if token is not False:
            headers.setdefault("X-Token", token or self.token)
        return httpx.request(method, f"{self.data_url}/api/ns{path}", headers=headers,
                             timeout=DEADLINE, **kwargs)

    def admin(self, method, path, **kwargs):
        return httpx.request(method, f"{self.admin_url}{path}", timeout=DEADLINE, **kwargs)

    def publish(self, queue="q", body=b"job", **params):
        r = self.api("PUT", f"/{queue}", content=body, params=params)
        assert r.status_code == 201, r.text
        return r.json()["job_id"]

    def consume(self, queue="q", **params):
        return self.api("GET", f"/{queue}", params=params)
