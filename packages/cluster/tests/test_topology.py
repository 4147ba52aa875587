"""The cluster's layout, command lines and port checks, without starting anything."""

import socket
from pathlib import Path

import pytest
from nsq_cluster import check_ports, plan
from nsq_cluster.__main__ import build_parser, main
from nsq_cluster.topology import with_lookupd


def flags(service):
    return dict(arg[2:].split("=", 1) for arg in service.args)


def test_default_layout_is_nsqs_own_ports():
    topology = plan()
    assert [s.name for s in topology.services] == ["nsqlookupd", "nsqd-1", "nsqd-2", "nsqadmin"]
    assert [(p.kind, p.number) for p in topology.lookupd.ports] == [("TCP", 4160), ("HTTP", 4161)]
    assert [[p.number for p in s.ports] for s in topology.nsqds] == [[4150, 4151, 7777, 7778],
                                                                    [4250, 4251]]
    assert [p.label for p in topology.nsqds[0].ports] == [
        "TCP", "HTTP", "lmstfy HTTP", "lmstfy admin HTTP"]
    assert [p.number for p in topology.admin.ports] == [4171]
    nsqd1 = flags(topology.nsqds[0])
    assert (nsqd1["lmstfy-http-address"], nsqd1["lmstfy-admin-http-address"]) == (
        "127.0.0.1:7777", "127.0.0.1:7778")
    assert "lmstfy-http-address" not in flags(topology.nsqds[1])


def test_nsqd_command_lines_register_with_lookupd_and_keep_data_apart(tmp_path):
    topology = plan(nsqd_count=3, data_dir=tmp_path)
    for i, nsqd in enumerate(topology.nsqds, start=1):
        f = flags(nsqd)
        assert f["tcp-address"] == f"127.0.0.1:{4150 + 100 * (i - 1)}"
        assert f["http-address"] == f"127.0.0.1:{4151 + 100 * (i - 1)}"
        assert f["broadcast-address"] == "127.0.0.1"
        assert f["lookupd-tcp-address"] == "127.0.0.1:4160"
        assert Path(f["data-path"]) == tmp_path / f"nsqd-{i}" == nsqd.data_path
        assert f["node-id"] == str(i)
    assert flags(topology.admin) == {"http-address": "127.0.0.1:4171",
                                     "lookupd-http-address": "127.0.0.1:4161"}


def test_base_port_moves_everything_and_zero_lets_the_kernel_choose():
    topology = plan(base_port=20000)
    assert [p.number for s in topology.services for p in s.ports] == [
        20010, 20011, 20000, 20001, 23627, 23628, 20100, 20101, 20021]
    anywhere = plan(base_port=0)
    assert {p.number for s in anywhere.services for p in s.ports} == {0}
    nsqd = with_lookupd(anywhere.nsqds[0], "127.0.0.1:5555", "127.0.0.1:5556")
    assert flags(nsqd)["lookupd-tcp-address"] == "127.0.0.1:5555"
    assert flags(with_lookupd(anywhere.admin, "x:1", "127.0.0.1:5556"))[
        "lookupd-http-address"] == "127.0.0.1:5556"


def test_wildcard_host_listens_everywhere_but_connects_and_announces_loopback():
    topology = plan(host="0.0.0.0")
    nsqd = flags(topology.nsqds[0])
    assert nsqd["tcp-address"] == "0.0.0.0:4150"
    assert nsqd["lookupd-tcp-address"] == "127.0.0.1:4160"
    assert nsqd["broadcast-address"] == "127.0.0.1"
    assert flags(plan(broadcast_address="node7").nsqds[1])["broadcast-address"] == "node7"


def test_extra_flags_are_appended():
    topology = plan(nsqd_args=("--mem-queue-size=0",), lookupd_args=("--log-level=debug",),
                    admin_args=("--base-path=/admin",))
    assert all(s.args[-1] == "--mem-queue-size=0" for s in topology.nsqds)
    assert topology.lookupd.args[-1] == "--log-level=debug"
    assert topology.admin.args[-1] == "--base-path=/admin"


