"""A small client of etcd v3's JSON gateway (etcd 3.4: ``/v3/...`` over HTTP/1.1, httpx).

Only what replication needs: range, put, delete, txn, lease grant / keep-alive / revoke, and a
streamed watch. Keys and values are bytes here; the gateway wants them base64 in JSON, and
64-bit integers (revisions, lease ids) as decimal strings, which it also answers with
(fields that are zero or false are left out of its answers: ``succeeded`` of a failed txn,
``TTL`` of a lease that no longer exists).

Errors::

    EtcdError            etcd answered with an error (``code``: gRPC's, ``message``: etcd's)
    └── EtcdUnavailable  no endpoint could be reached, or one answered something else than etcd

Endpoints are tried in turn, starting with the last that answered.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs
import httpx

__all__ = ["Compare", "EtcdClient", "EtcdError", "EtcdUnavailable", "Event", "KeyValue",
           "Op", "TxnResult", "prefix_end"]


class EtcdError(Exception):
    """etcd refused a request (``code`` is the gRPC status code, 0 when unknown)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailable(EtcdError):
    """No endpoint answered."""


@attrs.frozen
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


@attrs.frozen
class Event:
    """One change a watch saw: a put (``kv`` the new value) or a delete (``kv.value`` empty)."""

    deleted: bool
    kv: KeyValue


@attrs.frozen
class TxnResult:
    succeeded: bool
    revision: int
    #: the ranges' answers of the branch that ran, in order (one list per range op)
    ranges: list[list[KeyValue]]


@attrs.frozen
class Compare:
    """One comparison of a txn: ``target`` one of VERSION, CREATE, MOD, VALUE, LEASE;
    ``result`` one of EQUAL, NOT_EQUAL, GREATER, LESS. A missing key compares as zeros."""

    key: bytes
    target: str
    result: str
    value: int | bytes

    def to_json(self) -> dict[str, Any]:
        field = {"VERSION": "version", "CREATE": "create_revision", "MOD": "mod_revision",
                 "VALUE": "value", "LEASE": "lease"}[self.target]
        value = (_b64(self.value) if isinstance(self.value, bytes) else str(self.value))
        return {"key": _b64(self.key), "target": self.target, "result": self.result,
                field: value}

    @classmethod
    def version(cls, key: bytes, value: int, result: str = "EQUAL") -> Compare:
        return cls(key, "VERSION", result, value)

    @classmethod
    def create(cls, key: bytes, value: int, result: str = "EQUAL") -> Compare:
        return cls(key, "CREATE", result, value)

    @classmethod
    def mod(cls, key: bytes, value: int, result: str = "EQUAL") -> Compare:
        return cls(key, "MOD", result, value)

    @classmethod
    def lease(cls, key: bytes, value: int, result: str = "EQUAL") -> Compare:
        return cls(key, "LEASE", result, value)


