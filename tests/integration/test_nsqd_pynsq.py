"""pynsq, the official Python client, against our nsqd: 10,000 messages published with Writer,
received exactly once by a Reader with max_in_flight 200 that FINishes each.

pynsq runs on tornado, so it runs in a child process; this test counts what it reports.
"""

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, sys
    import nsq, tornado.ioloop

    tcp, count = sys.argv[1], int(sys.argv[2])
    loop = tornado.ioloop.IOLoop.current()
    received, acked, errors = [], [], []

    def handler(msg):
        received.append(msg.body.decode())
        if len(received) >= count:
            loop.call_later(1.0, loop.stop)  # linger: a duplicate would show up now
        return True

    reader = nsq.Reader(message_handler=handler, nsqd_tcp_addresses=[tcp], topic="pynsq",
                        channel="ch", max_in_flight=200)
    writer = nsq.Writer([tcp])
    state = {"next": 0}

    def done(conn, data):
        if isinstance(data, nsq.Error):
            errors.append(str(data))
        else:
            acked.append(1)

    def publish():
        if not writer.conns:
            loop.call_later(0.05, publish)
            return
        for _ in range(500):
            if state["next"] >= count:
                return
            writer.pub("pynsq", b"msg-%d" % state["next"], done)
            state["next"] += 1
        loop.call_later(0.005, publish)

    loop.call_later(0.2, publish)
    loop.call_later(90, loop.stop)
    loop.start()
    print(json.dumps({"received": received, "acked": len(acked), "errors": errors}))
""")


def test_pynsq_writer_and_reader_exactly_once(nsqd):
    out = subprocess.run([sys.executable, "-c", SCRIPT, nsqd.tcp_address, "10000"],
                         capture_output=True, timeout=120, check=True)
    result = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert result["errors"] == []
    assert result["acked"] == 10000
    received = result["received"]
    assert len(received) == 10000
    assert set(received) == {f"msg-{i}" for i in range(10000)}
