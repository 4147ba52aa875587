"""The ``nsqlookupd`` command: flags to Options, then ``trio.run(serve)`` until SIGINT/SIGTERM.

Trio, the server and the logger are imported only once the flags are parsed, so that
``--version``, ``--help`` and a bad flag answer without loading them, and a lone ``--version``
is answered before the flags are even described (see docs/performance.md). Then comes the
early start (``nsq_serving.early``, docs/architecture.md): both listeners are bound (when no
config file may name others) and ``/ping`` answers "not yet" from a thread while Trio and the
server are imported; it says OK once the real server serves both. A SIGINT or SIGTERM at any
moment of this stops nsqlookupd cleanly, once started (``catch_signals``).
"""

from __future__ import annotations

import sys

from nsq_serving import catch_signals
from nsq_serving import version_string as daemon_version

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

#: What Go's flag package takes for "print the version" alone on the command line.
VERSION_FLAGS = (["--version"], ["-version"])


def version_string() -> str:
    return daemon_version("nsqlookupd")


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args in VERSION_FLAGS:
        print(version_string())
        return
    catch_signals()
    from nsq_common import FlagError, exit_with_flag_error

    from .flags import check, flag_set

    flags = flag_set()
    try:
        values, given, _ = flags.parse(args)
    except FlagError as exc:
        exit_with_flag_error(flags, exc)
    if values["version"]:
        print(version_string())
        raise SystemExit(0)
    from nsq_serving import early  # not before: --version and --help need no socket

    # the addresses of a config file are not known before it is read (parsed_values, below)
    if not values["config"]:
        early.start(values["http_address"], [values["tcp_address"]])
    try:
        try:
            check(values, given)
        except FlagError as exc:
            exit_with_flag_error(flags, exc)
        from .options import ConfigError, parsed_values  # attrs: after the checks

        try:
            parsed = parsed_values(values, given, flags)
        except FlagError as exc:
            exit_with_flag_error(flags, exc)
        except ConfigError as exc:
            from .logger import Logger

            Logger().fatal(str(exc))
            raise SystemExit(1) from None
    except BaseException:
        early.abandon()
        raise
    options = parsed.options
    from functools import partial

    import trio
    from nsq_serving import ListenError, serve_until_signalled

    from .app import bind_listeners, serve
    from .logger import Logger

    log = Logger(options.log_prefix, options.log_level)
    log.info(version_string())
    early.access_log(log.info)  # as the HTTP API logs every request
    try:
        listeners = bind_listeners(options)
    except ListenError as exc:
        log.fatal(f"failed to instantiate nsqlookupd - {exc}")
        raise SystemExit(1) from None
    try:
        # the first signal ends the server, gracefully (one noted since main began too)
        trio.run(serve_until_signalled, partial(serve, options, log=log, listeners=listeners))
    finally:
        listeners.close()


if __name__ == "__main__":
    main()
