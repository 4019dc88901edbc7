"""The sender under the bots' real documented limits (WeCom 20/min; Feishu 5/s and 100/min) on a virtual
clock: the relay's injected clock and sleep and the fake bots share it, so minutes pass in milliseconds and
the exact send times can be asserted."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp import web

from tests.relay.fakebots import FakeBot, FakeFeishu, FakeWeCom
from tests.relay.harness import TOKEN, settings_for
from tests.relay.test_delivery import big_group
from xpuwatch.alerts.relay.server import build_app, build_relay


class VirtualClock:
    """Time moves only when the relay sleeps. One bot, one sender loop: its sleeps are the only waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.epoch = time.time()

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.epoch + self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("kind", "count", "expected"),
    [
        ("wecom", 45, [0.0] * 20 + [60.0] * 20 + [120.0] * 5),
        # 5 per second up to 100 in the first minute, then the 100/min window reopens at t=60
        ("feishu", 110, [float(s) for s in range(20) for _ in range(5)] + [60.0] * 5 + [61.0] * 5),
    ],
)
async def test_real_limits_on_a_virtual_clock(tmp_path, kind, count, expected):
    vc = VirtualClock()
    fake: FakeBot
    if kind == "wecom":
        fake = FakeWeCom(clock=vc.monotonic, wall=vc.wall)
    else:
        fake = FakeFeishu(clock=vc.monotonic, wall=vc.wall)
    await fake.start()
    accepted_at: list[float] = []
    original = fake.window.add

    def add() -> None:
        accepted_at.append(vc.now)
        original()

    fake.window.add = add  # type: ignore[method-assign]
    settings = settings_for(tmp_path, {"ch": {"type": kind, "url": fake.url(), "max_parts": 1}})  # type: ignore[attr-defined]
    relay = build_relay(settings, clock=vc.monotonic, wall=vc.wall, sleep=vc.sleep)
    runner = web.AppRunner(build_app(relay))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/alertmanager/ch"  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as s:
            for i in range(count):
                doc = big_group(1, group=f"v{i:03d}")
                doc["groupKey"] = f'{{}}:{{node="{i}"}}'
                async with s.post(url, json=doc) as r:
                    assert r.status == 200
        async with asyncio.timeout(60):
            while len(fake.accepted) < count:
                await asyncio.sleep(0.01)
    finally:
        await runner.cleanup()
        await fake.stop()
    assert set(fake.codes()) == {"0"}
    assert accepted_at == expected
