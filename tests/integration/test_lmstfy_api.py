"""lmstfy's HTTP API served by a real nsqd, driven over loopback with httpx: one test per
route and per refusal, compared with lmstfy's own answers (status, headers, JSON)."""

import base64
import signal

import httpx
import pytest
from nsq_testing import wait_until
from nsq_testing.lmstfy import Lmstfy
from prometheus_client.parser import text_string_to_metric_families


@pytest.fixture
def lmstfy(run_daemon):
    return Lmstfy(run_daemon)


def error(response, status, text, key="error"):
    assert (response.status_code, response.json()) == (status, {key: text}), response.text
    assert len(response.headers["x-request-id"]) == 26
    assert response.headers["content-type"] == "application/json; charset=utf-8"


def test_publish_consume_ack(lmstfy):
    r = lmstfy.api("PUT", "/q", content=b"hello", params={"tries": "3", "ttl": "60"})
    assert r.status_code == 201 and r.json()["msg"] == "published"
    job_id = r.json()["job_id"]
    assert len(job_id) == 26 and len(r.headers["x-request-id"]) == 26
    assert r.content.startswith(b'{"job_id":')  # gin writes a map's keys sorted, compact

    r = lmstfy.consume(ttr="30")
    assert r.status_code == 200
    job = r.json()
    assert job == {"msg": "new job", "namespace": "ns", "queue": "q", "job_id": job_id,
                   "data": base64.b64encode(b"hello").decode(), "ttl": job["ttl"],
                   "elapsed_ms": job["elapsed_ms"], "remain_tries": 2, "attributes": None}
    assert 58 <= job["ttl"] <= 60 and job["elapsed_ms"] >= 0
    error(lmstfy.consume(), 404, "no job available", key="msg")  # in flight for its TTR
    r = lmstfy.api("DELETE", f"/q/job/{job_id}")
    assert (r.status_code, r.content) == (204, b"") and "x-request-id" in r.headers
    assert lmstfy.api("DELETE", f"/q/job/{job_id}").status_code == 204  # idempotent
    assert lmstfy.api("GET", "/q/size").json() == {"namespace": "ns", "queue": "q", "size": 0}


def test_republish_replaces_the_job(lmstfy):
    old = lmstfy.publish(body=b"v1")
    r = lmstfy.api("PUT", f"/q/job/{old}", content=b"v2", params={"tries": "2"})
    assert r.status_code == 201 and r.json()["job_id"] != old
    # the old one is gone, but its place in the ready list is not: as in lmstfy, a consume
    # that pops it finds no job (and no wait: timeout 0), the next gets the new one
    error(lmstfy.consume(), 404, "no job available", key="msg")
    job = lmstfy.consume().json()
    assert (job["job_id"], base64.b64decode(job["data"])) == (r.json()["job_id"], b"v2")
    error(lmstfy.consume(), 404, "no job available", key="msg")
    # the old job goes first, before the checks of the new one
    other = lmstfy.publish(body=b"other")
    error(lmstfy.api("PUT", f"/q/job/{other}", params={"tries": "0"}), 400,
          "tries shouldn't be zero")
    error(lmstfy.consume(), 404, "no job available", key="msg")


def test_access_log_switch(lmstfy):
    assert lmstfy.admin("GET", "/accesslog").json() == {"status": "disabled"}
    assert lmstfy.admin("POST", "/accesslog", params={"status": "enable"}).json() == {
        "status": "enabled"}
    error(lmstfy.admin("POST", "/accesslog", params={"status": "maybe"}), 400,
          "invalid status")


def test_publish_refusals_in_lmstfy_order(lmstfy):
    put = lambda **params: lmstfy.api("PUT", "/q", content=b"x", params=params)  # noqa: E731
    error(put(delay="-1"), 400, "invalid delay")
    error(put(delay=""), 400, "invalid delay")  # present but empty is not the default
    error(put(delay="4294967296"), 400, "invalid delay")
    error(put(ttl="x", delay="y"), 400, "invalid delay")  # delay is checked first
    error(put(ttl="1.5"), 400, "invalid ttl")
    error(put(ttl="5", delay="10"), 400, "ttl is shorter than delay")
    error(put(tries="65536"), 400, "invalid tries")
    error(put(tries="0"), 400, "tries shouldn't be zero")
    big = lmstfy.api("PUT", "/q", content=b"x" * ((1 << 20) + 1))
    error(big, 413, "body too large")
    attrs = {f"Job-Attr-K{n}": "v" for n in range(17)}
    error(lmstfy.api("PUT", "/q", content=b"x", headers={"Enable-Job-Version": "yes", **attrs}),
          400, "too many attributes, cannot exceed 16")
    assert lmstfy.api("GET", "/q/size").json()["size"] == 0  # nothing got in
    assert lmstfy.publish() and lmstfy.api("GET", "/q/size").json()["size"] == 1


