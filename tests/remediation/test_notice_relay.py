"""Remediation notices reach the real relay: with the relay's bearer token they are accepted and delivered;
without it the relay answers 401 and the notice counts as not delivered."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from tests.relay.fakebots import FakeFeishu, texts
from tests.relay.harness import TOKEN, settings_for, start_relay
from xpuwatch.remediation.notice import payload, send


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


async def test_notices_reach_the_channel_of_their_category(tmp_path: Path) -> None:
    """``notify: {hardware: ..., performance: ...}``: a drain notice for an ECC alert (category hardware)
    reaches the on-call WeCom group through the real relay, a reclaim notice the team's Feishu group. With
    one ``notify_url`` both went to Feishu; a category ``notify`` leaves out falls back to ``notify_url``."""
    from tests.relay.fakebots import FakeWeCom
    from xpuwatch.remediation.notice import deliver
    from xpuwatch.remediation.settings import parse

    wecom, feishu = FakeWeCom(), FakeFeishu()
    await wecom.start()
    await feishu.start()
    relay = await start_relay(
        settings_for(
            tmp_path,
            {
                "oncall-wecom": {"type": "wecom", "url": wecom.url()},
                "team-feishu": {"type": "feishu", "url": feishu.url()},
            },
        )
    )
    (tmp_path / "relay-token").write_text(TOKEN)
    settings = parse(
        {
            "webhook": {"allow_unauthenticated": True},
            "notify": {
                "hardware": f"{relay.url}/alertmanager/oncall-wecom",
                "performance": f"{relay.url}/alertmanager/team-feishu",
            },
            "notify_token_file": "relay-token",
        },
        tmp_path,
    )
    now = datetime(2026, 11, 30, tzinfo=UTC)
    drain = payload(
        {"node": "gpu-7", "category": "hardware"},
        "[dry-run] drain start",
        "would start drain on node/gpu-7: AcceleratorEccUncorrectable",
        now,
    )
    reclaim = payload(
        {"namespace": "ml-team", "pod": "jupyter-alice"}, "Idle notebook will be stopped", "idle 2 h", now
    )
    try:
        async with aiohttp.ClientSession() as s:
            assert await deliver(s, settings, drain) is True
            assert await deliver(s, settings, reclaim) is True
        await relay.settle()
        on_wecom = ["\n".join(texts(b)) for b in wecom.accepted]
        on_feishu = ["\n".join(texts(b)) for b in feishu.accepted]
        assert len(on_wecom) == 1 and "would start drain on node/gpu-7" in on_wecom[0]
        assert len(on_feishu) == 1 and "Idle notebook will be stopped" in on_feishu[0]
    finally:
        await relay.close()
        await wecom.stop()
        await feishu.stop()
    assert settings.notify_url_for("performance").endswith("/team-feishu")
    fallback = parse({"webhook": {"allow_unauthenticated": True}, "notify_url": "http://r/alertmanager/x"})
    assert fallback.notify_url_for("hardware") == "http://r/alertmanager/x"
