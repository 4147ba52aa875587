"""One HTTP/1.1 connection: read, parse, answer, in the connection's own task.

There is no task, channel, lock or cancel scope per request. Requests are parsed by
httptools (llhttp, Node's parser) into :class:`RequestState` objects as their bytes arrive; each
is answered in turn, by calling its route's endpoint directly (see ``_direct``) or the ASGI
app, whose ``receive`` reads the body from the socket only when the app asks for it. So an
app can refuse a body by its declared length before a byte of it is read, and
``Expect: 100-continue`` is answered only when the app reads the body.

After an answer the connection stays open unless the client or the app asked otherwise, the
request was HTTP/1.0, or the app answered without reading the whole body; then the server
stops sending and drains what the client still sends for a moment before closing, so that
the client reads the answer instead of a reset.

Against slow and malformed clients (each as Go's net/http answers where it has an answer):

- time: a request's head must arrive within ``request_timeout`` of its first byte, and its body
  within ``request_timeout`` of the app's first read; else 408 and the connection closes. The
  server's sweeper checks the deadlines (``reading_until``); nothing is timed per read, so a
  client trickling one byte at a time gains nothing. A handler's own work is never timed.
- size: a head over 1 MiB or with more than ``MAX_HEADERS`` header lines is a 431;
- framing: two ``Host`` headers are a 400; a ``Transfer-Encoding`` other than ``chunked`` is
  Go's 501 ``Unsupported transfer encoding``; a body that cannot be parsed reaches the app as
  ``http.disconnect`` (its answer is the app's: ``read_body``), then the connection closes;
- the client going away: once a request's body is read, ``receive`` waits for the peer to
  close and answers ``http.disconnect`` (as uvicorn does), keeping any pipelined bytes for the
  next request; ``client_gone`` asks the socket without waiting.
"""

from __future__ import annotations

import logging
import select
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import httptools
import trio
from starlette.requests import Request
from starlette.responses import Response

from ._direct import Endpoints, answer_error
from ._exchange import RequestState, ResponseState, has_close, request_target
from ._heads import CONTINUE, DateHeader, plain_answer, status_line
from ._transport import Transport

log = logging.getLogger("nsq_serving")

#: Largest request line plus headers; more is answered with 431 (Go's net/http allows 1 MiB).
MAX_HEAD_BYTES = 1 << 20
#: Most header lines in a request; more is answered with 431 (Apache's LimitRequestFields).
MAX_HEADERS = 100
#: Seconds for a request's head from its first byte, and for its body from the app's first
#: read (Go's ReadHeaderTimeout and ReadTimeout, which NSQ leaves unset).
REQUEST_TIMEOUT = 60.0
#: How long a closing connection still reads (and drops) what the client sends.
LINGER_SECONDS = 2.0
LINGER_BYTES = 1 << 20

_BAD_REQUEST = plain_answer(400, b"400 Bad Request")
_NO_HOST = plain_answer(400, b"400 Bad Request: missing required Host header")
_HEAD_TOO_LARGE = plain_answer(431, b"431 Request Header Fields Too Large")
_UNSUPPORTED_TE = plain_answer(501, b"Unsupported transfer encoding")
_TIMED_OUT = plain_answer(408, b"408 Request Timeout")
_HUNG_UP = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)
_INTERNAL_ERROR = plain_answer(500, b"Internal Server Error")
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_DATE = DateHeader()
#: Where a Starlette ``Response`` keeps its head once written (without ``date``): one made
#: once and answered many times is not formatted again (so it must not change once used).
_HEAD = "_nsq_serving_head"
_METHODS = {name.encode(): name for name in ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH",
                                             "OPTIONS")}


