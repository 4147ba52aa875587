"""deploy/'s monitoring files: the Grafana dashboard asks only for metrics the daemons serve
(as docs/operations.md lists them; test_metrics.py checks that list against real scrapes),
the Prometheus configuration scrapes the Compose services' HTTP ports, and compose.yaml runs
both only under the "monitoring" profile.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "nsq.json"
PROMETHEUS = ROOT / "deploy" / "prometheus.yml"
METRIC = re.compile(r"\b((?:nsq|process|python)_[a-z0-9_]+)\b")
LIBRARY = {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
           "process_virtual_memory_bytes", "process_start_time_seconds", "process_max_fds"}


def documented_metrics() -> set[str]:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(nsq_[a-z0-9_]+)`", section, re.M))


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        exprs.append(variable["definition"])
    return exprs


def test_dashboard_asks_only_for_metrics_that_exist():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = _exprs(dashboard)
    assert len(exprs) > 20
    known = documented_metrics() | LIBRARY
    used: set[str] = set()
    for expr in exprs:
        names = set(METRIC.findall(expr))
        assert names, expr
        assert names <= known, (expr, names - known)
        used |= names
    # every nsqd and nsqlookupd metric of the issue is on a panel
    for wanted in ("nsq_channel_depth", "nsq_channel_disk_depth", "nsq_channel_in_flight",
                   "nsq_channel_requeued_total", "nsq_channel_timed_out_total",
                   "nsq_channel_e2e_processing_latency_seconds", "nsq_topic_messages_total",
                   "nsq_lookupd_producers", "nsq_lookupd_registration_events_total"):
        assert wanted in used


def test_dashboard_panels_use_the_provisioned_datasource_and_unique_ids():
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    provisioned = yaml.safe_load((ROOT / "deploy" / "grafana" / "provisioning" / "datasources"
                                  / "prometheus.yml").read_text())
    uid = provisioned["datasources"][0]["uid"]
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == uid
            assert all(t["datasource"]["uid"] == uid for t in panel["targets"])


def test_prometheus_scrapes_every_compose_daemon():
    config = yaml.safe_load(PROMETHEUS.read_text())
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    targets = {t for job in config["scrape_configs"] for c in job["static_configs"]
               for t in c["targets"]}
    expected = set()
    for name, service in compose["services"].items():
        if service.get("profiles") or name == "etcd":  # (etcd: the replication's, not ours)
            continue
        http = next(a for a in service["command"] if a.startswith("--http-address="))
        expected.add(f"{name}:{http.rsplit(':', 1)[1]}")
    assert targets == expected


def test_promtool_accepts_the_prometheus_configuration():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    done = subprocess.run([promtool, "check", "config", str(PROMETHEUS)], capture_output=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_monitoring_services_are_optional():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    monitoring = {n for n, s in compose["services"].items() if s.get("profiles")}
    assert monitoring == {"prometheus", "grafana"}
    for name in monitoring:
        assert compose["services"][name]["profiles"] == ["monitoring"]
        for port in compose["services"][name]["ports"]:
            assert port.startswith("127.0.0.1:")
        for volume in compose["services"][name]["volumes"]:
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), source
