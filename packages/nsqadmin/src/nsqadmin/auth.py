"""HTTP basic auth for admin actions (``--admin-basic-auth-file``; ours, not the Go nsqadmin's).

The Go nsqadmin trusts a reverse proxy to authenticate people and name them in
``--acl-http-header``. With ``--admin-basic-auth-file`` nsqadmin checks passwords itself:

* reading stays open: GET/HEAD/OPTIONS (pages, the JSON API's reads, static files);
* every other method (page forms, ``/api`` POST/DELETE, ``PUT /config``) needs valid
  credentials, else ``401`` with ``WWW-Authenticate: Basic realm="nsqadmin"``, so a browser
  asks for them and sends the request again; and, since a browser adds remembered credentials
  to requests other sites make it send, it must come from nsqadmin's own origin (else ``403``);
* the user who signed in is the admin-action notification's ``user``, and the one
  ``--admin-user`` (when given) must name; ``--acl-http-header`` is not used.

The file holds one ``user:hash`` per line (``#`` comments and blank lines allowed), the hash
in Django's PBKDF2 format ``pbkdf2_sha256$<iterations>$<salt>$<base64 digest>``, made with
``python -m nsqadmin.passwd USER``. Plain passwords are refused when the file is loaded.

PBKDF2 is slow on purpose (a few hundred milliseconds at the default iterations), so checks
run in a worker thread, one at a time, and a successful check is remembered for a while, keyed
by an HMAC of the credentials under a key that lives only in this process.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping

import attrs
import trio
from nsq_serving import HttpGate
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Scope

from .web import is_api_path, same_origin, v1_error

ALGORITHM = "pbkdf2_sha256"
DEFAULT_ITERATIONS = 600_000  # OWASP's 2023 figure for PBKDF2-HMAC-SHA256
REALM = "nsqadmin"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
USER_KEY = "nsqadmin.user"  # in the ASGI scope: the user whose password was checked
REMEMBER_SECONDS = 300.0
REMEMBER_MAX = 256


class PasswordFileError(Exception):
    """The basic-auth file cannot be used; the message names the file and line."""


def hash_password(password: str, *, iterations: int = DEFAULT_ITERATIONS,
                  salt: str | None = None) -> str:
    """``pbkdf2_sha256$<iterations>$<salt>$<base64 digest>`` for ``password``."""
    salt = salt or secrets.token_urlsafe(16)
    if "$" in salt or iterations < 1:
        raise ValueError("salt must not contain '$' and iterations must be positive")
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations)
    return f"{ALGORITHM}${iterations}${salt}${base64.b64encode(digest).decode()}"


def _split(encoded: str) -> tuple[int, str, bytes]:
    algorithm, iterations, salt, digest = encoded.split("$")
    digits = iterations.isascii() and iterations.isdigit()
    if algorithm != ALGORITHM or not digits or int(iterations) < 1 or not salt:
        raise ValueError(encoded)
    return int(iterations), salt, base64.b64decode(digest, validate=True)


def verify_password(password: str, encoded: str) -> bool:
    try:
        iterations, salt, expected = _split(encoded)
    except (ValueError, binascii.Error):
        return False
    actual = hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), iterations)
    return hmac.compare_digest(actual, expected)


def load_password_file(path: str) -> dict[str, str]:
    """Users and their password hashes.

    Raises:
        PasswordFileError: unreadable, a line that is not ``user:hash``, a plain password,
            the same user twice, or no users at all.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PasswordFileError(f"failed to read --admin-basic-auth-file {path} - {exc}"
                                ) from None
    users: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, encoded = line.partition(":")
        where = f"{path}:{number}"
        if not sep or not user:
            raise PasswordFileError(f"{where}: expected user:hash")
        try:
            _split(encoded)
        except (ValueError, binascii.Error):
            raise PasswordFileError(f"{where}: the password of {user!r} is not a {ALGORITHM} "
                                    f"hash; make one with: python -m nsqadmin.passwd {user}"
                                    ) from None
        if user in users:
            raise PasswordFileError(f"{where}: {user!r} is listed twice")
        users[user] = encoded
    if not users:
        raise PasswordFileError(f"{path}: no users")
    return users


def credentials(request: Request) -> tuple[str, str] | None:
    """The basic-auth user and password a request carries, if it carries any."""
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode(
            ).partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep and user else None


@attrs.define(eq=False)
class BasicAuth:
    """Checks passwords against the file's hashes, remembering recent successes."""

    users: Mapping[str, str]
    _key: bytes = attrs.field(init=False, factory=lambda: secrets.token_bytes(32))
    _remembered: dict[bytes, float] = attrs.field(init=False, factory=dict)
    _limiter: trio.CapacityLimiter = attrs.field(init=False,
                                                 factory=lambda: trio.CapacityLimiter(1))

    @classmethod
    def from_file(cls, path: str) -> BasicAuth:
        return cls(load_password_file(path))

    async def authenticate(self, user: str, password: str) -> bool:
        # the length keeps ("a:b", "c") and ("a", "b:c") apart
        tag = hmac.new(self._key, f"{len(user)}:{user}:{password}".encode(), "sha256").digest()
        now = time.monotonic()
        if now - self._remembered.get(tag, -REMEMBER_SECONDS) < REMEMBER_SECONDS:
            return True
        encoded = self.users.get(user)
        # An unknown user is checked against someone's hash all the same (and fails), so a
        # wrong name takes as long as a wrong password and names cannot be probed.
        checked = encoded or next(iter(self.users.values()), "")
        ok = await trio.to_thread.run_sync(verify_password, password, checked,
                                           limiter=self._limiter)
        if not (ok and encoded):
            return False
        if len(self._remembered) >= REMEMBER_MAX:
            self._remembered.clear()
        self._remembered[tag] = now
        return True


class RequireBasicAuth(HttpGate):
    """ASGI middleware: anything but a read needs valid credentials and our own origin."""

    def __init__(self, app: ASGIApp, auth: BasicAuth) -> None:
        super().__init__(app, self._refusal)
        self.auth = auth

    async def _refusal(self, scope: Scope) -> Response | None:
        if scope["method"] in SAFE_METHODS:
            return None
        request = Request(scope)
        given = credentials(request)
        if given is None or not await self.auth.authenticate(*given):
            return _refuse(scope, 401, "UNAUTHORIZED",
                           "Sign in as an nsqadmin admin user to change the cluster.",
                           {"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'})
        if not same_origin(request):
            return _refuse(scope, 403, "FORBIDDEN", "This request came from another site.")
        scope[USER_KEY] = given[0]
        return None


def _refuse(scope: Scope, status: int, code: str, text: str,
            headers: dict[str, str] | None = None) -> Response:
    if is_api_path(scope["path"]):
        response = v1_error(status, code)
        response.headers.update(headers or {})
        return response
    return PlainTextResponse(text, status_code=status, headers=headers)
