"""TLS for nsqd: the server context built from NSQ's flags, and what "TLS required" means.

``--tls-required``: ``false`` (default), ``true`` (TCP clients must upgrade before any command
but IDENTIFY, and plain HTTP is refused), or ``tcp-https`` (TCP must upgrade; plain HTTP is
still served). Setting ``--tls-client-auth-policy`` implies ``true``, as in nsqd.

Client certificates: ``require-verify`` verifies them against ``--tls-root-ca-file`` (the system
store without it). Go's ``require`` accepts any certificate without verifying it; Python's ssl
module cannot ask for a certificate without verifying it, so here ``require`` verifies as
``require-verify`` does.
"""

from __future__ import annotations

import ssl

from .options import Options

TLS_VERSIONS = {
    "ssl3.0": ssl.TLSVersion.SSLv3, "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1, "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}
REQUIRED_VALUES = {"false": "false", "true": "true", "tcp-https": "tcp-https", "1": "true",
                   "0": "false", "t": "true", "f": "false", "TRUE": "true", "FALSE": "false",
                   "True": "true", "False": "false"}


def tls_required(opts: Options) -> str:
    """``false``, ``true`` or ``tcp-https``.

    Raises:
        ValueError: an unknown ``--tls-required`` value.
    """
    value = REQUIRED_VALUES.get(str(opts.tls_required))
    if value is None:
        raise ValueError(f"invalid --tls-required value {opts.tls_required!r}")
    if opts.tls_client_auth_policy and value == "false":
        value = "true"
    return value


def server_context(opts: Options) -> ssl.SSLContext | None:
    """The context for TLS upgrades and the HTTPS listener; None without cert and key.

    Raises:
        ValueError: a bad --tls-min-version or --tls-client-auth-policy.
        OSError, ssl.SSLError: unreadable certificate, key or CA file.
    """
    if not (opts.tls_cert and opts.tls_key):
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(opts.tls_cert, opts.tls_key)
    version = TLS_VERSIONS.get(opts.tls_min_version.lower())
    if version is None:
        raise ValueError(f"unknown tls version {opts.tls_min_version!r}")
    ctx.minimum_version = version
    policy = opts.tls_client_auth_policy
    if policy in ("require", "require-verify"):
        ctx.verify_mode = ssl.CERT_REQUIRED
        if opts.tls_root_ca_file:
            ctx.load_verify_locations(opts.tls_root_ca_file)
        else:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    elif policy:
        raise ValueError(f"unknown --tls-client-auth-policy {policy!r}")
    return ctx
