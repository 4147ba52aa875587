import pytest
from nsq_common import FlagError, FlagSet


def flags() -> FlagSet:
    fs = FlagSet("prog")
    fs.add("tcp-address", "string", "0.0.0.0:4150", "<addr>:<port> to listen on")
    fs.add("mem-queue-size", "int", 10000, "number of messages to keep in memory")
    fs.add("msg-timeout", "duration", 60.0, "default timeout")
    fs.add("snappy", "bool", True, "enable snappy")
    fs.add("verbose", "bool", False, "[deprecated] no effect")
    fs.add("lookupd-tcp-address", "strings", [], "lookupd address", config_key="nsqlookupd_tcp_addresses")
    fs.add("pct", "floats", [], "percentiles", config_key="pcts")
    return fs


@pytest.mark.parametrize("argv", [
    ["-mem-queue-size", "5"], ["-mem-queue-size=5"], ["--mem-queue-size", "5"], ["--mem-queue-size=5"],
])
def test_every_go_form(argv):
    values, given, rest = flags().parse(argv)
    assert values["mem_queue_size"] == 5
    assert given == {"mem_queue_size"}
    assert rest == []


def test_bools_and_positional():
    values, _, rest = flags().parse(["-verbose", "-snappy=false", "true"])
    assert values["verbose"] is True
    assert values["snappy"] is False
    assert rest == ["true"]


def test_repeatable_and_durations():
    values, _, _ = flags().parse(["--lookupd-tcp-address=a:1", "-lookupd-tcp-address", "b:2",
                                  "--msg-timeout=1m30s", "--pct=0.5,0.99", "--pct", "1"])
    assert values["nsqlookupd_tcp_addresses"] == ["a:1", "b:2"]
    assert values["msg_timeout"] == 90.0
    assert values["pcts"] == [0.5, 0.99, 1.0]


@pytest.mark.parametrize(("argv", "message"), [
    (["--nope"], "flag provided but not defined: -nope"),
    (["--mem-queue-size"], "flag needs an argument: -mem-queue-size"),
    (["--mem-queue-size=x"], 'invalid value "x" for flag -mem-queue-size'),
    (["-h"], "help"),
])
def test_errors(argv, message):
    with pytest.raises(FlagError, match=message):
        flags().parse(argv)


def test_usage_reads_like_go():
    text = flags().usage()
    assert text.startswith("Usage of prog:\n")
    assert "  -mem-queue-size int\n    \tnumber of messages to keep in memory (default 10000)" in text
    assert "  -msg-timeout duration\n    \tdefault timeout (default 1m0s)" in text
    assert '  -tcp-address string\n    \t<addr>:<port> to listen on (default "0.0.0.0:4150")' in text
    assert "  -snappy\n    \tenable snappy (default true)" in text


def test_config_file_loses_to_flags(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('mem_queue_size = 7\ntcp_address = "1.2.3.4:5"\nmsg_timeout = "2s"\n'
                   'nsqlookupd_tcp_addresses = ["x:1"]\n')
    fs = flags()
    values, given, _ = fs.parse(["--mem-queue-size=9"])
    fs.apply_config_file(str(cfg), values, given)
    assert values["mem_queue_size"] == 9
    assert values["tcp_address"] == "1.2.3.4:5"
    assert values["msg_timeout"] == 2.0
    assert values["nsqlookupd_tcp_addresses"] == ["x:1"]


def test_parse_command_line_config_version_and_errors(tmp_path, capsys):
    fs = flags()
    fs.add("config", "string", "", "path to config file")
    fs.add("version", "bool", False, "print version string")
    cfg = tmp_path / "c.toml"
    cfg.write_text("mem_queue_size = 7\n")
    assert fs.parse_command_line([f"--config={cfg}"], "prog v1")["mem_queue_size"] == 7
    with pytest.raises(SystemExit) as info:
        fs.parse_command_line(["--version"], "prog v1")
    assert info.value.code == 0 and capsys.readouterr().out == "prog v1\n"
    with pytest.raises(SystemExit) as info:
        fs.parse_command_line(["--nope"], "prog v1")
    assert info.value.code == 2
