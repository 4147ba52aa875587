"""How ``private_queues_v1/`` was made: a data directory of the release before the channels'
own queue and dead letters moved into internal logs (their go-diskqueue files,
``<topic>:<channel>#own.diskqueue.*`` and ``#dead.diskqueue.*``, in the data path).

Run with that release's nsqd (commit 5dfc158) next to this Python:
``python tests/integration/data/make_private_queues_v1.py tests/integration/data/private_queues_v1``.
What it leaves (``test_nsqd_private_migration.py`` checks all of it after the migration):

- topic ``orders``, channels ``a`` and ``b``, each with ``max_attempts`` 1, six messages
  ``m1``..``m6`` published;
- channel ``a``: ``m1``, ``m2``, ``m3`` dead letters, then one of them (``m1``) respawned
  into its own queue; ``m4`` finished; ``m5``, ``m6`` waiting in the log;
- channel ``b``: ``m1``, ``m2`` dead letters; ``m3``..``m6`` waiting in the log;
- a second topic ``other`` with channel ``c``: one dead letter ``x1``.
"""

import shutil
import sys
from pathlib import Path

import httpx
from nsq_testing import DEADLINE, start_daemon, wait_until


def main(target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    nsqd = start_daemon("nsqd", [f"--data-path={target}", "--tcp-address=127.0.0.1:0",
                                 "--http-address=127.0.0.1:0", "--sync-every=1"])
    base = f"http://{nsqd.http_address}"

    def post(path: str, content: bytes = b"", **params: str) -> httpx.Response:
        r = httpx.post(base + path, params=params, content=content, timeout=DEADLINE)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r

    try:
        for topic, channels in (("orders", ("a", "b")), ("other", ("c",))):
            post("/topic/create", topic=topic)
            for channel in channels:
                post("/channel/create", topic=topic, channel=channel, max_attempts="1")
        post("/mpub", b"m1\nm2\nm3\nm4\nm5\nm6", topic="orders")
        post("/pub", b"x1", topic="other")

        def consume(topic: str, channel: str, n: int) -> dict[str, str]:
            msgs = post("/channel/consume", topic=topic, channel=channel,
                        n=str(n)).json()["messages"]
            return {m["text"]: m["id"] for m in msgs}

        def dead(topic: str, channel: str, ids: dict[str, str], *texts: str) -> None:
            for text in texts:
                post("/message/deadletter", topic=topic, channel=channel, id=ids[text])

        ids = consume("orders", "a", 4)
        dead("orders", "a", ids, "m1", "m2", "m3")
        post("/message/fin", topic="orders", channel="a", id=ids["m4"])
        ids = consume("orders", "b", 2)
        dead("orders", "b", ids, "m1", "m2")
        dead("other", "c", consume("other", "c", 1), "x1")

        def count(topic: str, channel: str) -> int:
            stats = httpx.get(base + "/stats", params={"format": "json", "topic": topic},
                              timeout=DEADLINE).json()
            (found,) = [c for c in stats["topics"][0]["channels"] if c["channel_name"] == channel]
            return int(found["dead_letter_count"])

        wait_until(lambda: count("orders", "a") == 3 and count("orders", "b") == 2
                   and count("other", "c") == 1, what="the dead letters stored")
        assert post("/channel/deadletter/respawn", topic="orders", channel="a",
                    n="1").json() == {"count": 1}
    finally:
        assert nsqd.stop() == 0
    for lock in target.glob("*.lock"):
        lock.unlink()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
