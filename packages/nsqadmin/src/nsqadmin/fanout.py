"""Asking every daemon at once: one Trio task per daemon, the failures kept beside the answers.

A daemon that fails becomes an ``UpstreamError`` in the list of errors and the rest still
count; ``check`` raises ``ClusterError`` only when every daemon asked failed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import trio

from .upstream import ClusterError, UpstreamError

A = TypeVar("A")
R = TypeVar("R")


async def fan_out(items: Iterable[A], call: Callable[[A], Awaitable[R]]
                  ) -> tuple[list[tuple[A, R]], list[UpstreamError]]:
    """Run ``call`` on every item concurrently; results keep the items' order."""
    items = list(items)
    slots: list[tuple[A, R] | None] = [None] * len(items)
    errors: list[UpstreamError] = []

    async def one(index: int, item: A) -> None:
        try:
            slots[index] = (item, await call(item))
        except UpstreamError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for index, item in enumerate(items):
            nursery.start_soon(one, index, item)
    return [s for s in slots if s is not None], errors


def check(kind: str, asked: int, errors: list[UpstreamError]) -> None:
    """Raise ``ClusterError`` when all ``asked`` daemons failed (asking none is no failure)."""
    if asked and len(errors) == asked:
        raise ClusterError(kind, errors)


def first_error(call: Callable[[A], Awaitable[R]]) -> Callable[[A], Awaitable[R]]:
    """Unwrap a nursery's ExceptionGroup so one daemon's UpstreamError reads as one error."""

    async def wrapped(item: A) -> R:
        try:
            return await call(item)
        except BaseExceptionGroup as group:
            first = _leaf(group)
            if isinstance(first, UpstreamError):
                raise first from None
            raise

    return wrapped


def _leaf(group: BaseExceptionGroup[Any]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc

