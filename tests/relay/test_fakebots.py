"""The fake bots enforce what their documents say (so relay tests against them mean something), and the
relay classifies every captured bot answer (tests/fixtures/{wecom,feishu}/resp-*) as the research notes say."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.relay.fakebots import FakeFeishu, FakeWeCom
from tests.relay.harness import FIXTURES
from xpuwatch.alerts.relay import feishu, wecom
from xpuwatch.alerts.relay.config import RateLimit
from xpuwatch.alerts.relay.outcome import Outcome
from xpuwatch.alerts.relay.signing import sign_body


async def post(url: str, body: object) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(url, data=json.dumps(body, ensure_ascii=False).encode()) as r,
    ):
        return r.status, await r.json(content_type=None)


def md(content: str) -> dict:
    return {"msgtype": "markdown", "markdown": {"content": content}}


async def test_fake_wecom_key_size_and_rate_limit():
    fake = FakeWeCom(limits=(RateLimit(3, 60.0),))
    await fake.start()
    try:
        assert (await post(fake.url("nope"), md("x")))[1]["errcode"] == 93000
        assert (await post(fake.url(), md("中" * 1366)))[1]["errcode"] == 40058  # 4098 bytes
        assert (await post(fake.url(), md("中" * 1365)))[1] == {"errcode": 0, "errmsg": "ok"}  # 4095 bytes
        text = {"msgtype": "text", "text": {"content": "x" * 2049}}
        assert (await post(fake.url(), text))[1]["errcode"] == 40058
        assert [(await post(fake.url(), md("y")))[1]["errcode"] for _ in range(3)] == [0, 0, 45009]
    finally:
        await fake.stop()
    assert len(fake.accepted) == 3


def card(text: str) -> dict:
    return {
        "msg_type": "interactive",
        "card": {"header": {"title": {"tag": "plain_text", "content": "t"}}, "elements": [
            {"tag": "div", "text": {"tag": "lark_md", "content": text}}]},
    }  # fmt: skip


async def test_fake_feishu_signature_keyword_size_mentions_and_both_rate_limits(monkeypatch):
    fake = FakeFeishu(limits=(RateLimit(2, 60.0), RateLimit(3, 120.0)), secret="demo", keywords=["告警"])
    await fake.start()
    now = fake.wall()
    try:
        assert (await post(fake.url(), card("告警")))[1]["code"] == 19021  # unsigned
        assert (await post(fake.url(), sign_body(card("告警"), "demo", now - 7200)))[1][
            "code"
        ] == 19021  # stale
        assert (await post(fake.url(), sign_body(card("告警"), "other", now)))[1]["code"] == 19021
        assert (await post(fake.url(), sign_body(card("no keyword"), "demo", now)))[1]["code"] == 19024
        at_email = card("告警 <at email=a@b.c></at>")
        assert (await post(fake.url(), sign_body(at_email, "demo", now)))[1]["code"] == 11246
        big = sign_body(card("告警" + "x" * 21000), "demo", now)
        assert await post(fake.url(), big) == (400, {"code": 9499, "msg": "Bad Request", "data": {}})
        ok = sign_body(card("告警 <at id=ou_1></at>"), "demo", now)
        answers = [await post(fake.url(), ok) for _ in range(2)]
        assert [a[1]["code"] for a in answers] == [0, 0]
        assert await post(fake.url(), ok) == (400, {"code": 9499, "msg": "too many request", "data": {}})
        fake.limits = fake.window.limits = (RateLimit(5, 60.0), RateLimit(2, 120.0))
        status, body = await post(fake.url(), ok)
        assert (status, body["code"]) == (200, 11232)
    finally:
        await fake.stop()
    assert len(fake.accepted) == 2


@pytest.mark.parametrize(
    ("name", "status", "expected"),
    [
        ("resp-0-ok.json", 200, ("ok", "0")),
        ("resp-45009-rate-limited.json", 200, ("rate_limited", "45009")),
        ("resp-93000-invalid-webhook-url.json", 200, ("permanent", "93000")),
        ("resp-40058-markdown-too-long.json", 200, ("permanent", "40058")),
        ("resp-60020-app-api-ip-not-trusted.json", 200, ("permanent", "60020")),
    ],
)
def test_wecom_answers(name, status, expected):
    out = wecom.BOT.classify(status, (FIXTURES / "wecom" / name).read_bytes())
    assert (out.result, out.code) == expected


@pytest.mark.parametrize(
    ("name", "status", "expected"),
    [
        ("resp-0-ok.json", 200, ("ok", "0")),
        ("resp-11232-frequency-limited_http200.json", 200, ("rate_limited", "11232")),
        ("resp-9499-too-many-request_http400.json", 400, ("rate_limited", "9499")),
        ("resp-9499-bad-request.json", 400, ("permanent", "9499")),
        ("resp-19021-sign-fail.json", 200, ("permanent", "19021")),
        ("resp-19022-ip-not-allowed.json", 200, ("permanent", "19022")),
        ("resp-19024-keyword-not-found.json", 200, ("permanent", "19024")),
        ("resp-11246-invalid-at-user.json", 200, ("permanent", "11246")),
    ],
)
def test_feishu_answers(name, status, expected):
    out = feishu.BOT.classify(status, (FIXTURES / "feishu" / name).read_bytes())
    assert (out.result, out.code) == expected


@pytest.mark.parametrize("bot", [wecom.BOT, feishu.BOT])
def test_transport_level_answers(bot):
    assert bot.classify(502, b"<html>bad gateway</html>") == Outcome("retry", "http_502", "HTTP 502")
    assert bot.classify(429, b"") == Outcome("rate_limited", "http_429", "HTTP 429")
    assert bot.classify(200, b"<html>proxy</html>").result == "retry"
    assert bot.classify(404, b"not found").result == "permanent"
