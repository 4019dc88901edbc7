"""Relay end to end in-process: Alertmanager payloads in, fake WeCom / Feishu bots out, over real HTTP."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from tests.relay.fakebots import FakeFeishu, FakeWeCom, Fault
from tests.relay.harness import TOKEN, Harness, alertmanager_fixtures, metric_value, settings_for, start_relay
from xpuwatch.alerts.relay.config import RateLimit
from xpuwatch.exporter import catalog as C
from xpuwatch.exporter import listener

FAST_WECOM = [{"count": 20, "per_seconds": 0.2}]
FAST_FEISHU = [{"count": 5, "per_seconds": 0.05}, {"count": 100, "per_seconds": 1.0}]


def payload(name: str = "am-issue2447-firing-captured.json") -> dict:
    path = Path(__file__).parent.parent / "fixtures" / "alertmanager" / name
    return json.loads(path.read_text())


@pytest.fixture
async def bots():
    wecom = FakeWeCom(limits=(RateLimit(20, 0.2),))
    feishu = FakeFeishu(
        limits=(RateLimit(5, 0.05), RateLimit(100, 1.0)), secret="feishu-secret", keywords=["gpu-alerts"]
    )
    await wecom.start()
    await feishu.start()
    yield wecom, feishu
    await wecom.stop()
    await feishu.stop()


async def relay_for(tmp_path: Path, wecom: FakeWeCom, feishu: FakeFeishu, **extra) -> Harness:
    channels = {
        "oncall-wecom": {"type": "wecom", "url": wecom.url(), "rate_limits": FAST_WECOM},
        "team-feishu": {
            "type": "feishu",
            "url": feishu.url(),
            "secret": "feishu-secret",
            "keyword": "gpu-alerts",
            "rate_limits": FAST_FEISHU,
        },
        **extra.pop("channels", {}),
    }
    return await start_relay(settings_for(tmp_path, channels, **extra))


@pytest.mark.parametrize("fixture", [p.name for p in alertmanager_fixtures()])
async def test_every_fixture_renders_and_delivers_to_both_bots(tmp_path, bots, fixture):
    wecom, feishu = bots
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        doc = payload(fixture)
        assert (await h.post("oncall-wecom", doc))[0] == 200
        assert (await h.post("team-feishu", doc))[0] == 200
        await h.settle()
    finally:
        await h.close()
    assert wecom.codes() == ["0"]
    assert feishu.codes() == ["0"]
    content = wecom.accepted[0]["markdown"]["content"]
    name = doc["alerts"][0]["labels"]["alertname"].replace("_", "_")
    assert name in content
    assert f"Firing ({sum(a['status'] == 'firing' for a in doc['alerts'])})" in content
    assert "ended" not in content.split("Resolved")[0]  # firing alerts show no end time
    card = feishu.accepted[0]["card"]
    assert card["header"]["template"] in ("red", "orange")
    assert "sign" in feishu.accepted[0] and "timestamp" in feishu.accepted[0]


@pytest.mark.slow
async def test_retry_on_5xx_timeout_and_rate_limit_then_deliver_once(tmp_path, bots, caplog):
    wecom, feishu = bots
    wecom.faults.extend(
        [
            Fault(status=502, body={"error": "bad gateway"}),
            Fault(delay=1.0),  # longer than request_timeout_seconds below
            Fault(body={"errcode": 45009, "errmsg": "api freq out of limit"}),
            Fault(body={"errcode": -1, "errmsg": "system busy"}),
        ]
    )
    feishu.faults.extend(
        [
            Fault(status=400, body={"code": 9499, "msg": "too many request", "data": {}}),
            Fault(body={"code": 11232, "data": {}, "msg": "frequency limited psm[x]appID[1]"}),
            Fault(status=503, body={}),
        ]
    )
    h = await relay_for(tmp_path, wecom, feishu, request_timeout_seconds=0.3)
    try:
        assert (await h.post("oncall-wecom", payload()))[0] == 200
        assert (await h.post("team-feishu", payload()))[0] == 200
        await h.settle()
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
    assert [c for c in wecom.codes() if c != "late"] == ["http_502", "45009", "-1", "0"]
    assert len(wecom.accepted) == 1
    assert feishu.codes() == ["9499", "11232", "http_503", "0"]
    assert len(feishu.accepted) == 1
    # the wait is the window the bot says was hit (FAST_FEISHU: 5 per 0.05 s, 100 per 1 s), and the log says it
    assert "team-feishu: 9499 (too many request), retry in 0.05s" in caplog.text
    assert "team-feishu: 11232 (frequency limited psm[x]appID[1]), retry in 1.00s" in caplog.text
    assert "oncall-wecom: 45009 (api freq out of limit), retry in 0.20s" in caplog.text
    assert metric_value(text, C.RELAY_RETRIES.name, channel="oncall-wecom", reason="timeout") == 1
    assert metric_value(text, C.RELAY_RETRIES.name, channel="oncall-wecom", reason="45009") == 1
    assert metric_value(text, C.RELAY_RETRIES.name, channel="team-feishu", reason="11232") == 1
    assert metric_value(text, C.RELAY_DELIVERED.name, channel="oncall-wecom") == 1
    assert metric_value(text, C.RELAY_DELIVERED.name, channel="team-feishu") == 1
    assert metric_value(text, C.RELAY_QUEUE_DEPTH.name, channel="oncall-wecom") == 0


async def test_permanent_failures_are_recorded_with_code_and_not_retried(tmp_path, bots):
    wecom, feishu = bots
    channels = {
        "bad-key": {"type": "wecom", "url": wecom.url("removed-key"), "rate_limits": FAST_WECOM},
        "bad-sign": {"type": "feishu", "url": feishu.url(), "secret": "wrong", "keyword": "gpu-alerts"},
        "no-keyword": {"type": "feishu", "url": feishu.url() + "?x=1", "secret": "feishu-secret"},
    }
    h = await relay_for(tmp_path, wecom, feishu, channels=channels)
    try:
        for name in channels:
            assert (await h.post(name, payload()))[0] == 200
        await h.settle()
        text = (await h.get("/metrics"))[1]
        rows = {r["channel"]: (r["state"], r["code"], r["attempts"]) for r in h.relay.outbox.messages()}
    finally:
        await h.close()
    assert rows == {
        "bad-key": ("failed", "93000", 1),
        "bad-sign": ("failed", "19021", 1),
        "no-keyword": ("failed", "19024", 1),
    }
    assert wecom.codes() == ["93000"]
    assert sorted(feishu.codes()) == ["19021", "19024"]
    assert metric_value(text, C.RELAY_FAILED.name, channel="bad-key", reason="93000") == 1
    assert metric_value(text, C.RELAY_FAILED.name, channel="bad-sign", reason="19021") == 1


async def test_repeat_within_window_sends_nothing_new(tmp_path, bots):
    wecom, feishu = bots
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        first = await h.post("oncall-wecom", payload())
        await h.settle()
        second = await h.post("oncall-wecom", payload())
        await h.settle()
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
    assert first == (200, {"status": "queued", "stored": 1})
    assert second == (200, {"status": "duplicate", "stored": 0})
    assert len(wecom.accepted) == 1
    assert metric_value(text, C.RELAY_DEDUPLICATED.name, channel="oncall-wecom") == 1


def big_group(n: int, status: str = "firing", group: str = "g0") -> dict:
    alerts = []
    for i in range(n):
        alerts.append(
            {
                "status": status,
                "labels": {
                    "alertname": "AcceleratorEccUncorrectable",
                    "severity": "critical",
                    "node": f"node-{i}",
                    "device": str(i % 8),
                    "uuid": f"GPU-{group}-{i:04d}",
                    "vendor": "nvidia",
                },
                "annotations": {"summary": "显存不可纠正 ECC 错误 " * 3, "description": f"{i} errors"},
                "startsAt": "2024-05-01T10:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2024-05-01T10:05:00Z",
                "generatorURL": "http://prometheus.example.internal/graph",
                "fingerprint": f"{group}-{i:04d}-{status}",
            }
        )
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="AcceleratorEccUncorrectable", group="{group}"}}',
        "truncatedAlerts": 0,
        "status": "firing" if status == "firing" else "resolved",
        "receiver": "r",
        "groupLabels": {"alertname": "AcceleratorEccUncorrectable"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example.internal:9093",
        "alerts": alerts,
    }


async def test_part_already_delivered_is_not_resent_when_a_later_part_fails(tmp_path, bots):
    wecom, feishu = bots
    wecom.faults.extend([Fault(body={"errcode": 0, "errmsg": "ok"}), Fault(status=500, body={})])
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        assert (await h.post("oncall-wecom", big_group(30)))[0] == 200
        await h.settle()
        rows = h.relay.outbox.messages("oncall-wecom")
    finally:
        await h.close()
    parts = rows[0]["parts"]
    assert parts >= 3
    assert [r["attempts"] for r in rows] == [1, 2] + [1] * (parts - 2)
    assert wecom.codes() == ["0", "http_500"] + ["0"] * (parts - 1)
    # the first part was answered by the scripted fault (not recorded as accepted); the rest once each
    markers = [b["markdown"]["content"].split("\n")[0].rsplit(" ", 1)[1] for b in wecom.accepted]
    assert markers == [f"({i}/{parts})" for i in range(2, parts + 1)]


async def test_overflow_is_summarised_not_dropped(tmp_path, bots):
    wecom, feishu = bots
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        doc = big_group(200)
        doc["truncatedAlerts"] = 7
        assert (await h.post("oncall-wecom", doc))[0] == 200
        assert (await h.post("team-feishu", doc))[0] == 200
        await h.settle()
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
    assert len(wecom.accepted) == 5  # max_parts default
    listed = len({u for b in wecom.accepted for u in re.findall(r"GPU-g0-\d{4}", b["markdown"]["content"])})
    last = wecom.accepted[-1]["markdown"]["content"]
    assert f"… {200 - listed + 7} more alerts ({200 - listed} firing, 0 resolved not shown)" in last
    assert metric_value(text, C.RELAY_SUMMARISED.name, channel="oncall-wecom") == 200 - listed + 7
    fs_listed = len({u for b in feishu.accepted for u in re.findall(r"GPU-g0-\d{4}", json.dumps(b))})
    assert f"… {200 - fs_listed + 7} more alerts" in json.dumps(feishu.accepted[-1], ensure_ascii=False)


async def test_inbound_auth_size_malformed_and_unknown_channel(tmp_path, bots):
    wecom, feishu = bots
    h = await relay_for(tmp_path, wecom, feishu, max_body_bytes=4096)
    try:
        assert (await h.post("oncall-wecom", payload(), token="wrong"))[0] == 401
        assert (await h.post("oncall-wecom", payload(), token=""))[0] == 401
        status, body = await h.post("nope", payload())
        assert (status, body["error"]) == (
            404,
            "unknown channel 'nope'; configured: ['oncall-wecom', 'team-feishu']",
        )
        status, body = await h.post("oncall-wecom", b"{not json")
        assert status == 400 and body["error"].startswith("body is not JSON")
        status, body = await h.post("oncall-wecom", {"version": "4", "alerts": []})
        assert (status, body["error"]) == (400, "'alerts' must be a non-empty list")
        status, body = await h.post("oncall-wecom", {"version": "9", "alerts": [{}]})
        assert (status, body["error"]) == (400, "unsupported version '9'; expected one of ['4', '3']")
        status, body = await h.post("oncall-wecom", big_group(40))
        assert status == 413
        text = (await h.get("/metrics"))[1]
        assert (await h.get("/healthz"))[0] == 200
        assert (await h.get("/readyz"))[0] == 200
    finally:
        await h.close()
    assert metric_value(text, C.RELAY_REJECTED.name, reason="unauthorized") == 2
    assert metric_value(text, C.RELAY_REJECTED.name, reason="unknown_channel") == 1
    assert metric_value(text, C.RELAY_REJECTED.name, reason="malformed") == 3
    assert metric_value(text, C.RELAY_REJECTED.name, reason="too_large") == 1
    assert wecom.accepted == []


async def test_basic_auth_accepted(tmp_path, bots):
    import base64

    wecom, feishu = bots
    h = await relay_for(tmp_path, wecom, feishu)
    h.relay.settings = h.relay.settings.__class__(
        **{**h.relay.settings.__dict__, "auth": h.relay.settings.auth.__class__("", "am", "pa:ss")}
    )
    try:
        good = base64.b64encode(b"am:pa:ss").decode()
        bad = base64.b64encode(b"am:nope").decode()
        assert (
            await h.post("oncall-wecom", payload(), token="", headers={"Authorization": f"Basic {good}"})
        )[0] == 200
        assert (await h.post("oncall-wecom", payload(), token="", headers={"Authorization": f"Basic {bad}"}))[
            0
        ] == 401
        await h.settle()
    finally:
        await h.close()
    assert len(wecom.accepted) == 1


async def test_store_failure_answers_503(tmp_path, bots):
    wecom, feishu = bots
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        h.relay.outbox._db.execute("DROP TABLE notifications")  # the disk "breaks"
        status, body = await h.post("oncall-wecom", payload())
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
    assert status == 503 and body["error"].startswith("could not store the notification")
    assert metric_value(text, C.RELAY_REJECTED.name, reason="store_failed") == 1
    assert metric_value(text, C.RELAY_OUTBOX_UP.name) == 0


async def test_restart_delivers_what_was_pending(tmp_path, bots):
    wecom, feishu = bots
    wecom.stall_after = 0  # the bot hangs: nothing gets through before the "crash"
    h = await relay_for(tmp_path, wecom, feishu, request_timeout_seconds=0.2)
    try:
        assert (await h.post("oncall-wecom", payload()))[0] == 200
        assert (await h.post("oncall-wecom", payload("am-issue1051-mixed-firing-resolved.json")))[0] == 200
    finally:
        await h.close()
    wecom.release()
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        await h.settle()
    finally:
        await h.close()
    assert [b["markdown"]["content"].split("\n")[0] for b in wecom.accepted] == [
        "## [FIRING:1] DemoAlert",
        "## [FIRING:1 RESOLVED:1] ServerStop prod",
    ]


async def test_mentions_wecom_markdown_and_mobile_followup_feishu_at(tmp_path, bots):
    wecom, feishu = bots
    channels = {
        "oncall-wecom": {
            "type": "wecom",
            "url": wecom.url(),
            "rate_limits": FAST_WECOM,
            "mentions": {"users": ["zhangsan"], "mobiles": ["13800001111"]},
        },
        "team-feishu": {
            "type": "feishu",
            "url": feishu.url(),
            "secret": "feishu-secret",
            "keyword": "gpu-alerts",
            "mentions": {"open_ids": ["ou_18eac8abc"], "all": True},
        },
    }
    h = await relay_for(tmp_path, wecom, feishu, channels=channels)
    try:
        await h.post("oncall-wecom", payload())
        await h.post("team-feishu", payload())
        await h.settle()
    finally:
        await h.close()
    assert wecom.accepted[0]["markdown"]["content"].endswith("<@zhangsan>")
    assert wecom.accepted[1] == {
        "msgtype": "text",
        "text": {"content": "[FIRING:1] DemoAlert", "mentioned_mobile_list": ["13800001111"]},
    }
    mention_div = feishu.accepted[0]["card"]["elements"][-2]
    assert mention_div == {
        "tag": "div",
        "text": {"tag": "lark_md", "content": "<at id=ou_18eac8abc></at> <at id=all></at>"},
    }


async def test_identical_part_from_another_group_key_is_not_queued_twice(tmp_path, bots):
    wecom, feishu = bots
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        doc = payload()
        first = await h.post("oncall-wecom", doc)
        doc["groupKey"] = '{}/{replica="b"}:{alertname="DemoAlert"}'  # e.g. an HA peer with another route
        second = await h.post("oncall-wecom", doc)
        await h.settle()
        states = [m["state"] for m in h.relay.outbox.messages("oncall-wecom")]
    finally:
        await h.close()
    assert first[1] == second[1] == {"status": "queued", "stored": 1}  # two notifications stored
    assert len(wecom.accepted) == 1  # the second's only part has the same body for the same episode
    assert states == ["delivered"]


async def test_hostile_labels_delivered_intact_over_http(tmp_path, bots):
    import html

    wecom, feishu = bots
    nasty = 'a"b\\c\nd *e* _f_ `g` [h](http://x) </at><at id=all></at> <@all> 显存告警'
    doc = payload()
    doc["alerts"][0]["labels"]["pod"] = nasty
    doc["alerts"][0]["annotations"]["summary"] = nasty
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        assert (await h.post("oncall-wecom", doc))[0] == 200
        assert (await h.post("team-feishu", doc))[0] == 200
        await h.settle()
    finally:
        await h.close()
    assert wecom.codes() == ["0"] and feishu.codes() == ["0"]
    content = wecom.accepted[0]["markdown"]["content"]
    assert "<@" not in content and "](http://x)" not in content
    assert 'a"b\\c\nd ＊e＊ _f_ ｀g｀ [h］(http://x) ＜/at＞＜at id=all＞＜/at＞ ＜@all＞ 显存告警' in content
    lark = "\n".join(
        e["text"]["content"] for e in feishu.accepted[0]["card"]["elements"] if e["tag"] == "div"
    )
    assert "<at" not in lark
    assert nasty in html.unescape(lark)


async def test_render_bug_is_recorded_with_the_payload_not_retried_forever(tmp_path, bots, monkeypatch):
    import xpuwatch.alerts.relay.sender as sender

    def broken(*args, **kwargs):
        raise RuntimeError("bug")

    wecom, feishu = bots
    monkeypatch.setattr(sender, "render", broken)
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        status, body = await h.post("oncall-wecom", payload())
        await h.settle()
        text = (await h.get("/metrics"))[1]
        state = h.relay.outbox._db.execute(
            "SELECT state, reason, length(payload) FROM notifications"
        ).fetchall()
    finally:
        await h.close()
    assert (status, body) == (200, {"status": "queued", "stored": 1})  # validated and stored: never lost
    assert state == [("failed", "render failed: RuntimeError: bug", len(json.dumps(payload())))]
    assert metric_value(text, C.RELAY_FAILED.name, channel="oncall-wecom", reason="render_failed") == 1
    assert wecom.accepted == []


def alert_doc(
    status: str, starts: str, fingerprint: str = "f1", name: str = "GpuLost", **labels: str
) -> dict:
    return {
        "status": status,
        "labels": {"alertname": name, "severity": "critical", "node": "n1", **labels},
        "annotations": {"summary": "device lost"},
        "startsAt": starts,
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2024-05-01T10:03:00Z",
        "fingerprint": fingerprint,
    }


def notification(*alerts: dict) -> dict:
    return {
        "version": "4",
        "receiver": "oncall",
        "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
        "groupKey": '{}:{alertname="GpuLost"}',
        "groupLabels": {"alertname": "GpuLost"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example.internal:9093",
        "truncatedAlerts": 0,
        "alerts": list(alerts),
    }


@pytest.mark.parametrize("template", [None, "{{ alert.alertname }} {{ alert.status }}"])
async def test_refire_after_resolve_is_delivered_and_a_retry_is_not(tmp_path, bots, template):
    """Fire, Alertmanager's retry of it, resolve, fire again (new startsAt, same fingerprint): three messages,
    also with a template that shows no time (identical text for both firings)."""
    wecom, feishu = bots
    extra = {"templates": {"alert": template}} if template else {}
    channels = {"oncall-wecom": {"type": "wecom", "url": wecom.url(), "rate_limits": FAST_WECOM, **extra}}
    h = await relay_for(tmp_path, wecom, feishu, channels=channels)
    try:
        answers = [
            (await h.post("oncall-wecom", notification(alert_doc(s, t))))[1]["status"]
            for s, t in [
                ("firing", "2024-05-01T10:00:00Z"),
                ("firing", "2024-05-01T10:00:00Z"),
                ("resolved", "2024-05-01T10:00:00Z"),
                ("firing", "2024-05-01T10:05:00Z"),
            ]
        ]
        await h.settle()
    finally:
        await h.close()
    assert answers == ["queued", "duplicate", "queued", "queued"]
    contents = [b["markdown"]["content"] for b in wecom.accepted]
    assert [c.split("\n", 1)[0] for c in contents] == [
        "## [FIRING:1] GpuLost",
        "## [RESOLVED:1] GpuLost",
        "## [FIRING:1] GpuLost",
    ]


async def test_second_alert_of_a_group_mentions_again_and_severity_filter(tmp_path, bots):
    wecom, feishu = bots
    mentions = {"mobiles": ["13800001111"], "severities": ["critical"]}
    channels = {
        "oncall-wecom": {"type": "wecom", "url": wecom.url(), "rate_limits": FAST_WECOM, "mentions": mentions}
    }
    first = alert_doc("firing", "2024-05-01T10:00:00Z")
    second = alert_doc("firing", "2024-05-01T10:01:00Z", fingerprint="f2", device="3")
    quiet = alert_doc("firing", "2024-05-01T10:02:00Z", fingerprint="f3", name="GpuHot")
    quiet["labels"]["severity"] = "warning"
    h = await relay_for(tmp_path, wecom, feishu, channels=channels)
    try:
        for doc in (notification(first), notification(first, second), notification(quiet)):
            assert (await h.post("oncall-wecom", doc))[0] == 200
            await h.settle()
    finally:
        await h.close()
    kinds = [b["msgtype"] for b in wecom.accepted]
    assert kinds == ["markdown", "text", "markdown", "text", "markdown"]  # the warning one mentions nobody
    followups = [b["text"] for b in wecom.accepted if b["msgtype"] == "text"]
    assert followups == [
        {"content": "[FIRING:1] GpuLost", "mentioned_mobile_list": ["13800001111"]},
        {"content": "[FIRING:2] GpuLost", "mentioned_mobile_list": ["13800001111"]},
    ]


async def test_lone_surrogate_is_400_with_the_reason(tmp_path, bots):
    wecom, feishu = bots
    raw = json.dumps(payload()).replace('"alertname"', '"alertname\\ud800"', 1).encode()
    emoji = json.dumps(payload()).replace('"alertname"', '"alertname\\ud83d\\ude00"', 1).encode()
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        status, body = await h.post("oncall-wecom", raw)
        ok, _ = await h.post("oncall-wecom", emoji)  # a valid surrogate pair is fine
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
    assert status == 400 and "invalid Unicode: lone surrogate U+D800" in body["error"]
    assert ok == 200
    assert metric_value(text, C.RELAY_REJECTED.name, reason="malformed") == 1


async def test_a_lone_surrogate_in_raw_bytes_is_400_too(tmp_path, bots):
    """The escape "\\ud800" was refused, but the same surrogate sent as raw UTF-8-style bytes (ED A0 80) got
    through json.loads(bytes), which decodes with "surrogatepass": 200, then a body no bot accepts."""
    wecom, feishu = bots
    raw = json.dumps(payload()).replace('"alertname"', '"alertname' + chr(0xD800) + '"', 1)
    raw = raw.encode("utf-8", "surrogatepass")
    assert b"\xed\xa0\x80" in raw
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        status, body = await h.post("oncall-wecom", raw)
    finally:
        await h.close()
    assert status == 400 and body["error"].startswith("body is not UTF-8")


async def test_nesting_bombs_and_huge_numbers_are_400_with_the_reason(tmp_path, bots):
    """Fails on main: the 200 KB bomb and the 33-level body gave 500 (RecursionError / accepted), the
    5,000-digit integer 500 (ValueError)."""
    wecom, feishu = bots
    bomb = b"[" * 100_000 + b"]" * 100_000  # 200 KB
    just_over = json.loads(json.dumps(payload()))
    just_over["extra"] = json.loads("[" * 32 + "]" * 32)  # 33 levels with the body itself
    within = json.loads(json.dumps(payload()))
    within["extra"] = json.loads("[" * 31 + "]" * 31)  # 32 levels: the bound, accepted
    huge = json.dumps(payload()).replace('"version"', '"n": ' + "9" * 5000 + ', "version"', 1).encode()
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        answers = [await h.post("oncall-wecom", body) for body in (bomb, just_over, huge)]
        ok, _ = await h.post("oncall-wecom", within)
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
    assert [(status, body["error"][:40]) for status, body in answers] == [
        (400, "body is nested deeper than 32 levels"),
        (400, "body is nested deeper than 32 levels"),
        (400, "body is not JSON: Exceeds the limit (430"),
    ]
    assert ok == 200
    assert metric_value(text, C.RELAY_REJECTED.name, reason="malformed") == 3


async def test_a_body_sent_too_slowly_is_503_after_the_body_timeout(tmp_path, bots, monkeypatch):
    """Fails on main: the relay waited for the rest of the body as long as the client kept the connection."""
    monkeypatch.setattr(listener, "BODY_TIMEOUT_SECONDS", 0.5)
    wecom, feishu = bots
    h = await relay_for(tmp_path, wecom, feishu)
    try:
        host, port = h.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /alertmanager/oncall-wecom HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
            + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
            + b'{"version": "4"'  # and nothing more
        )
        async with asyncio.timeout(10):
            head = await reader.readuntil(b"\r\n\r\n")
        writer.close()
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
    assert head.startswith(b"HTTP/1.1 503")
    assert metric_value(text, C.RELAY_REJECTED.name, reason="body_timeout") == 1


async def test_disk_full_is_503_with_sqlites_reason(tmp_path, bots):
    wecom, feishu = bots
    h = await relay_for(tmp_path, wecom, feishu, max_body_bytes=8 * 1024 * 1024)
    try:
        db = h.relay.outbox._db
        db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
        big = payload()
        big["alerts"][0]["annotations"]["description"] = "x" * 500_000
        status, body = await h.post("oncall-wecom", big)
    finally:
        await h.close()
    assert status == 503
    assert body["error"] == "could not store the notification in the outbox: database or disk is full"


async def test_restart_honours_the_send_times_of_the_previous_run(tmp_path):
    """15 messages sent in this minute by the first run; the second run may send only 5 more this minute."""
    wecom = FakeWeCom(limits=(RateLimit(20, 60.0),))
    await wecom.start()
    channels = {"w": {"type": "wecom", "url": wecom.url(), "rate_limits": [{"count": 20, "per_seconds": 60}]}}

    def doc(i: int) -> dict:
        return notification(alert_doc("firing", "2024-05-01T10:00:00Z", fingerprint=f"r{i}", node=f"n{i}"))

    try:
        h = await start_relay(settings_for(tmp_path, channels))
        try:
            for i in range(15):
                assert (await h.post("w", doc(i)))[0] == 200
            await h.settle()
        finally:
            await h.close()
        h = await start_relay(settings_for(tmp_path, channels))
        try:
            for i in range(15, 25):
                assert (await h.post("w", doc(i)))[0] == 200
            async with asyncio.timeout(30):
                while len(wecom.accepted) < 20:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(0.5)  # a 21st message would arrive now
            pending = sum(s.pending for s in h.relay.outbox.stats())
        finally:
            await h.close()
    finally:
        await wecom.stop()
    assert set(wecom.codes()) == {"0"} and len(wecom.accepted) == 20  # never 45009
    assert pending == 5


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answer_delay", "shown", "delivered", "failed"),
    [
        # answers in 0.5 s: the sends wait 0.2 s, 0.4 s, 0.8 s; the third hears the answer
        (0.5, 3, 1, 0),
        # never answers in time: 3 unanswered sends (0.2 + 0.4 + 0.8 s), then recorded as unconfirmed
        (3.0, 3, 0, 1),
    ],
)
async def test_a_bot_slower_than_the_timeout_shows_a_message_at_most_three_times(
    tmp_path, answer_delay, shown, delivered, failed
):
    """Issue 21: a bot that posts the message and answers after request_timeout_seconds got it 4 times (once
    per retry, unbounded until max_delivery_age_seconds). Each unanswered send doubles the timeout of the next
    and counts; after MAX_UNCONFIRMED_SENDS (3) the message is recorded as failed, reason unconfirmed."""
    wecom = FakeWeCom(limits=(RateLimit(20, 0.2),), answer_delay=answer_delay)
    feishu = FakeFeishu()
    await wecom.start()
    await feishu.start()
    h = await relay_for(tmp_path, wecom, feishu, request_timeout_seconds=0.2)
    try:
        assert (await h.post("oncall-wecom", payload()))[0] == 200
        await h.settle(timeout=20)
        await asyncio.sleep(0.1)
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
        await wecom.stop()
        await feishu.stop()
    assert len(wecom.accepted) == shown
    assert metric_value(text, C.RELAY_RETRIES.name, channel="oncall-wecom", reason="timeout") == 2
    assert metric_value(text, C.RELAY_DELIVERED.name, channel="oncall-wecom") == delivered
    assert metric_value(text, C.RELAY_FAILED.name, channel="oncall-wecom", reason="unconfirmed") == failed
