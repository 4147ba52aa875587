"""Every error nsqd sends, triggered on a raw socket: NSQ's exact frame, and the connection
closed after a fatal one while other clients keep working."""

import struct

import pytest
from nsq_common import commands
from nsq_testing import WireClient

ID = b"0123456789abcdef"


def size(n: int) -> bytes:
    return struct.pack(">i", n)


# (commands to send first, the offending bytes, the exact error text, fatal?)
SUBSCRIBE = [commands.sub("errs", "c")]
CASES = [
    ([], b"\n", b"E_INVALID invalid command ", True),
    ([], b"BOGUS x\n", b"E_INVALID invalid command BOGUS", True),
    ([], b"PUB\n", b"E_INVALID PUB insufficient number of parameters", True),
    ([], b"PUB bad!topic\n", b'E_BAD_TOPIC PUB topic name "bad!topic" is not valid', True),
    ([], b"PUB t\n" + size(0), b"E_BAD_MESSAGE PUB invalid message body size 0", True),
    ([], b"PUB t\n" + size(1048577), b"E_BAD_MESSAGE PUB message too big 1048577 > 1048576", True),
    ([], b"MPUB\n", b"E_INVALID MPUB insufficient number of parameters", True),
    ([], b"MPUB a*b\n", b'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "a*b" is not valid', True),
    ([], b"MPUB t\n" + size(-5), b"E_BAD_BODY MPUB invalid body size -5", True),
    ([], b"MPUB t\n" + size(5242881), b"E_BAD_BODY MPUB body too big 5242881 > 5242880", True),
    ([], b"MPUB t\n" + size(4) + size(0), b"E_BAD_BODY MPUB invalid message count 0", True),
    ([], b"MPUB t\n" + size(8) + size(1) + size(0),
     b"E_BAD_MESSAGE MPUB invalid message(0) body size 0", True),
    ([], b"MPUB t\n" + size(8) + size(1) + size(2000000),
     b"E_BAD_MESSAGE MPUB message too big 2000000 > 1048576", True),
    ([], b"DPUB t\n", b"E_INVALID DPUB insufficient number of parameters", True),
    ([], b"DPUB t x\n", b"E_INVALID DPUB could not parse timeout x", True),
    ([], b"DPUB t -1\n", b"E_INVALID DPUB could not parse timeout -1", True),
    ([], b"DPUB t 3600001\n", b"E_INVALID DPUB timeout 3600001 out of range 0-3600000", True),
    ([], b"DPUB t 10\n" + size(0), b"E_BAD_MESSAGE DPUB invalid message body size 0", True),
    ([], b"DPUB t\xff 10\n", b'E_BAD_TOPIC DPUB topic name "t\\xff" is not valid', True),
    ([], b"IDENTIFY\n" + size(0), b"E_BAD_BODY IDENTIFY invalid body size 0", True),
    ([], b"IDENTIFY\n" + size(5242881), b"E_BAD_BODY IDENTIFY body too big 5242881 > 5242880", True),
    ([], b"IDENTIFY\n" + size(3) + b"{{{", b"E_BAD_BODY IDENTIFY failed to decode JSON body", True),
    ([], commands.identify({"heartbeat_interval": 10}),
     b"E_BAD_BODY IDENTIFY heartbeat interval (10) is invalid", True),
    ([], commands.identify({"sample_rate": 101}), b"E_BAD_BODY IDENTIFY sample rate (101) is invalid",
     True),
    ([], commands.identify({"msg_timeout": 10}), b"E_BAD_BODY IDENTIFY msg timeout (10) is invalid",
     True),
    ([], commands.identify({"output_buffer_size": 10}),
     b"E_BAD_BODY IDENTIFY output buffer size (10) is invalid", True),
    ([], commands.identify({"output_buffer_timeout": 10}),
     b"E_BAD_BODY IDENTIFY output buffer timeout (10) is invalid", True),
    (SUBSCRIBE, commands.identify({}), b"E_INVALID cannot IDENTIFY in current state", True),
    ([], b"AUTH x\n", b"E_INVALID AUTH invalid number of parameters", True),
    ([], commands.auth("s"), b"E_AUTH_DISABLED AUTH disabled", True),
    (SUBSCRIBE, commands.auth("s"), b"E_INVALID cannot AUTH in current state", True),
    ([], b"SUB t\n", b"E_INVALID SUB insufficient number of parameters", True),
    ([], b"SUB t!t c\n", b'E_BAD_TOPIC SUB topic name "t!t" is not valid', True),
    ([], b"SUB t c!c\n", b'E_BAD_CHANNEL SUB channel name "c!c" is not valid', True),
    (SUBSCRIBE, b"SUB t c\n", b"E_INVALID cannot SUB in current state", True),
    ([commands.identify({"heartbeat_interval": -1})], b"SUB t c\n",
     b"E_INVALID cannot SUB with heartbeats disabled", True),
    ([], b"RDY 1\n", b"E_INVALID cannot RDY in current state", True),
    (SUBSCRIBE, b"RDY x\n", b"E_INVALID RDY could not parse count x", True),
    (SUBSCRIBE, b"RDY 2501\n", b"E_INVALID RDY count 2501 out of range 0-2500", True),
    ([], b"FIN " + ID + b"\n", b"E_INVALID cannot FIN in current state", True),
    (SUBSCRIBE, b"FIN\n", b"E_INVALID FIN insufficient number of params", True),
    (SUBSCRIBE, b"FIN abc\n", b"E_INVALID invalid message ID", True),
    (SUBSCRIBE, b"FIN " + ID + b"\n", b"E_FIN_FAILED FIN " + ID + b" failed ID not in flight", False),
    ([], b"REQ " + ID + b" 0\n", b"E_INVALID cannot REQ in current state", True),
    (SUBSCRIBE, b"REQ " + ID + b"\n", b"E_INVALID REQ insufficient number of params", True),
    (SUBSCRIBE, b"REQ " + ID + b" x\n", b"E_INVALID REQ could not parse timeout x", True),
    (SUBSCRIBE, b"REQ " + ID + b" 0\n", b"E_REQ_FAILED REQ " + ID + b" failed ID not in flight", False),
    ([], b"TOUCH " + ID + b"\n", b"E_INVALID cannot TOUCH in current state", True),
    (SUBSCRIBE, b"TOUCH\n", b"E_INVALID TOUCH insufficient number of params", True),
    (SUBSCRIBE, b"TOUCH " + ID + b"\n", b"E_TOUCH_FAILED TOUCH " + ID + b" failed ID not in flight",
     False),
    ([], b"CLS\n", b"E_INVALID cannot CLS in current state", True),
]


