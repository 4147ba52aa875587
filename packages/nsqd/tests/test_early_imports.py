"""What nsqd's early start loads to read nsqd.dat and reach its lookupds: nothing heavy.

The early start answers ``/ping`` before Trio and the server load (docs/performance.md);
every module it imports on the way is start-up time. This checks, in a fresh interpreter,
that reading an nsqd.dat, writing IDENTIFY and connecting to a lookupd leave attrs, logging,
typing, pathlib, Trio and the "idna" codec unloaded (a structural check, not a timing).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("attr", "attrs", "logging", "typing", "pathlib", "trio", "encodings.idna")

SCRIPT = """
import socket, sys
from nsqd.__main__ import _loaded_topics
from nsqd import early_lookup
from nsq_common import registration_bytes

topics = _loaded_topics({"data_path": sys.argv[1]})
identify = early_lookup.identify(broadcast_address="nsqd.local", tcp_port=4150, http_port=4151)
commands = [registration_bytes("REGISTER", t, c) for t, c in early_lookup.registrations(topics)]
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
early_lookup._connect("127.0.0.1", listener.getsockname()[1], 10.0).close()
listener.close()
print(repr((topics, identify, commands)))
print(" ".join(name for name in sys.argv[2:] if name in sys.modules))
"""


def test_reading_nsqd_dat_and_reaching_lookupds_loads_nothing_heavy(tmp_path: Path) -> None:
    doc = {"topics": [{"name": "t", "paused": False, "channels": [{"name": "c", "paused": True}]},
                      {"name": "bad name!", "paused": False, "channels": None}],
           "version": "1.3.0"}
    (tmp_path / "nsqd.dat").write_text(json.dumps(doc))
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), *HEAVY],
                            capture_output=True, text=True, timeout=120, check=True)
    answer, loaded = result.stdout.splitlines()
    body = b'{"broadcast_address":"nsqd.local","hostname":'
    topics, identify, commands = ast.literal_eval(answer)
    assert topics == [("t", ["c"])]
    assert identify.startswith(b"IDENTIFY\n") and body in identify
    assert commands == [b"REGISTER t c\n"]
    assert loaded == ""


REPLICATION_SCRIPT = """
import sys
import trio
from nsqd.__main__ import parse_options
from nsqd import app
from nsqd.broker import Broker
from nsqd.http_api import build_app

def loaded():
    return sorted(name for name in sys.modules if name.startswith("nsqd.replication"))

opts = parse_options(sys.argv[1:])
build_app(Broker(opts))
print(loaded())
if opts.etcd_endpoints:
    app._replication()
    print(loaded())
"""


def test_replication_is_loaded_only_with_etcd_endpoints(tmp_path: Path) -> None:
    """An nsqd without --etcd-endpoints imports nothing of ``nsqd.replication`` (its serve
    imports it only when given: ``app._replication``)."""
    def run(*args: str) -> list[str]:
        result = subprocess.run([sys.executable, "-c", REPLICATION_SCRIPT,
                                 f"--data-path={tmp_path}", *args],
                                capture_output=True, text=True, timeout=120, check=True)
        return result.stdout.splitlines()

    assert run() == ["[]"]
    without, given = run("--etcd-endpoints=http://127.0.0.1:1")
    assert without == "[]"
    assert "'nsqd.replication.coordinator'" in given
