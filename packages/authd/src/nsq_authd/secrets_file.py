"""The secrets file: who each secret belongs to and what it may do.

A TOML file::

    ttl = 3600                          # seconds nsqd may keep an answer (default 3600)

    [[secrets]]
    secret = "s3cret"                   # or: secret_sha256 = "<hex SHA-256 of the secret>"
    identity = "alice"
    identity_url = "https://example.com/alice"   # optional
    ttl = 600                           # optional, this secret's own ttl
    require_tls = true                  # optional: only clients connected over TLS
    remote_ips = ["10.0.0.0/8"]         # optional: only clients from these networks
    common_names = ["alice.example"]    # optional: only these TLS client certificate CNs
    [[secrets.authorizations]]
    topic = "orders.*"
    channels = [".*"]
    permissions = ["publish", "subscribe"]

Everything nsqd would reject in an answer is rejected when the file is loaded instead
(permissions other than ``subscribe``/``publish``, patterns that do not compile, ttl <= 0,
a secret without authorizations, which nsqd reports as "no authorizations found"), and so is
what nsqd cannot notice: unknown keys (a misspelt ``require_tls`` would silently open a
door), duplicate secrets, empty secrets or identities.

Secrets are looked up by their SHA-256 digest. Looking up a digest takes the same time however
much of a guess is right, and the file may carry digests instead of the secrets themselves.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import tomllib
from collections.abc import Mapping
from typing import Any

import attrs

PERMISSIONS = ("subscribe", "publish")
DEFAULT_TTL = 3600
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_TOP_KEYS = {"ttl", "secrets"}
_SECRET_KEYS = {"secret", "secret_sha256", "identity", "identity_url", "ttl", "require_tls",
                "remote_ips", "common_names", "authorizations"}
_AUTHORIZATION_KEYS = {"topic", "channels", "permissions"}


class SecretsError(Exception):
    """The secrets file cannot be used; the message names the file and the entry."""


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


@attrs.frozen
class Authorization:
    """One grant, as nsqd reads it: topic and channel patterns (unanchored), permissions."""

    topic: str
    channels: tuple[str, ...]
    permissions: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "channels": list(self.channels),
                "permissions": list(self.permissions)}


@attrs.frozen
class Entry:
    """One secret's identity, grants and the conditions a client must meet to use it."""

    identity: str
    identity_url: str
    ttl: int
    authorizations: tuple[Authorization, ...]
    require_tls: bool = False
    remote_ips: tuple[Network, ...] = ()
    common_names: tuple[str, ...] = ()

    def refusal(self, *, remote_ip: str, tls: bool, common_name: str) -> str | None:
        """Why this client may not use the secret, or None when it may."""
        if self.require_tls and not tls:
            return "TLS required"
        if self.remote_ips and not _address_in(remote_ip, self.remote_ips):
            return f"remote_ip {remote_ip!r} not allowed"
        if self.common_names and common_name not in self.common_names:
            return f"common_name {common_name!r} not allowed"
        return None

    def answer(self) -> dict[str, Any]:
        """The JSON nsqd expects, field for field."""
        return {"ttl": self.ttl, "identity": self.identity, "identity_url": self.identity_url,
                "authorizations": [a.to_json() for a in self.authorizations]}


def _address_in(text: str, networks: tuple[Network, ...]) -> bool:
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


@attrs.frozen
class Secrets:
    """Every entry of one secrets file, by the digest of its secret."""

    entries: Mapping[bytes, Entry] = attrs.field(factory=dict)

    def lookup(self, secret: str) -> Entry | None:
        return self.entries.get(digest(secret)) if secret else None

    def __len__(self) -> int:
        return len(self.entries)


def load(path: str) -> Secrets:
    """Read and check a secrets file.

    Raises:
        SecretsError: the file is unreadable, not TOML, or an entry is wrong.
    """
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SecretsError(f"failed to load {path} - {exc}") from None
    return parse(data, path)


