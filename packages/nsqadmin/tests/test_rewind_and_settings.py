"""What the rewind form and the settings forms take (beyond NSQ), before any daemon is
asked: the targets and settings nsqd would accept, refused with a reason otherwise."""

import pytest
from nsqadmin.actions import Report
from nsqadmin.cluster_actions import ActionResult
from nsqadmin.rewind import RewindError, RewindTarget
from nsqadmin.rewind import parse as parse_rewind
from nsqadmin.settings import SettingError, Settings
from nsqadmin.settings import parse as parse_settings
from nsqadmin.views import rewind_default


def test_rewind_targets_from_the_form_and_json():
    # the form's datetime-local input is UTC, as the pages show times; seconds optional
    at = parse_rewind({"to": "time", "time": "2026-05-01T12:30", "offset": ""})
    assert at == RewindTarget(timestamp=1777638600.0)
    assert at.params == {"timestamp": "1777638600"}
    assert at.describe() == "to 2026-05-01T12:30:00Z"
    assert parse_rewind({"to": "time", "time": "2026-05-01T14:30:15+02:00"}).timestamp == \
        1777638615.0
    assert parse_rewind({"to": "earliest", "time": "garbage"}).params == {"timestamp": "0"}
    assert parse_rewind({"to": "earliest"}).describe() == "to the earliest message kept"
    target = parse_rewind({"to": "offset", "offset": "1234", "time": "2026-05-01T12:30"})
    assert (target.params, target.describe()) == ({"offset": "1234"}, "to offset 1,234")
    # the JSON API: ``to`` implied by the one field given; numbers as numbers
    assert parse_rewind({"timestamp": 1700000000.25}).params == {"timestamp": "1700000000.25"}
    assert parse_rewind({"offset": 7}).offset == 7
    assert parse_rewind({"time": "2026-05-01T12:30:00Z"}).timestamp == 1777638600.0
    # a form whose radio button stayed at "a time" while only the offset was filled, and the
    # other way round: the field filled decides
    assert parse_rewind({"to": "time", "time": "", "offset": "5"}).offset == 5
    assert parse_rewind({"to": "offset", "time": "2026-05-01T12:30", "offset": ""}).timestamp \
        == 1777638600.0
    assert parse_rewind({"to": "time", "time": "2026-05-01T12:30", "offset": "5"}).offset is None


@pytest.mark.parametrize("fields", [
    {}, {"to": "tomorrow"}, {"timestamp": 1, "offset": 2}, {"to": "time"},
    {"to": "time", "time": "", "offset": ""},
    {"to": "time", "time": "yesterday"}, {"to": "time", "timestamp": "-5"},
    {"to": "time", "timestamp": "nan"}, {"to": "time", "timestamp": True},
    {"to": "time", "timestamp": "1e12"}, {"to": "offset"}, {"to": "offset", "offset": "-1"},
    {"to": "offset", "offset": "1.5"}, {"to": "offset", "offset": True},
    {"to": "offset", "offset": str(2**63)}, {"to": "offset", "offset": "٣"},
])
def test_rewind_targets_refused(fields):
    with pytest.raises(RewindError):
        parse_rewind(fields)


def test_the_forms_default_time_is_now_in_utc():
    assert rewind_default(1777638615.9) == "2026-05-01T12:30:15"


def test_retention_and_start_settings():
    settings = parse_settings({"retention": "24h", "retention_bytes": "1000000",
                               "start": "earliest", "max_attempts": ""})
    assert (settings.retention, settings.retention_bytes, settings.start) == (
        86400 * 10**9, 1000000, "earliest")
    assert settings.topic_params == {"retention": "24h0m0s", "retention_bytes": "1000000"}
    assert settings.channel_params == {}  # start is for creating a channel only
    assert settings.create_channel_params == {"start": "earliest"}
    assert settings.describe() == ("retention 24h0m0s, retention 1,000,000 bytes, "
                                   "starting at the earliest")
    assert parse_settings({"retention": "90"}).retention == 90 * 10**9  # seconds, as nsqd
    assert parse_settings({"retention": 1.5}).topic_params == {"retention": "1.5s"}
    none = parse_settings({"retention": "0", "retention_bytes": 0})
    assert none.describe() == "no retention, no retention in bytes"
    assert none.topic_params == {"retention": "0s", "retention_bytes": "0"}
    # a settings form changes only its own kind's settings
    both = parse_settings({"retention": "1h", "max_attempts": "3", "start": "latest"})
    assert both.topic_only == Settings(retention=3600 * 10**9)
    assert both.channel_only == Settings(max_attempts=3)


@pytest.mark.parametrize(("fields", "error"), [
    ({"retention": "forever"}, "INVALID_RETENTION"),
    ({"retention": "-1h"}, "INVALID_RETENTION"),
    ({"retention": "10000000000"}, "INVALID_RETENTION"),
    ({"retention": True}, "INVALID_RETENTION"),
    ({"retention_bytes": "-1"}, "INVALID_RETENTION_BYTES"),
    ({"retention_bytes": str(2**63)}, "INVALID_RETENTION_BYTES"),
    ({"start": "middle"}, "INVALID_START"),
])
def test_settings_nsqd_would_refuse(fields, error):
    with pytest.raises(SettingError, match=error):
        parse_settings(fields)


def test_a_rewinds_report_says_where_the_channel_is_now():
    result = ActionResult("rewind_channel", ("a:4151", "b:4151"), outcome=(
        "Its position now: offset 3 on a:4151, offset 0 on b:4151."),
        offsets=(("a:4151", 3), ("b:4151", 0)))
    report = Report.of(result, "t/c to the earliest message kept")
    assert report.headline == ("Rewound channel t/c to the earliest message kept on 2 daemons. "
                               "Its position now: offset 3 on a:4151, offset 0 on b:4151.")
    assert Report.decode(report.encode()) == report
