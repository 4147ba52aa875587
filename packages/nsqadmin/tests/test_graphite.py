"""/api/graphite and the --proxy-graphite /render pass-through, against a fake Graphite."""

import httpx
from nsqadmin import Options, create_app


def graphite(request: httpx.Request) -> httpx.Response:
    assert request.url.host == "graphite"
    params = dict(request.url.params)
    if params.get("format") == "json" and params["target"] == "broken":
        return httpx.Response(200, json=[])
    if params.get("format") == "json":
        assert (params["from"], params["until"]) == ("-20sec", "-10sec")
        return httpx.Response(200, json=[{"target": params["target"],
                                          "datapoints": [[15.0, 1700000000]]}])
    return httpx.Response(200, content=b"PNG", headers={"content-type": "image/png"})


async def test_rate_and_render_proxy():
    options = Options(nsqd_http_addresses=["n:4151"], graphite_url="http://graphite",
                      proxy_graphite=True, statsd_interval=10.0)
    async with httpx.AsyncClient(transport=httpx.MockTransport(graphite)) as upstream:
        app = create_app(options, client=upstream, sampling=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://admin") as client:
            rate = await client.get("/api/graphite", params={"metric": "rate", "target": "x"})
            assert rate.json() == {"rate": "1.50"}
            bad = await client.get("/api/graphite", params={"metric": "depth"})
            assert (bad.status_code, bad.json()) == (400, {"message": "INVALID_ARG_METRIC"})
            broken = await client.get("/api/graphite",
                                      params={"metric": "rate", "target": "broken"})
            assert broken.json() == {"message": "INTERNAL_ERROR"}
            image = await client.get("/render", params={"target": "x", "width": "120"})
            assert (image.content, image.headers["content-type"]) == (b"PNG", "image/png")
