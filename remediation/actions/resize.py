"""Resize a starved slice: recommend a larger MIG profile or HAMi share, or (apply mode) re-layout the node.

Extended resources cannot change on a running pod (KEP-1287 covers CPU/memory only; HAMi#1674), so
a resize is either a new node MIG layout or a recreated pod. Apply follows what NVIDIA mig-manager needs
(mig-parted ``reconfigure-mig.sh``): it does not evict user workloads, so this controller cordons,
evicts the GPU pods through the Eviction API, sets ``nvidia.com/mig.config`` (removing a stale
``nvidia.com/mig.config.state`` in the same patch, so any state read afterwards is mig-manager's answer
to this change), follows the state label (pending, rebooting, success, failed) with a timeout and
uncordons on success. On failure or timeout the node stays cordoned with ``xpuwatch.io/cordon-reason``.
An ``all-<profile>`` config re-lays every GPU of the node, hence every GPU pod of the node is evicted.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from .. import mig
from ..kube import NodeView, ObjectRef, PodView
from ..notice import deliver, payload
from ..policy import Decision
from ..progress import Progress, decode, key_for, last_key_for, stamp, unstamp
from . import Context, Outcome

MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
RECOMMENDATION = "xpuwatch.io/resize-recommendation"
CORDON_REASON = "xpuwatch.io/cordon-reason"


def target_profile(model_name: str, profile: str, direction: str) -> tuple[str, str]:
    """(target profile, "" ) or ("", why-not). Pure."""
    model = mig.model_for(model_name)
    if model is None:
        return "", f"no MIG profile table for {model_name!r}"
    grown = mig.grow(model, profile, "memory" if direction == "memory" else "compute")
    if grown is None:
        return "", f"{profile} is unknown on {model.name} or already the largest {direction} profile"
    return grown.name, ""


def hami_recommendation(gpu: dict[str, str] | Any, direction: str) -> dict[str, int | str]:
    """New ``nvidia.com/gpumem`` (MiB) / ``nvidia.com/gpucores`` (%) for a HAMi share (HAMi chart values:
    gpumem per vGPU in MiB, gpucores 0-100). Memory-bound doubles gpumem; compute-bound doubles gpucores
    (at least +10, at most 100). Unknown current values are reported as "unknown"."""

    def num(name: str) -> int | None:
        try:
            return int(str(gpu.get(name, "")).strip())
        except ValueError:
            return None

    mem, cores = num("nvidia.com/gpumem"), num("nvidia.com/gpucores")
    out: dict[str, int | str] = {}
    if direction == "memory":
        out["nvidia.com/gpumem"] = mem * 2 if mem else "unknown"
    else:
        out["nvidia.com/gpucores"] = (
            min(100, max((cores or 0) * 2, (cores or 0) + 10)) if cores is not None else "unknown"
        )
    return out


async def recommend(ctx: Context, d: Decision, now: datetime, dry_run: bool) -> Outcome:
    """Event + annotation (not in dry-run) + relay message."""
    assert d.target is not None
    prm = d.params
    if prm.get("slice_kind") == "vgpu":
        pod = await ctx.kube.get_pod(d.target.namespace, d.target.name)
        if pod is None:
            return Outcome("skipped", "pod not found")
        rec: dict[str, Any] = hami_recommendation(dict(pod.gpu_resources), str(prm["direction"]))
        owner = f"{pod.owner_kind}/{pod.owner_name}" if pod.owner_kind else f"Pod/{pod.name}"
        msg = (
            f"{owner} in {pod.namespace} is {prm['direction']}-bound on its HAMi share; set "
            + ", ".join(f"{k}={v}" for k, v in rec.items())
            + " and recreate the pod (HAMi limits are fixed at start)"
        )
        ref = ObjectRef("Pod", pod.name, pod.namespace, uid=pod.uid)
        if not dry_run:
            await ctx.kube.patch_pod_meta(
                pod.namespace,
                pod.name,
                {RECOMMENDATION: json.dumps({**rec, "owner": owner, "at": stamp(now)})},
            )
    else:
        profile, why = target_profile(str(prm["model"]), str(prm["profile"]), str(prm["direction"]))
        if not profile:
            return Outcome("skipped", why)
        config = ctx.settings.resize.config_name.format(profile=profile)
        msg = (
            f"slice {prm.get('slice_id', '')} ({prm['profile']}) on {prm['uuid']} is {prm['direction']}-bound: "
            f"use {profile} (mig-parted config {config})"
        )
        ref = ObjectRef("Node", d.target.name)
        if not dry_run:
            rec = {
                "uuid": prm["uuid"],
                "slice_id": prm.get("slice_id"),
                "from": prm["profile"],
                "to": profile,
                "config": config,
                "at": stamp(now),
            }
            await ctx.kube.annotate_node(d.target.name, {RECOMMENDATION: json.dumps(rec)})
    out = Outcome("ok", msg)
    if not dry_run:
        await ctx.report("resize", "recommend", ref, out, now, "ResizeRecommended", False)
        labels = {"node": d.target.node, "namespace": d.target.namespace, "uuid": str(prm.get("uuid", ""))}
        await deliver(
            ctx.session,
            ctx.settings,
            payload(labels, "Slice resize recommended", msg, now),
        )
    return out


def _gpu_pods(ctx: Context, pods: list[PodView]) -> list[PodView]:
    return [
        p
        for p in pods
        if any(r.startswith("nvidia.com/") for r in p.gpu_resources)
        and p.owner_kind != "DaemonSet"
        and p.namespace not in ctx.settings.guard.protected_namespaces
        and p.phase not in ("Succeeded", "Failed")
    ]


async def start(ctx: Context, d: Decision, now: datetime) -> Outcome:
    """Cordon, plan evictions of the node's GPU pods, persist, then one ``advance`` pass."""
    assert d.target is not None
    prm = d.params
    profile, why = target_profile(str(prm["model"]), str(prm["profile"]), str(prm["direction"]))
    if not profile:
        return Outcome("skipped", why)
    # Re-checked here only: once the slice's pods are evicted its alert ends by itself.
    no = await ctx.confirm("resize", "cordon", {"node": d.target.name, "uuid": str(prm["uuid"])}, now)
    if no:
        return Outcome("skipped", f"not cordoned: {no.detail}")
    node = await ctx.kube.get_node(d.target.name)
    config = ctx.settings.resize.config_name.format(profile=profile)
    pods = {
        f"{p.namespace}/{p.name}": {"state": "pending"}
        for p in _gpu_pods(ctx, await ctx.kube.pods_on_node(node.name))
    }
    p = Progress(
        "resize",
        d.alert_key,
        "evicting",
        now,
        {
            "config": config,
            "profile": profile,
            "uuid": prm["uuid"],
            "pods": pods,
            "was_unschedulable": node.unschedulable,
        },
    )
    await ctx.kube.patch_node(
        node.name,
        {"metadata": {"annotations": {key_for("resize"): p.encode()}}, "spec": {"unschedulable": True}},
    )
    await ctx.report(
        "resize",
        "cordon",
        ObjectRef("Node", node.name),
        Outcome("ok", f"cordoned for MIG config {config}"),
        now,
        "ResizeCordoned",
        False,
    )
    return await advance(ctx, await ctx.kube.get_node(node.name), p, now)


