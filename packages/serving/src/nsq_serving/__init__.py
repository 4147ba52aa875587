"""HTTP/1.1 for NSQ's daemons on Trio: ``serve_http(app, sockets)``, and what the daemons'
commands share besides.

One task per connection reads, parses (httptools) and answers its requests in turn. A
request for a plain route of a Starlette app calls the route's endpoint directly; every other
request goes to the ASGI app. nsqd, nsqlookupd, nsqadmin and nsq_auth all serve through it,
on sockets bound by ``listen_tcp`` (which fails in the words of Go's ``net.Listen``).

NSQ's HTTP conventions live here once, for every daemon: ``Router`` (Go's httprouter rules:
HEAD, 405 with ``Allow``, trailing-slash redirects, 404; ``NSQ`` or another ``Conventions``),
the answers (``v1_json``, ``v1_text``, ``V1_EMPTY``, ``v1_error``, ``plain_text``), the one error
a handler raises (``HttpError``), the query as Go reads it (``v1_query``), bodies within a limit
(``read_body``) and long-polls that end with their client (``while_connected``,
``client_gone``).

Also shared by the daemons: start-up (``version_string``, ``exit_on``, ``start_logging``,
``run_daemon``; ``early``: listeners bound and ``/ping`` answered while the server loads),
one app on one address (``serve_app``), ``GET /metrics``
(``metrics_endpoint``; ``build_info``, ``connection_metrics``, ``registry_with`` and
``render`` for the daemons' collectors) and middleware that may answer a request before the
app does (``HttpGate``).

The names are imported on first use (``nsq_common.lazy_exports``): a command parsing its
flags loads neither Trio nor prometheus-client.
"""

from __future__ import annotations

from nsq_common import lazy_exports

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing at start-up

if TYPE_CHECKING:
    from . import _early as early
    from ._answers import V1_EMPTY, HttpError, plain_text, v1_error, v1_json, v1_json_bytes, v1_text
    from ._body import declared_length, read_body
    from ._client import client_gone, wait_until_gone, while_connected
    from ._connection import REQUEST_TIMEOUT
    from ._daemon import (
        catch_signals,
        exit_on,
        release_signals,
        run_daemon,
        serve_until_signalled,
        start_logging,
        version_string,
        warm_up,
    )
    from ._direct import direct_endpoints
    from ._gate import HttpGate
    from ._listen import ListenError, bound_address, listen_tcp, split_host_port
    from ._metrics import build_info, connection_metrics, registry_with, render
    from ._one_address import serve_app
    from ._router import NSQ, Conventions, Router, v1_query, v1_query_all
    from ._scrape import metrics_endpoint
    from ._server import KEEP_ALIVE_TIMEOUT, ConnectionCounts, serve_http

__all__ = ["KEEP_ALIVE_TIMEOUT", "NSQ", "REQUEST_TIMEOUT", "V1_EMPTY", "ConnectionCounts",
           "Conventions", "HttpError", "HttpGate", "ListenError", "Router", "bound_address",
           "build_info", "catch_signals", "client_gone", "connection_metrics",
           "declared_length",
           "direct_endpoints", "early", "exit_on", "listen_tcp", "metrics_endpoint",
           "plain_text",
           "read_body", "registry_with", "release_signals", "render", "run_daemon", "serve_app",
           "serve_http",
           "serve_until_signalled", "split_host_port", "start_logging", "v1_error", "v1_json",
           "v1_json_bytes", "v1_query", "v1_query_all", "v1_text", "version_string",
           "wait_until_gone", "warm_up", "while_connected"]
__getattr__ = lazy_exports(__name__, {
    "V1_EMPTY": "_answers", "HttpError": "_answers", "plain_text": "_answers",
    "v1_error": "_answers", "v1_json": "_answers", "v1_json_bytes": "_answers",
    "v1_text": "_answers", "declared_length": "_body", "read_body": "_body",
    "client_gone": "_client", "wait_until_gone": "_client", "while_connected": "_client",
    "NSQ": "_router", "Conventions": "_router", "Router": "_router", "v1_query": "_router",
    "v1_query_all": "_router", "REQUEST_TIMEOUT": "_connection",
    "KEEP_ALIVE_TIMEOUT": "_server", "ConnectionCounts": "_server", "serve_http": "_server",
    "ListenError": "_listen", "bound_address": "_listen", "listen_tcp": "_listen",
    "split_host_port": "_listen", "direct_endpoints": "_direct", "HttpGate": "_gate",
    "early": "_early", "catch_signals": "_daemon", "exit_on": "_daemon",
    "release_signals": "_daemon", "run_daemon": "_daemon",
    "serve_until_signalled": "_daemon",
    "start_logging": "_daemon", "version_string": "_daemon", "warm_up": "_daemon",
    "serve_app": "_one_address",
    "metrics_endpoint": "_scrape", "build_info": "_metrics",
    "connection_metrics": "_metrics", "registry_with": "_metrics", "render": "_metrics",
})
