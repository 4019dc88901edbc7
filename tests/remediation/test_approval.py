"""Manual approval against the stand-in API server (fakekube.py, driven by the real kubernetes_asyncio
client) and the controller's real HTTP app: approve by annotation and by authenticated POST, deny, expire,
the guard run again at approval time, per action and per namespace."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.remediation.kit import alerts_of, am_alert, drain_labels, make_controller, make_settings
from xpuwatch.remediation.approval import decision_id
from xpuwatch.remediation.policy import TargetState, decide
from xpuwatch.remediation.settings import ApprovalSettings, ConfigError, GuardSettings, WebhookSettings, parse
from xpuwatch.remediation.webhook import build_app

HOUR = 3600.0


def _settings(url: str, cap: int = 5, **approval: Any) -> Any:
    return make_settings(
        guard=GuardSettings(dry_run=False, max_disrupted_nodes=cap, max_disrupted_ratio=1.0),
        approval=ApprovalSettings(**{"actions": {"drain": "manual"}, **approval}),
        notify_url=url,
        webhook=WebhookSettings(bearer_token="s3cret", basic_user="alice", basic_password="pw"),
    )


def _taints(fake: Any, node: str) -> list[str]:
    return [t["value"] for t in fake.get("nodes", node)["spec"].get("taints") or []]


async def test_manual_drain_waits_then_acts_on_an_annotation(fake, kube, session, clock, relay):  # type: ignore[no-untyped-def]
    url, notices = relay
    fake.add_node("gpu-0")
    ctl = make_controller(_settings(url), kube, session, clock)
    await ctl.refresh_view(clock())
    alerts = alerts_of(am_alert(**drain_labels("gpu-0", "GPU-A")))
    out = await ctl.handle(alerts)
    pid = decision_id(decide(alerts[0], TargetState(), (), clock(), ctl.settings))
    assert out[0]["result"] == "pending" and out[0]["approval"] == pid
    assert _taints(fake, "gpu-0") == []
    ann = fake.get("nodes", "gpu-0")["metadata"]["annotations"]
    assert json.loads(ann["xpuwatch.io/pending-approval"])["id"] == pid
    cmd = f"kubectl annotate node gpu-0 xpuwatch.io/approve={pid} xpuwatch.io/approved-by=$USER --overwrite"
    assert cmd in notices[0]["alerts"][0]["annotations"]["description"]
    assert [e["reason"] for e in fake.list("events")] == ["ApprovalRequired"]
    again = await ctl.handle(alerts)  # Alertmanager's repeat: still waiting, asked once
    assert again[0]["detail"] == f"awaiting approval {pid}" and len(notices) == 1
    clock.advance(60)
    await kube.annotate_node("gpu-0", {"xpuwatch.io/approve": pid, "xpuwatch.io/approved-by": "bob"})
    await ctl.tick()
    assert _taints(fake, "gpu-0") == ["GPU-A"]
    rec = next(r for r in ctl.audit.records or [] if r.get("state") == "approved")
    assert rec["by"] == "bob (kubectl annotate)" and rec["allowed"] is True
    ann = fake.get("nodes", "gpu-0")["metadata"]["annotations"]
    assert "xpuwatch.io/pending-approval" not in ann and "xpuwatch.io/approve" not in ann


async def test_deny_and_expire(fake, kube, session, clock, relay):  # type: ignore[no-untyped-def]
    url, notices = relay
    for n in ("gpu-0", "gpu-1"):
        fake.add_node(n)
    ctl = make_controller(_settings(url, expire_seconds=HOUR), kube, session, clock)
    await ctl.refresh_view(clock())
    a0 = alerts_of(am_alert(**drain_labels("gpu-0", "GPU-A")))
    a1 = alerts_of(am_alert(fingerprint="fp2", **drain_labels("gpu-1", "GPU-B")))
    p0 = (await ctl.handle(a0))[0]["approval"]
    await ctl.handle(a1)
    await kube.annotate_node("gpu-0", {"xpuwatch.io/deny": p0})
    clock.advance(60)
    await ctl.tick()
    states = [r["state"] for r in ctl.audit.records or [] if r["event"] == "approval"]
    assert states == ["pending", "pending", "denied"]
    assert (await ctl.handle(a0))[0]["refused"] == "duplicate"  # the repeat does not ask again
    clock.advance(HOUR)
    await ctl.tick()
    states = [r["state"] for r in ctl.audit.records or [] if r["event"] == "approval"]
    assert states[-1] == "expired" and not ctl.pending
    assert "xpuwatch.io/pending-approval" not in fake.get("nodes", "gpu-1")["metadata"]["annotations"]
    assert any("expired unanswered" in n["alerts"][0]["annotations"]["summary"] for n in notices)
    assert _taints(fake, "gpu-0") == _taints(fake, "gpu-1") == []


async def test_guard_runs_again_at_approval_and_post_names_the_user(fake, kube, session, clock, relay):  # type: ignore[no-untyped-def]
    from aiohttp.test_utils import TestClient, TestServer

    url, _ = relay
    for n in ("gpu-0", "gpu-1"):
        fake.add_node(n)
    ctl = make_controller(_settings(url, cap=1), kube, session, clock)
    await ctl.refresh_view(clock())
    p0 = (await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", "GPU-A")))))[0]["approval"]
    p1 = (await ctl.handle(alerts_of(am_alert(fingerprint="fp2", **drain_labels("gpu-1", "GPU-B")))))[0][
        "approval"
    ]
    async with TestClient(TestServer(build_app(ctl))) as client:
        assert (await client.post(f"/approve/{p0}")).status == 401
        basic = base64.b64encode(b"alice:pw").decode()
        r = await client.post(f"/approve/{p0}", headers={"Authorization": f"Basic {basic}"})
        assert r.status == 200 and (await r.json())["result"] == "ok"
        r = await client.post(
            f"/approve/{p1}", headers={"Authorization": "Bearer s3cret"}, json={"by": "carol"}
        )
        body = await r.json()
        assert r.status == 200 and body["refused"] == "cap"  # both pending under a cap of 1
        r = await client.post(f"/deny/{'0' * 12}", headers={"Authorization": "Bearer s3cret"})
        assert r.status == 404
    assert _taints(fake, "gpu-0") == ["GPU-A"] and _taints(fake, "gpu-1") == []
    approved = [r for r in ctl.audit.records or [] if r.get("state") == "approved"]
    assert [a["by"] for a in approved] == [
        "POST by user alice",
        "carol (stated; POST by the holder of the bearer token)",
    ]
    assert [a["allowed"] for a in approved] == [True, False]


async def test_per_namespace_approval(fake, kube, session, clock, relay):  # type: ignore[no-untyped-def]
    url, _ = relay
    for n in ("gpu-0", "gpu-1"):
        fake.add_node(n)
    s = _settings(url, actions={}, namespaces={"training": "manual"})
    ctl = make_controller(s, kube, session, clock)
    await ctl.refresh_view(clock())
    held = await ctl.handle(
        alerts_of(am_alert(**drain_labels("gpu-0", "GPU-A", namespace="training", pod="t-0")))
    )
    free = await ctl.handle(alerts_of(am_alert(fingerprint="fp2", **drain_labels("gpu-1", "GPU-B"))))
    assert held[0]["result"] == "pending" and free[0]["result"] == "ok"


def test_approval_config_is_validated() -> None:
    ok = parse(
        {
            "webhook": {"allow_unauthenticated": True},
            "approval": {
                "actions": {"drain": "manual"},
                "namespaces": {"prod": "manual"},
                "expire_seconds": 600,
            },
        }
    )
    assert ok.approval.actions == {"drain": "manual"} and ok.approval.expire_seconds == 600
    for bad, msg in (
        ({"actions": {"evict": "manual"}}, "approval.actions.evict: unknown action"),
        ({"namespaces": {"prod": "yes"}}, "approval.namespaces.prod: expected auto or manual"),
        ({"default": "never"}, "approval.default: expected auto or manual"),
        ({"expire_seconds": -1}, "approval.expire_seconds"),
    ):
        with pytest.raises(ConfigError, match=msg):
            parse({"webhook": {"allow_unauthenticated": True}, "approval": bad})