class Connection:
    """The HTTP/1.1 protocol over one byte stream (plain TCP or TLS)."""

    def __init__(self, transport: Transport, app: Any, endpoints: Endpoints, *,
                 scheme: str, server: tuple[str, int] | None, client: tuple[str, int] | None,
                 keep_alive_timeout: float = 75.0, request_timeout: float = REQUEST_TIMEOUT
                 ) -> None:
        self.transport = transport
        self.keep_alive_timeout = keep_alive_timeout
        self.request_timeout = request_timeout
        # Set while waiting for the client's bytes: the time by which they must come. The
        # server's sweeper calls ``expire`` past it (no timer per request or per read).
        self.reading_until: float | None = None
        self.idle_since = trio.current_time()  # since the last answer (or the connection)
        self.in_request = False  # the bytes awaited are a request's (a 408 if they are late)
        self.timed_out = False
        self.idle = trio.CancelScope()
        self.app = app
        self.endpoints = endpoints
        self.scheme = scheme
        self.server = server
        self.client = client
        self.parser = httptools.HttpRequestParser(self)
        self.requests: deque[RequestState] = deque()  # parsed, not yet answered; [0] is current
        self.parsing = RequestState(self, 0.0)
        self.broken = b""  # the answer to a request that could not be parsed
        self.response = ResponseState()
        self.out: list[bytes] = []  # answers not yet written (pipelined requests)

    # -- httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        self.parsing = RequestState(self, trio.current_time())
        self.requests.append(self.parsing)

    def on_url(self, url: bytes) -> None:
        self.parsing.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        request = self.parsing
        if len(request.headers) >= MAX_HEADERS:
            request.refusal = request.refusal or _HEAD_TOO_LARGE
            return
        name = name.lower()
        request.headers.append((name, value))
        if name == b"host":
            if request.has_host:  # Go's net/http: "too many Host headers"
                request.refusal = request.refusal or _BAD_REQUEST
            request.has_host = True
        elif name == b"expect" and value.lower() == b"100-continue":
            request.expect_continue = True
        elif name == b"transfer-encoding":
            # Go's net/http knows one coding (a second header is a 400, another coding a 501)
            if request.has_te:
                request.refusal = request.refusal or _BAD_REQUEST
            elif value.strip().lower() != b"chunked":
                request.refusal = request.refusal or _UNSUPPORTED_TE
            request.has_te = True

    def on_headers_complete(self) -> None:
        request = self.parsing
        method = self.parser.get_method()
        request.method = _METHODS.get(method) or method.decode("ascii", "replace")
        request.http_version = self.parser.get_http_version()
        # HTTP/1.0 keep-alive is not offered (h11 and Go's ``Connection: close`` habits agree)
        request.keep_alive = request.http_version == "1.1" and self.parser.should_keep_alive()
        request.head_done = True

    def on_body(self, body: bytes) -> None:
        self.parsing.body.append(body)

    def on_message_complete(self) -> None:
        self.parsing.complete = True

    # -- the loop ----------------------------------------------------------------------------
    async def serve(self) -> None:
        try:
            with self.idle:
                await self._serve()
            if self.timed_out and self.in_request:
                with trio.CancelScope(shield=True, deadline=trio.current_time() + LINGER_SECONDS):
                    await self._write(_TIMED_OUT)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await self.transport.aclose()

    def expire(self) -> None:
        """The client is late (the server's sweeper saw ``reading_until`` pass): stop, with a
        408 if it was sending a request."""
        self.timed_out = True
        self.idle.cancel()

    def hung_up(self) -> bool:
        """Whether the peer has closed (or reset) the connection, without reading from it."""
        poller = select.poll()
        poller.register(self.transport.fd, select.POLLIN | _HUNG_UP)
        events = poller.poll(0)
        return bool(events and events[0][1] & _HUNG_UP)

    async def _serve(self) -> None:
        while True:
            request = await self._next_request()
            if request is None:
                return
            self.response = ResponseState()
            if not await self._answer(request):
                await self._linger()
                return
            self.requests.popleft()
            self.idle_since = trio.current_time()

    async def _next_request(self) -> RequestState | None:
        """The next request whose head is parsed, reading as needed; None when the connection
        ends (the client closed, went idle too long, or sent what cannot be parsed)."""
        waited = 0  # bytes read while no head is complete: bounds a request's head
        while not (self.requests and self.requests[0].head_done):
            if self.broken:
                await self._write(self.broken)
                await self._linger()
                return None
            if self.out and not self.requests:
                await self._flush()
            if self.requests:  # a head has begun: it has its deadline
                self.in_request = True
                self.reading_until = self.requests[0].started + self.request_timeout
            else:
                self.in_request = False
                self.reading_until = self.idle_since + self.keep_alive_timeout
            data = await self.transport.receive()
            self.reading_until = None
            if not data:
                await self._flush()
                return None
            waited += len(data)
            self._feed(data)
            if waited > MAX_HEAD_BYTES:  # whatever was parsed meanwhile is not answered
                self.requests.clear()
                self.broken = _HEAD_TOO_LARGE
        return self.requests[0]

    def _feed(self, data: bytes | bytearray) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.parsing.keep_alive = False  # no protocol switch here: answer, then close
        except httptools.HttpParserError:
            self._refuse(_BAD_REQUEST)

    def _refuse(self, answer: bytes) -> None:
        """The request being parsed is broken: answer it (after those before it) and close."""
        if self.requests and self.requests[-1] is self.parsing and not self.parsing.head_done:
            self.requests.pop()
        elif self.parsing.head_done and not self.parsing.complete:
            self.parsing.disconnected = True  # its app gets http.disconnect for the rest
        self.broken = answer

    async def _answer(self, request: RequestState) -> bool:
        """Answer ``request``; whether the connection can carry another."""
        if request.refusal:
            await self._write(request.refusal)
            return False
        if not request.has_host and request.http_version == "1.1":
            await self._write(_NO_HOST)  # HTTP/1.1 requires it; Go's net/http refuses too
            return False
        path, _, query = request.url.partition(b"?")
        if not path.startswith(b"/"):
            path, query = request_target(request.url)
        text_path = path.decode("latin-1")
        scope: dict[str, Any] = {
            "type": "http", "asgi": _ASGI, "http_version": request.http_version,
            "method": request.method, "scheme": self.scheme,
            "path": unquote(text_path) if "%" in text_path else text_path,
            "raw_path": path, "query_string": query, "root_path": "",
            "headers": request.headers, "client": self.client, "server": self.server,
            "nsq_serving.request": request,
        }
        receive = self._receiver(request)
        methods = self.endpoints.get(scope["path"])
        endpoint = methods.get(request.method) if methods else None
        try:
            if endpoint is not None:
                scope["app"] = self.app
                scope["router"] = getattr(self.app, "router", None)
                scope["path_params"] = {}
                await self._call_endpoint(endpoint, scope, receive, request)
            else:
                await self.app(scope, receive, self._sender(request))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise
        except Exception:
            log.exception("%s %s failed", request.method, scope["path"])
            if not self.response.started:
                await self._write(_INTERNAL_ERROR)
            return False
        if not self.response.started:  # the app returned without answering
            await self._write(_INTERNAL_ERROR)
            return False
        return request.complete and request.keep_alive and not self.response.close

    async def _call_endpoint(self, endpoint: Callable[[Request], Any], scope: dict[str, Any],
                             receive: Callable[[], Any], request: RequestState) -> None:
        try:
            response = await endpoint(Request(scope, receive))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise
        except Exception as exc:
            await answer_error(self.app, scope, receive, self._sender(request), exc)
            return
        if type(response).__call__ is not Response.__call__ or response.background is not None:
            await response(scope, receive, self._sender(request))
            return
        if request.keep_alive and request.complete:  # the head depends on the response only
            head = response.__dict__.get(_HEAD)
            if head is None:
                head = self._start(request, response.status_code, response.raw_headers,
                                   len(response.body))
                if not (self.response.close or self.response.chunked):
                    response.__dict__[_HEAD] = head
            else:
                self.response.started = True
                self.out += (head, _DATE.line(), b"\r\n")
        else:
            self._start(request, response.status_code, response.raw_headers, len(response.body))
        await self._finish(request, b"" if request.method == "HEAD" else response.body)

    # -- the body, for the app ---------------------------------------------------------------
    def _receiver(self, request: RequestState) -> Callable[[], Any]:
        async def receive() -> dict[str, Any]:
            while True:
                if request.disconnected:
                    return {"type": "http.disconnect"}
                if request.body:
                    body = request.body[0] if len(request.body) == 1 else b"".join(request.body)
                    request.body.clear()
                    request.body_done = request.complete
                    return {"type": "http.request", "body": body, "more_body": not request.complete}
                if request.complete:
                    if not request.body_done:
                        request.body_done = True
                        return {"type": "http.request", "body": b"", "more_body": False}
                    await self._watch(request)
                    continue
                if request.expect_continue:
                    request.expect_continue = False
                    if not self.response.started:
                        await self.transport.send_all(CONTINUE)
                if request.body_until is None:
                    request.body_until = trio.current_time() + self.request_timeout
                self.in_request = True
                self.reading_until = request.body_until
                try:
                    data = await self.transport.receive()
                except trio.BrokenResourceError:
                    data = b""
                finally:
                    self.reading_until = None
                if not data:
                    request.disconnected = True
                else:
                    self._feed(data)
        return receive

    async def _watch(self, request: RequestState) -> None:
        """Wait for the client to go away once ``request`` is read whole: what it sends
        meanwhile is parsed for the requests after it, up to the next whole head (the rest
        waits in the socket)."""
        if any(later.head_done for later in self.requests if later is not request):
            await trio.sleep_forever()
        try:
            data = await self.transport.receive()
        except trio.BrokenResourceError:
            data = b""
        if not data:
            request.disconnected = True
        else:
            self._feed(data)

    # -- the answer --------------------------------------------------------------------------
    def _sender(self, request: RequestState) -> Callable[[dict[str, Any]], Any]:
        response = self.response

        async def send(message: dict[str, Any]) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                if response.head is not None:
                    raise RuntimeError("http.response.start sent twice")
                response.head = (message["status"], list(message.get("headers", ())))
            elif kind == "http.response.body":
                if response.head is None:
                    raise RuntimeError("http.response.body before http.response.start")
                body = message.get("body", b"")
                more = message.get("more_body", False)
                if not response.started:
                    status, headers = response.head
                    self._start(request, status, headers, None if more else len(body))
                if request.method == "HEAD":
                    body = b""
                if more:
                    if body:
                        await self._write(b"%x\r\n%s\r\n" % (len(body), body)
                                          if response.chunked else body)
                else:
                    if response.chunked:
                        body = (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body
                                else b"0\r\n\r\n")
                    await self._finish(request, body)
        return send

    def _start(self, request: RequestState, status: int, headers: list[tuple[bytes, bytes]],
               length: int | None) -> bytes:
        """Put the head of the answer in the output: the app's headers, ``date``, and the
        framing (``content-length`` of a whole body, else chunked); the head without
        ``date``."""
        response = self.response
        response.started = True
        head = [status_line(status)]
        has_length = False
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"content-length":
                has_length = True
            elif lowered == b"connection" and has_close(value):
                response.close = True
            elif lowered == b"transfer-encoding":
                response.chunked = True
            head.append(b"%s: %s\r\n" % (name, value))
        if not has_length and not response.chunked and status >= 200 and status not in (204, 304):
            if length is not None:
                head.append(b"content-length: %d\r\n" % length)
            elif request.http_version == "1.1":
                response.chunked = True
                head.append(b"transfer-encoding: chunked\r\n")
            else:
                response.close = True
        if not (request.keep_alive and request.complete) and not response.close:
            response.close = True
            if request.http_version == "1.1":
                head.append(b"connection: close\r\n")
        joined = b"".join(head)
        self.out += (joined, _DATE.line(), b"\r\n")
        return joined

    async def _finish(self, request: RequestState, body: bytes) -> None:
        """The answer is complete: write it now, or with the next one when the client has
        already sent the next request whole (pipelining)."""
        if body:
            self.out.append(body)
        if len(self.requests) > 1 and self.requests[1].complete and not self.response.close:
            return
        await self._flush()

    async def _write(self, data: bytes) -> None:
        self.out.append(data)
        await self._flush()

    async def _flush(self) -> None:
        if self.out:
            data = self.out[0] if len(self.out) == 1 else b"".join(self.out)
            self.out.clear()
            await self.transport.send_all(data)

    async def _linger(self) -> None:
        """Close gently: stop sending, and read (and drop) what the client still sends for a
        moment, so that it reads our answer rather than a reset of unread data."""
        await self._flush()
        try:
            if not await self.transport.send_eof():
                return
            with trio.move_on_after(LINGER_SECONDS):
                drained = 0
                while drained < LINGER_BYTES:
                    data = await self.transport.receive()
                    if not data:
                        break
                    drained += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
