"""A certificate authority for the TLS tests, written as nsqd's and nsqadmin's flags take it."""

from __future__ import annotations

from pathlib import Path

import trustme


def write_pki(d: Path, client: str) -> Path:
    """In ``d``: ``ca.pem``, a server certificate for 127.0.0.1 and localhost
    (``server.pem``, ``server.key``) and a client one for ``client`` (``client.pem``,
    ``client.key``), all signed by that CA; ``d``."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    issued = ca.issue_cert(client)
    ca.cert_pem.write_to_path(d / "ca.pem")
    server.private_key_pem.write_to_path(d / "server.key")
    server.cert_chain_pems[0].write_to_path(d / "server.pem")
    issued.private_key_pem.write_to_path(d / "client.key")
    issued.cert_chain_pems[0].write_to_path(d / "client.pem")
    return d
