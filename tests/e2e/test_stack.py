"""End to end with the real tools: the sim exporter with an ECC fault injected, Debian's Prometheus
evaluating the generated rules, Debian's Alertmanager with the generated config, the relay, and the fake
WeCom and Feishu bots. The hardware alert reaches WeCom, a performance alert Feishu, the performance alert
inhibited by the hardware one neither; then the resolved message arrives.

Durations are spec values shortened for the test (the spec's `with_overrides`); routing timings likewise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ports import free_port as _free_port
from tests.relay.fakebots import FakeFeishu, FakeWeCom, texts
from tests.relay.harness import TOKEN, settings_for, start_relay
from xpuwatch.alerts.alertmanager import Endpoints, render_alertmanager
from xpuwatch.alerts.relay.config import RateLimit
from xpuwatch.alerts.rules import render_rules
from xpuwatch.alerts.spec import load_spec
from xpuwatch.vendors.sim import default_scenario_text

ROOT = Path(__file__).resolve().parents[2]
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (os.access(ALERTMANAGER, os.X_OK) and os.access(PROMETHEUS, os.X_OK)),
        reason="Debian prometheus and prometheus-alertmanager are required",
    ),
]
FAULT_AT = (
    8.0  # seconds after Prometheus's first scrape (timeline_start: first_scrape): it saw the counters at 0
)
# The default sim fleet: bob's idle notebook is a MIG slice on the A100 nvidia/0; alice's idle notebook holds
# the RTX 4090 nvidia/2. The ECC fault lands on the A100, so bob's notebook alert is inhibited, alice's is not.
SCENARIO = yaml.safe_load(default_scenario_text())
SCENARIO["timeline_start"] = "first_scrape"
SCENARIO["timeline"] = [
    *SCENARIO["timeline"],
    {"at": FAULT_AT, "device": "nvidia/0", "fault": "ecc_uncorrectable"},
]
OVERRIDES: dict[str, dict[str, Any]] = {
    "AcceleratorEccUncorrectable": {"window": "30s"},
    "AcceleratorIdleNotebook": {"for": "12s"},
}


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


async def _until(pred: Any, timeout: float, what: str, diagnose: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{diagnose() if diagnose else ''}")
        await asyncio.sleep(0.2)


def _wecom_texts(bot: FakeWeCom) -> list[str]:
    return [
        b.get("markdown", {}).get("content", "") or b.get("text", {}).get("content", "") for b in bot.accepted
    ]


def _feishu_texts(bot: FakeFeishu) -> list[str]:
    return ["\n".join(texts(b)) for b in bot.accepted]


async def test_fault_to_chat_with_inhibition_and_resolution(tmp_path: Path) -> None:
    wecom = FakeWeCom(limits=(RateLimit(20, 60.0),))
    feishu = FakeFeishu(secret="sec")
    await wecom.start()
    await feishu.start()
    relay = await start_relay(
        settings_for(
            tmp_path,
            {
                "oncall-wecom": {"type": "wecom", "url": wecom.url()},
                "team-feishu": {"type": "feishu", "url": feishu.url(), "secret": "sec"},
            },
        )
    )
    spec = load_spec().with_overrides(OVERRIDES)
    fast = {"group_wait": "1s", "group_interval": "2s"}
    spec = dataclasses.replace(
        spec,
        routing=dataclasses.replace(
            spec.routing,
            hardware=dataclasses.replace(spec.routing.hardware, **fast),
            performance=dataclasses.replace(spec.routing.performance, **fast),
            remediation=dataclasses.replace(spec.routing.remediation, **fast),
        ),
    )
    (tmp_path / "token").write_text(TOKEN)
    exporter_port, prom_port, am_port = _free_port(), _free_port(), _free_port()
    (tmp_path / "rules.yml").write_text(render_rules(spec))
    (tmp_path / "alertmanager.yml").write_text(
        render_alertmanager(
            spec,
            Endpoints(
                relay_url=relay.url,
                remediator_url=f"http://127.0.0.1:{_free_port()}",  # no controller in this test
                relay_credentials_file=str(tmp_path / "token"),
                remediator_credentials_file=str(tmp_path / "token"),
            ),
        )
    )
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(tmp_path / "rules.yml")],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
                "scrape_configs": [
                    {"job_name": "xpuwatch", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}
                ],
            }
        )
    )
    (tmp_path / "sim.yaml").write_text(yaml.safe_dump(SCENARIO))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [
                ALERTMANAGER,
                f"--config.file={tmp_path / 'alertmanager.yml'}",
                f"--storage.path={tmp_path / 'am'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    started = time.monotonic()
    procs.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "xpuwatch",
                "serve",
                "--simulate",
                f"--sim-config={tmp_path / 'sim.yaml'}",
                f"--web.listen-address=127.0.0.1:{exporter_port}",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    am = f"http://127.0.0.1:{am_port}"

    def diagnose() -> str:
        out = []
        for what, url in (
            ("prometheus alerts", f"http://127.0.0.1:{prom_port}/api/v1/alerts"),
            ("alertmanager alerts", f"{am}/api/v2/alerts"),
        ):
            try:
                out.append(f"{what}: {json.dumps(_get(url))[:3000]}")
            except OSError as exc:
                out.append(f"{what}: {exc}")
        out.append(f"wecom answers {wecom.answers}; feishu answers {feishu.answers}")
        return "\n".join(out)

    try:
        # 1. the hardware alert reaches the WeCom bot
        await _until(
            lambda: any("AcceleratorEccUncorrectable" in t for t in _wecom_texts(wecom)),
            90,
            "the ECC alert at WeCom",
            diagnose,
        )
        latency = time.monotonic() - started - FAULT_AT
        print(f"fault injection -> WeCom message: {latency:.1f} s")
        # 2. a performance alert (alice's idle notebook) reaches Feishu ...
        await _until(
            lambda: any("jupyter-alice" in t for t in _feishu_texts(feishu)),
            90,
            "alice's notebook at Feishu",
            diagnose,
        )
        # ... while bob's, on a slice of the faulty card, is held back by the inhibition in Alertmanager
        alerts = _get(f"{am}/api/v2/alerts?filter=alertname%3D%22AcceleratorIdleNotebook%22")
        state = {a["labels"]["pod"]: a["status"] for a in alerts}
        assert state["jupyter-bob"]["state"] == "suppressed" and state["jupyter-bob"]["inhibitedBy"]
        assert state["jupyter-alice"]["state"] == "active"
        assert not any("jupyter-bob" in t for t in _feishu_texts(feishu) + _wecom_texts(wecom))
        assert not any("AcceleratorIdleNotebook" in t for t in _wecom_texts(wecom))  # categories stay apart
        # 3. the ECC counter stops rising: once the window passes, the resolved message arrives
        await _until(
            lambda: any("AcceleratorEccUncorrectable" in t and "RESOLVED:" in t for t in _wecom_texts(wecom)),
            120,
            "the resolved message at WeCom",
            diagnose,
        )
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        await relay.close()
        await wecom.stop()
        await feishu.stop()
