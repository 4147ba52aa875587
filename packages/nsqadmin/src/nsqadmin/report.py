"""``Report``: what an admin action did, shown once above the page.

After a redirect it travels in a flash cookie that the next full page shows and clears.
"""

from __future__ import annotations

import base64
import binascii
import json

import attrs
from starlette.requests import Request
from starlette.responses import Response

from .cluster_actions import ActionResult

FLASH_COOKIE = "nsqadmin_flash"
PHRASES = {
    "create_topic": "Created topic", "create_channel": "Created channel",
    "delete_topic": "Deleted topic", "delete_channel": "Deleted channel",
    "pause_topic": "Paused topic", "unpause_topic": "Unpaused topic",
    "pause_channel": "Paused channel", "unpause_channel": "Unpaused channel",
    "empty_topic": "Emptied topic", "empty_channel": "Emptied channel",
    "tombstone_topic_producer": "Tombstoned topic",
    "respawn_dead_letters": "Respawned", "empty_dead_letters": "Emptied",
    "update_topic": "Updated topic", "update_channel": "Updated channel",
    "rewind_channel": "Rewound channel",
    # the Jobs pages (lmstfy)
    "respawn_jobs": "Respawned", "delete_dead_jobs": "Deleted", "empty_dead_jobs": "Emptied",
    "delete_job": "Deleted", "destroy_queue": "Emptied", "create_token": "Created",
    "delete_token": "Deleted", "set_limit": "Set", "delete_limit": "Removed",
}


@attrs.frozen
class Report:
    """What an action did, shown once above the page."""

    action: str
    subject: str
    done: tuple[str, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()
    problem: str = ""
    outcome: str = ""

    @classmethod
    def of(cls, result: ActionResult, subject: str) -> Report:
        """The report of ``result``; a daemon asked twice (lookupd on create) counts once."""
        return cls(result.action, subject, tuple(dict.fromkeys(result.done)),
                   tuple((e.address, e.message) for e in result.errors),
                   outcome=result.outcome)

    @property
    def level(self) -> str:
        if self.problem or (self.errors and not self.done):
            return "error"
        return "warning" if self.errors else "ok"

    @property
    def headline(self) -> str:
        if self.problem:
            return self.problem
        return f"{self._headline} {self.outcome}" if self.outcome else self._headline

    @property
    def _headline(self) -> str:
        phrase = PHRASES.get(self.action, self.action)
        if not self.done and not self.errors:
            return f"{phrase} {self.subject}: no daemon hosts it, nothing to do."
        failed = {address for address, _ in self.errors}
        if not self.done:
            return f"Could not {self.verb} {self.subject}: {_daemons(len(failed))} failed."
        if not self.errors:
            return f"{phrase} {self.subject} on {_daemons(len(self.done))}."
        return (f"{phrase} {self.subject} on {_daemons(len(self.done))}; "
                f"failed on {_daemons(len(failed))}.")

    @property
    def verb(self) -> str:
        return self.action.split("_", 1)[0]

    def encode(self) -> str:
        raw = {"a": self.action, "s": self.subject, "d": list(self.done)[:20],
               "e": [[a, m[:300]] for a, m in self.errors[:10]], "p": self.problem,
               "o": self.outcome}
        # no "=" padding: cookie values with "=" get quoted
        return base64.urlsafe_b64encode(json.dumps(raw).encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Report | None:
        try:
            raw = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            return cls(str(raw["a"]), str(raw["s"]), tuple(map(str, raw["d"])),
                       tuple((str(a), str(m)) for a, m in raw["e"]), str(raw["p"]),
                       str(raw.get("o", "")))
        except (ValueError, KeyError, TypeError, binascii.Error):
            return None


def _daemons(count: int) -> str:
    return f"{count} daemon{'' if count == 1 else 's'}"


def read_flash(request: Request) -> Report | None:
    text = request.cookies.get(FLASH_COOKIE)
    return Report.decode(text) if text else None


def clear_flash(response: Response, path: str) -> None:
    response.delete_cookie(FLASH_COOKIE, path=path)


def set_flash(response: Response, path: str, report: Report) -> None:
    response.set_cookie(FLASH_COOKIE, report.encode(), path=path, httponly=True,
                        samesite="lax", max_age=60)
