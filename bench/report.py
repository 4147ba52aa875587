"""What the benchmark modules share to take their options and print their tables: a
positive number, a directory of NSQ's daemons, a cell of a figure that may be missing, and a
table whose columns are as wide as their widest cell."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def positive(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: ``convert``'s value of the text, refused unless above zero."""
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text}")
        return value
    return parse


def daemons_dir(text: str) -> str:
    """An argparse type: a directory holding an ``nsqd`` and an ``nsqlookupd``."""
    if not all(Path(text, name).is_file() for name in ("nsqd", "nsqlookupd")):
        raise argparse.ArgumentTypeError(f"no nsqd and nsqlookupd in {text}")
    return text


def cell(value: float | None, spec: str) -> str:
    """``value`` formatted by ``spec``; "-" for a figure not measured."""
    return "-" if value is None else format(value, spec)


def render(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]], right: set[int]) -> None:
    """Print ``rows`` under ``headers`` and a rule, the columns in ``right`` aligned right."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    print(line(headers))
    print(line(tuple("-" * w for w in widths)))
    for row in rows:
        print(line(row))
