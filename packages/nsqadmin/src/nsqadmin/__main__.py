"""The nsqadmin command: Go-style flags and config file -> Options -> serve.

Trio, the server, TLS and the HTTP client are imported only once the flags are parsed, so that
``--version``, ``--help`` and a bad flag answer without loading them (see docs/performance.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from nsq_serving import exit_on, run_daemon, start_logging, version_string

from .options import Options, build_flagset

NAME = "nsqadmin"


def parse_options(argv: Sequence[str]) -> Options:
    options = Options.from_values(build_flagset().parse_command_line(argv, version_string(NAME)))
    from .auth import PasswordFileError, load_password_file  # deferred: see the module's docstring
    from .upstream import tls_context

    with exit_on(ValueError, PasswordFileError, prefix=options.log_prefix,
                 context="failed to instantiate nsqadmin - "):
        options.validate()
        tls_context(options)  # the files are read now, so a bad one stops nsqadmin here
        if options.admin_basic_auth_file:
            load_password_file(options.admin_basic_auth_file)
    return options


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(sys.argv[1:] if argv is None else argv)
    from .server import serve

    log = start_logging(NAME, options.log_prefix, options.log_level)
    run_daemon(NAME, log, serve, options)


if __name__ == "__main__":
    main()
