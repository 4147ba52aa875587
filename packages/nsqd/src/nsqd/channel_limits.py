"""A channel's settings beyond NSQ that decide what becomes of its messages (``lifecycle``'s
verdicts, where one coming back waits): changed by ``Channel.configure`` (nsqd.dat, the HTTP
API, lmstfy), read by the channel's parts."""

from __future__ import annotations

__all__ = ["Limits"]


class Limits:
    """A channel's settings beyond NSQ that decide verdicts: its attempt limit (0: none, then
    nsqd's ``--max-attempts``), expired messages kept as dead letters, and where a message
    coming back waits (``requeue_behind``: behind every message waiting, lmstfy's ready list;
    else behind what NSQ's memory queue held)."""

    __slots__ = ("dead_letter_expired", "default_max_attempts", "max_attempts",
                 "requeue_behind")

    def __init__(self, default_max_attempts: int = 0) -> None:
        self.max_attempts = 0
        self.default_max_attempts = default_max_attempts
        self.dead_letter_expired = False
        self.requeue_behind = False

    @property
    def attempt_limit(self) -> int:
        return self.max_attempts or self.default_max_attempts

    def update(self, *, max_attempts: int | None, default_max_attempts: int | None,
               dead_letter_expired: bool | None, requeue_behind: bool | None) -> bool:
        """Change the settings given (None: as it is); whether one changed."""
        before = (self.max_attempts, self.default_max_attempts, self.dead_letter_expired,
                  self.requeue_behind)
        if max_attempts is not None:
            self.max_attempts = max_attempts
        if default_max_attempts is not None:
            self.default_max_attempts = default_max_attempts
        if dead_letter_expired is not None:
            self.dead_letter_expired = dead_letter_expired
        if requeue_behind is not None:
            self.requeue_behind = requeue_behind
        return before != (self.max_attempts, self.default_max_attempts,
                          self.dead_letter_expired, self.requeue_behind)
