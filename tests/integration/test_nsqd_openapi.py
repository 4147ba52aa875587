"""nsqd's OpenAPI description, served and driven: schemathesis generates requests for every
operation from it against a live nsqd, and none may be answered with a 5xx."""

import subprocess
import sys
from pathlib import Path

import httpx
from nsq_testing import DEADLINE

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


def test_the_description_is_served(nsqd):
    doc = httpx.get(f"http://{nsqd.http_address}/openapi.json", timeout=DEADLINE).json()
    assert doc["openapi"] == "3.1.0"
    assert "/channel/consume" in doc["paths"] and "/pub" in doc["paths"]


def test_no_generated_request_gets_a_server_error(nsqd, tmp_path):
    base = f"http://{nsqd.http_address}"
    httpx.post(f"{base}/topic/create", params={"topic": "t"}, timeout=DEADLINE)
    httpx.post(f"{base}/channel/create", params={"topic": "t", "channel": "c"}, timeout=DEADLINE)
    done = subprocess.run(
        [str(SCHEMATHESIS), "run", f"{base}/openapi.json", "--checks", "not_a_server_error",
         "--max-examples", "25", "--phases", "examples,fuzzing", "--seed", "1",
         "--no-color"],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path)  # its cache
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "passed" in done.stdout
    assert httpx.get(f"{base}/ping", timeout=DEADLINE).text == "OK"  # and nsqd still serves
