"""Alertmanager webhook parsing: real captured payloads in, exact fields out; bad input -> PayloadError."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.relay.harness import FIXTURES
from xpuwatch.alerts.relay.webhook import Notification, PayloadError, _typed, parse_body, parse_plain


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
        (  # accepted on main: the sender's summarised counter overflowed, the bot refused the part
            b'{"version": "4", "truncatedAlerts": ' + b"9" * 4000 + b', "alerts": [{"status": "firing", '
            b'"labels": {"a": "b"}}]}',
            "'truncatedAlerts' must be at most 1000000000",
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


def outcome(parse: Any, body: bytes) -> Any:
    try:
        return parse(body)
    except PayloadError as exc:
        return f"PayloadError: {exc}"


def nested(depth: int) -> Any:
    doc: Any = 1
    for i in range(depth):
        doc = [doc] if i % 2 else {"k": doc}
    return doc


BIG = "<an integer of 4,301 digits>"  # json.dumps cannot write one: put in after dumping
TIMES = [
    "2024-05-01T10:00:00Z",
    "2017-10-21T15:50:28.806970326-02:00",
    "0001-01-01T00:00:00Z",
    "",
    "yesterday",
]
strs = st.text(max_size=4) | st.sampled_from(["a\ud800", "\U0001f600", "é"])
str_maps = st.dictionaries(strs, strs, max_size=3)
odd = st.sampled_from([None, 0, 1, -1, True, 1.0, [], {}, {"a": 1}, "x"])
members = st.integers(0, 34).map(nested) | st.just(BIG) | st.just("9" * 4400) | json_values
alert = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["firing", "resolved"]) | odd,
        "labels": str_maps | odd,
        "annotations": str_maps | odd,
        "startsAt": st.sampled_from(TIMES) | odd,
        "endsAt": st.sampled_from(TIMES) | odd,
        "generatorURL": strs | odd,
        "fingerprint": strs | odd,
        "extra": members,
    },
)
webhook_body = st.fixed_dictionaries(
    {},
    optional={
        "version": st.sampled_from(["4", "3", 4]) | odd,
        "alerts": st.lists(alert, max_size=3) | odd,
        "receiver": strs | odd,
        "status": st.sampled_from(["firing", "resolved"]) | odd,
        "groupKey": strs | odd,
        "groupLabels": str_maps | odd,
        "commonLabels": str_maps | odd,
        "commonAnnotations": str_maps | odd,
        "externalURL": strs | odd,
        "truncatedAlerts": st.integers(-1, 2**70) | odd,
        "extra": members,
    },
)

valid_alert = st.fixed_dictionaries(
    {"status": st.sampled_from(["firing", "resolved"]), "labels": st.dictionaries(strs, strs, min_size=1)},
    optional={
        "annotations": str_maps | st.none(),
        "startsAt": st.sampled_from(TIMES[:4]) | st.none(),
        "endsAt": st.sampled_from(TIMES[:4]) | st.none(),
        "generatorURL": strs,
        "fingerprint": strs | st.none(),
        "extra": members,
    },
)
valid_body = st.fixed_dictionaries(
    {"version": st.sampled_from(["4", "3"]), "alerts": st.lists(valid_alert, min_size=1, max_size=3)},
    optional={
        "receiver": strs,
        "status": st.sampled_from(["firing", "resolved"]),
        "groupKey": strs | st.none(),
        "groupLabels": str_maps | st.none(),
        "commonLabels": str_maps | st.none(),
        "commonAnnotations": str_maps | st.none(),
        "externalURL": strs,
        "truncatedAlerts": st.integers(0, 2**70),
        "extra": members,
    },
)


@st.composite
def spoilt(draw: Any) -> dict[str, Any]:
    """A valid body with one member of it or of an alert set to something odd."""
    doc = draw(valid_body)
    target = doc if draw(st.booleans()) else draw(st.sampled_from(doc["alerts"]))
    target[draw(st.sampled_from(sorted(target)))] = draw(odd | members)
    return doc


@settings(max_examples=1500, deadline=None)
@given(valid_body | spoilt() | webhook_body, st.booleans())
def test_the_typed_path_agrees_with_the_plain_one(doc, ascii_only):
    """msgspec's path (``_typed``) gives exactly what the plain path gives, or leaves the body to it: same
    parsed notification, same 400 reasons (nesting over 32, 4,301-digit integers, lone surrogates, shapes)."""
    body = json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    body = body.replace(json.dumps(BIG).encode(), b"9" * 4301)
    plain = outcome(parse_plain, body)
    typed = _typed(body)
    assert typed is None or typed == plain
    assert outcome(parse_body, body) == plain


def test_the_typed_path_takes_alertmanager_bodies_and_leaves_bounds_to_the_plain_one():
    """Fails before msgspec: no typed path. A real body (10 alerts: 35 containers, more than the depth
    bound's cheap count) is parsed by msgspec; a member nested 33 deep inside an alert, or holding a
    4,301-digit integer, is skipped by msgspec unseen, so the plain path is asked and refuses it."""
    doc = json.loads(load("am-issue2447-firing-captured.json"))
    doc["alerts"] = [dict(a) for a in doc["alerts"] * 10]
    assert _typed(json.dumps(doc).encode()) == parse_plain(json.dumps(doc).encode())
    doc["alerts"][3]["extra"] = nested(30)  # 3 levels above it: 33
    assert _typed(json.dumps(doc).encode()) is None
    assert (
        outcome(parse_body, json.dumps(doc).encode()) == "PayloadError: body is nested deeper than 32 levels"
    )
    doc["alerts"][3]["extra"] = nested(27)  # 30 deep; the cheap count adds the 2 "{" of groupKey: 32
    assert _typed(json.dumps(doc).encode()) == parse_plain(json.dumps(doc).encode())
    doc["alerts"][3]["extra"] = [BIG]
    body = json.dumps(doc).encode().replace(json.dumps(BIG).encode(), b"9" * 4301)
    assert _typed(body) is None
    assert outcome(parse_body, body).startswith("PayloadError: body is not JSON: Exceeds the limit (4300")
    doc["alerts"][3]["extra"] = "9" * 4301  # digits in a string: left to the plain path, which accepts them
    assert _typed(json.dumps(doc).encode()) is None
    assert isinstance(parse_body(json.dumps(doc).encode()), Notification)
