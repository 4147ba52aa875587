"""The OpenAPI description covers every route nsqd serves, with the same methods."""

from nsqd.broker import Broker
from nsqd.http_api import build_app
from nsqd.openapi import document
from nsqd.options import Options
from starlette.routing import Route


def test_every_route_is_described(tmp_path):
    app = build_app(Broker(Options.defaults(data_path=str(tmp_path))))
    served = {route.path: {m.lower() for m in route.methods or ()} - {"head"}
              for route in app.routes if isinstance(route, Route)}
    paths = document()["paths"]
    assert set(served) == set(paths)
    for path, methods in served.items():
        assert methods == set(paths[path]) - {"parameters"}, path
