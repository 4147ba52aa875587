"""The nsq_auth command: flags -> Options -> the secrets file -> serve; SIGHUP reloads."""

from __future__ import annotations

import logging
import platform
import signal
import sys
from collections.abc import Sequence

import trio
from nsq_common import NSQ_VERSION, setup_logging

from .options import Options, build_flagset
from .secrets_file import SecretsError, SecretStore
from .server import serve


def version_string() -> str:
    return f"nsq_auth v{NSQ_VERSION} (built w/python{platform.python_version()})"


def parse_options(argv: Sequence[str]) -> Options:
    values = build_flagset().parse_command_line(argv, version_string())
    options = Options.from_values(values)
    try:
        options.validate()
    except ValueError as exc:
        sys.stderr.write(f"{options.log_prefix}FATAL: {exc}\n")
        raise SystemExit(1) from None
    return options


async def _run(options: Options, store: SecretStore, log: logging.Logger) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, options, store)
            async for signum in signals:
                if signum != signal.SIGHUP:
                    break
                try:
                    secrets = store.reload()
                except SecretsError as exc:
                    log.error("reload failed, keeping %d secrets - %s", len(store.current), exc)
                else:
                    log.info("reloaded %s: %d secrets", store.path, len(secrets))
            nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(sys.argv[1:] if argv is None else argv)
    log = setup_logging("nsq_auth", options.log_prefix, options.log_level)
    log.info(version_string())
    try:
        store = SecretStore.open(options.secrets_file)
    except SecretsError as exc:
        log.critical("%s", exc)
        raise SystemExit(1) from None
    log.info("loaded %s: %d secrets", store.path, len(store.current))
    try:
        trio.run(_run, options, store, log)
    except* OSError as group:  # e.g. the port is taken
        log.critical("failed to instantiate nsq_auth - %s", _first(group))
        raise SystemExit(1) from None
    log.info("exiting")


def _first(group: BaseExceptionGroup[OSError]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


if __name__ == "__main__":
    main()