@attrs.frozen
class Op:
    """One operation of a txn branch: ``Op.put``, ``Op.get``, ``Op.delete``."""

    body: dict[str, Any]

    @classmethod
    def put(cls, key: bytes, value: bytes, lease: int = 0) -> Op:
        put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            put["lease"] = str(lease)
        return cls({"requestPut": put})

    @classmethod
    def get(cls, key: bytes, *, prefix: bool = False) -> Op:
        return cls({"requestRange": _range_body(key, prefix)})

    @classmethod
    def delete(cls, key: bytes, *, prefix: bool = False) -> Op:
        return cls({"requestDeleteRange": _range_body(key, prefix)})


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix`` (etcd's range_end)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key


class EtcdClient:
    """Requests to one etcd cluster through any of ``endpoints`` (``http://host:port``)."""

    def __init__(self, endpoints: Sequence[str], *, timeout: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._next = 0
        self._timeout = timeout
        self._http = httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- keys

    async def range(self, key: bytes, *, prefix: bool = False) -> tuple[list[KeyValue], int]:
        """The key (or every key under the prefix), and the store's revision."""
        answer = await self._call("/v3/kv/range", _range_body(key, prefix))
        return [_kv(kv) for kv in answer.get("kvs", [])], _revision(answer)

    async def get(self, key: bytes) -> KeyValue | None:
        kvs, _ = await self.range(key)
        return kvs[0] if kvs else None

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """Put; the new revision."""
        return _revision(await self._call("/v3/kv/put", Op.put(key, value, lease).body["requestPut"]))

    async def delete(self, key: bytes, *, prefix: bool = False) -> int:
        """Delete; how many keys were."""
        answer = await self._call("/v3/kv/deleterange", _range_body(key, prefix))
        return int(answer.get("deleted", 0))

    async def txn(self, compare: Sequence[Compare], success: Sequence[Op],
                  failure: Sequence[Op] = ()) -> TxnResult:
        answer = await self._call("/v3/kv/txn", {
            "compare": [c.to_json() for c in compare],
            "success": [op.body for op in success],
            "failure": [op.body for op in failure]})
        ranges = [[_kv(kv) for kv in r["response_range"].get("kvs", [])]
                  for r in answer.get("responses", []) if "response_range" in r]
        return TxnResult(bool(answer.get("succeeded", False)), _revision(answer), ranges)

    # -- leases

    async def grant(self, ttl: int) -> tuple[int, int]:
        """A new lease: its id and the TTL granted (seconds)."""
        answer = await self._call("/v3/lease/grant", {"TTL": str(ttl)})
        if answer.get("error"):
            raise EtcdError(str(answer["error"]))
        return int(answer["ID"]), int(answer["TTL"])

    async def keepalive(self, lease: int) -> int:
        """Renew the lease once; its TTL now, 0 if it no longer exists (it expired or was
        revoked: whatever was put under it is gone)."""
        answer = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(answer.get("result", {}).get("TTL", 0))

    async def revoke(self, lease: int) -> bool:
        """Revoke the lease (deleting its keys); False if it did not exist."""
        try:
            await self._call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if isinstance(exc, EtcdUnavailable) or "lease not found" not in str(exc):
                raise
            return False
        return True

    # -- watch

    async def watch(self, key: bytes, *, prefix: bool = False,
                    start_revision: int = 0) -> AsyncIterator[tuple[int, list[Event]]]:
        """The changes to the key (or prefix) from ``start_revision`` (0: from now), as
        ``(revision, events)``, until the stream ends (then EtcdUnavailable) or etcd cancels
        the watch (EtcdError: a compacted revision, for one).

        Raises:
            EtcdUnavailable, EtcdError.
        """
        request: dict[str, Any] = _range_body(key, prefix)
        if start_revision:
            request["start_revision"] = str(start_revision)
        endpoint = self.endpoints[self._next]
        try:
            async with self._http.stream(
                    "POST", endpoint + "/v3/watch", json={"create_request": request},
                    timeout=httpx.Timeout(self._timeout, read=None)) as response:
                if response.status_code != 200:
                    self._rotate()
                    raise EtcdUnavailable(f"{endpoint}: watch answered {response.status_code}")
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    message = json.loads(line)
                    if "error" in message:
                        raise EtcdError(_message(message["error"]), message["error"].get("code", 0))
                    result = message.get("result", {})
                    if result.get("canceled"):
                        raise EtcdError(f"watch canceled: {result.get('cancel_reason', '')} "
                                        f"(compacted at {result.get('compact_revision', 0)})")
                    events = [Event(e.get("type") == "DELETE", _kv(e["kv"]))
                              for e in result.get("events", [])]
                    if events:
                        yield _revision(result), events
        except (httpx.HTTPError, ValueError) as exc:
            self._rotate()
            raise EtcdUnavailable(f"{endpoint}: watch: {exc or type(exc).__name__}") from None
        self._rotate()
        raise EtcdUnavailable(f"{endpoint}: watch stream ended")

    # -- transport

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to the first endpoint that answers; etcd's answer as JSON.

        Raises:
            EtcdUnavailable: none answered; EtcdError: etcd refused.
        """
        failures: list[str] = []
        for _ in self.endpoints:
            endpoint = self.endpoints[self._next]
            try:
                response = await self._http.post(endpoint + path, json=body)
                answer = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                failures.append(f"{endpoint}: {exc or type(exc).__name__}")
                self._rotate()
                continue
            if not isinstance(answer, dict):
                failures.append(f"{endpoint}: not etcd's answer")
                self._rotate()
                continue
            if response.status_code != 200 or ("error" in answer and "code" in answer):
                code = int(answer.get("code", 0))
                if code == 14:  # UNAVAILABLE: this member has no leader; try another
                    failures.append(f"{endpoint}: {_message(answer)}")
                    self._rotate()
                    continue
                raise EtcdError(_message(answer), code)
            return answer
        raise EtcdUnavailable("etcd unreachable: " + "; ".join(failures))

    def _rotate(self) -> None:
        self._next = (self._next + 1) % len(self.endpoints)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _range_body(key: bytes, prefix: bool) -> dict[str, Any]:
    body = {"key": _b64(key)}
    if prefix:
        body["range_end"] = _b64(prefix_end(key))
    return body


def _kv(kv: dict[str, Any]) -> KeyValue:
    return KeyValue(base64.b64decode(kv.get("key", "")), base64.b64decode(kv.get("value", "")),
                    int(kv.get("create_revision", 0)), int(kv.get("mod_revision", 0)),
                    int(kv.get("version", 0)), int(kv.get("lease", 0)))


def _revision(answer: dict[str, Any]) -> int:
    return int(answer.get("header", {}).get("revision", 0))


def _message(answer: dict[str, Any]) -> str:
    return str(answer.get("message") or answer.get("error") or answer)