def parse(data: Mapping[str, Any], source: str = "<secrets>") -> Secrets:
    """Check the decoded TOML of a secrets file (see the module docstring).

    Raises:
        SecretsError: naming ``source`` and the entry at fault.
    """
    _no_unknown_keys(data, _TOP_KEYS, source)
    default_ttl = _ttl(data.get("ttl", DEFAULT_TTL), source)
    raw_entries = data.get("secrets", [])
    if not isinstance(raw_entries, list):
        raise SecretsError(f"{source}: secrets must be an array of tables ([[secrets]])")
    entries: dict[bytes, Entry] = {}
    for index, raw in enumerate(raw_entries, 1):
        where = f"{source}: secrets #{index}"
        if not isinstance(raw, dict):
            raise SecretsError(f"{where}: not a table")
        key, entry = _entry(raw, default_ttl, where)
        if key in entries:
            raise SecretsError(f"{where} ({entry.identity}): the same secret is listed twice")
        entries[key] = entry
    return Secrets(entries)


def _entry(raw: Mapping[str, Any], default_ttl: int, where: str) -> tuple[bytes, Entry]:
    identity = _string(raw, "identity", where)
    if not identity:
        raise SecretsError(f"{where}: identity is required")
    where = f"{where} ({identity})"
    _no_unknown_keys(raw, _SECRET_KEYS, where)
    if ("secret" in raw) == ("secret_sha256" in raw):
        raise SecretsError(f"{where}: give exactly one of secret or secret_sha256")
    if "secret" in raw:
        secret = _string(raw, "secret", where)
        if not secret:
            raise SecretsError(f"{where}: secret is empty")
        key = digest(secret)
    else:
        try:
            key = bytes.fromhex(_string(raw, "secret_sha256", where))
        except ValueError:
            key = b""
        if len(key) != 32:
            raise SecretsError(f"{where}: secret_sha256 must be 64 hex digits")
    require_tls = raw.get("require_tls", False)
    if not isinstance(require_tls, bool):
        raise SecretsError(f"{where}: require_tls must be true or false")
    networks = []
    for text in _strings(raw, "remote_ips", where):
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError as exc:
            raise SecretsError(f"{where}: remote_ips - {exc}") from None
    raw_grants = raw.get("authorizations", [])
    if not isinstance(raw_grants, list) or not raw_grants:
        raise SecretsError(f"{where}: at least one [[secrets.authorizations]] is required")
    grants = tuple(_authorization(grant, f"{where}: authorizations #{n}")
                   for n, grant in enumerate(raw_grants, 1))
    entry = Entry(identity=identity, identity_url=_string(raw, "identity_url", where),
                  ttl=_ttl(raw.get("ttl", default_ttl), where), authorizations=grants,
                  require_tls=require_tls, remote_ips=tuple(networks),
                  common_names=tuple(_strings(raw, "common_names", where)))
    return key, entry


def _authorization(raw: Any, where: str) -> Authorization:
    if not isinstance(raw, dict):
        raise SecretsError(f"{where}: not a table")
    _no_unknown_keys(raw, _AUTHORIZATION_KEYS, where)
    topic = _string(raw, "topic", where)
    channels = _strings(raw, "channels", where)
    permissions = _strings(raw, "permissions", where)
    if not topic:
        raise SecretsError(f"{where}: topic pattern is required (\".*\" for every topic)")
    if not channels:
        # nsqd matches publishes against channel "" too: with no channel pattern nothing passes
        raise SecretsError(f"{where}: channels needs at least one pattern (\".*\" for all)")
    unknown = [p for p in permissions if p not in PERMISSIONS]
    if unknown or not permissions:
        raise SecretsError(f"{where}: permissions must be among {list(PERMISSIONS)}, "
                           f"got {permissions}")
    for pattern in (topic, *channels):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SecretsError(f"{where}: bad pattern {pattern!r} - {exc}") from None
    return Authorization(topic, tuple(channels), tuple(dict.fromkeys(permissions)))


def _no_unknown_keys(raw: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SecretsError(f"{where}: unknown key(s) {', '.join(unknown)}")


def _ttl(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SecretsError(f"{where}: ttl must be a whole number of seconds > 0, got {value!r}")
    return value


def _string(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise SecretsError(f"{where}: {key} must be a string")
    return value


def _strings(raw: Mapping[str, Any], key: str, where: str) -> list[str]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SecretsError(f"{where}: {key} must be an array of strings")
    return list(value)


@attrs.define(eq=False)
class SecretStore:
    """The secrets in use, and the file they come from (read again on ``reload``)."""

    path: str
    current: Secrets

    @classmethod
    def open(cls, path: str) -> SecretStore:
        return cls(path, load(path))

    def reload(self) -> Secrets:
        """Read the file again; on an error the secrets in use stay as they were.

        Raises:
            SecretsError: the file as it is now cannot be used.
        """
        self.current = load(self.path)
        return self.current
