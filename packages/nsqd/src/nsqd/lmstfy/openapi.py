"""The OpenAPI 3.1 description of lmstfy's two APIs as nsqd serves them, at the admin listener's
``/openapi.json`` (nsqd's own API is described at its ``/openapi.json``: ``nsqd.openapi``).

One document for both listeners: operations tagged ``data`` are served at
``--lmstfy-http-address``, those tagged ``admin`` at ``--lmstfy-admin-http-address`` (a tool
that drives it takes the base URL per tag). Written out route by route from lmstfy's own
conventions (docs/lmstfy.md): errors are ``{"error": "<text>"}`` (``{"msg": ...}`` for an empty
consume and a rate limit), every answer has an ``X-Request-ID``, the data API wants a token in
``X-Token`` (or the ``token`` query parameter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nsq_common import NSQ_VERSION

_NAME = {"type": "string", "pattern": r"^[-_A-Za-z0-9]+$", "minLength": 1, "maxLength": 255}
_UINT32 = {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}
_INT64 = {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
_JOB_ID = {"type": "string", "pattern": "^[0-9A-Za-z]{26,27}$"}
_ERROR = {"description": "lmstfy's error",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_EMPTY = {"description": "done (no body)"}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _path(name: str, schema: dict[str, Any], description: str, example: Any) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema,
            "description": description, "example": example}


def _query(name: str, schema: dict[str, Any], description: str, example: Any = None
           ) -> dict[str, Any]:
    param = {"name": name, "in": "query", "required": False, "schema": schema,
             "description": description}
    if example is not None:
        param["example"] = example
    return param


_NS = _path("namespace", _NAME, "the namespace", "ns")
_QUEUE = _path("queue", {**_NAME, "pattern": r"^[-A-Za-z0-9][-_A-Za-z0-9]*$"}, "the queue",
               "q")
_QUEUES = _path("queue", {**_NAME, "pattern": r"^[-_,A-Za-z0-9]+$"},
                "queues to take from, in order: q1,q2,...", "q")
_JOB = _path("job_id", _JOB_ID, "a job id", "01M8DB4B3BNTGK79XQEWF00000")
_TOKEN_PARAM = _path("token", {"type": "string", "minLength": 1}, "a token, `pool:token` or bare",
                     "01M8DB4B3BNTGK79XQEWF00000")


def _data(summary: str, params: list[dict[str, Any]], responses: dict[str, Any], *,
          body: dict[str, Any] | None = None, token: bool = True,
          queue: dict[str, Any] = _QUEUE) -> dict[str, Any]:
    op: dict[str, Any] = {"tags": ["data"], "summary": summary,
                          "parameters": [_NS, queue, *params],
                          "responses": {**responses, "400": _ERROR, "404": _ERROR,
                                        "500": _ERROR}}
    if token:
        op["security"] = [{"token": []}]
        op["responses"]["401"] = _ERROR
    if body is not None:
        op["requestBody"] = body
    return op


def _admin(summary: str, responses: dict[str, Any], *, params: Sequence[dict[str, Any]] = (),
           body: dict[str, Any] | None = None, guarded: bool = False) -> dict[str, Any]:
    op: dict[str, Any] = {"tags": ["admin"], "summary": summary, "parameters": list(params),
                          "responses": dict(responses)}
    if guarded:
        op["security"] = [{"account": []}, {}]
        op["responses"]["401"] = {"description": "an account is needed (--lmstfy-admin-account)"}
    if body is not None:
        op["requestBody"] = body
    return op


def document() -> dict[str, Any]:
    """The whole description, as a JSON-ready dict."""
    publish = [_query("delay", _UINT32, "seconds before it is ready", 0),
               _query("ttl", _UINT32, "seconds before it expires (0: never; 86400)", 3600),
               _query("tries", {"type": "integer", "minimum": 1, "maximum": 65535},
                      "deliveries at most (1)", 3)]
    job_body = {"required": True, "content": {"application/octet-stream": {"schema": {
        "type": "string", "format": "binary", "maxLength": 1 << 20}}}}
    published = {"201": _json("published", {"type": "object", "properties": {
        "job_id": {"type": "string"}, "msg": {"const": "published"}}})}
    limit_params = [_NS, _TOKEN_PARAM]
    limiter = {"required": True, "content": {"application/json": {"schema": _ref("Limit")}}}
    paths: dict[str, Any] = {
        "/api/{namespace}/{queue}": {
            "put": _data("publish a job (the body)", publish, published, body=job_body),
            "get": _data("consume: jobs from the queues listed (q1,q2,...), in that order", [
                _query("ttr", _UINT32, "seconds it stays in flight (120)", 30),
                _query("timeout", _UINT32, "seconds to wait for one (0)", 0),
                _query("count", {"type": "integer", "minimum": 1, "maximum": 100},
                       "how many (1); an array when above 1", 1)],
                {"200": _json("a job, or jobs", {"oneOf": [_ref("Job"), {
                    "type": "array", "items": _ref("Job")}]})}, queue=_QUEUES),
            "delete": _data("empty the queue (its ready jobs) and forget it", [],
                            {"204": _EMPTY}),
        },
        "/api/{namespace}/{queue}/bulk": {
            "put": _data("publish up to 64 jobs: the elements of a JSON array", publish, {
                "201": _json("published", {"type": "object", "properties": {
                    "job_ids": {"type": "array", "items": {"type": "string"}},
                    "msg": {"const": "published"}}})},
                body={"required": True, "content": {"application/json": {"schema": {
                    "type": "array", "minItems": 1, "maxItems": 64}}}}),
        },
        "/api/{namespace}/{queue}/job/{job_id}": {
            "put": _data("republish: delete the job, publish the body as a new one",
                         [_JOB, *publish], published, body=job_body),
            "get": _data("a job wherever it is (remain_tries is 0 here)", [_JOB],
                         {"200": _json("the job", _ref("Job"))}),
            "delete": _data("delete (acknowledge) a job; 204 whether or not it exists", [_JOB],
                            {"204": _EMPTY}),
        },
        "/api/{namespace}/{queue}/peek": {
            "get": _data("the next job, taken by no one", [],
                         {"200": _json("the job", _ref("Job"))}),
        },
        "/api/{namespace}/{queue}/size": {
            "get": _data("jobs ready", [], {"200": _json("the size", _ref("Size"))},
                         token=False),
        },
        "/api/{namespace}/{queue}/deadletter": {
            "get": _data("the dead letters' size and oldest job", [], {"200": _json(
                "size and head", {"type": "object", "properties": {
                    "namespace": {"type": "string"}, "queue": {"type": "string"},
                    "deadletter_size": {"type": "integer"},
                    "deadletter_head": {"type": "string"}}})}),
            "put": _data("respawn the oldest dead letters (one try each)", [
                _query("limit", _INT64, "how many (1; above 0)", 1),
                _query("ttl", _INT64, "their new TTL in seconds (86400; 0: none)", 60)],
                {"200": _json("respawned", {"type": "object", "properties": {
                    "msg": {"const": "respawned"}, "count": {"type": "integer"}}})}),
            "delete": _data("delete the oldest dead letters", [
                _query("limit", _INT64, "how many (1; above 0)", 1)], {"204": _EMPTY}),
        },
        "/api/{namespace}/{queue}/deadletter/size": {
            "get": _data("dead letters", [], {"200": _json("the size", _ref("Size"))},
                         token=False),
        },
        "/info": {"get": _admin("namespaces and their queues", {
            "200": _json("namespace -> queues", {"type": "object", "additionalProperties": {
                "type": "array", "items": {"type": "string"}}})},
            params=[_query("pool", {"type": "string"}, "default (the only pool)")])},
        "/version": {"get": _admin("build and version", {"200": _json("version", {
            "type": "object"})})},
        "/metrics": {"get": _admin("queue sizes in Prometheus's text format", {
            "200": {"description": "Prometheus text",
                    "content": {"text/plain": {"schema": {"type": "string"}}}}})},
        "/pools": {"get": _admin("pools", {"200": _json("the pools", {
            "type": "array", "items": {"type": "string"}})})},
        "/limits": {"get": _admin("every token's limit", {"200": _json("limits", {
            "type": "array", "items": {"type": "object"}})}, guarded=True)},
        "/accesslog": {
            "get": _admin("whether access logging is on", {"200": _json("status", {
                "type": "object"})}),
            "post": _admin("turn access logging on or off", {
                "200": _json("status", {"type": "object"}), "400": _ERROR},
                params=[_query("status", {"enum": ["enable", "disable"]}, "", "enable")],
                guarded=True),
        },
        "/token/{namespace}": {
            "get": _admin("the namespace's tokens", {"200": _json("tokens", {
                "type": "object", "properties": {"tokens": {"type": "object"}}}),
                "400": _ERROR}, params=[_NS, _query("pool", {"type": "string"}, "")],
                guarded=True),
            "post": _admin("make a token", {"201": _json("the token", {
                "type": "object", "properties": {"token": {"type": "string"}}}),
                "400": _ERROR}, params=[
                _NS, _query("description", {"type": "string"}, "what it is for", "tests"),
                _query("token", {"type": "string"}, "one's own (20 characters at least)"),
                _query("pool", {"type": "string"}, "")], guarded=True),
        },
        "/token/{namespace}/{token}": {
            "delete": _admin("delete a token (and its limit)", {"204": _EMPTY, "400": _ERROR},
                             params=[_NS, _TOKEN_PARAM], guarded=True),
        },
        "/token/{namespace}/{token}/limit": {
            "get": _admin("a token's limit", {"200": _json("the limit", _ref("Limit")),
                                              "404": {"description": "none (null)"}},
                          params=limit_params, guarded=True),
            "post": _admin("set a limit where there is none", {
                "201": _json("the limit", {"type": "object"}), "400": _ERROR, "500": _ERROR},
                params=limit_params, body=limiter, guarded=True),
            "put": _admin("set a limit", {"200": _json("the limit", {"type": "object"}),
                                          "400": _ERROR, "500": _ERROR},
                          params=limit_params, body=limiter, guarded=True),
            "delete": _admin("remove a limit", {"200": _json("done", {"type": "object"})},
                             params=limit_params, guarded=True),
        },
        "/peek/{namespace}/{queue}": {
            "get": _admin("the jobs ready, delayed and dead, taken by no one (beyond lmstfy)", {
                "200": _json("jobs", {"type": "object", "properties": {
                    k: {"type": "array", "items": _ref("Job")}
                    for k in ("ready", "delayed", "deadletter")}}), "400": _ERROR},
                params=[_NS, _QUEUE, _query("count", {"type": "integer", "minimum": 1,
                                                      "maximum": 100},
                                            "of each kind (10)", 10)], guarded=True),
        },
        "/peek/{namespace}/{queue}/{job_id}": {
            "get": _admin("one job wherever it is, with its tries left and delay (beyond "
                          "lmstfy)", {"200": _json("the job", _ref("Job")), "400": _ERROR,
                                      "404": _ERROR},
                          params=[_NS, _QUEUE, _JOB], guarded=True),
        },
        "/openapi.json": {"get": _admin("this description", {"200": _json("OpenAPI", {
            "type": "object"})})},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "lmstfy's job-queue API, served by nsqd", "version": NSQ_VERSION,
                 "description": "Operations tagged data are served at --lmstfy-http-address, "
                                "those tagged admin at --lmstfy-admin-http-address "
                                "(docs/lmstfy.md)."},
        "tags": [{"name": "data", "description": "--lmstfy-http-address"},
                 {"name": "admin", "description": "--lmstfy-admin-http-address"}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "token": {"type": "apiKey", "in": "header", "name": "X-Token"},
                "account": {"type": "http", "scheme": "basic"},
            },
            "schemas": {
                "Error": {"type": "object", "properties": {
                    "error": {"type": "string"}, "msg": {"type": "string"}}},
                "Size": {"type": "object", "required": ["namespace", "queue", "size"],
                         "properties": {"namespace": {"type": "string"},
                                        "queue": {"type": "string"},
                                        "size": {"type": "integer"}}},
                "Job": {"type": "object", "required": ["job_id", "namespace", "queue"],
                        "properties": {
                            "job_id": {"type": "string"}, "namespace": {"type": "string"},
                            "queue": {"type": "string"},
                            "data": {"type": ["string", "null"], "contentEncoding": "base64"},
                            "ttl": {"type": "integer"}, "elapsed_ms": {"type": "integer"},
                            "remain_tries": {"type": "integer"},
                            "delay": {"type": "integer"},
                            "attributes": {"type": ["object", "null"]},
                            "msg": {"type": "string"}}},
                "Limit": {"type": "object", "required": ["read", "write", "interval"],
                          "properties": {k: {"type": "integer"}
                                         for k in ("read", "write", "interval")}},
            },
        },
    }
