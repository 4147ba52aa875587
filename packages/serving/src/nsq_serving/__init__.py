"""HTTP/1.1 for NSQ's daemons on Trio: ``serve_http(app, sockets)``.

One task per connection reads, parses (httptools) and answers its requests in turn. A
request for a plain route of a Starlette app calls the route's endpoint directly; every other
request goes to the ASGI app. nsqd, nsqlookupd, nsqadmin and nsq_auth all serve through it,
on sockets bound by ``listen_tcp`` (which fails in the words of Go's ``net.Listen``).
"""

from ._direct import direct_endpoints
from ._listen import ListenError, bound_address, listen_tcp, split_host_port
from ._server import KEEP_ALIVE_TIMEOUT, ConnectionCounts, serve_http

__all__ = ["KEEP_ALIVE_TIMEOUT", "ConnectionCounts", "ListenError", "bound_address",
           "direct_endpoints", "listen_tcp", "serve_http", "split_host_port"]
