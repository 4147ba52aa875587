"""lmstfy's answers written directly are the same bytes as the JSON encoder's."""

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio
from nsqd.broker import Broker
from nsqd.lmstfy import api, ids
from nsqd.lmstfy.api import build_data_app
from nsqd.lmstfy.queues import JobQueues, consumed_job_text, job_json
from nsqd.lmstfy.state import State
from nsqd.lmstfy.throttle import Throttle
from nsqd.message import Job, QueuedMessage
from nsqd.options import Options

NOW = 1_795_000_000_123_456_789
NS = 1_000_000_000


def _encoded(namespace: str, queue: str, msg: QueuedMessage, now: int) -> str:
    return json.dumps({"msg": "new job", **job_json(namespace, queue, msg, now)},
                      sort_keys=True, separators=(",", ":"))


def test_a_consumed_job_is_written_as_the_encoder_writes_its_dict() -> None:
    attributes = json.dumps({"b": "x\"y\\z", "a": "é\u2028", "c": ""}, sort_keys=True,
                            separators=(",", ":")).encode()
    messages: list[QueuedMessage] = [
        Job(ids.new_message_id(NOW // 1_000_000), b"j" * 100, NOW - 5 * NS, expires=NOW + 86400 * NS),
        Job(ids.new_message_id(NOW // 1_000_000), b"", NOW + NS, expires=0, tries=3, attempts=1, delay=90),
        Job(ids.new_message_id(NOW // 1_000_000), bytes(range(256)), NOW, expires=NOW - 1, tries=2,
            attempts=5, attributes=attributes),
        Job(ids.new_message_id(NOW // 1_000_000), b"x", NOW, attributes=b"{}"),
        QueuedMessage(b"0123456789abcdef", b"nsq", NOW - NS // 2, 2, expires=NOW + 1),
    ]
    for msg in messages:
        for namespace, queue in (("ns", "q"), ("n-s_1", "Q_2-x")):
            assert consumed_job_text(namespace, queue, msg, NOW) == _encoded(
                namespace, queue, msg, NOW)


def test_an_answer_has_starlettes_head() -> None:
    for status, body in ((201, {"msg": "published", "job_id": "X"}), (204, None), (200, None),
                         (404, {"error": "job not found"})):
        response = api.answer(status, body)
        names = [name for name, _ in response.raw_headers]
        assert names[0] == b"x-request-id" and len(response.raw_headers[0][1]) == 26
        expected = [b"x-request-id"]
        if status != 204:
            expected.append(b"content-length")
        if body is not None:
            expected.append(b"content-type")
        assert names == expected
        if body is not None:
            assert response.body == json.dumps(body, sort_keys=True,
                                               separators=(",", ":")).encode()
            assert response.headers["content-length"] == str(len(response.body))
    indented = api.answer(201, {"token": "T"}, indent=True)
    assert indented.body == json.dumps({"token": "T"}, sort_keys=True, indent=4).encode()


def test_request_ids_are_fresh_ulids_of_now() -> None:
    before = time.time_ns() // 1_000_000
    seen = {ids.request_id() for _ in range(1000)}
    after = time.time_ns() // 1_000_000
    assert len(seen) == 1000
    for text in seen:
        raw = ids.decode_ulid(text)
        assert raw is not None and ids.encode_ulid(raw) == text
        assert before <= ids.timestamp_ms(text) <= after



@pytest.fixture
async def data_api(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    broker = Broker(Options.defaults(data_path=str(tmp_path)))
    await nursery.start(broker.run)
    state = State(str(tmp_path))
    state.tokens["ns"] = {"T": "test"}
    app = build_data_app(JobQueues(broker, state), state, Throttle(state.limits, broker.now))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://lmstfy.test", headers={"X-Token": "T"}) as http:
        yield http


def _is_encoders_text(body: bytes) -> bool:
    return body == json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()


async def test_the_data_apis_answers_are_the_encoders_text(data_api: httpx.AsyncClient) -> None:
    attributes = {"Enable-Job-Version": b"YES", "Job-Attr-Zeta": "é \\ \"".encode(),
                  "Job-Attr-a": b"1"}
    answers = [await data_api.put("/api/ns/q", content=b"one"),
               await data_api.put("/api/ns/q", content=b"two", headers=attributes),
               await data_api.put("/api/ns/q/bulk", content=b'["b1", {"x": 2}, 3]')]
    assert [r.status_code for r in answers] == [201, 201, 201]
    answers += [await data_api.get("/api/ns/q?count=1"), await data_api.get("/api/ns/q?count=9")]
    assert [len(r.json()) for r in answers[3:]] == [9, 4]  # one job (9 keys), then the other 4
    for r in answers:
        assert _is_encoders_text(r.content), r.content
        assert [name for name, _ in r.headers.raw] == [b"x-request-id", b"content-length",
                                                      b"content-type"]
    deleted = await data_api.delete(f"/api/ns/q/job/{answers[0].json()['job_id']}")
    assert deleted.status_code == 204 and deleted.content == b""
    assert [name for name, _ in deleted.headers.raw] == [b"x-request-id"]
