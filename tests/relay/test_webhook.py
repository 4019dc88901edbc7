"""Alertmanager webhook parsing: real captured payloads in, exact fields out; bad input -> PayloadError."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.relay.webhook import PayloadError, parse_body
from tests.relay.harness import FIXTURES


def load(name: str) -> bytes:
    return (FIXTURES / "alertmanager" / name).read_bytes()


def test_captured_v4_payload():
    n = parse_body(load("am-issue2447-firing-captured.json"))
    assert n.receiver == "web\\.hook"
    assert n.group_key == '{}:{alertname="DemoAlert"}'
    assert n.truncated_alerts == 0
    (a,) = n.alerts
    assert a.fingerprint == "8a07086b74f3ba78"
    assert a.generator_url.endswith("%3C+3&g0.tab=1")  # \u0026 decoded
    assert a.starts_at == datetime(2021, 1, 7, 8, 38, 0, 32813, tzinfo=UTC)
    assert a.ends_at is None


def test_mixed_firing_resolved_without_fingerprints():
    n = parse_body(load("am-issue1051-mixed-firing-resolved.json"))
    assert [a.status for a in n.alerts] == ["firing", "resolved"]
    assert n.status == "firing"
    assert n.alerts[0].labels["status"] == "firing"  # a label named "status" is just a label
    assert n.alerts[1].ends_at == datetime(
        2017, 10, 21, 15, 50, 28, 806970, tzinfo=timezone(timedelta(hours=-2))
    )
    assert len({a.fingerprint for a in n.alerts}) == 2  # derived from labels


def test_legacy_v3_without_group_key():
    n = parse_body(load("dingtalk-playground-demo-v3.json"))
    assert n.version == "3"
    assert n.group_key == '{}:{alertname="something_happened", instance="server01.example.internal:9100"}'


def test_digest_depends_on_fingerprints_and_statuses_only():
    doc = json.loads(load("am-issue2447-firing-captured.json"))
    a = parse_body(json.dumps(doc).encode())
    doc["alerts"][0]["annotations"]["summary"] = "changed"
    assert parse_body(json.dumps(doc).encode()).digest() == a.digest()
    doc["alerts"][0]["status"] = "resolved"
    assert parse_body(json.dumps(doc).encode()).digest() != a.digest()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "body is not JSON"),
        (b"[]", "body must be a JSON object"),
        (b'{"version": "4"}', "'alerts' must be a non-empty list"),
        (b'{"version": 4, "alerts": [1]}', "unsupported version 4"),
        (b'{"version": "4", "alerts": [1]}', "alerts[0] must be an object"),
        (b'{"version": "4", "alerts": [{"status": "x"}]}', "alerts[0].status must be firing or resolved"),
        (
            b'{"version": "4", "alerts": [{"status": "firing", "labels": {"a": 1}}]}',
            "alerts[0].labels must be",
        ),
        (
            b'{"version": "4", "alerts": [{"status": "firing", "labels": {"a": "b"}, "startsAt": "yesterday"}]}',
            "alerts[0].startsAt: not an RFC 3339 time",
        ),
        (
            b'{"version": "4", "truncatedAlerts": -1, "alerts": [{"status": "firing", "labels": {"a": "b"}}]}',
            "'truncatedAlerts' must be",
        ),
    ],
)
def test_malformed_bodies_say_why(body, reason):
    with pytest.raises(PayloadError) as err:
        parse_body(body)
    assert str(err.value).startswith(reason)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_body_parses_or_raises_payload_error(body):
    with contextlib.suppress(PayloadError):
        parse_body(body)
