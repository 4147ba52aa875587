"""/stats of a real nsqd, key for key: used only as NSQ, it is Go's nsqd 1.3 document (JSON and
text); the job features' keys come after Go's once a feature is in use, and the tools that read
/stats (nsq_stat's sums, nsqadmin's JSON API) take both."""

import httpx
from nsq_client.tools.nsq_stat import totals
from nsq_common import commands
from nsq_testing import DEADLINE, WireClient, wait_until

# Go's nsqd 1.3 (nsqd/stats.go): the keys of a topic and a channel, in order
GO_TOPIC = ["topic_name", "channels", "depth", "backend_depth", "message_count", "message_bytes",
            "paused", "e2e_processing_latency"]
GO_CHANNEL = ["channel_name", "depth", "backend_depth", "in_flight_count", "deferred_count",
              "message_count", "requeue_count", "timeout_count", "client_count", "clients",
              "paused", "e2e_processing_latency"]
GO_TEXT_CHANNEL_END = "e2e%: \n"  # a channel's line ends with its (here empty) percentiles


def get_stats(nsqd, **params):
    return httpx.get(f"http://{nsqd.http_address}/stats", timeout=DEADLINE,
                     params={"format": "json", **params}).json()


def post(nsqd, path, body=b"", **params):
    r = httpx.post(f"http://{nsqd.http_address}{path}", params=params, content=body,
                   timeout=DEADLINE)
    assert r.status_code == 200, r.text
    return r


async def test_nsq_features_only_give_go_keys_and_the_job_features_add_theirs(run_daemon):
    nsqd = run_daemon("nsqd")
    # NSQ's features only: topics and channels made, published to, consumed, paused
    post(nsqd, "/topic/create", topic="plain")
    post(nsqd, "/channel/create", topic="plain", channel="paused")
    post(nsqd, "/channel/pause", topic="plain", channel="paused")
    async with await WireClient.connect(nsqd.tcp_address) as client:
        await client.subscribe("plain", "worker", rdy=1)
        await client.pub("plain", b"one")
        msg = await client.message()
        await client.send(commands.fin(msg.id))
    post(nsqd, "/mpub", b"a\nb", topic="plain")
    doc = get_stats(nsqd)
    (topic,) = doc["topics"]
    assert list(topic) == GO_TOPIC
    assert [list(c) for c in topic["channels"]] == [GO_CHANNEL, GO_CHANNEL]
    text = httpx.get(f"http://{nsqd.http_address}/stats", timeout=DEADLINE).text
    channel_lines = [line for line in text.splitlines() if "inflt:" in line and "[V2" not in line]
    assert len(channel_lines) == 2
    assert all(line.endswith("e2e%: ") for line in channel_lines), channel_lines

    # each feature used: its keys, after Go's, on the objects that use it
    post(nsqd, "/topic/create", topic="plain", message_ttl="3600")
    post(nsqd, "/channel/update", topic="plain", channel="paused", max_attempts="4")
    post(nsqd, "/topic/create", topic="jobs")
    post(nsqd, "/channel/create", topic="jobs", channel="c")
    taken = post(nsqd, "/channel/consume", topic="jobs", channel="c")  # nothing yet
    assert taken.json() == {"messages": []}
    post(nsqd, "/pub", b"poison", topic="jobs")
    (msg,) = post(nsqd, "/channel/consume", topic="jobs", channel="c").json()["messages"]
    post(nsqd, "/message/deadletter", topic="jobs", channel="c", id=msg["id"])
    wait_until(lambda: "dead_letter_count" in get_stats(nsqd, topic="jobs")["topics"][0]
               ["channels"][0], what="the dead letter in /stats")
    doc = get_stats(nsqd)
    jobs, plain = doc["topics"]
    assert list(plain) == [*GO_TOPIC, "message_ttl"] and plain["message_ttl"] == 3600
    paused, worker = plain["channels"]
    assert list(paused) == [*GO_CHANNEL, "expired_count", "dead_letter_count", "max_attempts"]
    assert (paused["expired_count"], paused["dead_letter_count"], paused["max_attempts"]) == (
        0, 0, 4)
    assert list(worker) == [*GO_CHANNEL, "expired_count"]  # the topic's TTL applies to it
    assert list(jobs) == GO_TOPIC
    assert list(jobs["channels"][0]) == [*GO_CHANNEL, "dead_letter_count"]
    assert jobs["channels"][0]["dead_letter_count"] == 1
    text = httpx.get(f"http://{nsqd.http_address}/stats", timeout=DEADLINE).text
    assert "e2e%:  ttl: 1h0m0s\n" in text
    assert "e2e%:  expired: 0 dead: 0 max-attempts: 4\n" in text
    assert "e2e%:  dead: 1\n" in text

    # nsq_stat sums both shapes: a channel with the job keys and one without
    assert totals([doc], "plain", "worker").dead_letter_count is None
    assert totals([doc], "jobs", "c").dead_letter_count == 1
    assert totals([doc], "plain", "paused").depth == paused["depth"]
