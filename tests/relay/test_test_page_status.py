"""GET /api/v1/test-pages/<id>: what became of a test page's notifications (`xpuwatch rules test-page` reads the
bot's answer here), with the webhook's credentials, against the DingTalk stand-in (tests/relay/fakebots.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aiohttp

from tests.relay.fakebots import FakeDingTalk
from tests.relay.harness import TOKEN, settings_for, start_relay
from xpuwatch.alerts.testpage import page_alerts, webhook


async def _status(url: str, page: str, token: str | None = TOKEN) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s, s.get(f"{url}/api/v1/test-pages/{page}", headers=headers) as r:
        return r.status, await r.json()


async def test_delivered_and_refused_pages_are_told_apart(tmp_path):
    fake = FakeDingTalk(keywords=["告警"])
    await fake.start()
    channels = {
        "ops-dingtalk": {"type": "dingtalk", "url": fake.url(), "keyword": "告警"},
        "no-keyword": {"type": "dingtalk", "url": fake.url()},  # the robot wants a keyword: 310000
    }
    h = await start_relay(settings_for(tmp_path, channels))
    page, other = "0123456789abcdef", "fedcba9876543210"
    now = datetime.now(UTC)
    hardware, performance, _ = page_alerts(page, now, now + timedelta(minutes=5))
    try:
        assert (await h.post("ops-dingtalk", webhook(hardware, "ops-dingtalk", page)))[0] == 200
        assert (await h.post("no-keyword", webhook(performance, "no-keyword", page)))[0] == 200
        unrelated = page_alerts(other, now, now)[0]
        assert (await h.post("ops-dingtalk", webhook(unrelated, "ops-dingtalk", other)))[0] == 200
        await h.settle()
        status, doc = await _status(h.url, page)
        assert status == 200 and doc["page"] == page
        by_channel = {n["channel"]: n for n in doc["notifications"]}
        assert set(by_channel) == {"ops-dingtalk", "no-keyword"}  # not the other page's
        ok = by_channel["ops-dingtalk"]
        assert ok["state"] == "rendered" and ok["alerts"] == ["XpuwatchTestPageHardware"]
        assert [(m["state"], m["code"]) for m in ok["messages"]] == [("delivered", "0")]
        refused = by_channel["no-keyword"]["messages"]
        assert [(m["state"], m["code"]) for m in refused] == [("failed", "310000")]
        assert "keywords not in content" in refused[0]["reason"]
        assert (await _status(h.url, page, token=None))[0] == 401
        assert (await _status(h.url, page, token="wrong"))[0] == 401
        status, doc = await _status(h.url, "not-hex%25")
        assert status == 400 and "hex" in doc["error"]
        assert (await _status(h.url, "abcdef0123456789"))[1]["notifications"] == []
    finally:
        await h.close()
        await fake.stop()
