"""A real Alertmanager 0.25 runs the generated routing tree and inhibition rules on loopback.

Alerts are posted through its API v2 the way Prometheus does; a loopback webhook sink stands in for the relay
and the remediation controller (it records what Alertmanager delivers, per the webhook payload documented in
Alertmanager's docs/configuration.md <webhook_config>). Only the receiver endpoints and the group waits
differ from alerts/generated/alertmanager.yml: same routes, matchers and inhibit rules.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.ports import free_port as _free_port
from xpuwatch.alerts.alertmanager import Endpoints, render_alertmanager
from xpuwatch.alerts.spec import load_spec

AM_BIN = "/usr/bin/prometheus-alertmanager"
TOKEN = "s3cret-token"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(AM_BIN).exists(), reason=f"{AM_BIN} not installed"),
]


@dataclasses.dataclass
class Sink:
    """Loopback webhook receiver: path -> list of (Authorization header, payload)."""

    url: str
    received: dict[str, list[tuple[str, dict[str, Any]]]]


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    received: dict[str, list[tuple[str, dict[str, Any]]]] = {}

    async def hook(request: web.Request) -> web.Response:
        received.setdefault(request.path, []).append(
            (request.headers.get("Authorization", ""), await request.json())
        )
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/alertmanager/{channel}", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield Sink(f"http://127.0.0.1:{port}", received)
    await runner.cleanup()


@pytest.fixture
async def alertmanager(tmp_path: Path, sink: Sink) -> AsyncIterator[str]:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    spec = load_spec()
    ro = spec.routing
    fast = dataclasses.replace(
        ro,
        hardware=dataclasses.replace(ro.hardware, group_wait="1s"),
        performance=dataclasses.replace(ro.performance, group_wait="1s"),
        remediation=dataclasses.replace(ro.remediation, group_wait="1s"),
    )
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        render_alertmanager(
            dataclasses.replace(spec, routing=fast),
            Endpoints(sink.url, sink.url, str(token), str(token)),
        )
    )
    port = _free_port()
    proc = subprocess.Popen(
        [
            AM_BIN,
            f"--config.file={config}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(100):
                try:
                    async with http.get(f"{base}/-/ready") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                if proc.poll() is not None:
                    raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "alertmanager exited")
                await asyncio.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _alert(name: str, category: str, severity: str, action: str, uuid: str) -> dict[str, Any]:
    return {
        "labels": {
            "alertname": name,
            "category": category,
            "severity": severity,
            "action": action,
            "node": "n1",
            "vendor": "nvidia",
            "model": "A100",
            "device": uuid[-1],
            "uuid": uuid,
            "namespace": "ml",
            "pod": "train-1",
        },
        "annotations": {"summary": name, "description": f"{name} on {uuid}", "runbook_url": "x"},
    }


async def _wait_for(predicate: Any, timeout_s: float = 120.0) -> None:
    """Until ``predicate()``; ``timeout_s`` is a bound for a loaded machine, not a figure under test."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.2)
    raise AssertionError("condition not reached")


async def test_critical_hardware_alert_inhibits_performance_alerts_on_the_same_device(
    alertmanager: str, sink: Sink
) -> None:
    lost = _alert("AcceleratorLost", "hardware", "critical", "drain", "GPU-0")
    idle_same = _alert("AcceleratorLowUtilization", "performance", "warning", "none", "GPU-0")
    idle_other = _alert("AcceleratorLowUtilization", "performance", "warning", "none", "GPU-1")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{alertmanager}/api/v2/alerts", json=[lost, idle_same, idle_other]) as r:
            assert r.status == 200

        async def states() -> dict[tuple[str, str], dict[str, Any]]:
            async with http.get(f"{alertmanager}/api/v2/alerts") as r:
                return {(a["labels"]["alertname"], a["labels"]["uuid"]): a["status"] for a in await r.json()}

        deadline = time.monotonic() + 120  # a bound for a loaded machine
        while time.monotonic() < deadline:
            st = await states()
            if st.get(("AcceleratorLowUtilization", "GPU-0"), {}).get("state") == "suppressed":
                break
            await asyncio.sleep(0.1)
        st = await states()
        lost_fp = None
        async with http.get(f"{alertmanager}/api/v2/alerts") as r:
            for a in await r.json():
                if a["labels"]["alertname"] == "AcceleratorLost":
                    lost_fp = a["fingerprint"]
        assert st[("AcceleratorLowUtilization", "GPU-0")]["state"] == "suppressed"
        assert st[("AcceleratorLowUtilization", "GPU-0")]["inhibitedBy"] == [lost_fp]
        assert st[("AcceleratorLowUtilization", "GPU-1")] == {
            "state": "active",
            "inhibitedBy": [],
            "silencedBy": [],
        }
        assert st[("AcceleratorLost", "GPU-0")]["state"] == "active"

    await _wait_for(
        lambda: (
            {"/alertmanager/oncall-wecom", "/alertmanager/team-feishu", "/alertmanager/remediate"}
            <= set(sink.received)
        )
    )
    await asyncio.sleep(1.5)  # anything else (the inhibited alert) would arrive in the same flush

    def delivered(path: str) -> list[tuple[str, str]]:
        return [
            (a["labels"]["alertname"], a["labels"]["uuid"])
            for _, payload in sink.received.get(path, [])
            for a in payload["alerts"]
        ]

    assert delivered("/alertmanager/oncall-wecom") == [("AcceleratorLost", "GPU-0")]
    assert delivered("/alertmanager/remediate") == [("AcceleratorLost", "GPU-0")]
    assert delivered("/alertmanager/team-feishu") == [("AcceleratorLowUtilization", "GPU-1")]
    auth = {h for calls in sink.received.values() for h, _ in calls}
    assert auth == {f"Bearer {TOKEN}"}
    hw_payload = sink.received["/alertmanager/oncall-wecom"][0][1]
    assert hw_payload["receiver"] == "oncall-wecom"
    assert hw_payload["groupLabels"] == {"alertname": "AcceleratorLost", "node": "n1"}