@pytest.mark.parametrize(("setup", "offending", "text", "fatal"), CASES,
                         ids=[c[2].decode()[:60] for c in CASES])
async def test_error_frame(shared_nsqd, setup, offending, text, fatal):
    bystander = await WireClient.connect(shared_nsqd.tcp_address)
    client = await WireClient.connect(shared_nsqd.tcp_address)
    for cmd in setup:
        await client.send(cmd)
        await client.response()
    await client.send(offending)
    assert await client.error() == text
    if fatal:
        assert await client.closed()
    else:
        await client.send(b"NOP\n")
        await client.pub("errs-after", b"still open")
    # every other client is unaffected
    await bystander.pub("errs-bystander", b"fine")
    await client.aclose()
    await bystander.aclose()


async def test_bad_magic(shared_nsqd):
    client = await WireClient.connect(shared_nsqd.tcp_address, magic=b"  V1")
    assert await client.error() == b"E_BAD_PROTOCOL"
    assert await client.closed()
    await client.aclose()


async def test_non_fatal_error_keeps_the_rest_of_a_pipelined_batch(shared_nsqd):
    client = await WireClient.connect(shared_nsqd.tcp_address)
    await client.subscribe("errs-batch", "c")
    await client.send(b"FIN " + ID + b"\n" + commands.pub("errs-batch2", b"x"))
    assert (await client.error()).startswith(b"E_FIN_FAILED")
    assert await client.response() == b"OK"
    await client.aclose()


async def test_garbage_and_overlong_line_close_only_that_connection(shared_nsqd):
    bystander = await WireClient.connect(shared_nsqd.tcp_address)
    client = await WireClient.connect(shared_nsqd.tcp_address)
    await client.send(b"\x00\xff" * 20000)
    assert await client.closed()
    await bystander.pub("errs-garbage", b"fine")
    await client.aclose()
    await bystander.aclose()


async def test_not_your_message(shared_nsqd):
    publisher = await WireClient.connect(shared_nsqd.tcp_address)
    await publisher.pub("errs-owner", b"m")
    a = await WireClient.connect(shared_nsqd.tcp_address)
    b = await WireClient.connect(shared_nsqd.tcp_address)
    await b.subscribe("errs-owner", "c")
    await a.subscribe("errs-owner", "c", rdy=1)
    msg = await a.message()
    await b.send(b"FIN " + msg.id + b"\n")
    assert await b.error() == b"E_FIN_FAILED FIN " + msg.id + b" failed client does not own message"
    await a.send(b"FIN " + msg.id + b"\n")
    await a.send(b"NOP\n")
    for c in (publisher, a, b):
        await c.aclose()


async def test_max_channel_consumers(run_daemon):
    daemon = run_daemon("nsqd", "--max-channel-consumers=1")
    first = await WireClient.connect(daemon.tcp_address)
    await first.subscribe("limited", "c")
    second = await WireClient.connect(daemon.tcp_address)
    await second.send(commands.sub("limited", "c"))
    assert await second.error() == b"E_SUB_FAILED SUB failed consumers for limited:c exceeds limit of 1"
    assert await second.closed()
    await first.aclose()
    await second.aclose()
