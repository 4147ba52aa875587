"""The OpenAPI description of lmstfy's two APIs, served at the admin listener's /openapi.json,
and driven: schemathesis generates requests for every operation against a live nsqd (data
operations at the data listener, with a token; admin ones at the admin listener) and none may
be answered with a 5xx, except the three 500s lmstfy itself answers for a limiter it refuses
(docs/lmstfy.md), which must be those and nothing else."""

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from nsq_testing import DEADLINE, free_port
from nsq_testing.lmstfy import Lmstfy

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
LIMIT_OPERATIONS = ["POST /token/{namespace}/{token}/limit", "PUT /token/{namespace}/{token}/limit"]
# lmstfy's own 500s for a limiter it will not set (its server/handlers/throttler.go)
LMSTFY_500 = re.compile(r'\{"error":"(limiter interval should be > 0|the read and write of '
                        r"limiter can't be <= 0 at the same time|throttler token\(.*\) has "
                        r'already exists)"\}', re.S)
DATA_PATHS = {"/api/{namespace}/{queue}", "/api/{namespace}/{queue}/bulk",
              "/api/{namespace}/{queue}/job/{job_id}", "/api/{namespace}/{queue}/peek",
              "/api/{namespace}/{queue}/size", "/api/{namespace}/{queue}/deadletter",
              "/api/{namespace}/{queue}/deadletter/size"}
ADMIN_PATHS = {"/info", "/version", "/metrics", "/pools", "/limits", "/accesslog",
               "/token/{namespace}", "/token/{namespace}/{token}",
               "/token/{namespace}/{token}/limit", "/peek/{namespace}/{queue}",
               "/peek/{namespace}/{queue}/{job_id}", "/openapi.json"}


@pytest.fixture
def service(run_daemon):
    return Lmstfy(run_daemon, f"--lmstfy-http-address=127.0.0.1:{free_port()}",
                  f"--lmstfy-admin-http-address=127.0.0.1:{free_port()}")


def test_the_description_is_served_and_lists_every_route(service):
    doc = httpx.get(f"{service.admin_url}/openapi.json", timeout=DEADLINE).json()
    assert doc["openapi"] == "3.1.0"
    assert set(doc["paths"]) == DATA_PATHS | ADMIN_PATHS
    for path, item in doc["paths"].items():
        for method, op in item.items():
            assert op["tags"] == (["data"] if path in DATA_PATHS else ["admin"]), (method, path)
    # every path it names is served where its tag says (none is the listener's 404)
    assert httpx.get(f"{service.data_url}/api/ns/q/size", timeout=DEADLINE).status_code == 200
    assert httpx.get(f"{service.admin_url}/peek/ns/q", timeout=DEADLINE).status_code == 200
    r = httpx.get(f"{service.admin_url}/peek/ns/q/01M8DB4B3BNTGK79XQEWF00000", timeout=DEADLINE)
    assert (r.status_code, r.json()) == (404, {"error": "job not found"})


def schemathesis(cwd: Path, base: str, schema: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCHEMATHESIS), "run", schema, "--url", base, "--checks", "not_a_server_error",
         "--max-examples", "25", "--phases", "examples,fuzzing", "--seed", "1", "--no-color",
         *args], capture_output=True, text=True, timeout=600, check=False, cwd=cwd)


def test_no_generated_request_gets_a_server_error(service, tmp_path):
    schema = f"{service.admin_url}/openapi.json"
    service.publish("q", b"a job")  # something to peek at, consume, respawn
    data = schemathesis(tmp_path, service.data_url, schema, "--include-tag", "data",
                        "-H", f"X-Token: {service.token}")
    assert data.returncode == 0, data.stdout[-4000:] + data.stderr[-2000:]
    exclude = [a for name in LIMIT_OPERATIONS for a in ("--exclude-name", name)]
    admin = schemathesis(tmp_path, service.admin_url, schema, "--include-tag", "admin",
                         *exclude)
    assert admin.returncode == 0, admin.stdout[-4000:] + admin.stderr[-2000:]

    # setting a limit: lmstfy's own 500s are allowed, and only they
    (tmp_path / "schemathesis.toml").write_text(
        '[checks.not_a_server_error]\nexpected-statuses = ["2xx", "4xx", "500"]\n')
    include = [a for name in LIMIT_OPERATIONS for a in ("--include-name", name)]
    limits = schemathesis(tmp_path, service.admin_url, schema, *include, "--report", "har",
                          "--report-dir", str(tmp_path / "har"))
    assert limits.returncode == 0, limits.stdout[-4000:] + limits.stderr[-2000:]
    (har,) = (tmp_path / "har").iterdir()
    answers = [e["response"] for e in json.loads(har.read_text())["log"]["entries"]]
    assert len(answers) > 40
    errors = [a["content"].get("text", "") for a in answers if a["status"] >= 500]
    assert all(a["status"] == 500 and LMSTFY_500.fullmatch(t)
               for a, t in zip([a for a in answers if a["status"] >= 500], errors, strict=True)
               ), errors
    # and both listeners still serve
    assert service.api("GET", "/q/size", token=False).status_code == 200
    assert httpx.get(f"{service.admin_url}/version", timeout=DEADLINE).status_code == 200
