"""Action reports (headline, flash cookie round trip) and form checks, without a cluster."""

from nsqadmin.actions import Report, same_origin
from nsqadmin.cluster_actions import ActionResult
from nsqadmin.upstream import UpstreamError
from starlette.requests import Request


def request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw})


def test_headlines():
    ok = Report.of(ActionResult("pause_channel", ("a:1", "b:1")), "t/c")
    assert (ok.level, ok.headline) == ("ok", "Paused channel t/c on 2 daemons.")
    nothing = Report.of(ActionResult("empty_topic"), "t")
    assert nothing.headline == "Emptied topic t: no daemon hosts it, nothing to do."
    errors = (UpstreamError("l:2", "POST one"), UpstreamError("l:2", "POST two"))
    partial = Report.of(ActionResult("create_channel", ("l:1", "l:1", "n:1"), errors), "t/c")
    assert partial.level == "warning"
    assert partial.headline == "Created channel t/c on 2 daemons; failed on 1 daemon."
    failed = Report.of(ActionResult("delete_topic", (), errors[:1]), "t")
    assert (failed.level, failed.headline) == ("error", "Could not delete t: 1 daemon failed.")


def test_flash_round_trip_and_garbage():
    report = Report("pause_topic", "t", ("a:1",), (("b:1", "refused \u2013 \"x\""),))
    encoded = report.encode()
    assert "=" not in encoded and ";" not in encoded
    assert Report.decode(encoded) == report
    assert Report.decode("not base64 !") is None
    assert Report.decode("e30") is None  # "{}"


def test_same_origin():
    assert same_origin(request({"host": "admin:4171"}))
    assert same_origin(request({"host": "admin:4171", "origin": "http://admin:4171"}))
    assert not same_origin(request({"host": "admin:4171", "origin": "http://evil"}))
    assert not same_origin(request({"host": "admin:4171", "sec-fetch-site": "cross-site"}))
    assert not same_origin(request({"host": "admin:4171", "origin": "null"}))
