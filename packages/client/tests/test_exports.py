"""The public surface of nsq_client is a contract: this list changes only on purpose."""

import nsq_client

EXPECTED = [
    "Backoff", "Config", "ConnectError", "ConnectionClosed", "Consumer", "ConsumerStats",
    "DiscoveryError", "LookupdPoller", "Message", "MessageResponded", "NSQError", "Pipeline",
    "Producer", "PublishError", "RdyController", "ServerError", "__version__", "exponential",
    "full_jitter", "lookupd_url", "open_consumer", "open_producer",
]


def test_all_is_the_curated_list() -> None:
    assert sorted(nsq_client.__all__) == sorted(EXPECTED)


def test_every_export_exists_and_is_not_private() -> None:
    for name in nsq_client.__all__:
        assert hasattr(nsq_client, name), name
    public = {n for n in dir(nsq_client) if not n.startswith("_")}
    assert public <= set(EXPECTED) | {"tools"}  # the tools subpackage, once imported


def test_errors_form_one_tree() -> None:
    from nsq_common import ProtocolError

    for name in ("ConnectError", "ConnectionClosed", "DiscoveryError", "MessageResponded",
                 "PublishError", "ServerError"):
        assert issubclass(getattr(nsq_client, name), nsq_client.NSQError)
    assert issubclass(nsq_client.PublishError, nsq_client.ServerError)
    assert issubclass(nsq_client.ServerError, ProtocolError)
    err = nsq_client.ServerError.from_frame(b"E_BAD_TOPIC PUB topic name \"a b\" is not valid")
    assert err.code == "E_BAD_TOPIC" and err.fatal
    assert err.description == 'PUB topic name "a b" is not valid'
    assert not nsq_client.ServerError.from_frame(b"E_FIN_FAILED FIN x failed").fatal
