"""Drain end to end: webhook alert -> taint, notice, PDB-aware eviction, resume after a crash, lift."""

from __future__ import annotations

import json

from tests.remediation.fakekube import FakeKube
from tests.remediation.kit import alerts_of, am_alert, drain_labels, make_controller, make_settings
from xpuwatch.remediation.actions.drain import ACK_ANNOTATION, TAINT_KEY
from xpuwatch.remediation.settings import DrainSettings, GuardSettings

UUID = "GPU-11111111-2222-3333-4444-555555555555"


def seed(fake: FakeKube) -> None:
    for i in range(10):
        fake.add_node(f"gpu-{i}")
    fake.add_pod("train", "job-0", "gpu-0", {"nvidia.com/gpu": "1"}, owner=("Job", "job"))
    fake.add_pod("ml", "other-0", "gpu-0", {"nvidia.com/gpu": "1"})  # holds another device: untouched


def taints(fake: FakeKube, node: str) -> list[dict[str, str]]:
    return fake.get("nodes", node)["spec"].get("taints", [])  # type: ignore[index]


def drain_state(fake: FakeKube, node: str) -> dict:
    return json.loads(fake.get("nodes", node)["metadata"]["annotations"]["xpuwatch.io/drain"])  # type: ignore[index]


async def test_immediate_drain_taints_and_evicts_only_the_holder(fake, kube, session, clock) -> None:
    seed(fake)
    ctl = make_controller(make_settings(drain=DrainSettings(default_mode="immediate")), kube, session, clock)
    await ctl.refresh_view(clock())
    res = await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", UUID, namespace="train", pod="job-0"))))
    assert res[0]["result"] == "ok"
    assert taints(fake, "gpu-0") == [{"key": TAINT_KEY, "value": UUID, "effect": "NoSchedule"}]
    assert fake.evictions == [("train", "job-0")]
    # policy/v1 Eviction; no deleteOptions: the pod's own terminationGracePeriodSeconds applies.
    assert fake.eviction_bodies == [
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "job-0", "namespace": "train"}}
    ]
    assert fake.get("pods", "other-0", "ml") is not None
    st = drain_state(fake, "gpu-0")
    assert st["phase"] == "drained" and st["data"]["pods"]["train/job-0"]["state"] == "evicted"
    assert fake.get("nodes", "gpu-0")["metadata"]["annotations"]["xpuwatch.io/faulty-accelerators"] == UUID  # type: ignore[index]
    reasons = sorted(e["reason"] for e in fake.list("events"))
    assert reasons == ["Evicted", "FaultyAcceleratorTainted"]


