"""Remediation notices reach the real relay: with the relay's bearer token they are accepted and delivered;
without it the relay answers 401 and the notice counts as not delivered."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from remediation.notice import payload, send
from tests.relay.fakebots import FakeFeishu, texts
from tests.relay.harness import TOKEN, settings_for, start_relay


async def test_notice_with_token_is_delivered_without_is_refused(tmp_path: Path) -> None:
    bot = FakeFeishu()
    await bot.start()
    relay = await start_relay(settings_for(tmp_path, {"team-feishu": {"type": "feishu", "url": bot.url()}}))
    url = f"{relay.url}/alertmanager/team-feishu"
    body = payload(
        {"node": "gpu-7", "namespace": "ml-team", "owner": "alice"},
        "Idle notebook will be stopped",
        "jupyter-alice holds 70 GB with SM at 0 for 2 h",
        datetime(2026, 11, 30, tzinfo=UTC),
    )
    try:
        async with aiohttp.ClientSession() as s:
            assert await send(s, url, body) is False  # 401 from the relay
            assert await send(s, url, body, token=TOKEN) is True
        await relay.settle()
        assert any("Idle notebook will be stopped" in "\n".join(texts(b)) for b in bot.accepted)
    finally:
        await relay.close()
        await bot.stop()
