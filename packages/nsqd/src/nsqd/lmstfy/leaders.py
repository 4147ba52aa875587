"""lmstfy's data API with --etcd-endpoints: a queue whose topic is placed and led by another
node is answered by that leader's lmstfy, the request relayed to it (``nsqd.relay``) and its
answer given back, so a client of any node works as producers of any node do
(docs/lmstfy.md, "Replicated namespaces").

- Every route of one queue (publish, bulk, republish, peek, job, ack, size, destroy, dead
  letters, respawn) goes to its leader. A first job of a queue no node has places its topic
  first (as ``JobQueues._open`` would), once its names and token are good here; placed on
  other nodes only, the job goes to the leader.
- A consume of several queues goes where they are led: some led here, the ones led here
  only are looked at (those led elsewhere are left to their leaders' clients); else to the
  leader of the first queue led elsewhere, with the queues it leads (all of them when one
  node leads them all; queues no node has hold nothing and are left out).
- A queue not placed, or led here, is answered here as without etcd.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nsq_serving import HttpError, read_body, while_connected
from starlette.requests import Request
from starlette.responses import Response

from ..broker import Broker
from ..relay import Relay
from . import names

Endpoint = Callable[[Request], Awaitable[Response]]
Check = Callable[[Request], str]

#: the largest body any route takes (a bulk publish's), as ``api.MAX_BULK_BODY``
_TOO_LARGE = HttpError(413, "body too large")
_UNREADABLE = HttpError(400, "failed to read body")


class Leaders:
    def __init__(self, broker: Broker, max_body: int) -> None:
        self.broker = broker
        self.relay = Relay(broker, "lmstfy")
        self.max_body = max_body

    def queue_route(self, endpoint: Endpoint, *, publish: bool = False,
                    check: Check | None = None) -> Endpoint:
        """``endpoint`` (a route of one queue) answered by the queue's leader. A publish to a
        queue not placed yet places it first, after ``check`` (its names and token)."""
        relay = self.relay

        async def route(request: Request) -> Response:
            if self.broker.replication is None:
                return await endpoint(request)
            params = request.path_params
            topic = names.topic_name(params["namespace"], params["queue"])
            forwarded = relay.forwarded(request)
            if (publish and not forwarded and check is not None
                    and relay.leader_url(topic) is None):
                await self._place(request, topic, check)
            return await relay.answered(topic, request, endpoint, self._body)

        return route

    async def _place(self, request: Request, topic: str, check: Check) -> None:
        """A topic no node holds placed, as a first job places it (the job then goes to
        its leader when placed on other nodes only)."""
        cluster = self.broker.replication
        if cluster is None or topic in self.broker.topics:
            return
        check(request)  # lmstfy's refusals first: nothing placed for a refused job
        await cluster.hold(topic)

    def consume_route(self, endpoint: Endpoint) -> Endpoint:
        """The consume route (``/api/:namespace/q1,q2,...``), led as the module says."""
        relay = self.relay

        async def route(request: Request) -> Response:
            if self.broker.replication is None:
                return await endpoint(request)
            params = request.path_params
            namespace, queue_list = params["namespace"], params["queue"]
            if names.queue_list_error(namespace, queue_list):
                return await endpoint(request)  # lmstfy's 400
            queues = [name for name in queue_list.split(",") if name]
            urls = [relay.leader_url(names.topic_name(namespace, q)) for q in queues]
            if all(url is None for url in urls):
                return await endpoint(request)
            if relay.forwarded(request):
                raise HttpError(503, "LEADER_UNAVAILABLE")
            topics = self.broker.topics
            here = [q for q, url in zip(queues, urls, strict=True)
                    if url is None and names.topic_name(namespace, q) in topics]
            if here:
                narrowed = {**params, "queue": ",".join(here)}
                return await endpoint(Request({**request.scope, "path_params": narrowed},
                                              request.receive))
            first = next(url for url in urls if url is not None)
            led = [q for q, url in zip(queues, urls, strict=True) if url == first]
            answer: Response | None = None
            async with while_connected(request):
                answer = await relay.answered(
                    names.topic_name(namespace, led[0]), request, endpoint, self._body,
                    path=f"/api/{namespace}/{','.join(led)}", wait=_timeout(request))
            if answer is None:  # the client went away
                raise HttpError(404, body={"msg": "no job available"})
            return answer

        return route

    async def _body(self, request: Request) -> bytes:
        if request.scope["method"] != "PUT":
            return b""
        return await read_body(request, self.max_body, too_large=_TOO_LARGE,
                               unreadable=_UNREADABLE)

    async def aclose(self) -> None:
        await self.relay.aclose()


def _timeout(request: Request) -> float:
    """A consume's long-poll ``timeout`` (0: none, or not a number: the leader refuses it)."""
    text = request.query_params.get("timeout", "")
    return float(text) if text.isascii() and text.isdigit() and len(text) < 11 else 0.0