@pytest.mark.parametrize(("base", "count"), [(65500, 2), (-1, 2), (4150, 0), (4150, 51)])
def test_layouts_that_do_not_fit_are_refused(base, count):
    with pytest.raises(ValueError):
        plan(base_port=base, nsqd_count=count)


def test_a_taken_port_is_named():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        problems = check_ports(plan(base_port=port - 100, nsqd_count=2))
    assert f"port {port} on 127.0.0.1 (nsqd-2 TCP) is already in use" in problems


@pytest.mark.parametrize(("offset", "what"), [(3627, "nsqd-1 lmstfy HTTP"),
                                               (3628, "nsqd-1 lmstfy admin HTTP")])
def test_a_taken_lmstfy_port_is_named(offset, what):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        problems = check_ports(plan(base_port=port - offset, nsqd_count=1))
    assert f"port {port} on 127.0.0.1 ({what}) is already in use" in problems


def test_command_line_refuses_a_taken_port_before_starting_anything(capsys, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        with pytest.raises(SystemExit) as exited:
            main(["up", "--base-port", str(port - 10), "--data-dir", str(tmp_path / "d")])
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 (nsqlookupd TCP) is already in use" in err
    assert "--base-port" in err
    assert not (tmp_path / "d").exists()


def test_command_line_options():
    args = build_parser().parse_args(["up", "--nsqd", "3", "--base-port", "0",
                                      "--nsqd-arg=--mem-queue-size=0", "--data-dir", "x"])
    assert (args.nsqd, args.base_port, args.nsqd_arg, args.data_dir) == (
        3, 0, ["--mem-queue-size=0"], Path("x"))
    with pytest.raises(SystemExit) as exited:
        main(["up", "--base-port", "65530"])
    assert exited.value.code == 2


def test_replicas_add_an_etcd_and_replicate_on_every_nsqd(tmp_path):
    topology = plan(nsqd_count=3, replicas=3, data_dir=tmp_path)
    assert [s.name for s in topology.services] == [
        "nsqlookupd", "etcd", "nsqd-1", "nsqd-2", "nsqd-3", "nsqadmin"]
    etcd = topology.etcd
    assert etcd is not None and etcd.program == "etcd" and etcd.data_path == tmp_path / "etcd"
    assert [(p.kind, p.number) for p in etcd.ports] == [("CLIENT", 4179), ("PEER", 4180)]
    assert flags(etcd)["listen-client-urls"] == "http://127.0.0.1:4179"
    for nsqd in topology.nsqds:
        assert flags(nsqd)["etcd-endpoints"] == "http://127.0.0.1:4179"
        assert flags(nsqd)["default-replicas"] == "3"
    assert plan().etcd is None and "etcd-endpoints" not in flags(plan().nsqds[0])
    with pytest.raises(ValueError, match="--replicas 3 needs as many nsqd"):
        plan(nsqd_count=2, replicas=3)
    # with --base-port 0, etcd (which cannot be told port 0) gets free ports found now
    anywhere = plan(nsqd_count=3, replicas=3, base_port=0, data_dir=tmp_path).etcd
    assert anywhere is not None and all(p.number > 0 for p in anywhere.ports)


def test_replicas_without_etcd_installed_is_one_clear_line(capsys, tmp_path, monkeypatch):
    # etcd is installed here and cannot be uninstalled for a test: the lookup says it is not
    import nsq_cluster.__main__ as command
    monkeypatch.setattr(command, "etcd_binary", lambda: None)
    with pytest.raises(SystemExit) as exited:
        main(["up", "--replicas", "3", "--base-port", "0", "--data-dir", str(tmp_path / "d")])
    assert exited.value.code == 1
    assert capsys.readouterr().err == (
        "nsq-cluster: --replicas needs etcd, which is not installed (Debian: apt-get install "
        "etcd-server)\n")
    assert not (tmp_path / "d").exists()
