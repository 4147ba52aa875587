"""The nsqd command: flags (Go syntax) and config file -> Options -> serve.

Only the flag parser is loaded before the flags are parsed, so that ``--version``, ``--help``
and a bad flag answer at once, and a lone ``--version`` before the flags are even described.
Then comes the early start (``nsq_serving.early``, docs/architecture.md): the listeners are
bound (TCP clients wait in the kernel) and ``/ping`` answers "not yet" from a thread while
Trio and the server are imported; the data path is locked and every lookupd told of nsqd
meanwhile when nothing else there could fail the start (``_early_checks``). ``/ping`` says
OK once the real server serves every listener. A SIGINT or SIGTERM at any moment of this
stops nsqd cleanly, once started (``catch_signals``).
"""

from __future__ import annotations

import gc
import sys

from nsq_serving import catch_signals, exit_on, release_signals, version_string

from .errors import NsqdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Mapping, Sequence
    from typing import Any

    from .options import Options

#: What Go's flag package takes for "print the version" alone on the command line.
VERSION_FLAGS = (["--version"], ["-version"])
#: Names in a data path that nsqd brings in at start (queues of an older layout): with any of
#: them there, that could still fail, so nothing is done early but binding. (nsqd.dat is read
#: early: ``_loaded_topics``.)
_LOADED_AT_START = ("goimport.json",)
#: ``metadata_file.FILE_NAME``, named here so that a fresh data path does not load its parser.
METADATA_FILE = "nsqd.dat"


def parse_options(argv: Sequence[str]) -> Options:
    from .flags import build_flagset

    return options_of(build_flagset().parse_command_line(argv, version_string("nsqd")))


def options_of(values: Mapping[str, Any]) -> Options:
    """The validated options; a bad one exits 1 with NSQ's message."""
    from .options import Options

    _check(values)
    return Options.from_values(values)


def _check(values: Mapping[str, Any]) -> None:
    """NSQ's start-up checks on the flag values (``flags.check``): a bad one exits 1 with
    NSQ's message. No attrs: checked while the early start binds."""
    from .flags import check

    with exit_on(ValueError, prefix="[nsqd] "):
        check(values)


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
    catch_signals()
    from .flags import build_flagset

    values = build_flagset().parse_command_line(args, version_string("nsqd"))
    from nsq_serving import early  # not before: --version and --help need no socket
    bound = (None if values["export_go_data_path"]
             else early.start(values["http_address"], [values["tcp_address"]]))
    data_lock: int | None = None
    try:
        _check(values)
        if bound and _answers_early(values):
            data_lock = _early_checks(values)
            topics = None if data_lock is None else _loaded_topics(values)
            if topics is not None:
                _register_early(values, bound, topics)
    except BaseException:
        early.abandon()
        raise
    from .options import Options  # attrs: after the checks, the values are valid

    opts = Options.from_values(values)
    if opts.export_go_data_path:
        release_signals()  # an offline mode: no server to stop cleanly
        from .goexport import main as export  # deferred: an offline mode

        raise SystemExit(export(opts))
    _serve(opts, data_lock)


def _answers_early(values: Mapping[str, Any]) -> bool:
    """Whether everything that could still fail this start can be checked before Trio is
    imported (so that the data path may be locked and the lookupds told early): not with TLS
    files to load, auth servers, lmstfy's state or statsd to set up."""
    return not any(values[key] for key in (
        "tls_cert", "tls_key", "tls_root_ca_file", "auth_http_addresses",
        "lmstfy_http_address", "lmstfy_admin_http_address", "statsd_address"))


def _loaded_topics(values: Mapping[str, Any]) -> list[tuple[str, list[str]]] | None:
    """The topics (and their channels' names) nsqd will load from its nsqd.dat (none without
    one); None if it cannot be read or parsed (the real start refuses, in its words), or a
    topic's files could not be opened for reading and writing (the real start might fail
    on them: nothing is told early then)."""
    import os

    path = os.path.join(values["data_path"] or ".", METADATA_FILE)
    if not os.path.lexists(path):
        return []  # (a fresh data path: json spared)
    from .metadata_file import read  # nsqd.dat's one parser, without attrs

    try:
        topics, _ = read(path)  # warnings: the real start's
    except ValueError:
        return None
    directory = os.path.join(values["data_path"] or ".", "topics")
    if not all(_usable(os.path.join(directory, topic["name"])) for topic in topics):
        return None
    return [(topic["name"], [channel["name"] for channel in topic["channels"]])
            for topic in topics]


def _usable(directory: str) -> bool:
    """Whether a topic's directory (if any) and every file in it can be read and written."""
    import os

    if not os.path.exists(directory):
        return True
    try:
        names = os.listdir(directory)
    except OSError:
        return False
    rw = os.R_OK | os.W_OK
    return os.access(directory, rw | os.X_OK) and all(
        os.access(os.path.join(directory, name), rw) for name in names)


def _register_early(values: Mapping[str, Any], bound: Sequence[socket.socket],
                    topics: list[tuple[str, list[str]]]) -> None:
    """Tell every lookupd of nsqd and its ``topics`` (``early_lookup``), as ``Lookup``
    would before the real server serves (which then goes on over these connections), while
    nothing else runs. The ports are those of the sockets bound early (``bound``: TCP, then
    HTTP) unless broadcast ones are given."""
    if not values["nsqlookupd_tcp_addresses"] or not values["http_address"]:
        return
    tcp_port = values["broadcast_tcp_port"] or bound[0].getsockname()[1]
    http_port = values["broadcast_http_port"] or bound[-1].getsockname()[1]
    from . import early_lookup

    identify = early_lookup.identify(broadcast_address=values["broadcast_address"],
                                     tcp_port=tcp_port, http_port=http_port)
    from nsq_common import registration_bytes

    commands = [registration_bytes("REGISTER", topic, channel)
                for topic, channel in early_lookup.registrations(topics)]
    early_lookup.register(values["nsqlookupd_tcp_addresses"], identify, commands,
                          values["max_body_size"])


def _early_checks(values: Mapping[str, Any]) -> int | None:
    """The data path's lock (held for ``app.serve``), if nothing there is loaded at start;
    None (and no lock) otherwise, or if it is locked or missing: the real start then says
    why, in its words."""
    import fcntl
    import os

    directory = values["data_path"] or os.getcwd()
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    if any(name in _LOADED_AT_START or ".diskqueue." in name or name.endswith("deferred.dat")
           for name in names):
        return None
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _serve(opts: Options, data_lock: int | None) -> None:
    from functools import partial

    import trio  # deferred: see the module's docstring
    from nsq_serving import serve_until_signalled, start_logging

    from .app import serve  # before tune_gc, so that gc.freeze() covers the server's modules too

    tune_gc()
    log = start_logging("nsqd", opts.log_prefix, opts.log_level)
    try:
        trio.run(serve_until_signalled, partial(serve, opts, data_lock=data_lock))
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
