"""Protocol V2 commands: what nsqd does with each command of one client.

``ProtocolV2`` sits between the byte pump (``tcp.py``) and the broker: ``header`` is the
``CommandReader`` hook that decides, from a command's line alone, whether a body follows and
how big it may be (refusing bad params before reading a body, as nsqd does); ``handle`` runs
a whole command. Errors are raised as ``ProtocolError`` with NSQ's exact code and text (the
broker's and channels' errors, ``nsqd.errors``, are translated here and only here); the caller
writes the error frame and, for fatal ones, closes the connection.

Commands that answer nothing on success (RDY, FIN, REQ, TOUCH, NOP) really answer nothing:
clients match responses to requests in order.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING

import attrs
from nsq_common import (
    CLOSE_WAIT_FRAME,
    OK_FRAME,
    BodySpec,
    Command,
    ErrorCode,
    MpubPrefixCheck,
    ProtocolError,
    decode_identify,
    decode_mpub_body,
    encode_response,
    go_json,
    go_quote,
    is_valid_name,
    negotiate,
    response_json,
)

from . import auth
from .errors import (
    AuthError,
    Exiting,
    InFlightError,
    NsqdError,
    StoreFailed,
    SubscribeRefused,
)
from .message import QueuedMessage
from .state import ANSWER_STATES, CLOSING, after, invalid

if TYPE_CHECKING:
    from .broker import Broker
    from .client import Client

E = ErrorCode
log = logging.getLogger("nsqd")


@attrs.frozen
class Upgrades:
    """What IDENTIFY negotiated: the connection switches layers right after its reply."""

    tls: bool
    snappy: bool
    deflate: bool
    deflate_level: int


def _base10(text: bytes) -> int | None:
    """nsqd's ByteToBase10: ASCII digits only (empty is 0); None for anything else."""
    if text and not text.isdigit():
        return None
    return int(text) if text else 0


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _failed(code: ErrorCode, what: bytes, exc: NsqdError) -> ProtocolError:
    """The one translation of nsqd's errors to the wire: ``<code> <what> failed <reason>``.

    Only the domain errors listed in ``nsqd.errors`` come here; anything else is a bug and
    goes up to ``tcp.handle_stream``, which logs it with its traceback and closes the
    connection, so no exception text of a bug ever reaches a client.
    """
    return ProtocolError(code, f"{_name(what)} failed {exc}")


