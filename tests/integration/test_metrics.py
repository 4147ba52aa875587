"""``GET /metrics`` on every daemon: the numbers are /stats's, the names follow the rules.

- a known workload (publishes, consumes, FINs, requeues, timeouts, a disk overflow, pauses),
  then /stats and a scrape: every topic and channel figure is the same, read with
  prometheus-client's own text parser;
- each daemon's scrape passes ``promtool check metrics`` (skipped without promtool) and the
  same rules written here (below), and names exactly the metrics docs/operations.md lists;
- nsqlookupd counts registrations as nsqds come and go.

The rules are promtool's ``check metrics`` lint as it applies to us, plus ours: every metric
ours (``nsq_``; ``process_``/``python_`` come from prometheus-client's own collectors) in
snake_case, HELP and TYPE on every family, counters and only counters ending in ``_total``,
base units (``_seconds``, ``_bytes``; never milliseconds, nanoseconds or kilobytes), and the
``quantile`` label only on summaries.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from nsq_common import commands
from nsq_testing import Daemon, WireClient, start_daemon, until, wait_until
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
LIBRARY_PREFIXES = ("process_", "python_")
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
NON_BASE_UNITS = re.compile(
    r"_(milliseconds|microseconds|nanoseconds|millis|ms|us|ns|minutes|hours|days|"
    r"kilobytes|megabytes|gigabytes|kb|mb|gb|bits|percent)(_|$)")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of a scrape, by (sample name, labels)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(scraped: Samples, name: str, **labels: str) -> float:
    return scraped[(name, frozenset(labels.items()))]


def problems(text: str) -> list[str]:
    """What breaks the rules in a scrape; empty when it is clean."""
    found: list[str] = []
    helped: set[str] = set()
    typed: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, doc = line[7:].partition(" ")
            helped.add(name)
            if not doc.strip():
                found.append(f"{name}: empty HELP")
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            typed[name] = kind
    for family in text_string_to_metric_families(text):
        name, kind = family.name, family.type
        exposed = f"{name}_total" if kind == "counter" else name
        if exposed not in helped or exposed not in typed:
            found.append(f"{exposed}: HELP or TYPE missing")
        if not SNAKE.match(exposed):
            found.append(f"{exposed}: not snake_case")
        if not exposed.startswith("nsq_") and not exposed.startswith(LIBRARY_PREFIXES):
            found.append(f"{exposed}: not prefixed nsq_")
        if NON_BASE_UNITS.search(exposed):
            found.append(f"{exposed}: not in base units")
        if kind == "counter" and not exposed.endswith("_total"):
            found.append(f"{exposed}: counter without _total")
        if kind != "counter" and name.endswith("_total"):
            found.append(f"{name}: _total on a {kind}")
        for s in family.samples:
            if "quantile" in s.labels and kind != "summary":
                found.append(f"{name}: quantile label on a {kind}")
            for label in s.labels:
                if not SNAKE.match(label) or label.startswith("__"):
                    found.append(f"{name}: bad label name {label}")
    return found


#: the subsection of the metrics an nsqd serves only with --etcd-endpoints (checked by
#: test_replication_edges)
REPLICATED = "\n### nsqd with `--etcd-endpoints`\n"


def documented_metrics(*, replicated: bool = False) -> set[str]:
    """Metric names in docs/operations.md's metrics tables (first column, in backquotes):
    those of every daemon, or (``replicated``) those of an nsqd with --etcd-endpoints only."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    before, _, rest = section.partition(REPLICATED)
    replication, _, after = rest.partition("\n### ")
    section = replication if replicated else before + after
    return set(re.findall(r"^\| `(nsq_[a-z0-9_]+)`", section, re.M))


def exposed_names(text: str) -> set[str]:
    """The nsq_ family names of a scrape as they appear in it (counters with ``_total``)."""
    return {f"{f.name}_total" if f.type == "counter" else f.name
            for f in text_string_to_metric_families(text) if f.name.startswith("nsq_")}


# -- the workload ----------------------------------------------------------------------------