async def _persist(ctx: Context, node: str, p: Progress) -> None:
    await ctx.kube.annotate_node(node, {key_for("resize"): p.encode()})


async def _fail(ctx: Context, node: NodeView, p: Progress, now: datetime, why: str) -> Outcome:
    p = p.with_("failed", reason=why)
    await ctx.kube.annotate_node(node.name, {key_for("resize"): p.encode(), CORDON_REASON: why})
    out = Outcome("failed", why)
    await ctx.report("resize", "configure", ObjectRef("Node", node.name), out, now, "ResizeFailed", True)
    await deliver(
        ctx.session,
        ctx.settings,
        payload({"node": node.name}, "MIG reconfiguration failed", why, now),
    )
    return out


async def advance(ctx: Context, node: NodeView, p: Progress, now: datetime) -> Outcome:
    """One pass of evicting -> configuring -> success (uncordon) | failed (stay cordoned)."""
    if p.phase == "failed":
        return Outcome("failed", str(p.data.get("reason", "")))
    config = str(p.data["config"])
    if p.phase == "evicting":
        pods: dict[str, dict[str, Any]] = {h: dict(v) for h, v in p.data.get("pods", {}).items()}
        present = {f"{q.namespace}/{q.name}" for q in await ctx.kube.pods_on_node(node.name)}
        for h, st in pods.items():
            if st["state"] in ("evicted", "gone"):
                continue
            if h not in present:
                st["state"] = "gone"
            else:
                ns, name = h.split("/", 1)
                result = await ctx.kube.evict(ns, name, ctx.settings.resize.eviction_grace_seconds)
                st["state"] = {"evicted": "evicted", "gone": "gone"}.get(result, result)
                reason = "Evicted" if result in ("evicted", "gone") else "EvictionBlocked"
                await ctx.report(
                    "resize",
                    "evict",
                    ObjectRef("Pod", name, ns),
                    Outcome("ok" if reason == "Evicted" else "blocked", f"for MIG config {config}: {result}"),
                    now,
                    reason,
                    reason != "Evicted",
                )
            p = p.with_(pods=pods)
            await _persist(ctx, node.name, p)
        if any(st["state"] not in ("evicted", "gone") for st in pods.values()):
            return Outcome("blocked", "waiting for GPU pods to leave")
        present = {f"{q.namespace}/{q.name}" for q in await ctx.kube.pods_on_node(node.name)}
        if any(h in present for h, st in pods.items() if st["state"] == "evicted"):
            return Outcome("blocked", "evicted pods still terminating")
        deadline = now + timedelta(seconds=ctx.settings.resize.state_timeout_seconds)
        p = p.with_("configuring", deadline=stamp(deadline))
        await ctx.kube.patch_node(
            node.name,
            {
                "metadata": {
                    "labels": {MIG_CONFIG: config, MIG_STATE: None},
                    "annotations": {key_for("resize"): p.encode()},
                }
            },
        )
        await ctx.report(
            "resize",
            "configure",
            ObjectRef("Node", node.name),
            Outcome("ok", f"set {MIG_CONFIG}={config}"),
            now,
            "MigConfigSet",
            False,
        )
        return Outcome("ok", f"{MIG_CONFIG}={config} set; waiting for mig-manager")
    state = node.labels.get(MIG_STATE, "")
    if state == "success":
        ann: dict[str, str | None] = {
            key_for("resize"): None,
            last_key_for("resize"): json.dumps(
                {"finished": stamp(now), "config": config, "alert": p.alert_key}
            ),
            CORDON_REASON: None,
        }
        body: dict[str, Any] = {"metadata": {"annotations": ann}}
        if not p.data.get("was_unschedulable"):
            body["spec"] = {"unschedulable": None}
        await ctx.kube.patch_node(node.name, body)
        out = Outcome("ok", f"MIG config {config} applied; node uncordoned")
        await ctx.report(
            "resize", "uncordon", ObjectRef("Node", node.name), out, now, "ResizeSucceeded", False
        )
        return out
    if state == "failed":
        return await _fail(
            ctx,
            node,
            p,
            now,
            f"MIG reconfiguration to {config} failed ({MIG_STATE}=failed); node left cordoned",
        )
    due = unstamp(p.data.get("deadline"))
    if due and now >= due:
        return await _fail(
            ctx,
            node,
            p,
            now,
            f"MIG reconfiguration to {config} timed out in state {state or 'unset'}; node left cordoned",
        )
    return Outcome("blocked", f"mig-manager state {state or 'unset'}")


def progress_of(node: NodeView) -> Progress | None:
    return decode("resize", node.annotations.get(key_for("resize")))
