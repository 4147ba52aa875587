"""Topic and channel names: the only copy of NSQ's rule.

A name is 1..64 characters of ``[.a-zA-Z0-9_-]``, optionally ending in ``#ephemeral``
(the suffix counts toward the 64). The same rule holds for topics and channels in nsqd,
nsqlookupd and the clients.
"""

from __future__ import annotations

import re

EPHEMERAL_SUFFIX = "#ephemeral"
MAX_NAME_LENGTH = 64
_NAME = re.compile(r"[.a-zA-Z0-9_-]+(#ephemeral)?")


def is_valid_name(name: str | bytes) -> bool:
    """True when ``name`` is a valid topic or channel name."""
    if isinstance(name, bytes):
        try:
            name = name.decode("ascii")
        except UnicodeDecodeError:
            return False
    return 1 <= len(name) <= MAX_NAME_LENGTH and _NAME.fullmatch(name) is not None


is_valid_topic_name = is_valid_name
is_valid_channel_name = is_valid_name


def is_ephemeral(name: str) -> bool:
    """True for names ending in ``#ephemeral``: never on disk, gone with their last user."""
    return name.endswith(EPHEMERAL_SUFFIX)
