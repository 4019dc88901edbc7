"""The demo's parts one by one: its rules and routes (only durations differ from production; promtool and
amtool accept the files), the stand-in bots (answers the relay classifies as delivered), the Kubernetes
API stand-in (driven by the real client through remediation/kube.py) and the narration text."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from xpuwatch.alerts.relay import feishu, wecom
from xpuwatch.alerts.rules import AlertingRule, build_groups
from xpuwatch.alerts.spec import load_spec
from xpuwatch.deploy import demo_config as cfg
from xpuwatch.deploy.demo import load_demo_scenario, write_files
from xpuwatch.deploy.narration import AlertWatch, Console, describe_audit, parse_time, readable
from xpuwatch.deploy.standin_bots import FEISHU_OK, WECOM_OK, BotMessage, ChatBots
from xpuwatch.deploy.standin_kube import KubeStandIn, scenario_objects
from xpuwatch.remediation.kube import Kube, KubeError, ObjectRef
from xpuwatch.remediation.settings import KubeSettings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PORTS = cfg.Ports(exporter=19851, prometheus=19090, alertmanager=19093, relay=19852, remediation=19853)


def alerting(spec: Any) -> dict[str, AlertingRule]:
    return {r.alert: r for g in build_groups(spec) for r in g.rules if isinstance(r, AlertingRule)}


# ------------------------------------------------------------------------------------------ rules, routes


def test_demo_spec_changes_durations_only() -> None:
    prod = load_spec()
    demo = cfg.demo_spec(prod)
    p, d = alerting(prod), alerting(demo)
    assert {n for n in p if p[n].for_ != d[n].for_} == {
        "AcceleratorTemperatureHigh",
        "AcceleratorTemperatureCritical",
        "AcceleratorThermalThrottling",
        "AcceleratorIdleNotebook",
        "AcceleratorLowUtilization",
    }
    assert d["AcceleratorIdleNotebook"].for_ == "15s" and p["AcceleratorIdleNotebook"].for_ == "2h"
    # the ECC window is the only expression change, and only in its range
    assert {n for n in p if p[n].expr != d[n].expr} == {"AcceleratorEccUncorrectable"}
    assert d["AcceleratorEccUncorrectable"].expr == p["AcceleratorEccUncorrectable"].expr.replace(
        "[10m]", "[1m]"
    )
    assert {n for n in p if p[n].labels != d[n].labels} == set()
    r = demo.routing
    assert (r.hardware.group_wait, r.performance.group_wait, r.remediation.group_wait) == ("1s", "5s", "0s")
    assert (r.hardware.group_by, r.performance.group_by) == (
        prod.routing.hardware.group_by,
        prod.routing.performance.group_by,
    )
    assert prod.routing.performance.group_wait == "2m"  # the production spec is untouched


@pytest.fixture
def written(tmp_path: Path) -> cfg.Files:
    files = cfg.Files.under(tmp_path)
    text, _ = load_demo_scenario(None)
    bots = ChatBots("k" * 32, "t" * 32, lambda m: None)
    write_files(
        files, text, Path("alerts/spec.yaml"), PORTS, "http://127.0.0.1:16443", bots, "http://127.0.0.1:18080"
    )
    return files


def test_written_files_point_at_loopback_with_secrets_in_files(written: cfg.Files) -> None:
    am = written.alertmanager.read_text()
    assert "url: http://127.0.0.1:19852/alertmanager/oncall-wecom" in am
    assert "url: http://127.0.0.1:19852/alertmanager/team-feishu" in am
    assert "url: http://127.0.0.1:19853/alertmanager/remediate" in am
    assert f"credentials_file: {written.relay_token}" in am
    assert f"credentials_file: {written.remediation_token}" in am
    assert written.wecom_url.read_text() == f"http://127.0.0.1:18080/cgi-bin/webhook/send?key={'k' * 32}\n"
    assert written.feishu_url.read_text() == f"http://127.0.0.1:18080/open-apis/bot/v2/hook/{'t' * 32}\n"
    for secret in (written.relay_token, written.remediation_token, written.relay_password):
        assert secret.stat().st_mode & 0o777 == 0o600
        assert secret.read_text() not in am
    assert json.loads(written.exporter_targets.read_text()) == []


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian package prometheus) is required")
def test_promtool_accepts_prometheus_yml_and_rules(written: cfg.Files) -> None:
    out = subprocess.run(
        ["promtool", "check", "config", str(written.prometheus)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout and "rules found" in out.stdout


@pytest.mark.skipif(
    not shutil.which("amtool"), reason="amtool (Debian package prometheus-alertmanager) is required"
)
def test_amtool_accepts_alertmanager_yml(written: cfg.Files) -> None:
    out = subprocess.run(
        ["amtool", "check-config", str(written.alertmanager)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_relay_and_remediation_load_the_written_configs(written: cfg.Files) -> None:
    from xpuwatch.alerts.relay.config import load_settings
    from xpuwatch.remediation.settings import load

    relay = load_settings(written.relay)
    assert sorted(relay.channels) == ["oncall-wecom", "team-feishu"]
    assert relay.listen_address == "127.0.0.1:19852"
    assert relay.auth.bearer_token and relay.auth.basic_username == "remediation"
    rem = load(written.remediation)
    assert rem.guard.dry_run is True and rem.guard.max_disrupted_ratio == 1.0
    assert rem.kube.host == "http://127.0.0.1:16443"
    relay_at = f"http://remediation:{relay.auth.basic_password}@127.0.0.1:19852/alertmanager"
    assert rem.notify_url is None  # every notice goes by its category, as the alerts do
    assert rem.notify == {"hardware": f"{relay_at}/oncall-wecom", "performance": f"{relay_at}/team-feishu"}
    assert rem.webhook.bearer_token == written.remediation_token.read_text().strip()


# ------------------------------------------------------------------------------------------ stand-in bots


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_bots_answer_as_the_real_ones_and_hand_over_the_text() -> None:
    got: list[BotMessage] = []
    bots = ChatBots("key1", "tok1", got.append, clock=lambda: 1000.0)
    runner, base = await serve(bots.app())
    md = json.loads((FIXTURES / "wecom" / "req-markdown.json").read_text())
    card = json.loads((FIXTURES / "feishu" / "req-interactive-card-v1.json").read_text())
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(bots.wecom_url(base), json=md) as r:
                assert (r.status, await r.read()) == (200, json.dumps(WECOM_OK).encode())
                assert wecom.BOT.classify(200, json.dumps(WECOM_OK).encode()).result == "ok"
            async with s.post(bots.feishu_url(base), json=card) as r:
                body = await r.read()
                assert (r.status, json.loads(body)) == (200, FEISHU_OK)
                assert feishu.BOT.classify(200, body).result == "ok"
            async with s.post(f"{base}/cgi-bin/webhook/send?key=other", json=md) as r:
                assert (await r.json())["errcode"] == 93000
            async with s.post(f"{base}/open-apis/bot/v2/hook/other", json=card) as r:
                assert (await r.json())["code"] == 19001
    finally:
        await runner.cleanup()
    assert got == [
        BotMessage("wecom", md["markdown"]["content"], 1000.0),
        BotMessage(
            "feishu",
            "[FIRING:1] GpuXidError gpu-node-01\n**alertname**: GpuXidError\n**severity**: critical\n"
            "at所有人<at id=all></at>\nsent by relay",
            1000.0,
        ),
    ]
    assert readable(got[0]).startswith("实时新增用户反馈132例，请相关同事注意。\n>类型:用户反馈\n")
    assert readable(BotMessage("feishu", "&#91;dry-run&#93; reclaim", 0.0)) == "[dry-run] reclaim"


# ------------------------------------------------------------------------------------------ API stand-in


def test_scenario_objects_seed_the_node_and_every_pod() -> None:
    _, scenario = load_demo_scenario(None)
    objs = scenario_objects(scenario)
    assert objs[0] == (
        "nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "sim-node-1"}, "spec": {}},
    )
    pods = {o["metadata"]["name"]: o for r, o in objs if r == "pods"}
    assert len(pods) == 13
    assert "ownerReferences" not in pods["jupyter-alice"]["metadata"]
    assert pods["jupyter-alice"]["metadata"]["labels"]["hub.jupyter.org/username"] == "alice"
    assert pods["train-llm-0"]["metadata"]["ownerReferences"][0]["kind"] == "Job"


async def test_remediation_kube_client_works_against_the_stand_in() -> None:
    _, scenario = load_demo_scenario(None)
    standin = KubeStandIn(scenario_objects(scenario))
    runner, base = await serve(standin.app())
    kube = await Kube.connect(KubeSettings(host=base), instance="demo-0")
    try:
        assert [n.name for n in await kube.list_nodes()] == ["sim-node-1"]
        assert (await kube.get_node("sim-node-1")).annotations == {}
        pod = await kube.get_pod("ml-team", "jupyter-alice")
        assert pod is not None and pod.node == "sim-node-1" and pod.owner_kind == ""
        assert await kube.get_pod("ml-team", "nobody") is None
        assert len(await kube.pods_on_node("sim-node-1")) == 13
        assert await kube.get_notebook("ml-team", "alice") is None  # no Kubeflow CRD: 404
        lease = await kube.write_lease("xpuwatch", "xpuwatch-remediation", {"holderIdentity": "demo-0"}, None)
        with pytest.raises(KubeError) as exists:
            await kube.write_lease("xpuwatch", "xpuwatch-remediation", {"holderIdentity": "x"}, None)
        assert exists.value.status == 409 and exists.value.reason == "AlreadyExists"
        renewed = await kube.write_lease(
            "xpuwatch", "xpuwatch-remediation", {"holderIdentity": "demo-0"}, lease.resource_version
        )
        with pytest.raises(KubeError) as stale:
            await kube.write_lease(
                "xpuwatch", "xpuwatch-remediation", {"holderIdentity": "x"}, lease.resource_version
            )
        assert stale.value.status == 409 and stale.value.reason == "Conflict"
        assert (await kube.get_lease("xpuwatch", "xpuwatch-remediation")) == renewed
        from datetime import UTC, datetime

        await kube.emit_event(
            ObjectRef("Node", "sim-node-1"), "DryRun", "[dry-run] would drain", datetime.now(UTC)
        )
        await kube.annotate_node("sim-node-1", {"xpuwatch.io/test": "1"})
        assert (await kube.get_node("sim-node-1")).annotations == {"xpuwatch.io/test": "1"}
    finally:
        await kube.close()
        await runner.cleanup()
    assert [(e.namespace, e.kind, e.name, e.reason, e.message) for e in standin.events] == [
        ("default", "Node", "sim-node-1", "DryRun", "[dry-run] would drain")
    ]


# ------------------------------------------------------------------------------------------ narration


def stamped(out: io.StringIO) -> list[str]:
    """Printed lines without the time stamps."""
    return [re.sub(r"^\d\d:\d\d:\d\d +[+-][\d.]+s  ", "", line) for line in out.getvalue().splitlines()]


def test_alert_watch_tells_pending_firing_resolved_and_inhibited() -> None:
    out = io.StringIO()
    console = Console(out=out, started_wall=parse_time("2026-11-30T15:00:00Z") or 0.0)
    watch = AlertWatch({"AcceleratorEccUncorrectable": "0m", "AcceleratorIdleNotebook": "15s"})
    ecc = {"alertname": "AcceleratorEccUncorrectable", "severity": "critical", "category": "hardware",
           "action": "drain", "vendor": "nvidia", "device": "1", "namespace": "ml-team", "pod": "train-0"}  # fmt: skip
    nb = {"alertname": "AcceleratorIdleNotebook", "severity": "warning", "category": "performance",
          "action": "reclaim", "vendor": "nvidia", "device": "2", "namespace": "ml-team", "pod": "jupyter-a"}  # fmt: skip
    watch.prometheus([{"labels": nb, "state": "pending"}], console)
    watch.prometheus(
        [
            {"labels": nb, "state": "pending"},
            {"labels": ecc, "state": "firing", "activeAt": "2026-11-30T15:00:12.5Z"},
        ],
        console,
    )
    watch.prometheus([{"labels": nb, "state": "firing"}], console)
    watch.alertmanager([{"fingerprint": "ab", "labels": nb, "status": {"inhibitedBy": ["cd"]}}] * 2, console)
    assert stamped(out) == [
        "alert       PENDING   AcceleratorIdleNotebook  warning/performance  nvidia/2 ml-team/jupyter-a  -> reclaim  (fires if it lasts 15s)",
        "alert       FIRING    AcceleratorEccUncorrectable  critical/hardware  nvidia/1 ml-team/train-0  -> drain",
        "alert       FIRING    AcceleratorIdleNotebook  warning/performance  nvidia/2 ml-team/jupyter-a  -> reclaim",
        "alert       RESOLVED  AcceleratorEccUncorrectable  critical/hardware  nvidia/1 ml-team/train-0  -> drain",
        "alert       INHIBITED AcceleratorIdleNotebook  warning/performance  nvidia/2 ml-team/jupyter-a  -> reclaim  (a critical alert on the card speaks for it)",
    ]
    assert console.first_hardware_alert == 12.5


def test_audit_records_read_as_decisions() -> None:
    rec = {"ts": "2026-11-30T15:00:00Z", "event": "decision", "alert": "x", "alertname": "AcceleratorEccUncorrectable",
           "action": "drain", "step": "start", "target": "node/n1", "reason": "faulty accelerator GPU-1",
           "allowed": True, "mode": "dry-run", "refusal": None, "refusal_detail": ""}  # fmt: skip
    assert describe_audit(rec) == (
        "decision drain start node/n1 [AcceleratorEccUncorrectable]: allowed (dry-run): faulty accelerator GPU-1"
    )
    refused = {
        **rec,
        "allowed": False,
        "refusal": "cooldown",
        "refusal_detail": "drain on node/n1 within 3600s",
    }
    assert describe_audit(refused) == (
        "decision drain start node/n1 [AcceleratorEccUncorrectable]: refused (cooldown): drain on node/n1 within 3600s"
    )
    assert describe_audit({"event": "lease"}) is None


def test_parse_time_reads_prometheus_nanoseconds() -> None:
    assert parse_time("2026-11-30T15:19:58.123456789Z") == parse_time("2026-11-30T15:19:58.123456Z")
    assert parse_time("2026-11-30T15:19:58Z") == 1796051998.0
    assert parse_time("2026-11-30T16:19:58+01:00") == 1796051998.0
    assert parse_time("yesterday") is None


def test_components_listen_on_loopback_in_start_order(tmp_path: Path) -> None:
    files = cfg.Files.under(tmp_path)
    comps = cfg.components("/usr/bin/prometheus", "/usr/bin/prometheus-alertmanager", "/py", PORTS, files)
    assert [c.name for c in comps] == ["prometheus", "alertmanager", "relay", "remediation", "exporter"]
    am = comps[1]
    assert am.argv == (
        "/usr/bin/prometheus-alertmanager",
        f"--config.file={tmp_path}/alertmanager.yml",
        f"--storage.path={tmp_path}/alertmanager-data",
        "--web.listen-address=127.0.0.1:19093",
        "--cluster.listen-address=",
        "--web.external-url=http://127.0.0.1:19093",
    )
    assert comps[4].argv == (
        "/py", "-m", "xpuwatch", "serve", "--simulate", "--sim-config", f"{tmp_path}/scenario.yaml",
        "--web.listen-address", "127.0.0.1:19851",
    )  # fmt: skip
    assert [c.ready_url for c in comps] == [
        "http://127.0.0.1:19090/-/ready",
        "http://127.0.0.1:19093/-/ready",
        "http://127.0.0.1:19852/readyz",
        "http://127.0.0.1:19853/readyz",
        "http://127.0.0.1:19851/readyz",
    ]


def test_the_headline_counts_the_alerts_message_not_the_controllers_notice() -> None:
    """The dry-run drain notice can reach WeCom before the alert's own message: the summary's first
    hardware message is the alert's."""
    from xpuwatch.deploy.demo import summary

    console = Console(out=io.StringIO())
    console.first["WeCom"] = 26.9  # the notice
    console.first_hardware_alert = 27.1
    assert "first hardware message" not in summary(console)
    console.first_hardware_message = 27.6
    assert summary(console).endswith("; first hardware message at +27.6 s (0.5 s after the alert)")
