"""The nsqd command: flags (Go syntax) and config file -> Options -> serve.

Trio, the server and logging are imported only once the flags are parsed, so that ``--version``,
``--help`` and a bad flag answer without loading them, and a lone ``--version`` is answered
before the flags are even described (see docs/performance.md).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from nsq_serving import exit_on, serve_until_signalled, start_logging, version_string

from .errors import NsqdError

if TYPE_CHECKING:
    from .options import Options

#: What Go's flag package takes for "print the version" alone on the command line.
VERSION_FLAGS = (["--version"], ["-version"])


def parse_options(argv: Sequence[str]) -> Options:
    from .options import Options, build_flagset

    opts = Options.from_values(build_flagset().parse_command_line(argv, version_string("nsqd")))
    with exit_on(ValueError, prefix="[nsqd] "):
        opts.validate()
    return opts


def tune_gc() -> None:
    """Collect young objects far less often. A broker holds millions of live messages, which
    never form reference cycles; with the default thresholds CPython's cyclic GC rescans them
    over and over and costs most of the publish path (measured in docs/performance.md)."""
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)


def main(argv: Sequence[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args in VERSION_FLAGS:
        print(version_string("nsqd"))
        return
    opts = parse_options(args)
    if opts.export_go_data_path:
        from .goexport import main as export  # deferred: an offline mode

        raise SystemExit(export(opts))
    import trio  # deferred: see the module's docstring

    from .app import serve  # before tune_gc, so that gc.freeze() covers the server's modules too

    tune_gc()
    log = start_logging("nsqd", opts.log_prefix, opts.log_level)
    try:
        trio.run(serve_until_signalled, serve, opts)
    except (Exception, BaseExceptionGroup) as exc:
        for leaf in _leaves(exc):
            if isinstance(leaf, EXPECTED):
                # a port taken, the data path locked, unreadable metadata: one line each
                log.critical("%s", leaf)
            else:  # a bug: its traceback too
                log.critical("%s", leaf or type(leaf).__name__, exc_info=leaf)
        raise SystemExit(1) from None
    log.info("exiting")


#: Why nsqd may fail to start or stop running, as opposed to a bug: its own errors (a
#: ``StartError``), the system's (a port taken, a file unreadable) and bad values in files.
EXPECTED = (NsqdError, OSError, ValueError)


def _leaves(exc: BaseException) -> list[BaseException]:
    """Every exception inside ``exc`` (Trio's nurseries group them), in order."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


if __name__ == "__main__":
    main()
