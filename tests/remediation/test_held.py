"""Nothing stuck: every node xpuwatch holds is reported with its age, paged past ``max_hold`` with the node
named, and lifted by healthy-for or ack even while the blast-radius cap is full (injected clock, the
stand-in API server of fakekube.py, a relay stand-in collecting notices)."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import generate_latest

from tests.remediation.kit import (
    alerts_of,
    am_alert,
    drain_labels,
    make_controller,
    make_settings,
)
from xpuwatch.remediation.settings import DrainSettings, GuardSettings, RecheckSettings

HOUR = 3600.0


def _settings(url: str, **guard: Any) -> Any:
    g = {"dry_run": False, "max_disrupted_nodes": 1, "max_disrupted_ratio": 1.0, "max_hold_seconds": 6 * HOUR}
    return make_settings(
        guard=GuardSettings(**{**g, **guard}),
        drain=DrainSettings(default_mode="immediate", healthy_for_seconds=HOUR),
        notify={"hardware": url},
    )


def _metric(ctl: Any, name: str) -> str:
    return "\n".join(
        line
        for line in generate_latest(ctl.telemetry.registry).decode().splitlines()
        if line.startswith(name)
    )


async def test_held_node_age_is_exported_and_paged_once_past_max_hold(fake, kube, session, clock, relay):  # type: ignore[no-untyped-def]
    url, notices = relay
    fake.add_node("gpu-0")
    fake.add_node("gpu-1")
    ctl = make_controller(_settings(url), kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", "GPU-A"))))
    clock.advance(6 * HOUR - 60)
    await ctl.tick()
    assert _metric(ctl, "xpuwatch_remediation_held_node_age_seconds{") == (
        'xpuwatch_remediation_held_node_age_seconds{action="drain",node="gpu-0"} 21540.0'
    )
    assert (
        _metric(ctl, "xpuwatch_remediation_max_hold_seconds ")
        == "xpuwatch_remediation_max_hold_seconds 21600.0"
    )
    held = [n for n in notices if "held by xpuwatch" in n["alerts"][0]["annotations"]["summary"]]
    assert held == []
    clock.advance(120)
    await ctl.tick()
    await ctl.tick()  # paged once, not at every tick
    held = [n for n in notices if "held by xpuwatch" in n["alerts"][0]["annotations"]["summary"]]
    assert len(held) == 1
    alert = held[0]["alerts"][0]
    assert alert["labels"]["node"] == "gpu-0" and alert["labels"]["category"] == "hardware"
    assert "xpuwatch.io/fault-ack=all" in alert["annotations"]["description"]
    events = [e for e in fake.list("events") if e["reason"] == "RemediationHeldTooLong"]
    assert [e["involvedObject"]["name"] for e in events] == ["gpu-0"]
    clock.advance(6 * HOUR)
    await ctl.tick()  # still held another max_hold later: paged again
    assert len([n for n in notices if "held by xpuwatch" in n["alerts"][0]["annotations"]["summary"]]) == 2
    # acknowledged: lifted at the next tick, and no longer reported
    await kube.annotate_node("gpu-0", {"xpuwatch.io/fault-ack": "all"})
    await ctl.tick()
    assert not fake.get("nodes", "gpu-0")["spec"].get("taints")  # type: ignore[index]
    assert _metric(ctl, "xpuwatch_remediation_held_node_age_seconds{") == ""


async def test_the_cap_never_blocks_lifting(fake, kube, session, clock, relay):  # type: ignore[no-untyped-def]
    url, _ = relay
    for n in ("gpu-0", "gpu-1"):
        fake.add_node(n)
    ctl = make_controller(_settings(url), kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", "GPU-A"))))
    refused = await ctl.handle(alerts_of(am_alert(fingerprint="fp2", **drain_labels("gpu-1", "GPU-B"))))
    assert refused[0]["refused"] == "cap"  # the cap is full
    clock.advance(60)
    resolved = await ctl.handle(alerts_of(am_alert("resolved", **drain_labels("gpu-0", "GPU-A"))))
    assert resolved[0]["step"] == "healthy" and "refused" not in resolved[0]
    clock.advance(HOUR)
    await ctl.tick()
    assert not fake.get("nodes", "gpu-0")["spec"].get("taints")  # type: ignore[index]
    clock.advance(60)  # Alertmanager's repeat of the held alert now finds room
    again = await ctl.handle(alerts_of(am_alert(fingerprint="fp2", **drain_labels("gpu-1", "GPU-B"))))
    assert again[0]["step"] == "start" and again[0]["result"] == "ok"


async def test_a_lost_resolved_notification_cannot_hold_a_node_forever(
    fake, kube, session, clock, prometheus
):  # type: ignore[no-untyped-def]
    prom, prom_url = prometheus
    prom.firing.add("gpu-0")
    fake.add_node("gpu-0")
    s = make_settings(
        guard=GuardSettings(dry_run=False, max_disrupted_nodes=1, max_disrupted_ratio=1.0),
        drain=DrainSettings(default_mode="immediate", healthy_for_seconds=HOUR),
        recheck=RecheckSettings(prometheus_url=prom_url),
    )
    ctl = make_controller(s, kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", "GPU-A"))))
    clock.advance(60)
    await ctl.tick()  # still firing: nothing changes
    assert (
        "healthy"
        not in json.loads(fake.get("nodes", "gpu-0")["metadata"]["annotations"]["xpuwatch.io/drain"])["data"]
    )  # type: ignore[index]
    prom.firing.clear()  # the alert ends; Alertmanager's resolved notification is lost
    clock.advance(60)
    await ctl.tick()
    rec = [r for r in ctl.audit.records or [] if r["event"] == "recheck" and r["step"] == "healthy"]
    assert len(rec) == 1 and "without a resolved notification" in rec[0]["detail"]
    clock.advance(HOUR)
    await ctl.tick()
    assert not fake.get("nodes", "gpu-0")["spec"].get("taints")  # type: ignore[index]
