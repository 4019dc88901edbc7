"""The relay process killed (SIGKILL) in the middle of delivering, then restarted on the same outbox: the rest
is delivered, nothing twice. Runs the real CLI (`python -m exporter.entry relay`) as a subprocess."""

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

from alerts.relay.config import RateLimit
from tests.relay.fakebots import FakeWeCom
from tests.relay.harness import TOKEN
from tests.relay.test_delivery import big_group

ROOT = Path(__file__).resolve().parents[2]
GROUPS = 30


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
        sys.executable, "-m", "exporter.entry", "relay", "--config", str(config),
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
