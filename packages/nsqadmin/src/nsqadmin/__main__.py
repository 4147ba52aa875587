"""The nsqadmin command: Go-style flags and config file -> Options -> serve.

Trio, the server, TLS and the HTTP client are imported only once the flags are parsed, so that
``--version``, ``--help`` and a bad flag answer without loading them, and a lone ``--version``
is answered before the flags are even described (see docs/performance.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nsq_serving import exit_on, run_daemon, start_logging, version_string

if TYPE_CHECKING:
    from .options import Options

NAME = "nsqadmin"
#: What Go's flag package takes for "print the version" alone on the command line.
VERSION_FLAGS = (["--version"], ["-version"])


def parse_options(argv: Sequence[str]) -> Options:
    from .options import Options, build_flagset

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
    args = sys.argv[1:] if argv is None else list(argv)
    if args in VERSION_FLAGS:
        print(version_string(NAME))
        return
    options = parse_options(args)
    from .server import serve

    log = start_logging(NAME, options.log_prefix, options.log_level)
    run_daemon(NAME, log, serve, options)


if __name__ == "__main__":
    main()
