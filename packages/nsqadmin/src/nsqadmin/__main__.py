"""The nsqadmin command: Go-style flags and config file -> Options -> serve.

Trio, the server, TLS and the HTTP client are imported only once the flags are parsed, so that
``--version``, ``--help`` and a bad flag answer without loading them (see docs/performance.md).
"""

from __future__ import annotations

import platform
import signal
import sys
from collections.abc import Sequence

from nsq_common import NSQ_VERSION

from .options import Options, build_flagset


def version_string() -> str:
    return f"nsqadmin v{NSQ_VERSION} (built w/python{platform.python_version()})"


def parse_options(argv: Sequence[str]) -> Options:
    values = build_flagset().parse_command_line(argv, version_string())
    options = Options.from_values(values)
    from .auth import PasswordFileError, load_password_file  # deferred: see the module's docstring
    from .upstream import tls_context

    try:
        options.validate()
        tls_context(options)  # the files are read now, so a bad one stops nsqadmin here
        if options.admin_basic_auth_file:
            load_password_file(options.admin_basic_auth_file)
    except (ValueError, PasswordFileError) as exc:
        sys.stderr.write(f"{options.log_prefix}FATAL: failed to instantiate nsqadmin - {exc}\n")
        raise SystemExit(1) from None
    return options


async def _run(options: Options) -> None:
    import trio

    from .server import serve

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, options)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()


def _first(group: BaseExceptionGroup[OSError]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(sys.argv[1:] if argv is None else argv)
    import trio
    from nsq_common import setup_logging

    log = setup_logging("nsqadmin", options.log_prefix, options.log_level)
    log.info(version_string())
    try:
        trio.run(_run, options)
    except* OSError as group:  # e.g. the port is taken
        log.critical("failed to instantiate nsqadmin - %s", _first(group))
        sys.exit(1)
    log.info("exiting")


if __name__ == "__main__":
    main()
