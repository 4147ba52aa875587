"""The bytes nsqd writes to nsqlookupd (protocol V1, ``_lookup``) and how it reads each answer,
as plain functions: no attrs. nsqd's early start registers with its lookupds
through them before it has loaded the rest (``encode_lookup_command`` writes through them too).
"""

from __future__ import annotations

import struct

from ._errors import ProtocolError

MAGIC_V1 = b"  V1"
#: ``[ size: int32 BE ]``: before each IDENTIFY body, and before each of lookupd's answers.
SIZE = struct.Struct(">i")


def identify_bytes(*, broadcast_address: str, tcp_port: int, http_port: int, version: str,
                   hostname: str) -> bytes:
    """``IDENTIFY``, with its JSON body's keys in alphabetical order (nsqd marshals a map)::

        IDENTIFY\\n[ size: int32 BE ]{"broadcast_address":..,"hostname":..,"http_port":..,
                                      "tcp_port":..,"version":..}
    """
    body = (f'{{"broadcast_address":{_json_string(broadcast_address)},'
            f'"hostname":{_json_string(hostname)},"http_port":{int(http_port)},'
            f'"tcp_port":{int(tcp_port)},"version":{_json_string(version)}}}').encode()
    return b"IDENTIFY\n" + SIZE.pack(len(body)) + body


def _json_string(text: str) -> str:
    """``text`` as ``go_json`` writes it. A string of printable ASCII with nothing to escape
    is written as it is (what ``go_json`` gives for it), without loading ``json``: nsqd's
    early start sends IDENTIFY before anything else needs it."""
    if text.isascii() and text.isprintable() and not any(c in text for c in '"\\<>&'):
        return f'"{text}"'
    from ._gojson import go_json

    return go_json(text).decode()


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
