"""The nsq_auth command: flags -> Options -> the secrets file -> serve; SIGHUP reloads."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from nsq_serving import exit_on, run_daemon, start_logging, version_string

from .options import Options, build_flagset
from .secrets_file import SecretsError, SecretStore
from .server import serve

NAME = "nsq_auth"


def parse_options(argv: Sequence[str]) -> Options:
    options = Options.from_values(build_flagset().parse_command_line(argv, version_string(NAME)))
    with exit_on(ValueError, prefix=options.log_prefix):
        options.validate()
    return options


def reload(store: SecretStore, log: logging.Logger) -> None:
    """SIGHUP: read the secrets file again; a file that does not load leaves the last one."""
    try:
        secrets = store.reload()
    except SecretsError as exc:
        log.error("reload failed, keeping %d secrets - %s", len(store.current), exc)
    else:
        log.info("reloaded %s: %d secrets", store.path, len(secrets))


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_options(sys.argv[1:] if argv is None else argv)
    log = start_logging(NAME, options.log_prefix, options.log_level)
    try:
        store = SecretStore.open(options.secrets_file)
    except SecretsError as exc:
        log.critical("%s", exc)
        raise SystemExit(1) from None
    log.info("loaded %s: %d secrets", store.path, len(store.current))
    run_daemon(NAME, log, serve, options, store, on_hangup=lambda: reload(store, log))


if __name__ == "__main__":
    main()