class ProtocolV2:
    def __init__(self, broker: Broker, client: Client) -> None:
        self.broker = broker
        self.client = client
        opts = broker.opts
        self._max_msg_size = opts.max_msg_size
        self._max_body_size = opts.max_body_size
        self._max_rdy = opts.max_rdy_count
        self._max_req_ms = int(opts.max_req_timeout * 1000)
        self._pub_spec = BodySpec(self._max_msg_size, E.E_BAD_MESSAGE,
                                  "PUB invalid message body size %d", "PUB message too big %d > %d")
        self._dpub_spec = BodySpec(self._max_msg_size, E.E_BAD_MESSAGE,
                                   "DPUB invalid message body size %d",
                                   "DPUB message too big %d > %d")
        # an MPUB body is checked as it arrives: a message over --max-msg-size is refused
        # as soon as its size is in, not after the rest of the declared body
        self._mpub_spec = BodySpec(self._max_body_size, E.E_BAD_BODY, "MPUB invalid body size %d",
                                   "MPUB body too big %d > %d",
                                   partial(MpubPrefixCheck, self._max_msg_size,
                                           self._max_body_size))
        self._identify_spec = BodySpec(self._max_body_size, E.E_BAD_BODY,
                                       "IDENTIFY invalid body size %d",
                                       "IDENTIFY body too big %d > %d")
        self._auth_spec = BodySpec(self._max_body_size, E.E_BAD_BODY, "AUTH invalid body size %d",
                                   "AUTH body too big %d > %d")
        self.sync_handlers = {b"FIN": self.fin, b"RDY": self.rdy, b"REQ": self.req,
                              b"TOUCH": self.touch, b"NOP": self.nop, b"CLS": self.cls}
        self._tls_required = broker.tls_required != "false"
        self.upgrades: Upgrades | None = None  # what IDENTIFY negotiated: ``take_upgrades``
        self._batch_topic: bytes | None = None
        self._batch_bodies: list[bytes] = []
        self._batch_replies = 0
        self._batch_first = b""
        self._async = {b"PUB": self.pub, b"MPUB": self.mpub, b"DPUB": self.dpub,
                       b"IDENTIFY": self.identify, b"AUTH": self.auth, b"SUB": self.sub}
        self._auth_addresses: list[str] = list(opts.auth_http_addresses)

    # -- before the body -----------------------------------------------------------------
    def header(self, name: bytes, params: list[bytes]) -> BodySpec | None:
        if self._tls_required and not self.client.tls and name != b"IDENTIFY":
            raise ProtocolError(E.E_INVALID,
                                f"cannot {_name(name)} in current state (TLS required)")
        if name == b"PUB":
            self._check_topic_param(b"PUB", params, 1)
            return self._pub_spec
        if name == b"MPUB":
            self._check_topic_param(b"MPUB", params, 1)
            # nsqd checks MPUB's authorization, then makes the topic, before reading its body
            # (a refused body still leaves the topic); expired authorizations are fetched
            # again before the command runs, and the topic is made then
            if self.authorized_now(b"MPUB", params[0], b"") and not self.broker.exiting:
                self.broker.topic_before_body(_name(params[0]))
            return self._mpub_spec
        if name == b"DPUB":
            self._check_topic_param(b"DPUB", params, 2)
            self._defer_ms(params[1])
            return self._dpub_spec
        if name == b"IDENTIFY":
            after(self.client.state, name)
            return self._identify_spec
        if name == b"AUTH":
            after(self.client.state, name)
            if params:
                raise ProtocolError(E.E_INVALID, "AUTH invalid number of parameters")
            return self._auth_spec
        return None

    def _check_topic_param(self, cmd: bytes, params: list[bytes], needed: int) -> None:
        if len(params) < needed:
            raise ProtocolError(E.E_INVALID, f"{cmd.decode()} insufficient number of parameters")
        if not is_valid_name(params[0]):
            text = f"{cmd.decode()} topic name {go_quote(params[0])} is not valid"
            if cmd == b"MPUB":  # nsqd repeats the code inside the MPUB text
                text = "E_BAD_TOPIC " + text
            raise ProtocolError(E.E_BAD_TOPIC, text)

    def _defer_ms(self, raw: bytes) -> int:
        ms = _base10(raw)
        if ms is None:
            raise ProtocolError(E.E_INVALID, f"DPUB could not parse timeout {_name(raw)}")
        if ms > self._max_req_ms:
            raise ProtocolError(E.E_INVALID, f"DPUB timeout {ms} out of range 0-{self._max_req_ms}")
        return ms

    # -- dispatch --------------------------------------------------------------------------
    def take_upgrades(self) -> Upgrades | None:
        """The stream layers IDENTIFY negotiated, once (the connection puts them on)."""
        upgrades, self.upgrades = self.upgrades, None
        return upgrades

    def is_async(self, name: bytes) -> bool:
        return name in self._async

    def handle_sync(self, cmd: Command) -> None:
        handler = self.sync_handlers.get(cmd.name)
        if handler is None:
            raise ProtocolError(E.E_INVALID, f"invalid command {_name(cmd.name)}")
        handler(cmd.params)

    async def handle_async(self, cmd: Command) -> None:
        await self._async[cmd.name](cmd)

    # -- publishing --------------------------------------------------------------------------
    async def _publish(self, cmd: bytes, topic_raw: bytes, msgs: list[QueuedMessage],
                       failed: ErrorCode) -> None:
        topic = _name(topic_raw)
        try:
            await self.broker.publish(topic, msgs)
        except (Exiting, StoreFailed) as exc:
            raise _failed(failed, cmd, exc) from exc
        self.client.count_published(topic, len(msgs))
        self.client.send_frame(OK_FRAME)

    async def pub(self, cmd: Command) -> None:
        await self._authorize(b"PUB", cmd.params[0], b"")
        self.batch(cmd)
        await self.flush_batch()

    async def mpub(self, cmd: Command) -> None:
        await self._authorize(b"MPUB", cmd.params[0], b"")
        self.batch(cmd)
        await self.flush_batch()

    # Consecutive PUB and MPUB commands to one topic that arrive in one read are stored as
    # one batch and answered with one OK each, in order: a pipelining publisher then costs
    # one disk write per read rather than one per command. Nothing is answered before the
    # whole batch is stored, so an OK still means "stored".
    @property
    def batch_pending(self) -> bool:
        return self._batch_topic is not None

    def batchable(self, cmd: Command) -> bool:
        """Whether a PUB/MPUB can join the pending batch (same topic, or no batch)."""
        return self._batch_topic is None or cmd.params[0] == self._batch_topic

    def batch(self, cmd: Command) -> None:
        """Add a PUB or MPUB to the pending batch (its body is checked now).

        Raises:
            ProtocolError: a malformed MPUB body.
        """
        assert cmd.body is not None
        if cmd.name == b"MPUB":
            bodies = decode_mpub_body(cmd.body, self._max_msg_size, self._max_body_size)
            self._batch_bodies.extend(bodies)
        else:
            self._batch_bodies.append(cmd.body)
        if self._batch_topic is None:
            self._batch_topic = cmd.params[0]
            self._batch_first = cmd.name
        self._batch_replies += 1

    async def flush_batch(self) -> None:
        """Store the pending batch and answer it.

        Raises:
            ProtocolError: E_PUB_FAILED / E_MPUB_FAILED (for the batch's first command).
        """
        topic_raw = self._batch_topic
        if topic_raw is None:
            return
        bodies, replies, first = self._batch_bodies, self._batch_replies, self._batch_first
        self._batch_topic, self._batch_bodies, self._batch_replies = None, [], 0
        topic = _name(topic_raw)
        try:
            await self.broker.publish(topic, self.broker.new_records(bodies))
        except (Exiting, StoreFailed) as exc:
            code = E.E_MPUB_FAILED if first == b"MPUB" else E.E_PUB_FAILED
            raise _failed(code, first, exc) from exc
        self.client.count_published(topic, len(bodies))
        self.client.send_frame(OK_FRAME * replies)

    async def dpub(self, cmd: Command) -> None:
        assert cmd.body is not None
        await self._authorize(b"DPUB", cmd.params[0], b"")
        defer = self._defer_ms(cmd.params[1]) / 1000
        await self._publish(b"DPUB", cmd.params[0], self.broker.new_messages([cmd.body], defer),
                            E.E_DPUB_FAILED)

    # -- connection set-up -------------------------------------------------------------------
    async def identify(self, cmd: Command) -> None:
        assert cmd.body is not None
        client = self.client
        req = decode_identify(cmd.body)
        features = self.broker.features
        neg = negotiate(req, features)
        client.identified_as(req.client_id, req.hostname, req.user_agent,
                             heartbeat_interval=neg.heartbeat_interval / 1000,
                             output_buffer_size=neg.output_buffer_size,
                             output_buffer_timeout=neg.output_buffer_timeout / 1000,
                             sample_rate=neg.sample_rate, msg_timeout=neg.msg_timeout / 1000)
        if not req.feature_negotiation:
            client.send_frame(OK_FRAME)
            return
        client.send_frame(encode_response(response_json(neg, features)))
        # The connection upgrades after this reply, in nsqd's order: TLS, snappy, deflate,
        # each answered with OK through the new layer (tcp.py does the I/O).
        self.upgrades = Upgrades(neg.tls_v1, neg.snappy, neg.deflate, neg.deflate_level)

    async def auth(self, cmd: Command) -> None:
        assert cmd.body is not None
        client = self.client
        if client.auth is not None and client.auth.authorizations:
            raise ProtocolError(E.E_INVALID, "AUTH already set")
        if not self._auth_addresses:
            raise ProtocolError(E.E_AUTH_DISABLED, "AUTH disabled")
        client.authenticate(cmd.body.decode("utf-8", "surrogateescape"))
        await self._query_auth()
        assert client.auth is not None
        if not client.auth.authorizations:
            raise ProtocolError(E.E_UNAUTHORIZED, "AUTH no authorizations found")
        client.send_frame(encode_response(go_json({
            "identity": client.auth.identity,
            "identity_url": client.auth.identity_url,
            "permission_count": len(client.auth.authorizations),
        })))

    async def _query_auth(self) -> None:
        client = self.client
        try:
            client.authorized(await auth.query(
                self.broker.auth_http, self._auth_addresses, secret=client.auth_secret,
                remote_ip=client.remote_address.rsplit(":", 1)[0], tls=client.tls,
                common_name=client.tls_common_name, now=self.broker.now()))
        except AuthError as exc:
            log.warning("client %s: %s", client.remote_address, exc)
            raise ProtocolError(E.E_AUTH_FAILED, "AUTH failed") from None

    def authorized_now(self, cmd: bytes, topic: bytes, channel: bytes) -> bool:
        """Check a command against the cached authorizations, without waiting.

        Returns False when the authorizations have expired and must be fetched again first.

        Raises:
            ProtocolError: E_AUTH_FIRST (never authenticated), E_UNAUTHORIZED (not allowed).
        """
        if not self._auth_addresses:
            return True
        state = self.client.auth
        if state is None:
            raise ProtocolError(E.E_AUTH_FIRST, f"AUTH required before {cmd.decode()}")
        if state.expires <= self.broker.now():
            return False
        if not state.allows(_name(topic), _name(channel)):
            raise ProtocolError(E.E_UNAUTHORIZED, f"AUTH failed for {cmd.decode()} on "
                                f"{go_quote(topic)} {go_quote(channel)}")
        return True

    async def _authorize(self, cmd: bytes, topic: bytes, channel: bytes) -> None:
        if not self.authorized_now(cmd, topic, channel):
            await self._query_auth()  # expired: ask again, as nsqd does
            self.authorized_now(cmd, topic, channel)

    # -- consuming ---------------------------------------------------------------------------
    async def sub(self, cmd: Command) -> None:
        params = cmd.params
        client = self.client
        subscribed = after(client.state, b"SUB")
        if client.heartbeat_interval <= 0:
            raise ProtocolError(E.E_INVALID, "cannot SUB with heartbeats disabled")
        if len(params) < 2:
            raise ProtocolError(E.E_INVALID, "SUB insufficient number of parameters")
        if not is_valid_name(params[0]):
            raise ProtocolError(E.E_BAD_TOPIC, f"SUB topic name {go_quote(params[0])} is not valid")
        if not is_valid_name(params[1]):
            raise ProtocolError(E.E_BAD_CHANNEL,
                                f"SUB channel name {go_quote(params[1])} is not valid")
        await self._authorize(b"SUB", params[0], params[1])
        try:
            channel = self.broker.subscribe(client, _name(params[0]), _name(params[1]))
        except (Exiting, SubscribeRefused) as exc:
            raise _failed(E.E_SUB_FAILED, b"SUB", exc) from None
        await self.broker.keep_channel(channel)  # a new channel on disk before the OK
        client.move_to(subscribed)
        client.send_frame(OK_FRAME)

    def rdy(self, params: list[bytes]) -> None:
        client = self.client
        if client.state is CLOSING:  # allowed, and ignored: a closing consumer takes no more
            return
        if client.state not in ANSWER_STATES:
            raise invalid(b"RDY")
        count = 1
        if params:
            parsed = _base10(params[0])
            if parsed is None:
                raise ProtocolError(E.E_INVALID, f"RDY could not parse count {_name(params[0])}")
            count = parsed
        if count > self._max_rdy:
            raise ProtocolError(E.E_INVALID, f"RDY count {count} out of range 0-{self._max_rdy}")
        client.set_rdy(count)
        if client.channel is not None:
            self.broker.mark_dirty(client.channel)

    def _message_id(self, cmd: bytes, params: list[bytes], needed: int) -> bytes:
        # ANSWER_STATES is ALLOWED[cmd] for FIN, REQ and TOUCH, read without a dict lookup
        if self.client.state not in ANSWER_STATES:
            raise invalid(cmd)
        if len(params) < needed:
            raise ProtocolError(E.E_INVALID, f"{cmd.decode()} insufficient number of params")
        message_id = params[0]
        if len(message_id) != 16:
            raise ProtocolError(E.E_INVALID, "invalid message ID")
        return message_id

    def fin(self, params: list[bytes]) -> None:
        message_id = self._message_id(b"FIN", params, 1)
        channel = self.client.channel
        assert channel is not None
        try:
            channel.finish(self.client, message_id)
        except InFlightError as exc:
            raise _failed(E.E_FIN_FAILED, b"FIN " + message_id, exc) from None

    @property
    def fins_in_bulk(self) -> bool:
        """FINs may go through ``fin_many`` now: the state accepts them and no TLS is missing
        (what ``header`` and ``_message_id`` check per FIN; the ids are 16 bytes already)."""
        client = self.client
        return client.state in ANSWER_STATES and (client.tls or not self._tls_required)

    def fin_many(self, message_ids: list[bytes]) -> list[ProtocolError]:
        """Every FIN of a read (``CommandReader.next_fins``) while ``fins_in_bulk``; the
        E_FIN_FAILED errors to answer, in order (none of them fatal)."""
        channel = self.client.channel
        assert channel is not None
        return [_failed(E.E_FIN_FAILED, b"FIN " + message_id, exc)
                for message_id, exc in channel.finish_many(self.client, message_ids)]

    def req(self, params: list[bytes]) -> None:
        message_id = self._message_id(b"REQ", params, 2)
        ms = _base10(params[1])
        if ms is None:
            raise ProtocolError(E.E_INVALID, f"REQ could not parse timeout {_name(params[1])}")
        ms = min(ms, self._max_req_ms)  # nsqd clamps silently
        channel = self.client.channel
        assert channel is not None
        try:
            channel.requeue(self.client, message_id, ms / 1000, self.broker.now())
        except InFlightError as exc:
            raise _failed(E.E_REQ_FAILED, b"REQ " + message_id, exc) from None

    def touch(self, params: list[bytes]) -> None:
        message_id = self._message_id(b"TOUCH", params, 1)
        channel = self.client.channel
        assert channel is not None
        try:
            channel.touch(self.client, message_id, self.broker.now())
        except InFlightError as exc:
            raise _failed(E.E_TOUCH_FAILED, b"TOUCH " + message_id, exc) from None

    def cls(self, params: list[bytes]) -> None:
        client = self.client
        closing = after(client.state, b"CLS")
        client.close_wait(closing)
        client.send_frame(CLOSE_WAIT_FRAME)

    def nop(self, params: list[bytes]) -> None:
        pass
