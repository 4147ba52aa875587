"""Flags, config file and start-up checks, as the Go nsqadmin has them."""

import subprocess
import sys

import pytest
from nsqadmin.__main__ import parse_options
from nsqadmin.options import Options, build_flagset, normalize_base_path


def test_defaults_match_go():
    options = parse_options(["--nsqd-http-address=127.0.0.1:4151"])
    assert options.http_address == "0.0.0.0:4171"
    assert options.base_path == "/"
    assert options.http_client_connect_timeout == 2.0
    assert options.http_client_request_timeout == 5.0
    assert options.allow_config_from_cidr == "127.0.0.1/8"
    assert options.acl_http_header == "X-Forwarded-User"
    assert options.statsd_prefix == "nsq.%s"
    assert options.statsd_interval == 60.0
    assert options.log_prefix == "[nsqadmin] "
    assert options.nsqd_http_addresses == ("127.0.0.1:4151",)


def test_repeatable_flags_and_go_syntax():
    options = parse_options(["-lookupd-http-address", "a:4161", "--lookupd-http-address=b:4161",
                             "-admin-user=alice", "--admin-user", "bob", "-base-path=admin/",
                             "--notification-http-endpoint=http://n/x"])
    assert options.nsqlookupd_http_addresses == ("a:4161", "b:4161")
    assert options.admin_users == ("alice", "bob")
    assert options.base_path == "/admin"
    assert options.lookupd_mode


def test_config_file_uses_go_keys(tmp_path):
    config = tmp_path / "nsqadmin.cfg"
    config.write_text('nsqd_http_addresses = ["127.0.0.1:4151", "127.0.0.1:4251"]\n'
                      'http_address = "127.0.0.1:4999"\nadmin_users = ["root"]\n')
    options = parse_options([f"--config={config}", "--http-address=127.0.0.1:5000"])
    assert options.nsqd_http_addresses == ("127.0.0.1:4151", "127.0.0.1:4251")
    assert options.http_address == "127.0.0.1:5000"  # the command line wins
    assert options.admin_users == ("root",)


@pytest.mark.parametrize(("given", "error"), [
    ({}, "--nsqd-http-address or --lookupd-http-address required"),
    ({"nsqd_http_addresses": ["a:1"], "nsqlookupd_http_addresses": ["b:2"]},
     "use --nsqd-http-address or --lookupd-http-address not both"),
    ({"nsqd_http_addresses": ["a:1"], "http_client_tls_cert": "c.pem"},
     "--http-client-tls-key must be specified with --http-client-tls-cert"),
    ({"nsqd_http_addresses": ["nohost"]}, "failed to resolve --nsqd-http-address (nohost)"),
    ({"nsqd_http_addresses": ["a:1"], "allow_config_from_cidr": "bad"},
     "failed to parse --allow-config-from-cidr (bad)"),
])
def test_validation_errors(given, error):
    with pytest.raises(ValueError, match="^" + error.replace("(", r"\(").replace(")", r"\)")):
        Options(**given).validate()


def test_base_path_is_normalised():
    assert normalize_base_path("") == "/"
    assert normalize_base_path("admin") == "/admin"
    assert normalize_base_path("/a/b/../c/") == "/a/c"
    assert normalize_base_path("//") == "/"


def test_every_go_flag_exists():
    go_flags = {
        "config", "version", "log-level", "log-prefix", "verbose", "http-address", "base-path",
        "dev-static-dir", "graphite-url", "proxy-graphite", "statsd-counter-format",
        "statsd-gauge-format", "statsd-prefix", "statsd-interval", "notification-http-endpoint",
        "http-client-connect-timeout", "http-client-request-timeout",
        "http-client-tls-insecure-skip-verify", "http-client-tls-root-ca-file",
        "http-client-tls-cert", "http-client-tls-key", "allow-config-from-cidr",
        "acl-http-header", "lookupd-http-address", "nsqd-http-address", "admin-user",
    }
    assert go_flags <= set(build_flagset().flags)


def test_command_line_failures_exit_like_go():
    run = [sys.executable, "-m", "nsqadmin"]
    missing = subprocess.run(run, capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1
    assert ("[nsqadmin] FATAL: failed to instantiate nsqadmin - --nsqd-http-address or "
            "--lookupd-http-address required") in missing.stderr
    unknown = subprocess.run([*run, "--bogus"], capture_output=True, text=True, timeout=30)
    assert unknown.returncode == 2
    assert "flag provided but not defined: -bogus" in unknown.stderr
    version = subprocess.run([*run, "--version"], capture_output=True, text=True, timeout=30)
    assert version.returncode == 0 and version.stdout.startswith("nsqadmin v1.3.0")
