"""Debian's real Alertmanager (0.25, /usr/bin/prometheus-alertmanager) posting to the relay with bearer auth;
the relay delivering to the fake bots: the hardware alert to WeCom (firing, then resolved), a performance
alert to Feishu, and the performance alert inhibited by the hardware one to neither."""

from __future__ import annotations

import asyncio
import json
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
from tests.relay.fakebots import FakeFeishu, FakeWeCom
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
    """Hardware -> WeCom, performance -> Feishu; a critical hardware alert inhibits performance alerts on the
    same device (the shape of the generated config, hand-written here)."""
    (tmp / "relay-token").write_text(TOKEN)
    auth = {"authorization": {"credentials_file": str(tmp / "relay-token")}}

    def receiver(name: str) -> dict:
        hook = {"url": f"{relay_url}/alertmanager/{name}", "send_resolved": True, "http_config": auth}
        return {"name": name, "webhook_configs": [hook]}

    cfg = {
        "route": {
            "receiver": "oncall-wecom",
            "group_by": ["alertname", "node"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
            "routes": [
                {"matchers": ['category="hardware"'], "receiver": "oncall-wecom"},
                {"matchers": ['category="performance"'], "receiver": "team-feishu"},
            ],
        },
        "inhibit_rules": [
            {
                "source_matchers": ['category="hardware"', 'severity="critical"'],
                "target_matchers": ['category="performance"'],
                "equal": ["node", "device"],
            }
        ],
        "receivers": [receiver("oncall-wecom"), receiver("team-feishu")],
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
    lark = FakeFeishu(secret="sec", keywords=["xpuwatch"])
    await fake.start()
    await lark.start()
    channels = {
        "oncall-wecom": {"type": "wecom", "url": fake.url()},
        "team-feishu": {"type": "feishu", "url": lark.url(), "secret": "sec", "keyword": "xpuwatch"},
    }
    h = await start_relay(settings_for(tmp_path, channels))
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

            def perf(device: str) -> dict:
                labels = {**alert["labels"], "alertname": "AcceleratorIdleAllocated", "category": "performance",
                          "severity": "warning", "device": device, "uuid": f"GPU-{device}"}  # fmt: skip
                return {**alert, "labels": labels, "annotations": {"summary": f"device {device} idle"}}

            async with s.post(f"{base}/api/v2/alerts", json=[alert, perf("1"), perf("2")]) as r:
                assert r.status == 200
            await wait_for(lambda: len(fake.accepted) >= 1 and len(lark.accepted) >= 1)
            performance = json.dumps(lark.accepted[0], ensure_ascii=False)
            alert["endsAt"] = datetime.now(UTC).isoformat()
            async with s.post(f"{base}/api/v2/alerts", json=[alert]) as r:
                assert r.status == 200
            await wait_for(lambda: len(fake.accepted) >= 2)
    finally:
        am.terminate()
        am.wait(timeout=10)
        await h.close()
        await fake.stop()
        await lark.stop()
    assert "[FIRING:1] AcceleratorIdleAllocated sim-node-1" in performance
    assert "uuid=GPU-2" in performance and "GPU-1" not in performance  # device 1's is inhibited
    firing, resolved = (b["markdown"]["content"] for b in fake.accepted[:2])
    assert firing.startswith("## [FIRING:1] AcceleratorEccUncorrectable sim-node-1\n")
    assert "> device: node=sim-node-1 vendor=nvidia device=1 uuid=GPU-1" in firing
    assert f"[silence](http://127.0.0.1:{port}/#/silences/new?filter=" in firing
    assert resolved.startswith("## [RESOLVED:1] AcceleratorEccUncorrectable sim-node-1\n")
    assert ", ended: " in resolved
    assert len(fake.accepted) == 2
