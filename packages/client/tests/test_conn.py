import ssl
from typing import Any

import pytest
import trio
import trustme
from nsq_client import Config, ConnectError, Consumer, Producer, ServerError

A = "10.0.0.1:4150"


async def roundtrip(fake_cluster: Any, **options: Any) -> Any:
    """Publish one message and consume one message over the negotiated connection."""
    nsqd = fake_cluster[A]
    async with Producer(A, connector=fake_cluster.connector, **options) as p:
        await p.pub("t", b"x" * 1000)
    async with Consumer("t", "c", nsqd_tcp_addresses=[A], connector=fake_cluster.connector,
                        max_in_flight=5, **options) as c:
        conn = nsqd.conn
        await fake_cluster.wait_for(lambda: conn.rdy == 5)
        await conn.send_message(b"0" * 16, b"y" * 1000)
        async for msg in c:
            assert msg.body == b"y" * 1000
            break
    assert nsqd.published[0][2] == b"x" * 1000
    return conn


async def test_plain_ok_means_no_negotiation(fake_cluster: Any) -> None:
    fake_cluster[A].feature_negotiation = False
    conn = await roundtrip(fake_cluster, deflate=True)
    assert conn.out_codec is None


async def test_deflate_is_negotiated(fake_cluster: Any) -> None:
    fake_cluster[A].deflate = True
    conn = await roundtrip(fake_cluster, deflate=True, deflate_level=3)
    assert conn.identify["deflate"] is True and conn.identify["deflate_level"] == 3
    assert conn.out_codec is not None
    assert [c[0] for c in conn.commands][-2:] == [b"FIN", b"CLS"]


async def test_snappy_is_negotiated(fake_cluster: Any) -> None:
    fake_cluster[A].snappy = True
    conn = await roundtrip(fake_cluster, snappy=True)
    assert conn.out_codec is not None and conn.identify["snappy"] is True


async def test_compression_not_offered_by_nsqd_stays_off(fake_cluster: Any) -> None:
    conn = await roundtrip(fake_cluster, snappy=True)
    assert conn.out_codec is None


async def test_tls_is_negotiated(fake_cluster: Any) -> None:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("10.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    fake_cluster[A].tls_context = server_ctx
    fake_cluster[A].deflate = True
    conn = await roundtrip(fake_cluster, tls_v1=True, tls_context=client_ctx, deflate=True)
    assert isinstance(conn.stream, trio.SSLStream)


async def test_tls_with_an_untrusted_certificate_fails(fake_cluster: Any) -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("10.0.0.1").configure_cert(server_ctx)
    fake_cluster[A].tls_context = server_ctx
    async with Producer(A, connector=fake_cluster.connector, tls_v1=True) as p:
        with pytest.raises(ConnectError):
            await p.pub("t", b"x")


async def test_auth_is_sent_when_required(fake_cluster: Any) -> None:
    fake_cluster[A].auth_secret = b"s3cret"
    conn = await roundtrip(fake_cluster, auth_secret="s3cret")
    assert next(c for c in conn.commands if c[0] == b"AUTH")[2] == b"s3cret"


async def test_auth_required_without_a_secret_fails(fake_cluster: Any) -> None:
    fake_cluster[A].auth_secret = b"s3cret"
    async with Producer(A, connector=fake_cluster.connector) as p:
        with pytest.raises(ConnectError, match="Auth Required"):
            await p.pub("t", b"x")


async def test_an_identify_error_carries_nsqs_code(fake_cluster: Any) -> None:
    fake_cluster[A].auth_secret = b"other"
    async with Producer(A, connector=fake_cluster.connector, auth_secret="wrong") as p:
        with pytest.raises(ConnectError) as info:
            await p.pub("t", b"x")
    cause = info.value.__cause__
    assert isinstance(cause, ServerError) and cause.code == "E_AUTH_FAILED"


async def test_silence_past_read_timeout_closes_the_connection(fake_cluster: Any,
                                                               autojump_clock: Any) -> None:
    async with Consumer("t", "c", nsqd_tcp_addresses=[A], connector=fake_cluster.connector,
                        read_timeout=5.0, heartbeat_interval=2.0, lookupd_poll_interval=100.0) as c:
        assert c.connections == [A]
        await trio.sleep(4.0)
        assert c.connections == [A]
        await trio.sleep(2.0)
        assert c.connections == []


async def test_a_frame_over_max_msg_size_closes_the_connection(fake_cluster: Any) -> None:
    async with Consumer("t", "c", nsqd_tcp_addresses=[A], connector=fake_cluster.connector,
                        max_msg_size=100, lookupd_poll_interval=100.0) as c:
        conn = fake_cluster[A].conn
        await fake_cluster.wait_for(lambda: conn.rdy == 1)
        await conn.send_message(b"0" * 16, b"z" * 200)
        await fake_cluster.wait_for(lambda: c.connections == [])


def test_config_builds_a_tls_context() -> None:
    ctx = Config(tls_v1=True, tls_min_version="tls1.3").ssl_context()
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    insecure = Config(tls_insecure_skip_verify=True).ssl_context()
    assert insecure.verify_mode == ssl.CERT_NONE
