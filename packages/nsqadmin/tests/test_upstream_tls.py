"""Reaching nsqd over HTTPS: addresses with a scheme, and the client TLS settings built from
the --http-client-tls-* flags (certificates made with trustme)."""

import ssl

import httpx
import pytest
import trustme
from nsqadmin.__main__ import parse_options
from nsqadmin.cluster import ClusterInfo
from nsqadmin.options import Options
from nsqadmin.upstream import Upstream, tls_context


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    ca = trustme.CA()
    client = ca.issue_cert("nsqadmin.test")
    d = tmp_path_factory.mktemp("pki")
    ca.cert_pem.write_to_path(d / "ca.pem")
    client.cert_chain_pems[0].write_to_path(d / "client.pem")
    client.private_key_pem.write_to_path(d / "client.key")
    (d / "garbage.pem").write_text("not a certificate\n")
    return d


@pytest.mark.parametrize("address", ["https://n1:4152", "http://n1:4151/", "n1:4151"])
def test_addresses_may_carry_a_scheme(address):
    Options(nsqd_http_addresses=[address]).validate()


@pytest.mark.parametrize(("address", "error"), [
    ("ftp://n1:21", "unsupported scheme 'ftp'"), ("https://n1", "missing port in address"),
])
def test_bad_addresses(address, error):
    with pytest.raises(ValueError, match=error):
        Options(nsqd_http_addresses=[address]).validate()


async def test_https_address_is_asked_as_written():
    seen = []

    def nsqd(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.path == "/info":
            return httpx.Response(200, json={"version": "1.3.0", "hostname": "n1",
                                             "tcp_port": 4150, "http_port": 0})
        return httpx.Response(200, json={"topics": [{"topic_name": "t"}], "health": "OK"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(nsqd)) as client:
        cluster = ClusterInfo(Upstream(client), [], ["https://n1:4152"])
        (node,) = (await cluster.nodes()).value
    assert sorted(seen) == ["https://n1:4152/info",
                            "https://n1:4152/stats?format=json&include_clients=false"]
    # an nsqd with no plain HTTP listener: named by the address it is reached at
    assert (node.http_address, node.address, node.topics[0].topic) == (
        "n1:4152", "https://n1:4152", "t")
    assert cluster.find_node([node], "n1:4152") is node


def test_tls_context_from_flags(pki):
    assert tls_context(Options()) is None
    ca_only = tls_context(Options(http_client_tls_root_ca_file=str(pki / "ca.pem")))
    assert ca_only.verify_mode == ssl.CERT_REQUIRED and ca_only.check_hostname
    assert len(ca_only.get_ca_certs()) == 1  # only the given CA, as Go's RootCAs
    insecure = tls_context(Options(http_client_tls_insecure_skip_verify=True,
                                   http_client_tls_cert=str(pki / "client.pem"),
                                   http_client_tls_key=str(pki / "client.key")))
    assert insecure.verify_mode == ssl.CERT_NONE and not insecure.check_hostname


@pytest.mark.parametrize(("flags", "error"), [
    ({"http_client_tls_root_ca_file": "missing.pem"}, "failed to read TLS root CA file"),
    ({"http_client_tls_root_ca_file": "garbage.pem"}, "failed to read TLS root CA file"),
    ({"http_client_tls_cert": "garbage.pem", "http_client_tls_key": "client.key"},
     "failed to LoadX509KeyPair"),
])
def test_unusable_tls_files_stop_start_up(pki, capsys, flags, error):
    argv = ["--nsqd-http-address=127.0.0.1:4151"]
    argv += [f"--{k.replace('_', '-')}={pki / v}" for k, v in flags.items()]
    with pytest.raises(SystemExit) as caught:
        parse_options(argv)
    assert caught.value.code == 1
    err = capsys.readouterr().err
    assert "FATAL: failed to instantiate nsqadmin - " + error in err


def test_unusable_basic_auth_file_stops_start_up(tmp_path, capsys):
    users = tmp_path / "users"
    users.write_text("alice:plaintext\n")
    with pytest.raises(SystemExit):
        parse_options(["--nsqd-http-address=127.0.0.1:4151",
                       f"--admin-basic-auth-file={users}"])
    assert "python -m nsqadmin.passwd alice" in capsys.readouterr().err
