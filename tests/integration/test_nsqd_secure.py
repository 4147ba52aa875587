"""TLS, snappy and deflate negotiated by pynsq, exactly as with the Go nsqd; client
certificates; and garbage inside a TLS or compressed stream. Certificates are made here with
trustme."""

import json
import ssl
import subprocess
import sys
import textwrap

import pytest
import trio
from nsq_common import OK_FRAME, commands
from nsq_testing import WireClient

from ._pki import write_pki


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return write_pki(tmp_path_factory.mktemp("certs"), "client@example.com")


@pytest.fixture
def tls_nsqd(run_daemon, certs):
    return run_daemon("nsqd", f"--tls-cert={certs / 'server.pem'}", f"--tls-key={certs / 'server.key'}")


PYNSQ_ROUND_TRIP = textwrap.dedent("""
    import json, sys, nsq, tornado.ioloop
    tcp, options, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    loop = tornado.ioloop.IOLoop.current()
    got, errors = set(), []
    def handler(msg):
        got.add(msg.body.decode())
        if len(got) >= count:
            loop.call_later(0.3, loop.stop)
        return True
    nsq.Reader(message_handler=handler, nsqd_tcp_addresses=[tcp], topic="sec", channel="c",
               max_in_flight=100, **options)
    writer = nsq.Writer([tcp], **options)
    def done(conn, data):
        if isinstance(data, nsq.Error):
            errors.append(str(data))
    def publish():
        if not writer.conns:
            loop.call_later(0.05, publish)
            return
        for i in range(count):
            writer.pub("sec", b"m-%d" % i, done)
    loop.call_later(0.1, publish)
    loop.call_later(30, loop.stop)
    loop.start()
    print(json.dumps({"got": len(got), "errors": errors}))
""")


@pytest.mark.parametrize("features", [
    {"tls_v1": True}, {"snappy": True}, {"deflate": True, "deflate_level": 4},
    {"tls_v1": True, "snappy": True}, {"tls_v1": True, "deflate": True},
], ids=["tls", "snappy", "deflate", "tls+snappy", "tls+deflate"])
def test_pynsq_round_trips_1000_messages(tls_nsqd, certs, features):
    options = dict(features)
    if features.get("tls_v1"):
        options["tls_options"] = {"ca_certs": str(certs / "ca.pem"), "cert_reqs": ssl.CERT_REQUIRED}
    out = subprocess.run([sys.executable, "-c", PYNSQ_ROUND_TRIP, tls_nsqd.tcp_address,
                          json.dumps(options), "1000"], capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    result = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert result == {"got": 1000, "errors": []}


async def test_identify_reply_then_upgrade_order(tls_nsqd, certs):
    client = await WireClient.connect(tls_nsqd.tcp_address)
    reply = json.loads(await client.identify(tls_v1=True, snappy=False))
    assert reply["tls_v1"] is True and reply["snappy"] is False
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    tls = trio.SSLStream(client.stream, ctx, server_hostname="127.0.0.1")
    await tls.do_handshake()
    assert await tls.receive_some() == OK_FRAME  # the OK comes over TLS
    await tls.send_all(commands.pub("sec-order", b"x"))
    assert await tls.receive_some() == OK_FRAME
    await tls.aclose()


async def test_tls_required_refuses_plain_commands(run_daemon, certs):
    daemon = run_daemon("nsqd", f"--tls-cert={certs / 'server.pem'}",
                        f"--tls-key={certs / 'server.key'}", "--tls-required=tcp-https")
    client = await WireClient.connect(daemon.tcp_address)
    await client.send(commands.pub("t", b"x"))
    assert await client.error() == b"E_INVALID cannot PUB in current state (TLS required)"
    assert await client.closed()
    await client.aclose()


async def test_client_certificate_required(run_daemon, certs):
    daemon = run_daemon("nsqd", f"--tls-cert={certs / 'server.pem'}",
                        f"--tls-key={certs / 'server.key'}", "--tls-client-auth-policy=require-verify",
                        f"--tls-root-ca-file={certs / 'ca.pem'}")

    async def upgrade(with_cert):
        client = await WireClient.connect(daemon.tcp_address)
        await client.identify(tls_v1=True)
        ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        if with_cert:
            ctx.load_cert_chain(certs / "client.pem", certs / "client.key")
        tls = trio.SSLStream(client.stream, ctx, server_hostname="127.0.0.1")
        try:
            await tls.do_handshake()
            data = await tls.receive_some()
        except trio.BrokenResourceError:
            data = b""
        await client.aclose()
        return data

    assert await upgrade(with_cert=True) == OK_FRAME
    assert await upgrade(with_cert=False) == b""  # refused: no certificate


@pytest.mark.parametrize("features", [{"tls_v1": True}, {"snappy": True}, {"deflate": True}])
async def test_garbage_inside_an_upgraded_stream_closes_only_that_connection(
        tls_nsqd, certs, features):
    bystander = await WireClient.connect(tls_nsqd.tcp_address)
    client = await WireClient.connect(tls_nsqd.tcp_address)
    await client.identify(**features)
    if features.get("tls_v1"):
        ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        tls = trio.SSLStream(client.stream, ctx, server_hostname="127.0.0.1")
        await tls.do_handshake()
        assert await tls.receive_some() == OK_FRAME
        await client.stream.send_all(b"\x17\x03\x03\x00\x10" + b"\x00" * 16)  # a forged record
    else:
        await client.stream.receive_some()  # the compressed OK
        # a chunk that claims to be compressed data and is not
        await client.stream.send_all(b"\x00\x08\x00\x00" + b"\x01" * 8)
    assert await client.closed()
    await bystander.pub("sec-bystander", b"fine")
    await client.aclose()
    await bystander.aclose()
