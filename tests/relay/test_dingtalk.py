"""DingTalk group robot as a channel: URL signing, markdown with at.atMobiles, its 20/min limit and error codes,
against the protocol-level stand-in FakeDingTalk (tests/relay/fakebots.py)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.relay.fakebots import FakeDingTalk
from tests.relay.harness import metric_value, settings_for, start_relay
from xpuwatch.alerts.relay import dingtalk
from xpuwatch.alerts.relay.config import RateLimit
from xpuwatch.alerts.relay.signing import dingtalk_sign, dingtalk_url
from xpuwatch.exporter import catalog as C

FIXTURES = Path(__file__).parent.parent / "fixtures"
DEMO = json.loads(
    (FIXTURES / "alertmanager" / "dingtalk-playground-demo-v3.json").read_text(encoding="utf-8")
)


def test_signature_follows_the_documented_algorithm():
    # Expected value computed with the Python sample of DingTalk's robot doc (secret as HMAC key,
    # "timestamp\nsecret" as message, base64, then URL-encoded).
    assert (
        dingtalk_sign(1577836800000, "SEC0123456789abcdef") == "VIkrYXpqM66nY2agvTap17lAqEfAZw77OqD62+Mh1G0="
    )
    url = dingtalk_url(
        "https://oapi.dingtalk.com/robot/send?access_token=t", "SEC0123456789abcdef", 1577836800.0
    )
    assert url == (
        "https://oapi.dingtalk.com/robot/send?access_token=t&timestamp=1577836800000"
        "&sign=VIkrYXpqM66nY2agvTap17lAqEfAZw77OqD62%2BMh1G0%3D"
    )
    query = parse_qs(urlsplit(url).query)
    assert query["sign"] == ["VIkrYXpqM66nY2agvTap17lAqEfAZw77OqD62+Mh1G0="]  # decodes back exactly
    assert (
        dingtalk_url("https://x/robot/send?access_token=t", "", 1.0) == "https://x/robot/send?access_token=t"
    )


@pytest.mark.parametrize(
    ("name", "result", "code", "window"),
    [
        ("resp-0-ok.json", "ok", "0", None),
        ("resp-130101-send-too-fast.json", "rate_limited", "130101", 0),
        ("resp-410100-send-too-fast.json", "rate_limited", "410100", 0),
        ("resp-310000-sign-not-match.json", "permanent", "310000", None),
        ("resp-310000-keywords-not-in-content.json", "permanent", "310000", None),
        ("resp-300001-token-not-exist.json", "permanent", "300001", None),
        ("resp-460101-message-too-long.json", "permanent", "460101", None),
    ],
)
def test_classify_documented_answers(name, result, code, window):
    outcome = dingtalk.BOT.classify(200, (FIXTURES / "dingtalk" / name).read_bytes())
    assert (outcome.result, outcome.code, outcome.window) == (result, code, window)


def test_classify_transport_answers():
    assert dingtalk.BOT.classify(502, b"").result == "retry"
    assert dingtalk.BOT.classify(200, b'{"errcode":-1,"errmsg":"busy"}').result == "retry"
    assert dingtalk.BOT.classify(200, b"<html>").result == "retry"


async def test_signed_markdown_with_mentions_keyword_and_all_annotations(tmp_path):
    fake = FakeDingTalk(secret="SECdemo", keywords=["xpuwatch"], limits=(RateLimit(20, 0.5),))
    await fake.start()
    channels = {
        "ops-dingtalk": {
            "type": "dingtalk",
            "url": fake.url(),
            "secret": "SECdemo",
            "keyword": "xpuwatch",
            "mentions": {"mobiles": ["13800001111"], "severities": ["warning", "critical"]},
            "rate_limits": [{"count": 20, "per_seconds": 0.5}],
        },
        "bad-sign": {
            "type": "dingtalk",
            "url": fake.url() + "&x=1",
            "secret": "SECwrong",
            "keyword": "xpuwatch",
        },
    }
    doc = json.loads(json.dumps(DEMO))
    doc["alerts"][0]["annotations"] = {
        "alertAdvice": "重启 runit 服务",
        "description": "prometheus_bot 已停止",
        "summary": "Oops, something happened!",
        "alertInfo": "server01 上的服务异常",
    }
    h = await start_relay(settings_for(tmp_path, channels))
    try:
        assert (await h.post("ops-dingtalk", doc))[0] == 200
        assert (await h.post("bad-sign", doc))[0] == 200
        await h.settle()
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
        await fake.stop()
    assert fake.codes() == ["0", "310000"] or fake.codes() == ["310000", "0"]
    (body,) = fake.accepted
    assert body["msgtype"] == "markdown" and body["at"] == {"isAtAll": False, "atMobiles": ["13800001111"]}
    md = body["markdown"]
    assert md["title"] == "[FIRING:2] something_happened server01.example.internal:9100"
    content = md["text"]
    assert content.startswith("### [FIRING:2] something_happened server01.example.internal:9100\n")
    lines = content.splitlines()
    first = lines.index("> Oops, something happened!")
    # summary, description, then the other annotations in the payload's order
    assert lines[first : first + 8 : 2] == [
        "> Oops, something happened!",
        "> prometheus_bot 已停止",
        "> alertAdvice: 重启 runit 服务",
        "> alertInfo: server01 上的服务异常",
    ]
    assert "@13800001111" in content and content.endswith("xpuwatch")
    assert metric_value(text, C.RELAY_FAILED.name, channel="bad-sign", reason="310000") == 1


@pytest.mark.slow
async def test_burst_stays_within_20_per_window_and_mention_only_on_configured_severity(tmp_path):
    fake = FakeDingTalk(limits=(RateLimit(20, 0.5),), penalty=5.0)
    await fake.start()
    channels = {
        "ops": {
            "type": "dingtalk",
            "url": fake.url(),
            "mentions": {"mobiles": ["13800001111"], "severities": ["critical"]},
            "rate_limits": [{"count": 20, "per_seconds": 0.5}],
        }
    }
    h = await start_relay(settings_for(tmp_path, channels))
    try:
        for i in range(45):
            doc = json.loads(json.dumps(DEMO))
            doc["groupKey"] = f'{{}}:{{n="{i}"}}'
            doc["alerts"] = doc["alerts"][:1]
            doc["alerts"][0]["labels"]["instance"] = f"server{i:02d}.example.internal:9100"
            doc["alerts"][0]["labels"]["severity"] = "critical" if i == 44 else "warning"
            assert (await h.post("ops", doc))[0] == 200
        await h.settle(timeout=60)
    finally:
        await h.close()
        await fake.stop()
    assert set(fake.codes()) == {"0"} and len(fake.accepted) == 45  # never 130101 (which would cost 10 min)
    assert [("at" in b) for b in fake.accepted] == [False] * 44 + [True]


@pytest.mark.slow
@pytest.mark.parametrize("rate_code", [130101, 410100])
async def test_every_page_is_delivered_when_the_robot_rate_limits_with_either_code(tmp_path, rate_code):
    """Issue 21: a robot whose quota is shared (3 messages / 2 s here, the relay told 20 / 2 s) answers its
    rate-limit code; the relay waits the window and sends again. 410100 was recorded as a permanent failure:
    5 of 8 pages lost."""
    fake = FakeDingTalk(limits=(RateLimit(3, 2.0),), penalty=1.0, rate_code=rate_code)
    await fake.start()
    channels = {
        "ops": {"type": "dingtalk", "url": fake.url(), "rate_limits": [{"count": 20, "per_seconds": 2.0}]}
    }
    h = await start_relay(settings_for(tmp_path, channels))
    try:
        for i in range(8):
            doc = json.loads(json.dumps(DEMO))
            doc["groupKey"] = f'{{}}:{{n="{i}"}}'
            doc["alerts"] = doc["alerts"][:1]
            doc["alerts"][0]["labels"]["instance"] = f"server{i:02d}.example.internal:9100"
            assert (await h.post("ops", doc))[0] == 200
        await h.settle(timeout=60)
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
        await fake.stop()
    assert len(fake.accepted) == 8
    assert str(rate_code) in fake.codes()  # the robot did refuse some: the relay waited and resent them
    assert metric_value(text, C.RELAY_FAILED.name, channel="ops", reason=str(rate_code)) == 0
    assert metric_value(text, C.RELAY_DELIVERED.name, channel="ops") == 8
    assert metric_value(text, C.RELAY_RETRIES.name, channel="ops", reason=str(rate_code)) >= 1


# --- underscores: identifiers stay copyable, emphasis stays impossible --------------------------------------
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("K100_AI", "K100_AI"),  # a model name copied from the page must work in PromQL
        ("train_job-0", "train_job-0"),
        ("node_exporter_build_info", "node_exporter_build_info"),
        ("a__b", "a__b"),
        ("模型_A", "模型_A"),
        ("_tmp", "＿tmp"),  # at a word's edge an underscore could open emphasis
        ("x_", "x＿"),
        ("a _b_ c", "a ＿b＿ c"),
        ("K100_AI_", "K100_AI＿"),
    ],
)
def test_underscores_inside_words_are_kept_at_word_edges_made_inert(text, shown):
    assert dingtalk.escape(text) == shown


UNDERSCORE_TEXT = st.lists(
    st.sampled_from([*list("ab1 _*`~#[]()<>\n-"), "K100", "模型", "__"]), min_size=1, max_size=24
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=UNDERSCORE_TEXT)
def test_escaped_text_opens_no_emphasis_in_commonmark(text):
    """markdown-it-py (a CommonMark implementation) as the oracle: no label text turns into emphasis, and
    putting the full-width look-alikes back gives the text again."""
    md = pytest.importorskip("markdown_it").MarkdownIt("commonmark")
    escaped = dingtalk.escape(text)
    html = md.render(escaped)
    assert "<em>" not in html and "<strong>" not in html
    back = escaped.replace("\u200b", "").translate(
        str.maketrans({"＿": "_", "＊": "*", "｀": "`", "～": "~", "＜": "<", "＞": ">", "］": "]"})
    )
    assert back == text
