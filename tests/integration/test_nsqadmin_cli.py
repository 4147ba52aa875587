"""The nsqadmin executable: Go's start-up lines on stderr, /ping, serving with an nsqd that is
down, request log lines, gzip, and a clean exit on SIGTERM."""

import re

import httpx
from nsq_testing import free_port


def test_serves_and_logs_like_the_go_daemon(run_daemon):
    dead = f"127.0.0.1:{free_port()}"
    admin = run_daemon("nsqadmin", f"--nsqd-http-address={dead}", "--http-address=127.0.0.1:0",
                       expect=("HTTP",))
    base = f"http://{admin.http_address}"
    ping = httpx.get(base + "/ping")
    assert (ping.status_code, ping.text) == (200, "OK")
    page = httpx.get(base + "/", headers={"Accept-Encoding": "gzip"})
    assert page.status_code == 200 and page.headers["content-encoding"] == "gzip"
    assert "No nsqd answered" in page.text and dead in page.text
    assert httpx.get(base + "/api/topics").status_code == 502
    assert admin.stop() == 0
    log = admin.output()
    stamp = r"\[nsqadmin\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6}"
    assert re.search(stamp + r" INFO: nsqadmin v1\.3\.0 \(built w/python3\.\d+\.\d+\)\n", log)
    assert re.search(stamp + r" INFO: HTTP: listening on 127\.0\.0\.1:\d+\n", log)
    assert re.search(stamp + r" INFO: 200 GET /ping \(127\.0\.0\.1:\d+\) [\d.]+[µm]?s\n", log)
    assert re.search(stamp + r" INFO: exiting\n", log)
