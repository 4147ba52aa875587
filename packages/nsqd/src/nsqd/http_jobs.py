"""nsqd's job features over HTTP (beyond NSQ): messages consumed and answered by HTTP
(``/channel/consume``, ``/message/fin`` ...), a channel's dead letters, its job settings.

The channel does the work (``channel_pull``, ``channel_dead``); these routes read the request
(``http_args``) and answer in NSQ's V1 JSON, as ``http_api``'s routes do.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import trio
from nsq_common import parse_query
from nsq_serving import (
    V1_EMPTY,
    client_gone,
    declared_length,
    v1_json,
    v1_query,
    while_connected,
)
from starlette.requests import Request
from starlette.responses import Response

from .errors import LogError
from .http_args import (
    ApiError,
    decimal_seconds,
    existing_channel,
    flag,
    max_attempts,
    message_count,
    read_limited,
    still_existing,
)

if TYPE_CHECKING:
    from .broker import Broker
    from .channel import Channel
    from .message import QueuedMessage

log = logging.getLogger("nsqd")


class JobApi:
    """The routes' handlers, on one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.opts = broker.opts

    async def channel_update(self, request: Request) -> Response:
        """Settings of an existing channel (beyond NSQ): ``max_attempts``,
        ``dead_letter_expired``."""
        q = v1_query(request)
        channel = existing_channel(self.broker, q)[1]
        attempts = max_attempts(q)
        dead_expired = flag(q, "dead_letter_expired")
        if attempts is None and dead_expired is None:
            raise ApiError(400, "MISSING_ARG_MAX_ATTEMPTS")
        configure_channel(self.broker, channel, attempts, dead_expired)
        return V1_EMPTY

    # -- dead letters ------------------------------------------------------------------------
    async def deadletter_peek(self, request: Request) -> Response:
        q = v1_query(request)
        channel = existing_channel(self.broker, q)[1]
        n = message_count(q, self.opts.max_rdy_count)
        with self._at_work_on(channel, "peek"):
            msgs = await channel.peek_dead(n)
        return v1_json({"messages": [message_json(m) for m in msgs]})

    async def deadletter_respawn(self, request: Request) -> Response:
        q = v1_query(request)
        channel = existing_channel(self.broker, q)[1]
        n = message_count(q, self.opts.max_rdy_count)
        with self._at_work_on(channel, "respawn"):
            await self.broker.store_dead_letters(channel)
            count = await channel.respawn(n)
        return v1_json({"count": count})

    async def deadletter_empty(self, request: Request) -> Response:
        q = v1_query(request)
        channel = existing_channel(self.broker, q)[1]
        n = message_count(q, self.opts.max_rdy_count) if "n" in q else None
        with self._at_work_on(channel, "emptying dead letters"):
            await self.broker.store_dead_letters(channel)
            count = await (channel.drop_dead(n) if n is not None else channel.empty_dead())
        return v1_json({"count": count})

    async def message_deadletter(self, request: Request) -> Response:
        channel, _, ids = self._pulled(request)
        self._check_ids(ids[:1])
        if not channel.dead_letter_pulled(ids[0]):
            raise ApiError(404, "MESSAGE_NOT_IN_FLIGHT")
        with self._at_work_on(channel, "dead letter"):
            await self.broker.store_dead_letters(channel)
        return V1_EMPTY

    @contextmanager
    def _at_work_on(self, channel: Channel, what: str) -> Iterator[None]:
        """A request's work on ``channel``'s dead letters: a deletion that overtakes it
        (closing the queues under it) makes it a 404 (``still_existing``), never a failure;
        a disk queue's failure otherwise is a 500, logged."""
        try:
            yield
        except LogError as exc:
            still_existing(self.broker, channel)
            log.error("%s on %s:%s failed: %s", what, channel.topic_name, channel.name, exc)
            raise ApiError(500, "INTERNAL_ERROR") from exc
        still_existing(self.broker, channel)

    # -- HTTP pulling: consume and answer over HTTP -----------------------------------------
    async def channel_consume(self, request: Request) -> Response:
        """Up to n waiting messages (long-polling up to ``wait`` seconds), each in flight for
        ``ttr`` seconds until ``/message/fin``, ``/message/req`` or its timeout."""
        q = v1_query(request)
        channel = existing_channel(self.broker, q)[1]
        o = self.opts
        n = message_count(q, o.max_rdy_count)
        wait = decimal_seconds(q, "wait", 0.0, low=0.0, high=o.max_msg_timeout,
                               error="INVALID_WAIT")
        ttr = decimal_seconds(q, "ttr", o.msg_timeout, low=0.001, high=o.max_msg_timeout,
                              error="INVALID_TTR")
        # a client that has gone takes nothing: asked before the first pull, then the wait
        # ends when it goes, and it is asked once more before each pull after a wait
        await channel.fetch()
        if client_gone(request):
            return v1_json({"messages": []})
        msgs = channel.pull(n, ttr, self.broker.now())
        if not msgs and wait > 0:
            async with while_connected(request):
                with trio.move_on_after(wait):
                    while not msgs and not channel.deleted:
                        await channel.wait_pullable()
                        if client_gone(request):
                            break
                        msgs = channel.pull(n, ttr, self.broker.now())
        return v1_json({"messages": [message_json(m) for m in msgs]})

    async def channel_peek(self, request: Request) -> Response:
        """The next n messages the channel would deliver, left where they are."""
        q = v1_query(request)
        channel = existing_channel(self.broker, q)[1]
        n = message_count(q, self.opts.max_rdy_count)
        await channel.fetch()  # what a consume would read next, from disk if need be
        msgs = channel.peek(n, self.broker.now())
        return v1_json({"messages": [message_json(m) for m in msgs]})

    def _pulled(self, request: Request) -> tuple[Channel, dict[str, str], list[bytes]]:
        """The channel and the message ids of a /message/* request (``id`` in the query, or
        one per line of the body for /message/fin's list)."""
        q = v1_query(request)  # refuses a query Go would refuse, so parse_query takes this one
        channel = existing_channel(self.broker, q)[1]
        raw: bytes = request.scope.get("query_string", b"")
        if 0x25 in raw or 0x2B in raw:  # "%" or "+" (an int's `in` is the fast one on bytes)
            ids = [i.encode("utf-8", "surrogateescape") for i in parse_query(raw).get("id", ())]
        else:  # nothing to unescape: the ids are the query's bytes
            ids = [value for key, _, value in (pair.partition(b"=") for pair in raw.split(b"&"))
                   if key == b"id"]
        return channel, q, ids

    @staticmethod
    def _check_ids(ids: list[bytes]) -> None:
        if not ids:
            raise ApiError(400, "MISSING_ARG_ID")
        if any(len(i) != 16 for i in ids):
            raise ApiError(400, "INVALID_ID")

    async def message_fin(self, request: Request) -> Response:
        channel, _, ids = self._pulled(request)
        if declared_length(request) != 0:  # ids in the body too
            body = await read_limited(request, self.opts.max_body_size, "BODY_TOO_BIG")
            ids += [line.strip() for line in body.split(b"\n") if line.strip()]
        self._check_ids(ids)
        finished = [channel.finish_pulled(i) for i in ids]
        if not all(finished):
            raise ApiError(404, "MESSAGE_NOT_IN_FLIGHT")
        return V1_EMPTY

    async def message_req(self, request: Request) -> Response:
        channel, q, ids = self._pulled(request)
        self._check_ids(ids[:1])
        delay = decimal_seconds(q, "delay", 0.0, low=0.0, high=self.opts.max_req_timeout,
                                error="INVALID_DELAY")
        if not channel.requeue_pulled(ids[0], delay, self.broker.now()):
            raise ApiError(404, "MESSAGE_NOT_IN_FLIGHT")
        return V1_EMPTY

    async def message_touch(self, request: Request) -> Response:
        channel, _, ids = self._pulled(request)
        self._check_ids(ids[:1])
        if not channel.touch_pulled(ids[0], self.broker.now()):
            raise ApiError(404, "MESSAGE_NOT_IN_FLIGHT")
        return V1_EMPTY


def configure_channel(broker: Broker, channel: Channel, attempts: int | None,
                      dead_expired: bool | None) -> None:
    """A channel's job settings (beyond NSQ), as /channel/create and /channel/update set
    them: saved in nsqd.dat, and applied at the channel's next pump."""
    if channel.configure(max_attempts=attempts, dead_letter_expired=dead_expired):
        broker.metadata_changed()
        broker.mark_dirty(channel)  # messages over a new limit go at the next pump


def message_json(msg: QueuedMessage) -> dict[str, Any]:
    """A message as the HTTP API shows it: its body in base64, and as text when it is UTF-8."""
    out: dict[str, Any] = {"id": msg.id.decode("latin-1"), "attempts": msg.attempts,
                           "timestamp": msg.timestamp,
                           "body": base64.b64encode(msg.body).decode("ascii")}
    try:
        out["text"] = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return out
