"""The nsqd executable as a drop-in for the Go binary: flag syntax, --version, startup lines,
default data path, /ping, restart on the same ports after SIGKILL, signals."""

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from nsq_testing import DEADLINE, free_port, start_daemon, wait_until

NSQD = str(Path(sys.executable).with_name("nsqd"))


def get_config(daemon, key):
    return httpx.get(f"http://{daemon.http_address}/config/{key}", timeout=DEADLINE).json()


@pytest.mark.parametrize("form", [
    ["-mem-queue-size", "77"], ["-mem-queue-size=77"], ["--mem-queue-size", "77"], ["--mem-queue-size=77"],
])
def test_go_flag_forms(run_daemon, form):
    daemon = run_daemon("nsqd", *form, "-snappy=false", "--verbose", "-msg-timeout", "1m30s")
    assert get_config(daemon, "mem_queue_size") == 77
    assert get_config(daemon, "snappy") is False
    assert get_config(daemon, "msg_timeout") == 90 * 10**9


def test_single_dash_addresses_and_repeatable(run_daemon, tmp_path):
    daemon = run_daemon("nsqd", "-tcp-address", "127.0.0.1:0", "-http-address=127.0.0.1:0",
                        "-lookupd-tcp-address", "127.0.0.1:1", "--lookupd-tcp-address=127.0.0.1:2",
                        f"-data-path={tmp_path}")
    assert get_config(daemon, "nsqlookupd_tcp_addresses") == ["127.0.0.1:1", "127.0.0.1:2"]


def test_version():
    out = subprocess.run([NSQD, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert re.fullmatch(r"nsqd v\d+\.\d+\.\d+ \(built w/python3\.\d+\.\d+\)\n", out.stdout)


def test_help_and_unknown_flag():
    out = subprocess.run([NSQD, "-h"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert out.stderr.startswith("Usage of nsqd:\n")
    assert "  -mem-queue-size int\n" in out.stderr
    out = subprocess.run([NSQD, "--no-such-flag"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert out.stderr.startswith("flag provided but not defined: -no-such-flag\n")


def test_startup_lines_show_the_real_port(run_daemon):
    daemon = run_daemon("nsqd")
    text = daemon.output()
    tcp = re.search(r"TCP: listening on 127\.0\.0\.1:(\d+)", text)
    http = re.search(r"HTTP: listening on 127\.0\.0\.1:(\d+)", text)
    assert tcp and http and int(tcp.group(1)) > 0 and int(http.group(1)) > 0


def test_default_data_path_is_the_working_directory(tmp_path):
    first = start_daemon("nsqd", ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
                         cwd=tmp_path)
    try:
        # the data directory (here: the cwd) is locked; a second nsqd in it refuses to start
        second = subprocess.run([NSQD, "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"],
                                cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert second.returncode == 1
        assert "in use" in second.stderr
    finally:
        assert first.stop() == 0


def test_ping_answers_and_restart_after_sigkill(tmp_path):
    """/ping answers once nsqd is up, and a SIGKILLed nsqd starts again on the same ports.

    How fast it starts is measured by bench/startup.py, not here: this waits for /ping.
    """
    tcp, http = free_port(), free_port()
    args = [f"--tcp-address=127.0.0.1:{tcp}", f"--http-address=127.0.0.1:{http}",
            f"--data-path={tmp_path}"]
    for _ in range(2):
        proc = subprocess.Popen([NSQD, *args], stderr=subprocess.DEVNULL)
        try:
            def pings(proc: subprocess.Popen[bytes] = proc) -> bool:
                assert proc.poll() is None, f"nsqd exited with {proc.returncode}"
                return httpx.get(f"http://127.0.0.1:{http}/ping", timeout=DEADLINE).text == "OK"

            wait_until(pings, ignore=(httpx.HTTPError,), what="/ping OK")
        finally:
            proc.kill()
            proc.wait(DEADLINE)


def test_config_file(run_daemon, tmp_path):
    cfg = tmp_path / "nsqd.cfg"
    cfg.write_text('mem_queue_size = 123\nmax_rdy_count = 50\nmsg_timeout = "5s"\n')
    daemon = run_daemon("nsqd", f"--config={cfg}", "--max-rdy-count=60")
    assert get_config(daemon, "mem_queue_size") == 123
    assert get_config(daemon, "max_rdy_count") == 60  # the command line wins
    assert get_config(daemon, "msg_timeout") == 5 * 10**9


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_exit_on_signal(run_daemon, sig):
    daemon = run_daemon("nsqd")
    assert daemon.stop(sig) == 0
    assert "exiting" in daemon.output()


def test_bad_option_values_fail_like_nsqd(tmp_path):
    out = subprocess.run([NSQD, "--node-id=5000", f"--data-path={tmp_path}"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 1
    assert "--node-id must be [0,1024)" in out.stderr
