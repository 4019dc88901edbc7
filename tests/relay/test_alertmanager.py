"""Debian's real Alertmanager (0.25, /usr/bin/prometheus-alertmanager) posting to the relay with bearer auth;
the relay delivering to the fake WeCom bot: the firing message, then the resolved one."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
import yaml

from alerts.relay.config import RateLimit
from tests.relay.fakebots import FakeWeCom
from tests.relay.harness import TOKEN, settings_for, start_relay

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.access(ALERTMANAGER, os.X_OK), reason="Debian prometheus-alertmanager not installed"
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def am_config(tmp: Path, relay_url: str) -> Path:
    (tmp / "relay-token").write_text(TOKEN)
    cfg = {
        "route": {
            "receiver": "oncall",
            "group_by": ["alertname", "node"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {
                "name": "oncall",
                "webhook_configs": [
                    {
                        "url": f"{relay_url}/alertmanager/oncall-wecom",
                        "send_resolved": True,
                        "http_config": {"authorization": {"credentials_file": str(tmp / "relay-token")}},
                    }
                ],
            }
        ],
    }
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


async def wait_for(predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


async def test_alertmanager_firing_then_resolved_reach_the_wecom_fake(tmp_path):
    fake = FakeWeCom(limits=(RateLimit(20, 60.0),))
    await fake.start()
    h = await start_relay(settings_for(tmp_path, {"oncall-wecom": {"type": "wecom", "url": fake.url()}}))
    port = free_port()
    am = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={am_config(tmp_path, h.url)}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            f"--web.external-url=http://127.0.0.1:{port}",
            "--log.level=debug",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "am.log", "wb"),  # noqa: SIM115
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:

            async def ready() -> bool:
                try:
                    async with s.get(f"{base}/-/ready") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            async with asyncio.timeout(30):
                while not await ready():
                    await asyncio.sleep(0.1)
            now = datetime.now(UTC)
            alert = {
                "labels": {
                    "alertname": "AcceleratorEccUncorrectable",
                    "severity": "critical",
                    "category": "hardware",
                    "node": "sim-node-1",
                    "vendor": "nvidia",
                    "device": "1",
                    "uuid": "GPU-1",
                },
                "annotations": {"summary": "ECC 不可纠正错误", "description": "3 errors in 5m"},
                "startsAt": now.isoformat(),
                "endsAt": (now + timedelta(hours=1)).isoformat(),
            }
            async with s.post(f"{base}/api/v2/alerts", json=[alert]) as r:
                assert r.status == 200
            await wait_for(lambda: len(fake.accepted) >= 1)
            alert["endsAt"] = datetime.now(UTC).isoformat()
            async with s.post(f"{base}/api/v2/alerts", json=[alert]) as r:
                assert r.status == 200
            await wait_for(lambda: len(fake.accepted) >= 2)
    finally:
        am.terminate()
        am.wait(timeout=10)
        await h.close()
        await fake.stop()
    firing, resolved = (b["markdown"]["content"] for b in fake.accepted[:2])
    assert firing.startswith("## [FIRING:1] AcceleratorEccUncorrectable sim-node-1\n")
    assert "> device: node=sim-node-1 vendor=nvidia device=1 uuid=GPU-1" in firing
    assert f"[silence](http://127.0.0.1:{port}/#/silences/new?filter=" in firing
    assert resolved.startswith("## [RESOLVED:1] AcceleratorEccUncorrectable sim-node-1\n")
    assert ", ended: " in resolved
    assert len(fake.accepted) == 2
