"""Guardrail scenarios through the real HTTP webhook: alert storms, duplicates, leadership, MIG failure."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.remediation.fakekube import FakeKube
from tests.remediation.kit import (
    Clock,
    alerts_of,
    am_alert,
    am_payload,
    drain_labels,
    make_controller,
    make_settings,
)
from xpuwatch.remediation.actions.drain import TAINT_KEY
from xpuwatch.remediation.actions.resize import CORDON_REASON, MIG_CONFIG, MIG_STATE
from xpuwatch.remediation.controller import Controller
from xpuwatch.remediation.lease import Elector
from xpuwatch.remediation.settings import (
    DrainSettings,
    GuardSettings,
    LeaderSettings,
    ResizeSettings,
    Rule,
    WebhookSettings,
)
from xpuwatch.remediation.webhook import PATH, build_app

TOKEN = "s3cret-token"


async def serve(ctl: Controller) -> AsyncIterator[str]:
    runner = web.AppRunner(build_app(ctl))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}{PATH}"
    finally:
        await runner.cleanup()


async def post(session: aiohttp.ClientSession, url: str, body: object) -> tuple[int, dict]:
    async with session.post(url, json=body, headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
        return resp.status, await resp.json()


def tainted(fake: FakeKube) -> set[str]:
    return {
        n["metadata"]["name"]
        for n in fake.list("nodes")
        if any(t["key"] == TAINT_KEY for t in n["spec"].get("taints", []))
    }


def settings(**kw):  # type: ignore[no-untyped-def]
    return make_settings(
        webhook=WebhookSettings(bearer_token=TOKEN), drain=DrainSettings(default_mode="immediate"), **kw
    )


@pytest.fixture
async def fleet(fake: FakeKube) -> FakeKube:
    for i in range(100):
        fake.add_node(f"gpu-{i:03d}")
        fake.add_pod("train", f"job-{i:03d}", f"gpu-{i:03d}", {"nvidia.com/gpu": "8"})
    return fake


async def test_storm_of_1000_hardware_alerts_never_exceeds_the_cap(fleet, kube, session, clock) -> None:
    """1,000 alerts (10 devices x 100 nodes) in 10 concurrent webhooks: cap = min(5, 100% of 100) = 5."""
    ctl = make_controller(settings(), kube, session, clock)
    await ctl.refresh_view(clock())
    payloads = []
    for batch in range(10):
        alerts = [
            am_alert(
                fingerprint=f"fp-{n}-{d}",
                **drain_labels(f"gpu-{n:03d}", f"GPU-{n:03d}-{d}", namespace="train", pod=f"job-{n:03d}"),
            )
            for n in range(batch * 10, batch * 10 + 10)
            for d in range(10)
        ]
        payloads.append(am_payload(*alerts))
    import asyncio

    async for url in serve(ctl):
        answers = await asyncio.gather(*(post(session, url, p) for p in payloads))
    assert [code for code, _ in answers] == [200] * 10
    assert len(tainted(fleet)) == 5
    assert len(fleet.evictions) == 5
    assert ctl.view.disrupted == tainted(fleet)
    refused = ctl.telemetry.refusals.labels("cap")._value.get()
    # The 5 disrupted nodes' remaining 9 devices extend their drain; every other alert is refused.
    assert refused == 1000 - 5 * 10
    assert ctl.telemetry.decisions.labels("drain", "extend")._value.get() == 45
    decisions = [r for r in ctl.audit.records or [] if r["event"] == "decision"]
    assert len(decisions) == 1000 and sum(r["refusal"] == "cap" for r in decisions) == 950


async def test_cap_as_share_of_a_small_fleet(fake, kube, session, clock) -> None:
    for i in range(12):
        fake.add_node(f"n{i}")
    s = settings(guard=GuardSettings(dry_run=False, max_disrupted_nodes=10, max_disrupted_ratio=0.25))
    ctl = make_controller(s, kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(
        alerts_of(*[am_alert(fingerprint=f"f{i}", **drain_labels(f"n{i}", f"GPU-{i}")) for i in range(12)])
    )
    assert len(tainted(fake)) == 3  # floor(0.25 * 12)


async def test_duplicate_webhook_yields_one_action(fake, kube, session, clock) -> None:
    fake.add_node("gpu-0")
    fake.add_pod("train", "job-0", "gpu-0", {"nvidia.com/gpu": "1"})
    ctl = make_controller(settings(), kube, session, clock)
    await ctl.refresh_view(clock())
    body = am_payload(am_alert(**drain_labels("gpu-0", "GPU-0", namespace="train", pod="job-0")))
    async for url in serve(ctl):
        first = await post(session, url, body)
        clock.advance(30)
        second = await post(session, url, body)  # an HA peer's copy / a retry
        clock.advance(4 * 3600)
        third = await post(session, url, body)  # repeat_interval later
    assert first[0] == second[0] == third[0] == 200
    assert first[1]["results"][0]["result"] == "ok"
    assert second[1]["results"][0]["step"] == "wait" and third[1]["results"][0]["step"] == "wait"
    assert fake.evictions == [("train", "job-0")]
    assert len([r for r in fake.requests if r[1].endswith("/eviction")]) == 1
    assert [e["reason"] for e in fake.list("events")].count("FaultyAcceleratorTainted") == 1


async def test_duplicate_recommendation_yields_one_event(fake, kube, session, clock) -> None:
    fake.add_node("gpu-0")
    s = settings(rules=(Rule("resize"),))
    ctl = make_controller(s, kube, session, clock)
    labels = {
        "alertname": "AcceleratorSliceMemoryBound",
        "action": "resize",
        "node": "gpu-0",
        "uuid": "GPU-0",
        "model": "NVIDIA A100-SXM4-80GB",
        "profile": "1g.10gb",
        "slice_id": "7",
        "slice_kind": "mig",
    }
    for _ in range(3):
        await ctl.handle(alerts_of(am_alert(**labels)))
    assert [e["reason"] for e in fake.list("events")] == ["ResizeRecommended"]
    assert ctl.telemetry.refusals.labels("duplicate")._value.get() == 2


async def test_two_replicas_never_both_act(fake, kube, session) -> None:
    fake.add_node("gpu-0")
    fake.add_node("gpu-1")
    clock = Clock()
    a = make_controller(
        settings(leader=LeaderSettings(identity="a", lease_namespace="xpuwatch")), kube, session, clock
    )
    b = make_controller(
        settings(leader=LeaderSettings(identity="b", lease_namespace="xpuwatch")), kube, session, clock
    )
    a.elector = Elector(kube, a.settings.leader)
    b.elector = Elector(kube, b.settings.leader)
    assert await a.elector.step(clock()) is True
    assert await b.elector.step(clock()) is False
    await a.refresh_view(clock())
    await b.refresh_view(clock())
    body = am_payload(am_alert(**drain_labels("gpu-0", "GPU-0")))
    async for url_a in serve(a):
        async for url_b in serve(b):
            code_b, doc_b = await post(session, url_b, body)
            code_a, _ = await post(session, url_a, body)
            assert (code_a, code_b) == (200, 503)
            assert doc_b == {"error": "not the leader; retry"}
            # a stops renewing (hung); b takes over only after a full lease duration by its own clock.
            clock.advance(5)
            assert await b.elector.step(clock()) is False
            clock.advance(11)  # a's renew deadline (10 s) has passed: a stops acting on its own
            assert a.elector.is_leader(clock()) is False
            assert (
                await post(
                    session, url_a, am_payload(am_alert(fingerprint="x", **drain_labels("gpu-1", "GPU-1")))
                )
            )[0] == 503
            assert await b.elector.step(clock()) is True
            clock.advance(1)
            assert await a.elector.step(clock()) is False
            code_b, _ = await post(
                session, url_b, am_payload(am_alert(fingerprint="y", **drain_labels("gpu-1", "GPU-1")))
            )
            assert code_b == 200
    lease = fake.get("leases", "xpuwatch-remediation", "xpuwatch")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1  # type: ignore[index]
    assert tainted(fake) == {"gpu-0", "gpu-1"}
    assert [r for r in fake.requests if r[1].endswith("/eviction")] == []


async def test_racing_candidates_get_one_lease(fake, kube) -> None:
    clock = Clock()
    electors = [Elector(kube, LeaderSettings(identity=f"r{i}", lease_namespace="xpuwatch")) for i in range(5)]
    import asyncio

    wins = await asyncio.gather(*(e.step(clock()) for e in electors))
    assert sum(wins) == 1
    await electors[wins.index(True)].release(clock())
    assert fake.get("leases", "xpuwatch-remediation", "xpuwatch")["spec"]["holderIdentity"] == ""  # type: ignore[index]
    assert await electors[(wins.index(True) + 1) % 5].step(clock()) is True


def resize_labels(node: str) -> dict[str, str]:
    return {
        "alertname": "AcceleratorSliceMemoryBound",
        "category": "performance",
        "severity": "warning",
        "action": "resize",
        "node": node,
        "vendor": "nvidia",
        "model": "NVIDIA A100-SXM4-80GB",
        "device": "0",
        "uuid": "GPU-A",
        "slice_id": "7",
        "profile": "1g.10gb",
        "slice_kind": "mig",
    }


async def test_mig_reconfiguration_failed_leaves_node_cordoned_with_reason(
    fake, kube, session, clock
) -> None:
    fake.add_node("gpu-0", {MIG_CONFIG: "all-1g.10gb", MIG_STATE: "success"})
    fake.add_pod("ml", "infer-0", "gpu-0", {"nvidia.com/mig-1g.10gb": "1"})
    fake.add_pod("ml", "cpu-only", "gpu-0")
    fake.add_pod("gpu-operator", "device-plugin", "gpu-0", {"nvidia.com/gpu": "1"}, owner=("DaemonSet", "dp"))
    fake.eviction_plan[("ml", "infer-0")] = [429]
    s = settings(resize=ResizeSettings(mode="apply", state_timeout_seconds=600))
    ctl = make_controller(s, kube, session, clock)
    await ctl.refresh_view(clock())
    res = await ctl.handle(alerts_of(am_alert(**resize_labels("gpu-0"))))
    assert res[0]["result"] == "blocked"  # PDB said 429
    node = fake.get("nodes", "gpu-0")
    assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"][MIG_CONFIG] == "all-1g.10gb"  # type: ignore[index]
    await ctl.tick()
    node = fake.get("nodes", "gpu-0")
    assert fake.evictions == [("ml", "infer-0")]  # never the DaemonSet pod nor the CPU pod
    assert node["metadata"]["labels"][MIG_CONFIG] == "all-1g.20gb"  # type: ignore[index]
    assert MIG_STATE not in node["metadata"]["labels"]  # type: ignore[index]
    fake.objects[("nodes", "", "gpu-0")]["metadata"]["labels"][MIG_STATE] = "pending"  # mig-manager
    clock.advance(60)
    await ctl.tick()
    fake.objects[("nodes", "", "gpu-0")]["metadata"]["labels"][MIG_STATE] = "failed"
    clock.advance(60)
    await ctl.tick()
    node = fake.get("nodes", "gpu-0")
    assert node["spec"]["unschedulable"] is True  # type: ignore[index]
    assert node["metadata"]["annotations"][CORDON_REASON] == (  # type: ignore[index]
        "MIG reconfiguration to all-1g.20gb failed (nvidia.com/mig.config.state=failed); node left cordoned"
    )
    assert json.loads(node["metadata"]["annotations"]["xpuwatch.io/resize"])["phase"] == "failed"  # type: ignore[index]
    assert "ResizeFailed" in [e["reason"] for e in fake.list("events")]
    assert ctl.view.disrupted == frozenset({"gpu-0"})  # still counts against the cap
    await ctl.tick()
    assert fake.get("nodes", "gpu-0")["spec"]["unschedulable"] is True  # type: ignore[index]


async def test_mig_reconfiguration_success_uncordons(fake, kube, session, clock) -> None:
    fake.add_node("gpu-0", {MIG_CONFIG: "all-1g.10gb", MIG_STATE: "success"})
    fake.add_pod("ml", "infer-0", "gpu-0", {"nvidia.com/mig-1g.10gb": "1"})
    ctl = make_controller(settings(resize=ResizeSettings(mode="apply")), kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**resize_labels("gpu-0"))))
    fake.objects[("nodes", "", "gpu-0")]["metadata"]["labels"][MIG_STATE] = "success"
    await ctl.tick()
    node = fake.get("nodes", "gpu-0")
    assert "unschedulable" not in node["spec"]  # type: ignore[index]
    assert "xpuwatch.io/resize" not in node["metadata"]["annotations"]  # type: ignore[index]
    assert json.loads(node["metadata"]["annotations"]["xpuwatch.io/last-resize"])["config"] == "all-1g.20gb"  # type: ignore[index]
    assert ctl.view.disrupted == frozenset()


async def test_mig_reconfiguration_timeout(fake, kube, session, clock) -> None:
    fake.add_node("gpu-0")
    ctl = make_controller(
        settings(resize=ResizeSettings(mode="apply", state_timeout_seconds=900)), kube, session, clock
    )
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**resize_labels("gpu-0"))))
    fake.objects[("nodes", "", "gpu-0")]["metadata"]["labels"][MIG_STATE] = "rebooting"
    clock.advance(899)
    await ctl.tick()
    assert CORDON_REASON not in fake.get("nodes", "gpu-0")["metadata"].get("annotations", {})  # type: ignore[index]
    clock.advance(1)
    await ctl.tick()
    ann = fake.get("nodes", "gpu-0")["metadata"]["annotations"]  # type: ignore[index]
    assert (
        ann[CORDON_REASON]
        == "MIG reconfiguration to all-1g.20gb timed out in state rebooting; node left cordoned"
    )


async def test_resize_apply_needs_both_config_and_rule(fake, kube, session, clock) -> None:
    fake.add_node("gpu-0")
    ctl = make_controller(settings(), kube, session, clock)  # resize.mode defaults to recommend
    res = await ctl.handle(alerts_of(am_alert(**resize_labels("gpu-0"))))
    assert res[0]["step"] == "recommend"
    node = fake.get("nodes", "gpu-0")
    assert "unschedulable" not in node["spec"]  # type: ignore[index]
    rec = json.loads(node["metadata"]["annotations"]["xpuwatch.io/resize-recommendation"])  # type: ignore[index]
    assert (rec["from"], rec["to"], rec["config"]) == ("1g.10gb", "1g.20gb", "all-1g.20gb")


async def test_hami_share_recommendation(fake, kube, session, clock) -> None:
    fake.add_node("gpu-0")
    fake.add_pod(
        "ml",
        "svc-0",
        "gpu-0",
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"},
        owner=("ReplicaSet", "svc-7d9"),
    )
    ctl = make_controller(settings(), kube, session, clock)
    labels = {
        **resize_labels("gpu-0"),
        "alertname": "AcceleratorShareComputeBound",
        "slice_kind": "vgpu",
        "namespace": "ml",
        "pod": "svc-0",
        "model": "NVIDIA GeForce RTX 4090",
    }
    await ctl.handle(alerts_of(am_alert(**labels)))
    pod = fake.get("pods", "svc-0", "ml")
    rec = json.loads(pod["metadata"]["annotations"]["xpuwatch.io/resize-recommendation"])  # type: ignore[index]
    assert rec["nvidia.com/gpucores"] == 60 and rec["owner"] == "ReplicaSet/svc-7d9"
    ev = [e for e in fake.list("events") if e["reason"] == "ResizeRecommended"]
    assert ev[0]["involvedObject"]["name"] == "svc-0"
    assert ev[0]["message"] == (
        "[apply] ReplicaSet/svc-7d9 in ml is compute-bound on its HAMi share; set nvidia.com/gpucores=60 "
        "and recreate the pod (HAMi limits are fixed at start)"
    )


async def test_apiserver_down_answers_503_and_acts_on_nothing(fake, kube, session, clock) -> None:
    fake.add_node("gpu-0")
    ctl = make_controller(settings(), kube, session, clock)
    fake.down = True
    async for url in serve(ctl):
        code, doc = await post(session, url, am_payload(am_alert(**drain_labels("gpu-0", "GPU-0"))))
    assert code == 503 and doc["error"].startswith("kubernetes API unavailable")
    fake.down = False
    assert tainted(fake) == set()


async def test_stale_view_refuses_disruption_when_it_cannot_be_refreshed(fake, kube, session, clock) -> None:
    fake.add_node("gpu-0")
    ctl = make_controller(settings(), kube, session, clock)
    await ctl.refresh_view(clock())
    clock.advance(301)
    original = fake.list_objects

    def no_nodes(kind, namespace, query):  # type: ignore[no-untyped-def]
        if kind == "nodes":
            return web.json_response(
                {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd"}, status=500
            )
        return original(kind, namespace, query)

    fake.list_objects = no_nodes  # type: ignore[method-assign]
    async for url in serve(ctl):
        code, _ = await post(session, url, am_payload(am_alert(**drain_labels("gpu-0", "GPU-0"))))
    assert code == 503
    assert tainted(fake) == set()


async def test_a_half_done_drain_still_counts_against_the_cap(fake, kube, session, clock) -> None:
    """Taint applied, progress write refused: the node is still counted (by its taint) after a refresh."""
    for i in range(3):
        fake.add_node(f"gpu-{i}")
    original = fake.patch

    def refuse_annotations(key, body, content_type):  # type: ignore[no-untyped-def]
        if "annotations" in (body.get("metadata") or {}):
            return web.json_response(
                {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd timeout"},
                status=500,
            )
        return original(key, body, content_type)

    fake.patch = refuse_annotations  # type: ignore[method-assign]
    ctl = make_controller(
        settings(guard=GuardSettings(dry_run=False, max_disrupted_nodes=1, max_disrupted_ratio=1.0)),
        kube,
        session,
        clock,
    )
    await ctl.refresh_view(clock())
    res = await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", "GPU-0"))))
    assert res[0]["result"] == "failed" and "etcd timeout" in res[0]["detail"]
    await ctl.refresh_view(clock())
    assert ctl.view.disrupted == frozenset({"gpu-0"})
    res = await ctl.handle(alerts_of(am_alert(fingerprint="b", **drain_labels("gpu-1", "GPU-1"))))
    assert res[0]["refused"] == "cap"
    assert tainted(fake) == {"gpu-0"}


async def test_an_orphaned_taint_is_adopted_and_can_be_acked(fake, kube, session, clock) -> None:
    fake.add_node("gpu-0")
    fake.objects[("nodes", "", "gpu-0")]["spec"]["taints"] = [
        {"key": TAINT_KEY, "value": "GPU-9", "effect": "NoSchedule"}
    ]
    ctl = make_controller(settings(), kube, session, clock)
    await ctl.tick()
    ann = fake.get("nodes", "gpu-0")["metadata"]["annotations"]  # type: ignore[index]
    assert json.loads(ann["xpuwatch.io/drain"])["data"]["uuids"] == ["GPU-9"]
    assert ctl.view.disrupted == frozenset({"gpu-0"})
    fake.objects[("nodes", "", "gpu-0")]["metadata"]["annotations"]["xpuwatch.io/fault-ack"] = "GPU-9"
    await ctl.tick()
    assert tainted(fake) == set() and ctl.view.disrupted == frozenset()
    assert [e["reason"] for e in fake.list("events")] == [
        "FaultyAcceleratorAdopted",
        "FaultyAcceleratorLifted",
    ]
