"""Webhook payload parsing: captured Alertmanager payloads in, exact Alerts out; garbage in, PayloadError out."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from xpuwatch.remediation.alert import PayloadError, parse_payload, parse_time

AM = FIXTURES / "alertmanager"


def test_child_route_payload() -> None:
    alerts = parse_payload((AM / "am-child-route-groupkey-p0.json").read_bytes())
    assert len(alerts) == 1
    a = alerts[0]
    assert (a.status, a.name, a.fingerprint) == ("firing", "Instance Is Down", "4e4c4c3d872bf6d8")
    assert a.starts_at == datetime(2022, 12, 2, 10, 0, 20, 381000, tzinfo=UTC)
    assert a.key == "4e4c4c3d872bf6d8@2022-12-02T10:00:20Z"
    assert a.group_key == '{}/{priority="P0"}:{alertname="Instance Is Down", priority="P0"}'
    assert a.action == "none"  # no action label: the policy ignores it


def test_mixed_firing_resolved_with_nanoseconds_and_offsets() -> None:
    alerts = parse_payload((AM / "am-issue1051-mixed-firing-resolved.json").read_bytes())
    assert [a.status for a in alerts] == ["firing", "resolved"]
    # "2017-10-21T15:50:17.16095407-02:00": Go's 8 fractional digits, a negative offset.
    assert alerts[0].starts_at == datetime(2017, 10, 21, 17, 50, 17, 160954, tzinfo=UTC)
    # No fingerprint in this (pre-0.19) capture: a stable stand-in from the label set.
    assert alerts[0].fingerprint != alerts[1].fingerprint and len(alerts[0].fingerprint) == 16


def test_captured_firing_payload() -> None:
    alerts = parse_payload((AM / "am-issue2447-firing-captured.json").read_bytes())
    assert all(a.status == "firing" for a in alerts) and alerts


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "body is not JSON"),
        (b"\xff\xfe", "body is not UTF-8"),
        (b"[]", "body: expected a JSON object"),
        (b'{"version": "3", "alerts": []}', 'version: expected "4"'),
        (b'{"version": "4"}', "alerts: expected a list"),
        (b'{"version": "4", "alerts": [1]}', "alerts[0]: expected an object"),
        (
            b'{"version": "4", "alerts": [{"status": "pending"}]}',
            "alerts[0].status: expected firing or resolved",
        ),
        (
            b'{"version": "4", "alerts": [{"status": "firing", "labels": {"a": 1}}]}',
            "alerts[0].labels: expected an object of strings",
        ),
        (
            b'{"version": "4", "alerts": [{"status": "firing", "labels": {}}]}',
            "alerts[0].startsAt: expected an RFC 3339 timestamp",
        ),
        (
            b'{"version": "4", "alerts": [{"status": "firing", "startsAt": "2024-01-01T00:00:00"}]}',
            "alerts[0].startsAt: timestamp without a time zone",
        ),
    ],
)
def test_malformed_payloads_say_why(body: bytes, reason: str) -> None:
    with pytest.raises(PayloadError) as err:
        parse_payload(body)
    assert str(err.value).startswith(reason)


def test_parse_time_go_zero_and_z() -> None:
    assert parse_time("0001-01-01T00:00:00Z", "t") == datetime(1, 1, 1, tzinfo=UTC)
    assert parse_time("2024-05-01T10:00:00.123456789Z", "t") == datetime(
        2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC
    )


scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=12)
alert_dicts = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["firing", "resolved", "pending", 1]) | scalars,
        "labels": st.dictionaries(st.text(max_size=8), st.text(max_size=8) | st.integers(), max_size=3)
        | scalars,
        "annotations": st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=2) | scalars,
        "startsAt": st.sampled_from(["2024-01-01T00:00:00Z", "2024-01-01T00:00:00.123456789+02:00", "x", ""])
        | scalars,
        "fingerprint": st.text(max_size=8) | scalars,
    },
)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_bytes_never_crash(body: bytes) -> None:
    with contextlib.suppress(PayloadError):
        parse_payload(body)


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries(
        {"version": st.sampled_from(["4", 4, None]), "alerts": st.lists(alert_dicts, max_size=3) | scalars}
    )
)
def test_fuzz_shapes_never_crash(doc: dict) -> None:
    try:
        alerts = parse_payload(json.dumps(doc).encode())
    except PayloadError:
        return
    assert all(a.status in ("firing", "resolved") for a in alerts)


def test_an_annotation_nested_past_the_recursion_limit_reads_as_absent() -> None:
    """Fails on main: ``decode`` promised never to raise, but 100,000 ``[`` in a progress annotation (anyone
    who may annotate the node can write one) raised RecursionError at every tick."""
    from xpuwatch.remediation.progress import decode, last_time

    deep = "[" * 100_000
    assert decode("drain", deep) is None
    assert last_time({"xpuwatch.io/last-drain": deep}, "drain") is None
