"""The nsqadmin command: Go-style flags and config file -> Options -> serve.

Only the flag parser is loaded before the flags are parsed, so that ``--version``, ``--help``
and a bad flag answer at once, and a lone ``--version`` before the flags are even described.
Then comes the early start (``nsq_serving.early``, docs/architecture.md): the listener is bound
and ``/ping`` answers "not yet" from a thread while Trio, the server and the HTTP client are
imported; it says OK once the real server serves. A SIGINT or SIGTERM at any moment of this
stops nsqadmin cleanly, once started (``catch_signals``).
"""

from __future__ import annotations

import sys

from nsq_serving import catch_signals, exit_on, version_string

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from .options import Options

NAME = "nsqadmin"
#: What Go's flag package takes for "print the version" alone on the command line.
VERSION_FLAGS = (["--version"], ["-version"])


def parse_options(argv: Sequence[str]) -> Options:
    from .flags import build_flagset

    return options_of(build_flagset().parse_command_line(argv, version_string(NAME)))


def options_of(values: Mapping[str, Any]) -> Options:
    """The validated options, their files read (TLS, password file); a bad one exits 1 with
    the Go nsqadmin's message."""
    _check(values)
    return _options_of_valid(values)


def _check(values: Mapping[str, Any]) -> None:
    """The Go nsqadmin's start-up checks on the flag values (``flags.check``): a bad one
    exits 1 with its message. No attrs: checked while the early start binds."""
    from .flags import check

    with exit_on(ValueError, prefix=values["log_prefix"],
                 context="failed to instantiate nsqadmin - "):
        check(values)


def _options_of_valid(values: Mapping[str, Any]) -> Options:
    """The Options of checked values, their files read (TLS, password file: a bad one exits
    1 with the Go nsqadmin's message)."""
    from .options import Options

    options = Options.from_values(dict(values))
    if _has_tls_files(values):
        from .upstream import tls_context  # deferred: httpx and ssl

        with exit_on(ValueError, prefix=options.log_prefix,
                     context="failed to instantiate nsqadmin - "):
            tls_context(options)  # the files are read now, so a bad one stops nsqadmin here
    if options.admin_basic_auth_file:
        from .auth import PasswordFileError, load_password_file

        with exit_on(PasswordFileError, prefix=options.log_prefix,
                     context="failed to instantiate nsqadmin - "):
            load_password_file(options.admin_basic_auth_file)
    return options


def _has_tls_files(values: Mapping[str, Any]) -> bool:
    return bool(values["http_client_tls_root_ca_file"] or values["http_client_tls_cert"]
                or values["http_client_tls_insecure_skip_verify"])


def ping_path(base_path: str) -> str:
    """Where ``/ping`` is: under ``--base-path`` (as ``Options`` normalizes it)."""
    from .flags import normalize_base_path

    return normalize_base_path(base_path).rstrip("/") + "/ping"


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args in VERSION_FLAGS:
        print(version_string(NAME))
        return
    catch_signals()
    from .flags import build_flagset

    values = build_flagset().parse_command_line(args, version_string(NAME))
    from nsq_serving import early  # not before: --version and --help need no socket
    early.start(values["http_address"], [], ping_path=ping_path(values["base_path"]))
    try:
        _check(values)
        options = _options_of_valid(values)
    except BaseException:
        early.abandon()
        raise
    from functools import partial

    from nsq_serving import run_daemon, start_logging

    from .server import serve

    log = start_logging(NAME, options.log_prefix, options.log_level)
    early.access_log(partial(log.info, "%s"))  # as RequestLog logs every request
    run_daemon(NAME, log, serve, options)


if __name__ == "__main__":
    main()
