"""nsqd's GET /topic/read on a real nsqd: a topic's log from an offset, or from a time."""

from __future__ import annotations

import httpx
from nsq_testing import DEADLINE


def read(client: httpx.Client, **params: str) -> httpx.Response:
    return client.get("/topic/read", params={"topic": "timed", **params})


def test_a_read_from_a_timestamp_starts_at_the_first_message_published_then(nsqd):
    with httpx.Client(base_url=f"http://{nsqd.http_address}", timeout=DEADLINE) as client:
        assert client.post("/mpub", params={"topic": "timed"}, content=b"a0\na1").status_code == 200
        assert client.post("/mpub", params={"topic": "timed"}, content=b"b0\nb1").status_code == 200
        everything = read(client, n="10").json()
        a1, b0 = everything["messages"][1], everything["messages"][2]
        assert (a1["text"], b0["text"]) == ("a1", "b0")
        assert b0["timestamp"] - a1["timestamp"] > 2000  # two requests: microseconds apart
        between = (a1["timestamp"] + b0["timestamp"]) // 2

        found = read(client, n="10", timestamp=f"{between / 1e9:.9f}").json()
        assert [m["text"] for m in found["messages"]] == ["b0", "b1"]
        assert [m["offset"] for m in found["messages"]] == [2, 3]
        assert (found["next_offset"], found["earliest_offset"], found["latest_offset"]) == (4, 0, 3)

        assert [m["offset"] for m in read(client, n="1", timestamp="0").json()["messages"]] == [0]
        after = read(client, n="1", timestamp=f"{b0['timestamp'] / 1e9 + 3600:.9f}").json()
        assert (after["messages"], after["next_offset"]) == ([], 4)  # nothing yet: the end
        # an offset wins over a timestamp
        assert read(client, offset="1", timestamp="0").json()["messages"][0]["offset"] == 1
        for bad in ("soon", "-1", "nan", "1e12"):
            answer = read(client, timestamp=bad)
            assert (answer.status_code, answer.json()["message"]) == (400, "INVALID_TIMESTAMP")


def test_a_rewind_takes_the_same_timestamps(nsqd):
    with httpx.Client(base_url=f"http://{nsqd.http_address}", timeout=DEADLINE) as client:
        params = {"topic": "rewound", "channel": "c"}
        assert client.post("/topic/create", params={"topic": "rewound"}).status_code == 200
        assert client.post("/channel/create", params=params).status_code == 200
        assert client.post("/mpub", params={"topic": "rewound"}, content=b"x\ny").status_code == 200
        answer = client.post("/channel/rewind", params={**params, "timestamp": "0"})
        assert (answer.status_code, answer.json()) == (200, {"offset": 0})
        for query, message in (({}, "MISSING_ARG_TIMESTAMP"), ({"timestamp": "x"}, "INVALID_TIMESTAMP")):
            answer = client.post("/channel/rewind", params={**params, **query})
            assert (answer.status_code, answer.json()["message"]) == (400, message)