def test_names_tokens_and_routes(lmstfy):
    error(lmstfy.api("PUT", "/bad.name"), 400, "queue name contains forbidden characters")
    error(lmstfy.api("PUT", "/_hidden"), 400, "queue name contains forbidden characters")
    error(lmstfy.api("PUT", "/" + "q" * 256), 400, "namespace or queue name too long")
    r = httpx.put(f"{lmstfy.data_url}/api/n%21s/q", headers={"X-Token": lmstfy.token})
    error(r, 400, "namespace name contains forbidden characters")
    error(lmstfy.api("PUT", "/q", token=False), 401, "token not found")
    error(lmstfy.api("PUT", "/q", token="nope"), 401, "invalid token")
    error(lmstfy.api("PUT", "/q", token="other:" + lmstfy.token), 404, "pool not found")
    other = lmstfy.admin("POST", "/token/other", params={"description": "x"}).json()["token"]
    error(lmstfy.api("PUT", "/q", token=other), 401, "invalid token")  # another namespace's
    r = httpx.put(f"{lmstfy.data_url}/api/ns/q", params={"token": lmstfy.token}, content=b"x")
    assert r.status_code == 201  # the token may come in the query
    assert lmstfy.api("GET", "/q/size", token=False).status_code == 200  # no token needed
    error(lmstfy.api("GET", "/q/what/ever"), 404, "api not found")
    error(lmstfy.api("POST", "/q"), 404, "api not found")  # a wrong method too
    error(httpx.get(f"{lmstfy.data_url}/nothing"), 404, "api not found")


def test_bulk_publish(lmstfy):
    r = lmstfy.api("PUT", "/q/bulk", content=b'["a", {"b": 1}, null, 7]')
    assert r.status_code == 201 and r.json()["msg"] == "published"
    job_ids = r.json()["job_ids"]
    assert len(job_ids) == 4
    jobs = lmstfy.consume(count="10").json()
    assert [j["job_id"] for j in jobs] == job_ids
    assert [base64.b64decode(j["data"]) for j in jobs] == [b'"a"', b'{"b": 1}', b"null", b"7"]
    error(lmstfy.api("PUT", "/q/bulk", content=b'{"a": 1}'), 400,
          "request body should be an array of objects")
    error(lmstfy.api("PUT", "/q/bulk", content=b"[nope"), 400,
          "request body should be an array of objects")
    error(lmstfy.api("PUT", "/q/bulk", content=b"[]"), 400, "no jobs")
    error(lmstfy.api("PUT", "/q/bulk", content=b"[" + b",".join([b"1"] * 65) + b"]"), 400,
          "too many jobs")
    error(lmstfy.api("PUT", "/q/bulk", content=b'["' + b"x" * (1 << 20) + b'"]'), 413,
          "job too large")


def test_attributes_make_version_1_jobs(lmstfy):
    headers = {"Enable-Job-Version": "YES", "Job-Attr-Color": "blue", "job-attr-SIZE": "L"}
    r = lmstfy.api("PUT", "/q", content=b"x", headers=headers)
    job_id = r.json()["job_id"]
    assert len(job_id) == 27 and job_id[0] == "1"
    job = lmstfy.consume().json()
    assert (job["job_id"], job["attributes"]) == (job_id, {"color": "blue", "size": "L"})
    plain = lmstfy.publish(headers={"Job-Attr-Color": "red"})  # not enabled: ignored
    assert len(plain) == 26 and lmstfy.consume().json()["attributes"] is None


def test_consume_refusals_and_several_queues(lmstfy):
    error(lmstfy.consume(ttr="-1"), 400, "invalid ttr")
    error(lmstfy.consume(timeout="x"), 400, "invalid timeout")
    error(lmstfy.consume(count="0"), 400, "invalid count")
    error(lmstfy.consume(count="101"), 400, "invalid count")
    error(lmstfy.api("GET", "/,,"), 400, "invalid queue name(s)")
    error(lmstfy.api("GET", "/a.b"), 400, "queue name contains forbidden characters")
    low = lmstfy.publish("low", b"low")
    high = lmstfy.publish("high", b"high")
    assert lmstfy.consume("high,low").json()["job_id"] == high  # the order given wins
    assert lmstfy.consume("high,low").json()["job_id"] == low
    error(lmstfy.consume("high,low"), 404, "no job available", key="msg")


def test_consume_waits_for_a_publish(lmstfy):
    import threading

    later = threading.Timer(0.5, lambda: lmstfy.publish("late", b"now"))
    later.start()
    try:
        r = lmstfy.consume("late", timeout="30")
    finally:
        later.join()
    assert r.status_code == 200 and base64.b64decode(r.json()["data"]) == b"now"


