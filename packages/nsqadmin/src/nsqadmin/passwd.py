"""``python -m nsqadmin.passwd USER``: a line for ``--admin-basic-auth-file``.

Asks for the password twice (or reads one line from stdin with ``--stdin``) and prints
``USER:pbkdf2_sha256$...``; with ``--file PATH`` it adds the user to that file instead, or
replaces the user's line if there is one. nsqadmin reads the file when it starts.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Sequence

from nsq_common import write_atomically

from .auth import DEFAULT_ITERATIONS, hash_password


def _password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass("Password: ")
    if first != getpass.getpass("Again: "):
        raise SystemExit("passwords do not match")
    return first


def _write(path: str, user: str, line: str) -> None:
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        lines = []
    kept = [old for old in lines if old.partition(":")[0].strip() != user]
    kept.append(line)
    write_atomically(path, ("\n".join(kept) + "\n").encode(), mode=0o600)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nsqadmin.passwd",
                                     description="Make a user:hash line for nsqadmin's "
                                                 "--admin-basic-auth-file.")
    parser.add_argument("user")
    parser.add_argument("--file", help="add (or replace) the user in this file")
    parser.add_argument("--stdin", action="store_true", help="read the password from stdin")
    parser.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                        help=f"PBKDF2 iterations (default {DEFAULT_ITERATIONS})")
    args = parser.parse_args(argv)
    if not args.user or ":" in args.user or args.user.strip() != args.user:
        parser.error("the user name must not be empty, contain ':' or spaces at either end")
    if args.iterations < 1:
        parser.error("--iterations must be positive")
    password = _password(args.stdin)
    if not password:
        raise SystemExit("empty password")
    line = f"{args.user}:{hash_password(password, iterations=args.iterations)}"
    if args.file:
        _write(args.file, args.user, line)
    else:
        print(line)


if __name__ == "__main__":
    main()
