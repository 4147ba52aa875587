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


def test_a_replicated_nsqds_routes_are_described(tmp_path):
    opts = Options.defaults(data_path=str(tmp_path), etcd_endpoints=("http://127.0.0.1:1",))
    app = build_app(Broker(opts))
    served = {route.path for route in app.routes if isinstance(route, Route)}
    paths = document(replicated=True)["paths"]
    assert set(served) == set(paths) and "/topic/replicas" in served
    assert "replicas" in {p["name"] for p in paths["/topic/create"]["post"]["parameters"]}
    assert "replicas" not in {p["name"] for p in document()["paths"]["/topic/create"]["post"][
        "parameters"]}
