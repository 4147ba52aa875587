"""The OpenAPI 3.1 description of nsqd's HTTP API, served at ``/openapi.json``.

Written out here route by route (NSQ's API predates OpenAPI; its conventions, such as errors
as ``{"message": "<TEXT>"}`` and query parameters for everything, are stated once below). A
test checks that every route nsqd serves is described, and a schemathesis run drives the
description against a live nsqd.
"""

from __future__ import annotations

from typing import Any

from nsq_common import NSQ_VERSION

_NAME = {"type": "string", "pattern": r"^[.a-zA-Z0-9_-]+(#ephemeral)?$", "minLength": 1,
         "maxLength": 64}
_ERROR = {"description": "NSQ's error: a status and a text such as INVALID_TOPIC",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_OK_TEXT = {"description": "done", "content": {"text/plain": {"schema": {"type": "string"}}}}
_EMPTY = {"description": "done (empty body)"}
_JSON = {"description": "the answer", "content": {"application/json": {"schema": {}}}}
_MESSAGES = {"description": "messages",
             "content": {"application/json": {"schema": {
                 "$ref": "#/components/schemas/Messages"}}}}
_COUNT = {"description": "how many",
          "content": {"application/json": {"schema": {
              "type": "object", "properties": {"count": {"type": "integer"}}}}}}


def _query(name: str, schema: dict[str, Any], description: str, *, required: bool = False
           ) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema,
            "description": description}


_TOPIC = _query("topic", _NAME, "topic name", required=True)
_CHANNEL = _query("channel", _NAME, "channel name", required=True)
_N = _query("n", {"type": "integer", "minimum": 1, "maximum": 2500},
            "how many (default 1; at most --max-rdy-count)")
_ID = _query("id", {"type": "string", "minLength": 16, "maxLength": 16}, "a message id",
             required=True)
