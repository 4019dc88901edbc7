"""No silent muting under kube-prometheus-stack: with the chart's default inhibit rules (chart 88.5.3,
tests/fixtures/kube-prometheus-stack/) and its InfoInhibitor firing, every xpuwatch alert is ``active`` in a
real Alertmanager (Debian's 0.25), read from ``GET /api/v2/alerts``, not only routed by ``amtool config routes
test`` (which cannot see inhibitions). Only xpuwatch's own inhibitions suppress xpuwatch alerts.

Two ways in: the AlertmanagerConfig merged the way prometheus-operator merges it (strategy None, docs/deploy.md
step 2; tests/deploy/test_alertmanagerconfig_routing.operator_merge) and the fragment merged into the chart's
config by hand (``rules generate --merge-into``). The InfoInhibitor alerts posted are the ones the chart's rule
fires for info alerts in a namespace and without one (promtool: fixtures/kube-prometheus-stack/
info-inhibitor_test.yml); two controls show the inhibitor works: the chart's own ``CPUThrottlingHigh`` and an
xpuwatch alert with the old ``severity=info`` are both suppressed by it."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from tests.deploy.test_alertmanagerconfig_routing import KPS_CONFIG, operator_merge
from tests.ports import free_port
from xpuwatch.alerts.alertmanager import Endpoints, build_fragment, merge_fragment
from xpuwatch.alerts.alertmanagerconfig import from_fragment
from xpuwatch.alerts.rules import AlertingRule, build_groups
from xpuwatch.alerts.spec import CATEGORIES, load_spec

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
KPS_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kube-prometheus-stack"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.access(ALERTMANAGER, os.X_OK), reason="Debian prometheus-alertmanager not installed"
    ),
]


@pytest.fixture
async def sink() -> AsyncIterator[str]:
    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{path:.*}", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


def configs(sink: str, tmp: Path) -> dict[str, dict[str, Any]]:
    for name in ("relay-token", "remediation-token"):  # the Secret's keys are the file names
        (tmp / name).write_text("t")
    endpoints = Endpoints(sink, sink, str(tmp / "relay-token"), str(tmp / "remediation-token"))
    fragment = build_fragment(load_spec(), endpoints)
    base = yaml.safe_load(KPS_CONFIG)
    return {
        "AlertmanagerConfig, strategy None": operator_merge(base, from_fragment(fragment), "None"),
        "fragment": merge_fragment(base, fragment),
    }


async def start(config: dict[str, Any], tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    path = tmp / "alertmanager.yml"
    config = {k: v for k, v in config.items() if k != "templates"}  # the chart's template folder is not here
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={path}", f"--storage.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as s, asyncio.timeout(60):
        while True:
            try:
                async with s.get(f"{base}/-/ready") as r:
                    if r.status == 200:
                        return proc, base
            except aiohttp.ClientError:
                pass
            assert proc.poll() is None, "alertmanager exited"
            await asyncio.sleep(0.1)


def xpuwatch_alerts() -> list[dict[str, Any]]:
    """Every alert of the generated rules, each as it would fire in a workload namespace, without one, and
    (the relay's and controller's own) in namespace xpuwatch, each on a node and device of its own so that
    no xpuwatch inhibition joins them."""
    out = []
    rules = [r for g in build_groups(load_spec()) for r in g.rules if isinstance(r, AlertingRule)]
    for i, rule in enumerate(rules):
        namespaces: tuple[str | None, ...] = ("team-a", None) + (
            ("xpuwatch",) if rule.labels["category"] == "meta" else ()
        )
        for j, ns in enumerate(namespaces):
            labels = {"alertname": rule.alert, **rule.labels, "node": f"n{i}-{j}", "uuid": f"GPU-{i}-{j}"}
            if ns:
                labels["namespace"] = ns
            out.append({"labels": labels})
    return out


INFO_INHIBITORS = [
    {"labels": {"alertname": "InfoInhibitor", "severity": "none", "namespace": ns}}
    for ns in ("team-a", "team-b", "xpuwatch")
] + [{"labels": {"alertname": "InfoInhibitor", "severity": "none"}}]
# xpuwatch's own inhibition, for contrast: a lost card silences the finding that it is idle
LOST = {"labels": {"alertname": "AcceleratorLost", "category": "hardware", "severity": "critical", "action": "drain",
                   "node": "gpu-9", "uuid": "GPU-9", "device": "9"}}  # fmt: skip
IDLE = {"labels": {"alertname": "AcceleratorLowUtilization", "category": "performance", "severity": "warning",
                   "action": "none", "node": "gpu-9", "uuid": "GPU-9", "device": "9", "namespace": "team-a"}}  # fmt: skip
# controls: the chart's own info alert, and xpuwatch's capacity signal with the severity it had (the issue)
CHART_INFO = {"labels": {"alertname": "CPUThrottlingHigh", "severity": "info", "namespace": "team-a"}}
OLD_INFO = {"labels": {"alertname": "AcceleratorQueueTimeHigh", "category": "performance", "severity": "info",
                       "action": "none", "namespace": "team-b", "node": "old"}}  # fmt: skip


def key(alert: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(alert["labels"].items()))


@pytest.mark.parametrize("way", ["AlertmanagerConfig, strategy None", "fragment"])
async def test_every_xpuwatch_alert_stays_active_beside_the_charts_info_inhibitor(
    way: str, sink: str, tmp_path: Path
) -> None:
    proc, base = await start(configs(sink, tmp_path)[way], tmp_path)
    ours = xpuwatch_alerts()
    try:
        async with aiohttp.ClientSession() as s:
            posted = [*INFO_INHIBITORS, *ours, LOST, IDLE, CHART_INFO, OLD_INFO]
            async with s.post(f"{base}/api/v2/alerts", json=posted) as r:
                assert r.status == 200
            async with asyncio.timeout(60):
                while True:
                    async with s.get(f"{base}/api/v2/alerts") as r:
                        got = {key(a): a for a in await r.json()}
                    states = [got.get(key(a), {}).get("status", {}).get("state") for a in posted]
                    # Alertmanager marks inhibitions as its inhibitor sees each alert, in no set order:
                    # wait until every alert this test expects muted is muted (else time out and fail)
                    if (
                        None not in states
                        and "unprocessed" not in states
                        and all(
                            got[key(a)]["status"]["state"] == "suppressed"
                            for a in (OLD_INFO, CHART_INFO, IDLE)
                        )
                    ):
                        break
                    await asyncio.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    fingerprint = {key(a): a["fingerprint"] for a in got.values()}
    inhibitor = {a["labels"].get("namespace"): fingerprint[key(a)] for a in INFO_INHIBITORS}
    not_active = {
        a["labels"]["alertname"] + str(a["labels"].get("namespace", "")): got[key(a)]["status"]
        for a in ours
        if got[key(a)]["status"]["state"] != "active"
    }
    assert not_active == {}
    assert len(ours) > 2 * 40 and {a["labels"]["category"] for a in ours} == set(CATEGORIES)
    # xpuwatch's own inhibition still works, and is the only thing suppressing an xpuwatch alert
    assert got[key(IDLE)]["status"] == {
        "state": "suppressed",
        "inhibitedBy": [fingerprint[key(LOST)]],
        "silencedBy": [],
    }
    assert got[key(LOST)]["status"]["state"] == "active"
    # the InfoInhibitor is live: it mutes the chart's info alert and the old info severity, as in the issue
    assert got[key(CHART_INFO)]["status"]["inhibitedBy"] == [inhibitor["team-a"]]
    assert got[key(OLD_INFO)]["status"]["inhibitedBy"] == [inhibitor["team-b"]]


def test_the_charts_info_inhibitor_fires_where_the_test_posts_it() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is required (Debian package prometheus)"
    result = subprocess.run(
        [promtool, "test", "rules", "info-inhibitor_test.yml"],
        cwd=KPS_FIXTURES, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_generated_alert_has_severity_info() -> None:
    """kube-prometheus' convention: severity=info is context, muted unless a warning fires in its namespace.
    xpuwatch's advice must arrive on its own, so it is a warning on a quiet route (docs/deploy.md)."""
    rules = [r for g in build_groups(load_spec()) for r in g.rules if isinstance(r, AlertingRule)]
    assert [r.alert for r in rules if r.labels["severity"] == "info"] == []
