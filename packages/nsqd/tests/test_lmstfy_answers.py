"""lmstfy's answers written directly are the same bytes as the JSON encoder's."""

import json
import time

from nsqd.lmstfy import api, ids
from nsqd.lmstfy.queues import consumed_job_text, job_json
from nsqd.message import Job, QueuedMessage

NOW = 1_795_000_000_123_456_789
NS = 1_000_000_000


def _encoded(namespace: str, queue: str, msg: QueuedMessage, now: int) -> str:
    return json.dumps({"msg": "new job", **job_json(namespace, queue, msg, now)},
                      sort_keys=True, separators=(",", ":"))


def test_a_consumed_job_is_written_as_the_encoder_writes_its_dict() -> None:
    attributes = json.dumps({"b": "x\"y\\z", "a": "é\u2028", "c": ""}, sort_keys=True,
                            separators=(",", ":")).encode()
    messages: list[QueuedMessage] = [
        Job(ids.new_message_id(), b"j" * 100, NOW - 5 * NS, expires=NOW + 86400 * NS),
        Job(ids.new_message_id(), b"", NOW + NS, expires=0, tries=3, attempts=1, delay=90),
        Job(ids.new_message_id(), bytes(range(256)), NOW, expires=NOW - 1, tries=2,
            attempts=5, attributes=attributes),
        Job(ids.new_message_id(), b"x", NOW, attributes=b"{}"),
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