def test_delay_peek_and_peek_job(lmstfy):
    # due long after the test: invisible all through it, however slowly the machine runs
    hidden = lmstfy.publish(body=b"much later", delay="3600")
    error(lmstfy.api("GET", "/q/peek"), 404, "the queue is empty")  # delayed: invisible
    ready = lmstfy.publish(body=b"ready", tries="4")
    peeked = lmstfy.api("GET", "/q/peek").json()
    assert (peeked["job_id"], peeked["remain_tries"]) == (ready, 4) and "msg" not in peeked
    for job_id in (hidden, ready):
        found = lmstfy.api("GET", f"/q/job/{job_id}")
        assert found.status_code == 200 and found.json()["remain_tries"] == 0
    error(lmstfy.api("GET", "/q/job/01ARZ3NDEKTSV4RRFFQ69G5FAV"), 404, "job not found")
    assert lmstfy.consume().json()["job_id"] == ready
    error(lmstfy.consume(), 404, "no job available", key="msg")
    delayed = lmstfy.publish(body=b"later", delay="2")
    job = lmstfy.consume(timeout="10").json()  # becomes ready when due, never before
    assert job["job_id"] == delayed and job["elapsed_ms"] >= 1500


def test_destroy_and_dead_letters(lmstfy):
    for _ in range(3):
        lmstfy.publish(ttl="0")
    r = lmstfy.api("DELETE", "/q")
    assert r.status_code == 204 and lmstfy.api("GET", "/q/size").json()["size"] == 0
    assert lmstfy.admin("GET", "/info").json() == {}

    job_ids = [lmstfy.publish(body=b"d%d" % n) for n in range(3)]
    for _ in range(3):
        lmstfy.consume(ttr="0")  # one try, no time to run: dead letters
    wait_until(lambda: lmstfy.api("GET", "/q/deadletter/size").json()["size"] == 3,
               what="three dead letters")
    assert lmstfy.api("GET", "/q/deadletter").json() == {
        "namespace": "ns", "queue": "q", "deadletter_size": 3, "deadletter_head": job_ids[0]}
    error(lmstfy.api("PUT", "/q/deadletter", params={"limit": "0"}), 400, "invalid limit")
    error(lmstfy.api("PUT", "/q/deadletter", params={"ttl": "-1"}), 400, "invalid ttl")
    error(lmstfy.api("DELETE", "/q/deadletter", params={"limit": "x"}), 400, "invalid limit")
    r = lmstfy.api("PUT", "/q/deadletter", params={"limit": "2", "ttl": "30"})
    assert r.json() == {"msg": "respawned", "count": 2}
    jobs = lmstfy.consume(count="5").json()
    assert [j["job_id"] for j in jobs] == job_ids[:2]
    assert all(j["remain_tries"] == 0 and 28 <= j["ttl"] <= 30 for j in jobs)
    assert lmstfy.api("DELETE", "/q/deadletter").status_code == 204  # limit 1
    assert lmstfy.api("GET", "/q/deadletter").json()["deadletter_size"] == 0


def test_rate_limits(lmstfy):
    url = f"/token/ns/{lmstfy.token}/limit"
    assert lmstfy.admin("GET", url).status_code == 404
    r = lmstfy.admin("POST", url, json={"read": 1, "write": 2, "interval": 60})
    assert (r.status_code, r.json()) == (201, {"limiter": {"read": 1, "write": 2,
                                                           "interval": 60}})
    assert lmstfy.admin("POST", url, json={"read": 1, "write": 1, "interval": 60}
                        ).status_code == 500
    error(lmstfy.admin("PUT", url, json={"read": 1, "write": 2, "interval": 0}), 400,
          "interval should be > 0")
    lmstfy.publish()
    lmstfy.publish()
    error(lmstfy.api("PUT", "/q", content=b"x"), 429,
          f"token({lmstfy.token}) produce reach the limit rate, please retry later", key="msg")
    error(lmstfy.consume("empty"), 404, "no job available", key="msg")  # given back
    assert lmstfy.consume().status_code == 200
    assert lmstfy.consume().status_code == 429
    assert lmstfy.admin("GET", "/limits").json() == [
        {"namespace": "ns", "token": lmstfy.token,
         "limiter": {"read": 1, "write": 2, "interval": 60}}]
    assert lmstfy.admin("DELETE", url).json() == {"msg": "success"}
    assert lmstfy.publish()