async def test_after_notice_waits_then_evicts_and_retries_on_pdb(fake, kube, session, clock) -> None:
    seed(fake)
    fake.eviction_plan[("train", "job-0")] = [429, 500]
    settings = make_settings(
        drain=DrainSettings(default_mode="after-notice", notice_seconds=600, eviction_grace_seconds=120)
    )
    ctl = make_controller(settings, kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", UUID, namespace="train", pod="job-0"))))
    assert fake.evictions == []
    pod = fake.get("pods", "job-0", "train")
    assert pod["metadata"]["annotations"]["xpuwatch.io/eviction-notice"] == "2026-11-30T12:10:00Z"  # type: ignore[index]
    clock.advance(300)
    await ctl.tick()
    assert [r for r in fake.requests if r[1].endswith("/eviction")] == []
    clock.advance(300)
    await ctl.tick()  # 429: PDB
    assert drain_state(fake, "gpu-0")["data"]["pods"]["train/job-0"]["state"] == "blocked"
    await ctl.tick()  # 500: two PDBs
    assert drain_state(fake, "gpu-0")["data"]["pods"]["train/job-0"]["state"] == "error"
    await ctl.tick()  # 201
    assert fake.evictions == [("train", "job-0")]
    assert fake.eviction_bodies[-1]["deleteOptions"] == {"gracePeriodSeconds": 120}
    assert drain_state(fake, "gpu-0")["phase"] == "drained"
    assert ctl.telemetry.actions.labels("drain", "blocked", "apply")._value.get() == 2


async def test_wait_for_completion_does_not_evict_a_finished_pod(fake, kube, session, clock) -> None:
    seed(fake)
    settings = make_settings(
        drain=DrainSettings(namespace_modes={"train": "wait-for-completion"}, completion_timeout_seconds=3600)
    )
    ctl = make_controller(settings, kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", UUID, namespace="train", pod="job-0"))))
    fake.objects[("pods", "train", "job-0")]["status"]["phase"] = "Succeeded"
    clock.advance(60)
    await ctl.tick()
    assert fake.evictions == []
    assert drain_state(fake, "gpu-0")["data"]["pods"]["train/job-0"]["state"] == "completed"


async def test_killed_mid_drain_resumes_without_repeating(fake, kube, session, clock) -> None:
    seed(fake)
    for i in range(3):
        fake.add_pod("train", f"w-{i}", "gpu-0", {"nvidia.com/gpu": "1"})
    fake.eviction_plan[("train", "w-2")] = [429]
    settings = make_settings(drain=DrainSettings(default_mode="immediate"))
    first = make_controller(settings, kube, session, clock)
    await first.refresh_view(clock())
    alert = am_alert(**drain_labels("gpu-0", UUID, namespace="train", pod="w-0"))
    await first.handle(alerts_of(alert))
    # A second fault record naming more holders arrives; w-2 is PDB-blocked, then the process dies.
    more = am_alert(
        fingerprint="fp2", **drain_labels("gpu-0", UUID.replace("1111", "9999"), namespace="train", pod="w-1")
    )
    await first.handle(alerts_of(more))
    third = am_alert(
        fingerprint="fp3", **drain_labels("gpu-0", UUID.replace("1111", "8888"), namespace="train", pod="w-2")
    )
    await first.handle(alerts_of(third))
    assert fake.evictions == [("train", "w-0"), ("train", "w-1")]
    del first  # killed: nothing in memory survives

    second = make_controller(settings, kube, session, clock)
    clock.advance(10)
    # Alertmanager re-sends the whole group to the new process.
    await second.handle(alerts_of(alert, more, third))
    await second.tick()
    assert fake.evictions == [("train", "w-0"), ("train", "w-1"), ("train", "w-2")]
    evict_posts = [r for r in fake.requests if r[1].endswith("/eviction")]
    assert len(evict_posts) == 4  # w-0, w-1, w-2 (429), w-2 (201): nothing repeated
    assert len(taints(fake, "gpu-0")) == 1
    assert drain_state(fake, "gpu-0")["phase"] == "drained"


async def test_taint_lifted_after_healthy_for(fake, kube, session, clock) -> None:
    seed(fake)
    settings = make_settings(drain=DrainSettings(default_mode="immediate", healthy_for_seconds=3600))
    ctl = make_controller(settings, kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", UUID))))
    clock.advance(600)
    await ctl.handle(alerts_of(am_alert(status="resolved", **drain_labels("gpu-0", UUID))))
    clock.advance(3599)
    await ctl.tick()
    assert len(taints(fake, "gpu-0")) == 1
    clock.advance(1)
    await ctl.tick()
    assert taints(fake, "gpu-0") == []
    ann = fake.get("nodes", "gpu-0")["metadata"]["annotations"]  # type: ignore[index]
    assert "xpuwatch.io/drain" not in ann
    assert json.loads(ann["xpuwatch.io/last-drain"])["why"] == "healthy since 2026-11-30T12:10:00Z"
    assert ctl.view.disrupted == frozenset()


async def test_explicit_ack_lifts_the_taint(fake, kube, session, clock) -> None:
    seed(fake)
    ctl = make_controller(make_settings(drain=DrainSettings(default_mode="immediate")), kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", UUID))))
    fake.objects[("nodes", "", "gpu-0")]["metadata"]["annotations"][ACK_ANNOTATION] = UUID  # kubectl annotate
    await ctl.tick()
    assert taints(fake, "gpu-0") == []
    assert ACK_ANNOTATION not in fake.get("nodes", "gpu-0")["metadata"]["annotations"]  # type: ignore[index]


async def test_taint_update_survives_a_concurrent_writer(fake, kube, session, clock) -> None:
    """Another controller adds a taint between our read and our write: 409, re-read, both taints kept."""
    seed(fake)
    fake.objects[("nodes", "", "gpu-0")]["spec"]["taints"] = [
        {"key": "other", "value": "x", "effect": "NoSchedule"}
    ]
    original = fake.patch
    raced = False

    def racing_patch(key, body, content_type):  # type: ignore[no-untyped-def]
        nonlocal raced
        if key == ("nodes", "", "gpu-0") and "spec" in body and not raced:
            raced = True
            node = fake.objects[key]
            node["spec"]["taints"] = [
                *node["spec"]["taints"],
                {"key": "late", "value": "y", "effect": "NoSchedule"},
            ]
            fake._bump(node)
        return original(key, body, content_type)

    fake.patch = racing_patch  # type: ignore[method-assign]
    ctl = make_controller(make_settings(drain=DrainSettings(default_mode="immediate")), kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", UUID))))
    assert [t["key"] for t in taints(fake, "gpu-0")] == ["other", "late", TAINT_KEY]


async def test_protected_namespace_holder_is_not_evicted(fake, kube, session, clock) -> None:
    seed(fake)
    fake.add_pod("kube-system", "sys-0", "gpu-0", {"nvidia.com/gpu": "1"})
    ctl = make_controller(make_settings(drain=DrainSettings(default_mode="immediate")), kube, session, clock)
    await ctl.refresh_view(clock())
    res = await ctl.handle(
        alerts_of(am_alert(**drain_labels("gpu-0", UUID, namespace="kube-system", pod="sys-0")))
    )
    # The node is still tainted (no new work on a faulty card); the system pod is never evicted.
    assert res[0]["result"] == "ok"
    assert fake.evictions == []
    assert len(taints(fake, "gpu-0")) == 1
    pod_state = drain_state(fake, "gpu-0")["data"]["pods"]["kube-system/sys-0"]
    assert (pod_state["state"], pod_state["why"]) == ("skipped", "protected namespace")


async def test_dry_run_changes_nothing(fake, kube, session, clock) -> None:
    seed(fake)
    before = json.dumps(sorted((str(k), v) for k, v in fake.objects.items()), sort_keys=True)
    settings = make_settings(guard=GuardSettings(dry_run=True, max_disrupted_nodes=5))
    ctl = make_controller(settings, kube, session, clock)
    await ctl.refresh_view(clock())
    res = await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", UUID, namespace="train", pod="job-0"))))
    await ctl.tick()
    events = fake.list("events")
    for e in events:
        del fake.objects[("events", e["metadata"]["namespace"], e["metadata"]["name"])]
    assert json.dumps(sorted((str(k), v) for k, v in fake.objects.items()), sort_keys=True) == before
    assert res[0]["result"] == "dry-run"
    assert [e["reason"] for e in events] == ["DryRun"]
    assert events[0]["message"].startswith("[dry-run] would start drain on node/gpu-0")
    writes = [r for r in fake.requests if r[0] in ("PATCH", "PUT", "DELETE") or r[1].endswith("/eviction")]
    assert writes == []
    assert ctl.telemetry.actions.labels("drain", "ok", "dry-run")._value.get() == 1


async def test_taint_stays_until_every_faulty_device_is_healthy(fake, kube, session, clock) -> None:
    seed(fake)
    other = UUID.replace("1111", "9999")
    settings = make_settings(drain=DrainSettings(default_mode="immediate", healthy_for_seconds=600))
    ctl = make_controller(settings, kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(
        alerts_of(
            am_alert(**drain_labels("gpu-0", UUID)),
            am_alert(fingerprint="fp2", **drain_labels("gpu-0", other)),
        )
    )
    await ctl.handle(alerts_of(am_alert(status="resolved", **drain_labels("gpu-0", UUID))))
    clock.advance(1200)
    await ctl.tick()
    assert len(taints(fake, "gpu-0")) == 1  # the second device is still faulty
    await ctl.handle(
        alerts_of(am_alert(status="resolved", fingerprint="fp2", **drain_labels("gpu-0", other)))
    )
    clock.advance(599)
    await ctl.tick()
    assert len(taints(fake, "gpu-0")) == 1
    clock.advance(1)
    await ctl.tick()
    assert taints(fake, "gpu-0") == []


async def test_crash_between_eviction_and_progress_write_does_not_repeat(fake, kube, session, clock) -> None:
    """The API server dies right after accepting an eviction, before the progress annotation is written;
    a fresh controller sees the pod gone and never posts that eviction again."""
    seed(fake)
    fake.add_pod("train", "w-1", "gpu-0", {"nvidia.com/gpu": "1"})
    settings = make_settings(drain=DrainSettings(default_mode="after-notice", notice_seconds=60))
    first = make_controller(settings, kube, session, clock)
    await first.refresh_view(clock())
    await first.handle(alerts_of(am_alert(**drain_labels("gpu-0", UUID, namespace="train", pod="job-0"))))
    other = UUID.replace("1111", "9999")
    await first.handle(
        alerts_of(am_alert(fingerprint="fp2", **drain_labels("gpu-0", other, namespace="train", pod="w-1")))
    )
    original = fake.evict

    def evict_then_die(namespace, name, body):  # type: ignore[no-untyped-def]
        answer = original(namespace, name, body)
        fake.down = True
        return answer

    fake.evict = evict_then_die  # type: ignore[method-assign]
    clock.advance(60)
    await first.tick()  # evicts job-0, then every call fails
    assert fake.evictions == [("train", "job-0")]
    fake.evict = original  # type: ignore[method-assign]
    fake.down = False
    assert drain_state(fake, "gpu-0")["data"]["pods"]["train/job-0"]["state"] == "pending"  # never recorded

    second = make_controller(settings, kube, session, clock)
    await second.tick()
    posts = [r[1] for r in fake.requests if r[1].endswith("/eviction")]
    assert posts == [
        "/api/v1/namespaces/train/pods/job-0/eviction",
        "/api/v1/namespaces/train/pods/w-1/eviction",
    ]
    pods = drain_state(fake, "gpu-0")["data"]["pods"]
    assert (pods["train/job-0"]["state"], pods["train/w-1"]["state"]) == ("gone", "evicted")


async def test_dry_run_storm_reports_what_the_cap_would_allow(fake, kube, session, clock) -> None:
    """100 faulty devices on 100 nodes, cap 3, dry run: 3 'would drain', 97 'would be held by the cap', and one
    summary line "would drain 3; 97 held by the cap" (audit and a notice to the relay channel)."""
    from aiohttp import web

    notices: list[dict] = []

    async def relay(request: web.Request) -> web.Response:
        notices.append(await request.json())
        return web.json_response({"status": "queued"})

    app = web.Application()
    app.router.add_post("/alertmanager/team", relay)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    for i in range(100):
        fake.add_node(f"gpu-{i:03d}")
    settings = make_settings(
        guard=GuardSettings(dry_run=True, max_disrupted_nodes=3, max_disrupted_ratio=1.0),
        notify_url=f"http://127.0.0.1:{port}/alertmanager/team",
    )
    ctl = make_controller(settings, kube, session, clock)
    await ctl.refresh_view(clock())
    try:
        res = await ctl.handle(
            alerts_of(
                *[
                    am_alert(fingerprint=f"f{i}", **drain_labels(f"gpu-{i:03d}", f"GPU-{i}"))
                    for i in range(100)
                ]
            )
        )
    finally:
        await runner.cleanup()
    assert [r.get("result") for r in res[:3]] == ["dry-run"] * 3
    assert [r.get("refused") for r in res[3:]] == ["cap"] * 97
    assert res[3]["detail"].startswith("would be held by the cap: 3 of 100 nodes already disrupted, cap 3")
    summaries = [r for r in ctl.audit.records or [] if r["event"] == "summary"]
    assert [s["detail"] for s in summaries] == ["would drain 3; 97 held by the cap"]
    assert [n["alerts"][0]["annotations"]["summary"] for n in notices][
        -1
    ] == "[dry-run] would drain 3; 97 held by the cap"
    # A drain for a hardware fault is reported under the alert's category (the hardware channel), the
    # summary too: the notices were all labelled performance before.
    assert len(notices) == 4
    assert {n["alerts"][0]["labels"]["category"] for n in notices} == {"hardware"}
    assert {n["commonLabels"]["category"] for n in notices} == {"hardware"}
    assert tainted_nodes(fake) == set() and fake.evictions == []


def tainted_nodes(fake) -> set[str]:  # type: ignore[no-untyped-def]
    return {n["metadata"]["name"] for n in fake.list("nodes") if (n.get("spec") or {}).get("taints")}


def test_dry_run_summary_per_action() -> None:
    from xpuwatch.remediation.controller import dry_run_summary

    results = [
        {"action": "drain", "step": "start", "result": "dry-run"},
        {"action": "drain", "step": "start", "refused": "cap"},
        {"action": "reclaim", "step": "notify", "result": "dry-run"},
        {"action": "drain", "step": "wait"},
        {"action": "drain", "step": "start", "refused": "cooldown"},
    ]
    assert dry_run_summary(results) == "would drain 1; 1 held by the cap; would reclaim 1"
    assert dry_run_summary([{"action": "none", "step": "ignore"}]) == ""


async def test_protected_holder_stays_and_every_report_says_so(fake, kube, session, clock) -> None:
    seed(fake)
    fake.add_pod("kube-system", "sys-0", "gpu-0", {"nvidia.com/gpu": "1"})
    labels = drain_labels("gpu-0", UUID, namespace="kube-system", pod="sys-0")
    dry = make_controller(
        make_settings(
            drain=DrainSettings(default_mode="immediate"),
            guard=GuardSettings(dry_run=True, max_disrupted_nodes=5),
        ),
        kube,
        session,
        clock,
    )
    await dry.refresh_view(clock())
    (preview,) = await dry.handle(alerts_of(am_alert(**labels)))
    ctl = make_controller(make_settings(drain=DrainSettings(default_mode="immediate")), kube, session, clock)
    await ctl.refresh_view(clock())
    (res,) = await ctl.handle(alerts_of(am_alert(**labels)))
    events = {e["reason"]: e["message"] for e in fake.list("events")}
    stays = "kube-system/sys-0 stays on the faulty device (protected namespace)"
    assert preview["detail"].endswith(f"; no holder to evict; {stays}")
    assert res["detail"] == f"no holder to evict; {stays}"  # not "no holders left on the device"
    assert events["FaultyAcceleratorTainted"].endswith(f"NoSchedule; {stays}")
    assert fake.evictions == []