_TTL = _query("ttl", {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
              "seconds until the messages expire (beyond NSQ)")
_GO_DURATION = r"^([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$|^[0-9]+(\.[0-9]*)?$"
_BODY = {"required": True, "content": {"application/octet-stream": {"schema": {
    "type": "string", "format": "binary"}}}}


def _op(summary: str, params: list[dict[str, Any]], ok: dict[str, Any], *,
        body: dict[str, Any] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "parameters": params,
                          "responses": {"200": ok, "400": _ERROR, "404": _ERROR}}
    if body is not None:
        op["requestBody"] = body
        op["responses"]["413"] = _ERROR
    return op


def _post(summary: str, params: list[dict[str, Any]], ok: dict[str, Any] = _EMPTY,
          **kw: Any) -> dict[str, Any]:
    return {"post": _op(summary, params, ok, **kw)}


def _get(summary: str, params: list[dict[str, Any]], ok: dict[str, Any] = _JSON
         ) -> dict[str, Any]:
    return {"get": _op(summary, params, ok)}


_REPLICAS = _query("replicas", {"type": "integer", "minimum": 1, "maximum": 65535},
                   "nodes the topic is placed on (with --etcd-endpoints; default "
                   "--default-replicas)")


def document(replicated: bool = False) -> dict[str, Any]:
    """The whole description, as a JSON-ready dict; ``replicated``: of an nsqd with
    --etcd-endpoints (``replicas`` on /topic/create, and /topic/replicas)."""
    topic_channel = [_TOPIC, _CHANNEL]
    paths = {
        "/ping": _get("liveness: OK, or the reason nsqd is unhealthy", [], _OK_TEXT),
        "/info": _get("version and settings", []),
        "/stats": _get("topics, channels and clients", [
            _query("format", {"enum": ["json", "text"]}, "json, or text (default)"),
            _query("topic", {"type": "string"}, "only this topic"),
            _query("channel", {"type": "string"}, "only this channel"),
            _query("include_clients", {"type": "boolean"}, "list clients (default true)"),
            _query("include_mem", {"type": "boolean"}, "memory figures (default true)"),
            _query("include_offsets", {"type": "boolean"},
                   "the log's offsets and each channel's cursor (default: on topics with a "
                   "retention)")]),
        "/metrics": _get("the same figures in Prometheus's text format (docs/operations.md)", [],
                         _OK_TEXT),
        "/pub": _post("publish one message (the body)", [
            _TOPIC, _query("defer", {"type": "integer", "minimum": 0}, "delay in ms"), _TTL],
            _OK_TEXT, body=_BODY),
        "/mpub": _post("publish many: one per line, or binary with binary=true", [
            _TOPIC, _query("binary", {"type": "boolean"}, "NSQ's binary MPUB body"), _TTL],
            _OK_TEXT, body=_BODY),
        "/topic/create": _post("create a topic", [_TOPIC, _query(
            "message_ttl", {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
            "default TTL in seconds of its messages (beyond NSQ)"), _query(
            "retention", {"type": "string", "pattern": _GO_DURATION},
            "keep what every channel has read this long, a Go duration such as 24h (beyond "
            "NSQ)"), _query(
            "retention_bytes", {"type": "integer", "minimum": 0},
            "or the newest segments within this many bytes (beyond NSQ)")]),
        "/topic/read": {"get": _op("messages of a topic's log from an offset, touching no "
                                   "channel (beyond NSQ)", [_TOPIC, _N, _query(
                                       "offset", {"type": "integer", "minimum": 0},
                                       "the first offset (default: the earliest stored)"),
                                       _query("timestamp", {"type": "number", "minimum": 0},
                                              "without offset: from the first message "
                                              "published at or after this (unix seconds)")],
                                   _JSON)},
        "/topic/delete": _post("delete a topic", [_TOPIC]),
        "/topic/empty": _post("drop a topic's queued messages", [_TOPIC]),
        "/topic/pause": _post("pause a topic", [_TOPIC]),
        "/topic/unpause": _post("unpause a topic", [_TOPIC]),
        "/channel/create": _post("create a channel", [*topic_channel, _query(
            "max_attempts", {"type": "integer", "minimum": 0, "maximum": 65535},
            "deliveries before the dead letters (beyond NSQ)"), _query(
            "dead_letter_expired", {"type": "boolean"},
            "expired messages to the dead letters (beyond NSQ)"), _query(
            "start", {"type": "string", "enum": ["earliest", "latest"]},
            "where a new channel starts: everything stored, or what comes next (beyond NSQ; "
            "default: as NSQ)")]),
        "/channel/update": _post("change a channel's settings (beyond NSQ)", [
            *topic_channel,
            _query("max_attempts", {"type": "integer", "minimum": 0, "maximum": 65535},
                   "deliveries before the dead letters"),
            _query("dead_letter_expired", {"type": "boolean"},
                   "expired messages to the dead letters")]),
        "/channel/rewind": _post("deliver again everything stored from a time or an offset "
                                 "(beyond NSQ)", [*topic_channel, _query(
                                     "timestamp", {"type": "number", "minimum": 0},
                                     "unix seconds"), _query(
                                     "offset", {"type": "integer", "minimum": 0},
                                     "an offset of the topic's log")], _JSON),
        "/channel/delete": _post("delete a channel", topic_channel),
        "/channel/empty": _post("drop a channel's queued and in-flight messages", topic_channel),
        "/channel/pause": _post("pause a channel", topic_channel),
        "/channel/unpause": _post("unpause a channel", topic_channel),
        "/channel/peek": _get("the next messages the channel would deliver (beyond NSQ)",
                              [*topic_channel, _N], _MESSAGES),
        "/channel/consume": _post("take messages over HTTP (beyond NSQ)", [
            *topic_channel, _N,
            _query("wait", {"type": "number", "minimum": 0}, "seconds to wait for one"),
            _query("ttr", {"type": "number", "exclusiveMinimum": 0},
                   "seconds each stays in flight")], _MESSAGES),
        "/message/fin": _post("finish messages taken over HTTP (beyond NSQ)",
                              [*topic_channel, {**_ID, "required": False}]),
        "/message/req": _post("requeue a message taken over HTTP (beyond NSQ)", [
            *topic_channel, _ID,
            _query("delay", {"type": "number", "minimum": 0}, "seconds before redelivery")]),
        "/message/touch": _post("restart the ttr of a message taken over HTTP (beyond NSQ)",
                                [*topic_channel, _ID]),
        "/message/deadletter": _post("give up on a message taken over HTTP (beyond NSQ)",
                                     [*topic_channel, _ID]),
        "/channel/deadletter": _get("peek at the dead letters (beyond NSQ)",
                                    [*topic_channel, _N], _MESSAGES),
        "/channel/deadletter/respawn": _post("dead letters back to the channel (beyond NSQ)",
                                             [*topic_channel, _N], _COUNT),
        "/channel/deadletter/empty": _post("delete dead letters, all without n (beyond NSQ)",
                                           [*topic_channel, _N], _COUNT),
        "/config/{opt}": {
            "parameters": [{"name": "opt", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "get": _op("a setting's value", [], _JSON),
            "put": _op("change nsqlookupd_tcp_addresses or log_level", [], _JSON,
                       body=_BODY),
        },
        "/openapi.json": _get("this description", []),
    }
    if replicated:
        paths["/topic/create"]["post"]["parameters"].append(_REPLICAS)
        paths["/topic/replicas"] = _post(
            "change a replicated topic's number of replicas (by its leader, forwarded to it)",
            [_TOPIC, {**_REPLICAS, "required": True}])
    for item in paths.values():
        for op in item.values():
            if isinstance(op, dict) and "responses" in op:
                op["responses"]["500"] = _ERROR
    return {
        "openapi": "3.1.0",
        "info": {"title": "nsqd HTTP API", "version": NSQ_VERSION,
                 "description": "NSQ's nsqd HTTP API, with the job features beyond NSQ "
                                "(docs/jobs.md). Errors are {\"message\": \"<TEXT>\"}. "
                                "lmstfy's APIs, when this nsqd serves them, are described at "
                                "its --lmstfy-admin-http-address's /openapi.json."},
        "paths": paths,
        "components": {"schemas": {
            "Error": {"type": "object", "required": ["message"],
                      "properties": {"message": {"type": "string"}}},
            "Messages": {"type": "object", "required": ["messages"], "properties": {
                "messages": {"type": "array", "items": {
                    "type": "object", "required": ["id", "attempts", "timestamp", "body"],
                    "properties": {"id": {"type": "string"}, "attempts": {"type": "integer"},
                                   "timestamp": {"type": "integer"},
                                   "body": {"type": "string", "contentEncoding": "base64"},
                                   "text": {"type": "string"}}}}}},
        }},
    }
