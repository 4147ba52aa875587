"""IDENTIFY: the client's JSON, the server's checks, and the negotiated answer.

The request is decoded as Go's encoding/json decodes it into nsqd's struct (``_gojson``): keys
match case-insensitively, unknown keys are ignored, ``null`` leaves a field at its zero value,
and a value of the wrong JSON type (a string for an int, ``1.5`` for an int) fails the whole
body. ``negotiate`` then applies nsqd's rules in nsqd's order (heartbeat, output buffer
timeout, output buffer size, sample rate, msg timeout) and ``response_json`` renders the reply
with the fields in nsqd's order.
All durations on this wire are milliseconds.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._errors import ErrorCode, ProtocolError
from ._gojson import GoKind, decode_go_struct, go_json


def _go(kind: GoKind) -> Any:
    """A field of nsqd's identifyDataV2: its Go type, and that type's zero value."""
    return attrs.field(default=kind.zero, metadata={"go": kind})


@attrs.frozen
class IdentifyRequest:
    """The IDENTIFY body: nsqd's identifyDataV2, each field with the Go type it is decoded as."""

    client_id: str = _go(GoKind.STRING)
    hostname: str = _go(GoKind.STRING)
    user_agent: str = _go(GoKind.STRING)
    feature_negotiation: bool = _go(GoKind.BOOL)
    heartbeat_interval: int = _go(GoKind.INT64)
    output_buffer_size: int = _go(GoKind.INT64)
    output_buffer_timeout: int = _go(GoKind.INT64)
    tls_v1: bool = _go(GoKind.BOOL)
    snappy: bool = _go(GoKind.BOOL)
    deflate: bool = _go(GoKind.BOOL)
    deflate_level: int = _go(GoKind.INT64)
    sample_rate: int = _go(GoKind.INT32)
    msg_timeout: int = _go(GoKind.INT64)


# What decode_go_struct fills: the request's fields, and long_id and short_id (of clients
# before 1.0), decoded for their type and dropped.
_FIELDS = {f.name: f.metadata["go"] for f in attrs.fields(IdentifyRequest)} | {
    "long_id": GoKind.STRING, "short_id": GoKind.STRING}


def decode_identify(body: bytes) -> IdentifyRequest:
    """Decode an IDENTIFY body.

    Raises:
        ProtocolError: ``E_BAD_BODY IDENTIFY failed to decode JSON body``.
    """
    try:
        fields = decode_go_struct(body, _FIELDS)
    except ValueError:
        raise ProtocolError(ErrorCode.E_BAD_BODY, "IDENTIFY failed to decode JSON body") from None
    del fields["long_id"], fields["short_id"]
    return IdentifyRequest(**fields)


@attrs.frozen
class ServerFeatures:
    """What the server offers and allows; all durations in ms."""

    version: str
    max_rdy_count: int = 2500
    msg_timeout: int = 60000
    max_msg_timeout: int = 900000
    heartbeat_interval: int = 30000
    max_heartbeat_interval: int = 60000
    output_buffer_size: int = 16384
    max_output_buffer_size: int = 65536
    output_buffer_timeout: int = 250
    min_output_buffer_timeout: int = 25
    max_output_buffer_timeout: int = 30000
    max_deflate_level: int = 6
    tls_available: bool = False
    snappy_enabled: bool = False
    deflate_enabled: bool = False
    auth_required: bool = False


@attrs.frozen
class Negotiated:
    """The client's settings after IDENTIFY (ms; 0 heartbeat = disabled)."""

    heartbeat_interval: int
    output_buffer_size: int
    output_buffer_timeout: int
    sample_rate: int
    msg_timeout: int
    tls_v1: bool = False
    snappy: bool = False
    deflate: bool = False
    deflate_level: int = 6


def _bad(text: str) -> ProtocolError:
    return ProtocolError(ErrorCode.E_BAD_BODY, text)


def _setting(value: int, default: int, low: int, high: int, what: str) -> int:
    """A negotiated number: 0 asks for the server's default, ``[low, high]`` is taken as it is,
    anything else is refused (E_BAD_BODY, NSQ's text)."""
    if value == 0:
        return default
    if low <= value <= high:
        return value
    raise _bad(f"IDENTIFY {what} ({value}) is invalid")


def negotiate(req: IdentifyRequest, server: ServerFeatures) -> Negotiated:
    """Apply nsqd's IDENTIFY rules.

    Raises:
        ProtocolError: E_BAD_BODY for an out-of-range value (first failing check wins),
            E_IDENTIFY_FAILED when both deflate and snappy would be on.
    """
    hb = req.heartbeat_interval
    heartbeat = 0 if hb == -1 else _setting(hb, server.heartbeat_interval, 1000,
                                            server.max_heartbeat_interval, "heartbeat interval")
    obt = req.output_buffer_timeout
    buffer_timeout = 0 if obt == -1 else _setting(
        obt, server.output_buffer_timeout, server.min_output_buffer_timeout,
        server.max_output_buffer_timeout, "output buffer timeout")
    obs = req.output_buffer_size
    if obs == -1:
        buffer_size, buffer_timeout = 1, 0
    else:
        buffer_size = _setting(obs, server.output_buffer_size, 64, server.max_output_buffer_size,
                               "output buffer size")

    if not 0 <= req.sample_rate <= 99:
        raise _bad(f"IDENTIFY sample rate ({req.sample_rate}) is invalid")

    msg_timeout = _setting(req.msg_timeout, server.msg_timeout, 1000, server.max_msg_timeout,
                           "msg timeout")

    negotiating = req.feature_negotiation
    tls = negotiating and server.tls_available and req.tls_v1
    deflate = negotiating and server.deflate_enabled and req.deflate
    snappy = negotiating and server.snappy_enabled and req.snappy
    level = req.deflate_level if deflate and req.deflate_level > 0 else 6
    level = min(level, server.max_deflate_level)
    if deflate and snappy:
        raise ProtocolError(ErrorCode.E_IDENTIFY_FAILED,
                            "cannot enable both deflate and snappy compression")
    return Negotiated(heartbeat, buffer_size, buffer_timeout, req.sample_rate, msg_timeout,
                      tls, snappy, deflate, level)


def response_json(neg: Negotiated, server: ServerFeatures) -> bytes:
    """The IDENTIFY reply body, fields in nsqd's order."""
    return go_json({
        "max_rdy_count": server.max_rdy_count,
        "version": server.version,
        "max_msg_timeout": server.max_msg_timeout,
        "msg_timeout": neg.msg_timeout,
        "tls_v1": neg.tls_v1,
        "deflate": neg.deflate,
        "deflate_level": neg.deflate_level,
        "max_deflate_level": server.max_deflate_level,
        "snappy": neg.snappy,
        "sample_rate": neg.sample_rate,
        "auth_required": server.auth_required,
        "output_buffer_size": neg.output_buffer_size,
        "output_buffer_timeout": neg.output_buffer_timeout,
    })