async def test_exporter_down_inhibits_device_alerts_of_its_node(alertmanager: str, sink: Sink) -> None:
    down = {
        "labels": {
            "alertname": "XpuwatchExporterDown",
            "category": "hardware",
            "severity": "warning",
            "action": "none",
            "node": "n1",
            "instance": "n1:9851",
        }
    }
    missing = {
        "labels": {
            "alertname": "AcceleratorMissing",
            "category": "hardware",
            "severity": "critical",
            "action": "none",
            "node": "n1",
        }
    }
    other_node = _alert("AcceleratorTemperatureHigh", "hardware", "warning", "none", "GPU-7")
    other_node["labels"]["node"] = "n2"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{alertmanager}/api/v2/alerts", json=[down, missing, other_node]) as r:
            assert r.status == 200
        await asyncio.sleep(0.5)
        async with http.get(f"{alertmanager}/api/v2/alerts") as r:
            st = {a["labels"]["alertname"]: a["status"]["state"] for a in await r.json()}
    assert st == {
        "XpuwatchExporterDown": "active",
        "AcceleratorMissing": "suppressed",
        "AcceleratorTemperatureHigh": "active",
    }


def _amtool(base: str, *args: str) -> str:
    result = subprocess.run(
        ["amtool", f"--alertmanager.url={base}", *args], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.skipif(not shutil.which("amtool"), reason="amtool not installed")
async def test_inhibitions_never_cross_clusters(alertmanager: str, sink: Sink) -> None:
    """Same node name and uuid in clusters a and b (clusters are built alike): a critical hardware alert and
    an exporter outage in cluster a silence only cluster a's alerts. Alerts are added and read with amtool."""
    device = ["node=n1", "vendor=nvidia", "model=A100", "device=0", "uuid=GPU-0", "namespace=ml", "pod=p"]
    hw = ["category=hardware", "severity=critical", "action=drain"]
    perf = ["category=performance", "severity=warning", "action=none"]
    for cluster in ("a", "b"):
        _amtool(
            alertmanager,
            "alert",
            "add",
            "alertname=AcceleratorLowUtilization",
            f"cluster={cluster}",
            *perf,
            *device,
        )
        _amtool(alertmanager, "alert", "add", "alertname=AcceleratorTemperatureHigh", f"cluster={cluster}",
                "category=hardware", "severity=warning", "action=none", *device)  # fmt: skip
        _amtool(alertmanager, "alert", "add", "alertname=AcceleratorMissing", f"cluster={cluster}", "node=n2",
                "category=hardware", "severity=critical", "action=none")  # fmt: skip
    _amtool(alertmanager, "alert", "add", "alertname=AcceleratorLost", "cluster=a", *hw, *device)
    _amtool(alertmanager, "alert", "add", "alertname=XpuwatchExporterDown", "cluster=a", "node=n2",
            "instance=n2:9851", "category=hardware", "severity=warning", "action=none")  # fmt: skip

    def states() -> dict[tuple[str, str], str]:
        out = json.loads(_amtool(alertmanager, "alert", "query", "--inhibited", "--active", "-o", "json"))
        return {(a["labels"]["alertname"], a["labels"]["cluster"]): a["status"]["state"] for a in out}

    deadline = time.monotonic() + 120  # a bound for a loaded machine
    while time.monotonic() < deadline:
        if states().get(("AcceleratorMissing", "a")) == "suppressed":
            break
        await asyncio.sleep(0.1)
    assert states() == {
        ("AcceleratorLost", "a"): "active",
        ("XpuwatchExporterDown", "a"): "active",
        ("AcceleratorLowUtilization", "a"): "suppressed",
        ("AcceleratorTemperatureHigh", "a"): "suppressed",
        ("AcceleratorMissing", "a"): "suppressed",
        ("AcceleratorLowUtilization", "b"): "active",
        ("AcceleratorTemperatureHigh", "b"): "active",
        ("AcceleratorMissing", "b"): "active",
    }