def _check_topic(scraped: Samples, t: dict[str, Any]) -> None:
    labels = {"topic": t["topic_name"]}
    assert value(scraped, "nsq_topic_depth", **labels) == t["depth"]
    assert value(scraped, "nsq_topic_disk_depth", **labels) == t["backend_depth"]
    assert value(scraped, "nsq_topic_memory_depth", **labels) == t["depth"] - t["backend_depth"]
    assert value(scraped, "nsq_topic_messages_total", **labels) == t["message_count"]
    assert value(scraped, "nsq_topic_message_bytes_total", **labels) == t["message_bytes"]
    assert value(scraped, "nsq_topic_paused", **labels) == int(t["paused"])
    assert value(scraped, "nsq_topic_channels", **labels) == len(t["channels"])
    for p in t["e2e_processing_latency"]["percentiles"] or []:
        assert value(scraped, "nsq_topic_e2e_processing_latency_seconds", **labels,
                     quantile=repr(p["quantile"])) == p["value"] / 1e9


def _check_channel(scraped: Samples, topic: str, c: dict[str, Any]) -> None:
    labels = {"topic": topic, "channel": c["channel_name"]}
    for name, field in (("depth", "depth"), ("disk_depth", "backend_depth"),
                        ("in_flight", "in_flight_count"), ("deferred", "deferred_count"),
                        ("messages_total", "message_count"), ("requeued_total", "requeue_count"),
                        ("timed_out_total", "timeout_count"), ("expired_total", "expired_count"),
                        ("dead_letters", "dead_letter_count"), ("clients", "client_count"),
                        ("paused", "paused")):
        # (a job feature's count is in /stats only once in use: 0 until then)
        assert value(scraped, f"nsq_channel_{name}", **labels) == c.get(field, 0), name
    assert value(scraped, "nsq_channel_memory_depth", **labels) == c["depth"] - c["backend_depth"]
    for p in c["e2e_processing_latency"]["percentiles"] or []:
        assert value(scraped, "nsq_channel_e2e_processing_latency_seconds", **labels,
                     quantile=repr(p["quantile"])) == p["value"] / 1e9


async def test_scrape_matches_stats_after_a_known_workload(run_daemon):
    nsqd = run_daemon("nsqd", "--mem-queue-size=4", "--msg-timeout=1s",
                      "--e2e-processing-latency-percentile=0.5,0.99")
    async with httpx.AsyncClient(base_url=f"http://{nsqd.http_address}") as http, \
            await WireClient.connect(nsqd.tcp_address) as consumer, \
            await WireClient.connect(nsqd.tcp_address) as producer:
        for path, params in (("/topic/create", {"topic": "mt"}),
                             ("/channel/create", {"topic": "mt", "channel": "held"}),
                             ("/channel/create", {"topic": "mt", "channel": "stopped"}),
                             ("/channel/pause", {"topic": "mt", "channel": "stopped"}),
                             ("/topic/create", {"topic": "idle"}),
                             ("/topic/pause", {"topic": "idle"})):
            response = await http.post(path, params=params)
            assert response.status_code == 200, (path, response.text)
        await consumer.subscribe("mt", "work", rdy=10)
        await producer.send(commands.mpub("mt", [b"m%d" % i for i in range(10)]))
        assert await producer.response() == b"OK"
        assert (await http.post("/pub", params={"topic": "idle"}, content=b"held back")
                ).status_code == 200
        got = await consumer.messages(10)
        await consumer.send(commands.rdy(0))  # nothing is delivered again: the figures settle
        for msg in got[:5]:
            await consumer.send(commands.fin(msg.id))
        for msg in got[5:8]:
            await consumer.send(commands.req(msg.id, 600_000))
        # got[8:] are left to time out (--msg-timeout=1s)

        async def stats() -> dict[str, Any]:
            return (await http.get("/stats", params={"format": "json"})).json()

        def work(doc: dict[str, Any]) -> dict[str, Any]:
            mt = next(t for t in doc["topics"] if t["topic_name"] == "mt")
            return next(c for c in mt["channels"] if c["channel_name"] == "work")

        async def settled() -> bool:
            c = work(await stats())
            return (c["timeout_count"], c["deferred_count"], c["in_flight_count"]) == (2, 3, 0)

        await until(settled, what="2 timeouts, 3 deferred, none in flight")
        doc = await stats()
        text = (await http.get("/metrics")).text
    scraped = samples(text)
    assert {t["topic_name"] for t in doc["topics"]} == {"mt", "idle"}
    for t in doc["topics"]:
        _check_topic(scraped, t)
        for c in t["channels"]:
            _check_channel(scraped, t["topic_name"], c)
    # the workload's own numbers, so that agreeing on zeros cannot pass
    c = work(doc)
    assert (c["message_count"], c["requeue_count"], c["depth"], c["client_count"]) == (10, 3, 2, 1)
    assert value(scraped, "nsq_channel_disk_depth", topic="mt", channel="held") == 6
    assert value(scraped, "nsq_channel_memory_depth", topic="mt", channel="held") == 4
    assert value(scraped, "nsq_channel_paused", topic="mt", channel="stopped") == 1
    assert value(scraped, "nsq_topic_depth", topic="idle") == 1
    assert value(scraped, "nsq_topic_message_bytes_total", topic="mt") == 20
    assert c["e2e_processing_latency"]["count"] == 5
    assert value(scraped, "nsq_channel_e2e_processing_latency_seconds", topic="mt",
                 channel="work", quantile="0.99") > 0
    assert value(scraped, "nsq_disk_queue_healthy", topic="mt", channel="held") == 1
    assert value(scraped, "nsq_disk_queue_write_errors_total", topic="mt", channel="held") == 0
    assert value(scraped, "nsq_healthy") == 1
    assert value(scraped, "nsq_tcp_connections") == 2
    assert value(scraped, "nsq_tcp_connections_accepted_total") == 2
    assert value(scraped, "nsq_http_connections") >= 1
    assert value(scraped, "nsq_http_connections_accepted_total") >= 1
    assert value(scraped, "process_resident_memory_bytes") > 0


