"""AUTH: asking an auth server what a client's secret allows, and checking each command.

nsqd sends ``GET <auth address>/auth?common_name=..&remote_ip=..&secret=..&tls=..`` (the keys
sorted, as Go encodes them), trying the addresses in a random rotation until one answers 200
with JSON like::

    {"ttl": 3600, "identity": "alice", "identity_url": "https://..",
     "authorizations": [{"topic": "orders.*", "channels": [".*"], "permissions": ["publish"]}]}

An authorization allows a request when the permission fits (``subscribe`` for SUB,
``publish`` for PUB/MPUB/DPUB, which pass the channel ``""``), the topic regex matches the
topic and some channel regex matches the channel. The regexes are searched, not anchored,
as Go's ``regexp.MatchString`` does. After ``ttl`` seconds nsqd asks again.
"""

from __future__ import annotations

import json
import random
import re
from typing import TYPE_CHECKING, Any

import attrs
from nsq_common import ACCEPT_V1

from .errors import AuthError

if TYPE_CHECKING:
    import httpx

PERMISSIONS = frozenset({"subscribe", "publish"})


@attrs.frozen
class Authorization:
    topic: re.Pattern[str]
    channels: tuple[re.Pattern[str], ...]
    permissions: frozenset[str]

    def allows(self, topic: str, channel: str) -> bool:
        needed = "subscribe" if channel else "publish"
        if needed not in self.permissions or not self.topic.search(topic):
            return False
        return any(c.search(channel) for c in self.channels)


@attrs.frozen
class AuthState:
    identity: str
    identity_url: str
    authorizations: tuple[Authorization, ...]
    expires: float  # on the trio clock

    def allows(self, topic: str, channel: str) -> bool:
        return any(a.allows(topic, channel) for a in self.authorizations)


def parse_reply(data: bytes, now: float) -> AuthState:
    """Check and read an auth server's JSON.

    Raises:
        AuthError: bad JSON, a bad permission, a regex that does not compile, ttl <= 0.
    """
    try:
        doc: Any = json.loads(data)
        if not isinstance(doc, dict):
            raise AuthError("response is not a JSON object")
        ttl = doc.get("ttl", 0)
        if not isinstance(ttl, int) or ttl <= 0:
            raise AuthError(f"invalid TTL {ttl} (must be >0)")
        authorizations = []
        for item in doc.get("authorizations") or []:
            permissions = frozenset(item.get("permissions") or [])
            if not permissions <= PERMISSIONS:
                raise AuthError(f"unknown permission in {sorted(permissions)}")
            authorizations.append(Authorization(
                re.compile(item.get("topic", "")),
                tuple(re.compile(c) for c in item.get("channels") or []),
                permissions,
            ))
        return AuthState(str(doc.get("identity", "")), str(doc.get("identity_url", "")),
                         tuple(authorizations), now + ttl)
    except (ValueError, TypeError, AttributeError, re.error) as exc:
        raise AuthError(f"invalid auth response - {exc}") from None


def auth_url(address: str) -> str:
    return address if "://" in address else f"http://{address}/auth"


async def query(http: httpx.AsyncClient, addresses: list[str], *, secret: str, remote_ip: str,
                tls: bool, common_name: str, now: float) -> AuthState:
    """Ask the auth servers, in a random rotation, until one answers.

    Raises:
        AuthError: every server failed (the reasons joined with ``; ``).
    """
    import httpx  # deferred: slow to import, and only needed with --auth-http-address

    params = {"common_name": common_name, "remote_ip": remote_ip, "secret": secret,
              "tls": "true" if tls else "false"}
    start = random.randrange(len(addresses))
    errors = []
    for address in addresses[start:] + addresses[:start]:
        try:
            r = await http.get(auth_url(address), params=params,
                               headers={"Accept": ACCEPT_V1})
            if r.status_code != 200:
                raise AuthError(f"got response {r.status_code}")
            return parse_reply(r.content, now)
        except (httpx.HTTPError, AuthError) as exc:
            errors.append(f"failed to auth against {address} - {exc}")
    raise AuthError("; ".join(errors))
