"""What the nsq_auth tests share: secrets-file entries written from their values.

``secret_entry`` builds one ``[[secrets]]`` table with one authorization, so each test names
only what its secrets differ in::

    secret_entry("alice", "orders.*", ["publish", "subscribe"], secret="s3cret")
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pytest

SecretEntry = Callable[..., str]


def _secret_entry(identity: str, topic: str, permissions: Sequence[str], *,
                  channels: Sequence[str] = (".*",), **keys: object) -> str:
    """The TOML of one secret: ``keys`` (``secret``, ``ttl``, ``require_tls``, ...) beside
    its ``identity``, then its one ``[[secrets.authorizations]]``."""
    values = {"identity": identity, **keys}
    lines = ["[[secrets]]", *(f"{key} = {json.dumps(value)}" for key, value in values.items()),
             "[[secrets.authorizations]]", f"topic = {json.dumps(topic)}",
             f"channels = {json.dumps(list(channels))}",
             f"permissions = {json.dumps(list(permissions))}"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def secret_entry() -> SecretEntry:
    return _secret_entry