# -- every daemon's scrape against the rules -------------------------------------------------

SECRETS = """
[[secrets]]
secret = "metrics-secret"
identity = "metrics"
[[secrets.authorizations]]
topic = ".*"
channels = [".*"]
permissions = ["publish", "subscribe"]
"""


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One scrape of each daemon of a small cluster that has a topic and a channel."""
    tmp = tmp_path_factory.mktemp("metrics")
    (tmp / "data").mkdir()
    (tmp / "secrets.toml").write_text(SECRETS)
    loopback = ["--http-address=127.0.0.1:0"]
    with start_daemon("nsqlookupd", [*loopback, "--tcp-address=127.0.0.1:0"]) as lookupd, \
            start_daemon("nsqd", [*loopback, "--tcp-address=127.0.0.1:0",
                                  f"--data-path={tmp / 'data'}",
                                  f"--lookupd-tcp-address={lookupd.tcp_address}",
                                  "--e2e-processing-latency-percentile=0.99"]) as nsqd, \
            start_daemon("nsqadmin", [*loopback,
                                      f"--lookupd-http-address={lookupd.http_address}"],
                         expect=("HTTP",)) as admin, \
            start_daemon("nsq_auth", [*loopback, f"--secrets-file={tmp / 'secrets.toml'}"],
                         expect=("HTTP",)) as auth, httpx.Client() as http:
        base = f"http://{nsqd.http_address}"
        assert http.post(f"{base}/topic/create", params={"topic": "r"}).status_code == 200
        assert http.post(f"{base}/channel/create", params={"topic": "r", "channel": "c"}
                         ).status_code == 200
        assert http.post(f"{base}/pub", params={"topic": "r"}, content=b"x").status_code == 200

        def scrape(daemon: Daemon) -> str:
            response = http.get(f"http://{daemon.http_address}/metrics")
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
            return response.text

        wait_until(lambda: value(samples(scrape(lookupd)), "nsq_lookupd_channels") == 1,
                   what="nsqd registered its topic and channel with nsqlookupd")
        yield {d.name: scrape(d) for d in (nsqd, lookupd, admin, auth)}


@pytest.mark.parametrize("daemon", ["nsqd", "nsqlookupd", "nsqadmin", "nsq_auth"])
def test_scrape_follows_the_rules(scrapes, daemon):
    assert problems(scrapes[daemon]) == []


@pytest.mark.parametrize("daemon", ["nsqd", "nsqlookupd", "nsqadmin", "nsq_auth"])
def test_promtool_check_metrics(scrapes, daemon):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    done = subprocess.run([promtool, "check", "metrics"], input=scrapes[daemon].encode(),
                          capture_output=True, timeout=60, check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, b"")


def test_docs_list_exactly_the_metrics_served(scrapes):
    served = set().union(*(exposed_names(text) for text in scrapes.values()))
    assert served == documented_metrics()


def test_rules_catch_what_they_should():
    bad = (
        "# HELP nsq_depth_ms d\n# TYPE nsq_depth_ms gauge\nnsq_depth_ms 1\n"
        "# HELP nsq_sent_total s\n# TYPE nsq_sent_total gauge\nnsq_sent_total 1\n"
        "# HELP depth d\n# TYPE depth gauge\ndepth{quantile=\"0.5\"} 1\n"
        "# TYPE nsq_undocumented gauge\nnsq_undocumented 1\n"
    )
    found = "\n".join(problems(bad))
    for expected in ("nsq_depth_ms: not in base units", "nsq_sent_total: _total on a gauge",
                     "depth: not prefixed nsq_", "depth: quantile label on a gauge",
                     "nsq_undocumented: HELP or TYPE missing"):
        assert expected in found


# -- nsqlookupd ------------------------------------------------------------------------------

async def test_lookupd_counts_registrations(run_daemon):
    lookupd = run_daemon("nsqlookupd")
    nsqd = run_daemon("nsqd", f"--lookupd-tcp-address={lookupd.tcp_address}",
                      "--broadcast-address=127.0.0.1")
    async with httpx.AsyncClient() as http:
        async def scrape() -> Samples:
            return samples((await http.get(f"http://{lookupd.http_address}/metrics")).text)

        def events(s: Samples, action: str, category: str) -> float:
            return value(s, "nsq_lookupd_registration_events_total", action=action,
                         category=category)

        assert (await http.post(f"http://{nsqd.http_address}/topic/create",
                                params={"topic": "lt"})).status_code == 200
        assert (await http.post(f"http://{nsqd.http_address}/channel/create",
                                params={"topic": "lt", "channel": "lc"})).status_code == 200

        async def registered() -> Samples | None:
            s = await scrape()
            return s if events(s, "register", "channel") == 1 else None

        s = await until(registered, what="nsqd registered channel lc")
        assert value(s, "nsq_lookupd_producers") == 1
        assert value(s, "nsq_lookupd_topics") == 1
        assert value(s, "nsq_lookupd_channels") == 1
        assert value(s, "nsq_lookupd_topic_producers", topic="lt") == 1
        assert value(s, "nsq_lookupd_tombstones") == 0
        assert (events(s, "register", "client"), events(s, "register", "topic")) == (1, 1)
        assert value(s, "nsq_tcp_connections") == 1
        nodes = (await http.get(f"http://{lookupd.http_address}/nodes")).json()["producers"]
        assert len(nodes) == 1
        assert (await http.post(f"http://{lookupd.http_address}/topic/tombstone",
                                params={"topic": "lt", "node": f"127.0.0.1:{nsqd.http_port}"}
                                )).status_code == 200
        s = await scrape()
        assert value(s, "nsq_lookupd_tombstones") == 1
        assert value(s, "nsq_lookupd_topic_producers", topic="lt") == 0
        nsqd.stop()

        async def gone() -> Samples | None:
            s = await scrape()
            return s if events(s, "unregister", "client") == 1 else None

        s = await until(gone, what="nsqd's disconnect seen")
        assert (events(s, "unregister", "topic"), events(s, "unregister", "channel")) == (1, 1)
        assert value(s, "nsq_lookupd_producers") == 0
        assert value(s, "nsq_tcp_connections") == 0
        assert value(s, "nsq_tcp_connections_accepted_total") == 1
