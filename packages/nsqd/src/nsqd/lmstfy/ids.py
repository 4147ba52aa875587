"""lmstfy's job ids, and how each maps onto an NSQ message id.

A job id is a ULID (26 characters of Crockford base32 for 16 bytes: a 48-bit millisecond
timestamp, then random bits) whose last 4 bytes lmstfy overwrites with the job's delay in
seconds (little-endian), as its ``uuid`` package does; version 1 ids (jobs with attributes)
carry the digit ``1`` in front.

An NSQ message id is 16 bytes that clients treat as text. The first 12 bytes of the ULID (time
and randomness) written in URL-safe base64 are exactly 16 characters, so each job's message id
*is* its ULID's first 12 bytes, and the job id is rebuilt from the message id, the delay and
the version: no index is needed either way. Any other message id of 16 base64 characters
(nsqd's own are hexadecimal) maps to a job id the same way.

Randomness. Job and request ids need to be unique, not secret (lmstfy draws theirs from Go's
``math/rand``): theirs comes from a generator seeded once from ``os.urandom``, without a
system call per id. Tokens are secrets: ``new_ulid`` reads ``os.urandom``.
"""

from __future__ import annotations

import base64
import binascii
import os
import random
import struct
import time

_CROCKFORD = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_CROCKFORD_ANY_CASE = _CROCKFORD + _CROCKFORD.lower()
#: Crockford's digits as ``int(text, 32)`` reads them (0-9, then a-v).
_INT_DIGITS = b"0123456789abcdefghijklmnopqrstuv"
_FROM_CROCKFORD = bytes.maketrans(_CROCKFORD_ANY_CASE, _INT_DIGITS + _INT_DIGITS)
#: Any byte as one of Crockford's digits (its low 5 bits): 16 random bytes, 80 random bits.
_BYTE_TO_DIGIT = bytes(_CROCKFORD[b & 31] for b in range(256))
_DELAY = struct.Struct("<I")
_rng = random.Random(os.urandom(32))
# a process forked from one that imported this module (a fork server) draws its own ids
os.register_at_fork(after_in_child=lambda: _rng.seed(os.urandom(32)))


_PAIRS = [chr(_CROCKFORD[i >> 5]) + chr(_CROCKFORD[i & 31]) for i in range(1024)]
_SHIFTS = range(120, -1, -10)


def encode_ulid(raw: bytes) -> str:
    """16 bytes as the 26 characters of a ULID (128 bits in 13 ten-bit pairs of characters,
    2 zero bits in front)."""
    value = int.from_bytes(raw, "big")
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])


def decode_ulid(text: str) -> bytes | None:
    """The 16 bytes of a ULID's 26 characters, or None when it is not one."""
    if len(text) != 26 or text[0] not in "01234567" or not text.isascii():
        return None
    raw = text.encode("ascii")
    if raw.translate(None, _CROCKFORD_ANY_CASE):
        return None  # characters outside Crockford's alphabet
    return int(raw.translate(_FROM_CROCKFORD), 32).to_bytes(16, "big")


def new_ulid(now_ms: int) -> bytes:
    """A fresh ULID's 16 bytes at ``now_ms`` (the broker's wall clock), its randomness from
    ``os.urandom`` (lmstfy's tokens)."""
    return now_ms.to_bytes(6, "big") + os.urandom(10)


_prefix_ms = -1
_prefix = ""


def request_id() -> str:
    """A fresh ULID as text (lmstfy's ``X-Request-ID``): the time's 10 characters, kept for
    the millisecond, and 16 random ones. The one read of the system's clock outside
    ``nsqd.clock``: an answer's id is made where the answer is built, with no broker at hand,
    and nothing in nsqd reads it back (tests/test_one_clock.py allows it)."""
    global _prefix_ms, _prefix
    ms = time.time_ns() // 1_000_000
    if ms != _prefix_ms:
        _prefix_ms, _prefix = ms, encode_ulid(ms.to_bytes(6, "big") + bytes(10))[:10]
    return _prefix + _rng.randbytes(16).translate(_BYTE_TO_DIGIT).decode("ascii")


def new_message_id(now_ms: int) -> bytes:
    """The NSQ message id of a new job at ``now_ms``: its ULID's time and 48 random bits, as
    base64."""
    return base64.urlsafe_b64encode(now_ms.to_bytes(6, "big") + _rng.randbytes(6))


def new_job(now_ms: int, delay: int, version: int) -> tuple[bytes, str]:
    """A new job's NSQ message id (``new_message_id``) and its job id (``job_id`` of it),
    made from the same 12 bytes without decoding the one to make the other."""
    head = now_ms.to_bytes(6, "big") + _rng.randbytes(6)
    text = encode_ulid(head + _DELAY.pack(delay & 0xFFFFFFFF))
    return base64.urlsafe_b64encode(head), f"{version}{text}" if version else text


def job_id(message_id: bytes, delay: int, version: int) -> str:
    """The lmstfy job id of a message id (16 base64 characters)."""
    try:
        head = base64.urlsafe_b64decode(message_id)
    except (binascii.Error, ValueError):
        head = message_id[:12].ljust(12, b"\0")
    text = encode_ulid(head + _DELAY.pack(delay & 0xFFFFFFFF))
    return f"{version}{text}" if version else text


def message_id(job: str) -> bytes | None:
    """The NSQ message id a job id stands for, or None when it is not a job id."""
    ulid = decode_ulid(job[1:] if len(job) > 26 else job)
    if ulid is None or (len(job) > 26 and (len(job) != 27 or not job[0].isdigit())):
        return None
    return base64.urlsafe_b64encode(ulid[:12])


def timestamp_ms(job: str) -> int:
    """The publish time a job id carries (0 when it is not a job id)."""
    ulid = decode_ulid(job[1:] if len(job) > 26 else job)
    return int.from_bytes(ulid[:6], "big") if ulid is not None else 0
