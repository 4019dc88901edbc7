"""Debian's real Alertmanager (0.25, /usr/bin/prometheus-alertmanager) posting to the relay with bearer auth;
the relay delivering to the fake bots: the hardware alert to WeCom (firing, then resolved), a performance
alert to Feishu, and the performance alert inhibited by the hardware one to neither."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.ports import free_port
from tests.relay.fakebots import FakeDingTalk, FakeFeishu, FakeWeCom
from tests.relay.harness import TOKEN, settings_for, start_relay
from xpuwatch.alerts.relay.config import RateLimit

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.access(ALERTMANAGER, os.X_OK), reason="Debian prometheus-alertmanager not installed"
    ),
]


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


async def test_flapping_alert_mentions_annotations_and_dingtalk_through_real_alertmanager(tmp_path):
    """One group (alertname) to a WeCom channel with a mobile mention and a signed DingTalk channel: fire,
    resolve, fire again (same fingerprint, new startsAt), then a second alert joins the group. Every episode
    reaches the bots, every firing notification mentions the on-call, custom annotations appear in order."""
    wecom = FakeWeCom(limits=(RateLimit(20, 60.0),))
    ding = FakeDingTalk(secret="SECflap", keywords=["xpuwatch"], limits=(RateLimit(20, 60.0),))
    await wecom.start()
    await ding.start()
    channels = {
        "oncall-wecom": {"type": "wecom", "url": wecom.url(), "mentions": {"mobiles": ["13800001111"]}},
        "ops-dingtalk": {
            "type": "dingtalk",
            "url": ding.url(),
            "secret": "SECflap",
            "keyword": "xpuwatch",
            "mentions": {"mobiles": ["13800002222"]},
        },
    }
    h = await start_relay(settings_for(tmp_path, channels))
    (tmp_path / "relay-token").write_text(TOKEN)
    auth = {"authorization": {"credentials_file": str(tmp_path / "relay-token")}}
    hooks = [
        {"url": f"{h.url}/alertmanager/{name}", "send_resolved": True, "http_config": auth}
        for name in channels
    ]
    cfg = {
        "route": {
            "receiver": "oncall",
            "group_by": ["alertname"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "oncall", "webhook_configs": hooks}],
    }
    (tmp_path / "am.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    am = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={tmp_path / 'am.yml'}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            f"--web.external-url=http://127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "am.log", "wb"),  # noqa: SIM115
    )
    base = f"http://127.0.0.1:{port}"

    def gpu(device: str, starts: datetime, ends: datetime) -> dict:
        return {
            "labels": {
                "alertname": "AcceleratorLost",
                "severity": "critical",
                "node": "n1",
                "device": device,
            },
            "annotations": {
                "summary": f"GPU {device} 掉卡",
                "description": "nvidia-smi 看不到该设备",
                "alertInfo": "Xid 79: GPU has fallen off the bus",
                "alertAdvice": "排空节点后重启",
            },
            "startsAt": starts.isoformat(),
            "endsAt": ends.isoformat(),
        }

    def kinds() -> list[str]:
        return [b["msgtype"] for b in wecom.accepted]

    try:
        async with aiohttp.ClientSession() as s:
            async with asyncio.timeout(30):
                while True:
                    try:
                        async with s.get(f"{base}/-/ready") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientError:
                        pass
                    await asyncio.sleep(0.1)

            async def push(*alerts: dict) -> None:
                async with s.post(f"{base}/api/v2/alerts", json=list(alerts)) as r:
                    assert r.status == 200

            t1 = datetime.now(UTC)
            await push(gpu("1", t1, t1 + timedelta(hours=1)))  # fire
            await wait_for(lambda: len(wecom.accepted) >= 2 and len(ding.accepted) >= 1)
            await push(gpu("1", t1, datetime.now(UTC)))  # resolve
            await wait_for(lambda: len(wecom.accepted) >= 3 and len(ding.accepted) >= 2)
            t2 = datetime.now(UTC)
            await push(gpu("1", t2, t2 + timedelta(hours=1)))  # fire again: a new episode
            await wait_for(lambda: len(wecom.accepted) >= 5 and len(ding.accepted) >= 3)
            await push(gpu("1", t2, t2 + timedelta(hours=1)), gpu("2", t2, t2 + timedelta(hours=1)))
            await wait_for(lambda: len(wecom.accepted) >= 7 and len(ding.accepted) >= 4)
            await asyncio.sleep(2.5)  # two more group intervals: anything extra would arrive now
    finally:
        am.terminate()
        am.wait(timeout=10)
        await h.close()
        await wecom.stop()
        await ding.stop()
    assert set(wecom.codes()) == {"0"} and set(ding.codes()) == {"0"}  # signature, keyword, limits all fine
    assert kinds() == ["markdown", "text", "markdown", "markdown", "text", "markdown", "text"]
    titles = [
        b["markdown"]["content"].split("\n", 1)[0] for b in wecom.accepted if b["msgtype"] == "markdown"
    ]
    assert titles == [
        "## [FIRING:1] AcceleratorLost",
        "## [RESOLVED:1] AcceleratorLost",
        "## [FIRING:1] AcceleratorLost",
        "## [FIRING:2] AcceleratorLost",
    ]
    mentions = [b["text"]["mentioned_mobile_list"] for b in wecom.accepted if b["msgtype"] == "text"]
    assert mentions == [["13800001111"]] * 3  # every firing notification, the second alert's included
    first = wecom.accepted[0]["markdown"]["content"].splitlines()
    start = first.index("> GPU 1 掉卡")
    assert first[start : start + 4] == [  # Alertmanager sends annotations with sorted keys (a Go map)
        "> GPU 1 掉卡",
        "> nvidia-smi 看不到该设备",
        "> alertAdvice: 排空节点后重启",
        "> alertInfo: Xid 79: GPU has fallen off the bus",
    ]
    assert [("at" in b) for b in ding.accepted] == [True, False, True, True]
    assert ding.accepted[0]["at"] == {"isAtAll": False, "atMobiles": ["13800002222"]}
    texts = [b["markdown"]["text"] for b in ding.accepted]
    assert texts[0].startswith("### [FIRING:1] AcceleratorLost\n") and "@13800002222" in texts[0]
    assert "> alertAdvice: 排空节点后重启" in texts[0] and texts[0].endswith("xpuwatch")
    assert texts[1].startswith("### [RESOLVED:1] AcceleratorLost\n")
