"""The bytes nsqd writes to nsqlookupd (protocol V1, ``_lookup``) and how it reads each answer,
as plain functions: no attrs. nsqd's early start registers with its lookupds
through them before it has loaded the rest (``encode_lookup_command`` writes through them too).
"""

from __future__ import annotations

import struct

from ._errors import ProtocolError
from ._gojson import go_json

MAGIC_V1 = b"  V1"
#: ``[ size: int32 BE ]``: before each IDENTIFY body, and before each of lookupd's answers.
SIZE = struct.Struct(">i")


def identify_bytes(*, broadcast_address: str, tcp_port: int, http_port: int, version: str,
                   hostname: str) -> bytes:
    """``IDENTIFY``, with its JSON body's keys in alphabetical order (nsqd marshals a map)::

        IDENTIFY\\n[ size: int32 BE ]{"broadcast_address":..,"hostname":..,"http_port":..,
                                      "tcp_port":..,"version":..}
    """
    body = go_json({
        "broadcast_address": broadcast_address,
        "hostname": hostname,
        "http_port": http_port,
        "tcp_port": tcp_port,
        "version": version,
    })
    return b"IDENTIFY\n" + SIZE.pack(len(body)) + body


def registration_bytes(verb: str, topic: str, channel: str | None) -> bytes:
    """``REGISTER``/``UNREGISTER <topic> [<channel>]\\n`` (``verb`` is the command's name)."""
    params = topic if channel is None else f"{topic} {channel}"
    return f"{verb} {params}\n".encode("utf-8", "surrogateescape")


def lookup_answer_size(head: bytes) -> int:
    """The size of lookupd's answer whose first 4 bytes are ``head`` (negative: broken)."""
    (size,) = SIZE.unpack(head)
    return int(size)


def lookup_response_error(data: bytes) -> ProtocolError | None:
    """The error carried by an answer (``E_<CODE> [description]``), or None for a success."""
    if not data.startswith(b"E_"):
        return None
    code, _, description = data.decode("utf-8", "surrogateescape").partition(" ")
    return ProtocolError(code, description)