def test_admin_tokens_info_version_metrics(run_daemon):
    auth = ("ops", "secret")
    service = Lmstfy(run_daemon, "--lmstfy-admin-account=ops:secret", auth=auth)
    for wrong in (None, ("ops", "guess")):
        r = service.admin("POST", "/token/ns", params={"description": "x"}, auth=wrong)
        assert r.status_code == 401 and r.content == b""
        assert r.headers["www-authenticate"] == 'Basic realm="Authorization Required"'
    r = service.admin("GET", "/token/ns", auth=auth)
    assert r.status_code == 200 and r.text.startswith("{\n    ")  # indented, as lmstfy
    error(service.admin("POST", "/token/ns", params={"description": "x", "token": "short"},
                        auth=auth), 400, "the user token was too short")
    chosen = "a-token-of-my-own-choosing"
    assert service.admin("POST", "/token/ns", params={"description": "mine", "token": chosen},
                         auth=auth).json() == {"token": chosen}
    error(service.admin("POST", "/token/ns", params={"description": "x", "token": chosen},
                        auth=auth), 400, "the token has already existed")
    error(service.admin("POST", "/token/ns", auth=auth), 400, "invalid description")
    tokens = service.admin("GET", "/token/ns", auth=auth).json()["tokens"]
    assert tokens == {service.token: "tests", chosen: "mine"}
    service.publish()
    assert service.admin("GET", "/version").json()["version"]
    assert service.admin("GET", "/pools").json() == ["default"]
    assert service.admin("GET", "/info").json() == {"ns": ["q"]}
    families = {f.name: f for f in text_string_to_metric_families(
        service.admin("GET", "/metrics").text)}
    (sample,) = families["infra_lmstfy_redis_queue_sizes"].samples
    assert sample.labels == {"pool": "default", "namespace": "ns", "queue": "q"}
    assert sample.value == 1
    assert service.admin("GET", "/nothing").text == "404 page not found"

    service.restart()  # tokens, limits and the queue list are kept
    assert service.admin("GET", "/token/ns", auth=auth).json()["tokens"] == tokens
    assert service.admin("GET", "/info").json() == {"ns": ["q"]}
    r = service.admin("DELETE", f"/token/ns/{chosen}", auth=auth)
    assert r.status_code == 204
    error(service.api("PUT", "/q", token=chosen), 401, "invalid token")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_lmstfy_scenario_across_a_restart(run_daemon, stop):
    """tries=2, ttr=1: consumed twice without a delete, the job is a dead letter; respawned,
    consumed and deleted: every size 0. The daemon stops in the middle (and a delayed job
    and a ready one wait through it)."""
    service = Lmstfy(run_daemon, "--sync-every=1")
    job_id = service.publish(body=b"scenario", tries="2")
    delayed = service.publish("later", b"delayed", delay="3")
    waiting = service.publish("waiting", b"waiting")
    first = service.consume(ttr="1").json()
    assert (first["job_id"], first["remain_tries"]) == (job_id, 1)
    service.restart(stop)
    tries_left = []

    def dead_lettered():
        r = service.consume(ttr="1", timeout="1")
        if r.status_code == 200:
            tries_left.append(r.json()["remain_tries"])
        return service.api("GET", "/q/deadletter").json()["deadletter_size"] == 1

    wait_until(dead_lettered, what="the job to become a dead letter")
    # A clean stop keeps the delivery count; a kill -9 loses the one in flight (it is
    # delivered again with the tries it had on disk), never the job.
    assert tries_left == ([0] if stop == signal.SIGTERM else [1, 0])
    assert service.api("GET", "/q/deadletter").json()["deadletter_head"] == job_id
    assert service.api("PUT", "/q/deadletter").json() == {"msg": "respawned", "count": 1}
    third = service.consume(ttr="30").json()
    assert (third["job_id"], third["remain_tries"]) == (job_id, 0)
    assert service.api("DELETE", f"/q/job/{job_id}").status_code == 204
    for path in ("/q/size", "/q/deadletter/size"):
        assert service.api("GET", path).json()["size"] == 0
    assert service.consume("waiting").json()["job_id"] == waiting
    assert service.consume("later", timeout="10").json()["job_id"] == delayed


def test_a_respawned_job_goes_behind_the_ready_ones(lmstfy):
    """As lmstfy's respawn pushes dead jobs onto the back of the ready list."""
    dead = lmstfy.publish(body=b"dead", tries="1")
    assert lmstfy.consume(ttr="1").json()["job_id"] == dead

    def dead_lettered():
        return lmstfy.api("GET", "/q/deadletter").json()["deadletter_size"] == 1

    wait_until(dead_lettered, what="the job to become a dead letter")
    first, second = lmstfy.publish(body=b"b"), lmstfy.publish(body=b"c")
    assert lmstfy.api("PUT", "/q/deadletter").json() == {"msg": "respawned", "count": 1}
    later = lmstfy.publish(body=b"after the respawn")
    got = [lmstfy.consume(timeout="5").json()["job_id"] for _ in range(4)]
    assert got == [first, second, dead, later]
