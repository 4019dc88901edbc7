"""The relay process killed (SIGKILL) in the middle of delivering, then restarted on the same outbox: the rest
is delivered, nothing twice. Runs the real CLI (`python -m xpuwatch relay`) as a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.relay.fakebots import FakeFeishu, FakeWeCom
from tests.relay.harness import TOKEN
from tests.relay.test_delivery import big_group
from xpuwatch.alerts.relay.config import RateLimit

ROOT = Path(__file__).resolve().parents[2]
GROUPS = 30
FEISHU_GROUPS = 12


def write_config(tmp: Path, url: str) -> Path:
    (tmp / "wecom-url").write_text(url + "\n")
    (tmp / "token").write_text(TOKEN + "\n")
    cfg = {
        "listen_address": "127.0.0.1:0",
        "outbox": str(tmp / "outbox.sqlite"),
        "auth": {"bearer_token_file": "token"},
        "request_timeout_seconds": 30,
        "retry": {"initial_seconds": 0.05, "max_seconds": 0.5},
        "channels": {
            "oncall-wecom": {
                "type": "wecom",
                "webhook_url_file": "wecom-url",
                "rate_limits": [{"count": 20, "per_seconds": 0.2}],
            }
        },
    }
    path = tmp / "relay.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


async def start(config: Path) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "xpuwatch", "relay", "--config", str(config),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        line = (await proc.stdout.readline()).decode()
    assert line.startswith("relay listening on 127.0.0.1:"), line
    return proc, "http://" + line.rsplit(" ", 1)[1].strip()


def group(i: int) -> dict:
    doc = big_group(1, group=f"c{i:03d}")
    doc["groupKey"] = f'{{}}:{{node="n{i:03d}"}}'
    return doc


@pytest.mark.slow
async def test_sigkill_mid_delivery_then_restart_delivers_the_rest_once(tmp_path):
    fake = FakeWeCom(limits=(RateLimit(20, 0.2),), stall_after=12)
    await fake.start()
    config = write_config(tmp_path, fake.url())
    proc, url = await start(config)
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as s:
            for i in range(GROUPS):
                async with s.post(f"{url}/alertmanager/oncall-wecom", data=json.dumps(group(i))) as r:
                    assert r.status == 200
        async with asyncio.timeout(30):
            await fake.stalled.wait()  # 12 delivered, the 13th is in flight and will never be answered
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert len(fake.accepted) == 12
    fake.release()
    proc, url = await start(config)
    try:
        async with asyncio.timeout(60):
            while len(fake.accepted) < GROUPS:
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # anything extra would arrive now
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
        await fake.stop()
    assert proc.returncode == 0
    got = [b["markdown"]["content"] for b in fake.accepted]
    ids = [f"GPU-c{i:03d}-0000" for i in range(GROUPS)]
    assert [next(x for x in ids if f"uuid={x}" in c) for c in got] == ids  # all, once, in order


@pytest.mark.slow
async def test_sigkill_mid_burst_then_restart_never_exceeds_the_bots_windows(tmp_path):
    """Killed after 10 WeCom and 3 Feishu messages of a window, the restarted relay counts them (send times
    are in the outbox): the stand-ins never answer 45009 (WeCom 20 per window) or 9499 (Feishu 5 per window)."""
    # Windows longer than a restart of the CLI takes here (the restarted relay is still inside them).
    wecom = FakeWeCom(limits=(RateLimit(20, 10.0),))
    lark = FakeFeishu(limits=(RateLimit(5, 5.0), RateLimit(100, 10.0)))
    await wecom.start()
    await lark.start()
    (tmp_path / "wecom-url").write_text(wecom.url() + "\n")
    (tmp_path / "feishu-url").write_text(lark.url() + "\n")
    (tmp_path / "token").write_text(TOKEN + "\n")
    cfg = {
        "listen_address": "127.0.0.1:0",
        "outbox": str(tmp_path / "outbox.sqlite"),
        "auth": {"bearer_token_file": "token"},
        "request_timeout_seconds": 1,
        "channels": {
            "w": {
                "type": "wecom",
                "webhook_url_file": "wecom-url",
                "rate_limits": [{"count": 20, "per_seconds": 10}],
            },
            "f": {
                "type": "feishu",
                "webhook_url_file": "feishu-url",
                "rate_limits": [{"count": 5, "per_seconds": 5}, {"count": 100, "per_seconds": 10}],
            },
        },
    }
    config = tmp_path / "relay.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc, url = await start(config)
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as s:
            for i in range(GROUPS):
                for ch in ("w", "f") if i < FEISHU_GROUPS else ("w",):
                    async with s.post(f"{url}/alertmanager/{ch}", data=json.dumps(group(i))) as r:
                        assert r.status == 200
        async with asyncio.timeout(30):
            while len(wecom.accepted) < 10 or len(lark.accepted) < 3:
                await asyncio.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    proc, url = await start(config)  # at once: still inside both windows
    try:
        async with asyncio.timeout(60):
            while (
                len({b["markdown"]["content"] for b in wecom.accepted}) < GROUPS
                or len(lark.accepted) < FEISHU_GROUPS
            ):
                await asyncio.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
        await wecom.stop()
        await lark.stop()
    assert "45009" not in wecom.codes() and "9499" not in lark.codes() and "11232" not in lark.codes()
    assert set(wecom.codes()) == {"0"} and set(lark.codes()) == {"0"}
