"""Drain a faulty accelerator: taint the node, evict only the device's holders, lift when healthy or acked.

Why not cordon + full drain: only the pods on the faulty device are hurt (the NVIDIA device plugin marks
the device Unhealthy but never evicts; k8s-device-plugin#234). The taint
``xpuwatch.io/faulty-accelerator=<uuid>:NoSchedule`` keeps new GPU work off the node; evictions go
through the Eviction API so PodDisruptionBudgets and grace periods hold (api-eviction docs), never a
NoExecute taint. Per-namespace modes follow NVSentinel's node-drainer: ``immediate``, ``after-notice``
(an Event + annotation on the pod, eviction after ``notice_seconds`` so training can checkpoint) and
``wait-for-completion`` (wait for the pod to finish, evict after ``completion_timeout_seconds``).

Progress lives in node annotation ``xpuwatch.io/drain`` and is written after every eviction, so a
restarted controller continues where it stopped and never evicts the same pod twice.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

from ..allocation import AllocationError, holders_of
from ..kube import NodeView, ObjectRef, Taint
from ..policy import Decision
from ..progress import Progress, decode, key_for, last_key_for, stamp, unstamp
from ..recheck import UNCONFIRMED
from . import Context, Outcome

TAINT_KEY = "xpuwatch.io/faulty-accelerator"
ACK_ANNOTATION = "xpuwatch.io/fault-ack"  # value: a faulty uuid, or "all"
FAULTS_ANNOTATION = "xpuwatch.io/faulty-accelerators"  # human-readable, comma-separated uuids
DONE_STATES = ("evicted", "gone", "completed", "skipped")


def taint_value(uuid: str) -> str:
    """A label-value-safe form of a device uuid (<= 63 chars of ``[A-Za-z0-9._-]``; MIG uuids carry '/')."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", uuid)[:63].strip("._-") or "unknown"


def _node_ref(name: str) -> ObjectRef:
    return ObjectRef("Node", name)


def _plan_pods(ctx: Context, holders: list[str], now: datetime) -> dict[str, dict[str, Any]]:
    ds = ctx.settings.drain
    plan: dict[str, dict[str, Any]] = {}
    for h in holders:
        ns = h.split("/", 1)[0]
        mode = ds.namespace_modes.get(ns, ds.default_mode)
        if ns in ctx.settings.guard.protected_namespaces:
            plan[h] = {"mode": mode, "state": "skipped", "due": stamp(now), "why": "protected namespace"}
            continue
        delay = {
            "immediate": 0.0,
            "after-notice": ds.notice_seconds,
            "wait-for-completion": ds.completion_timeout_seconds,
        }[mode]
        plan[h] = {
            "mode": mode,
            "state": "pending",
            "due": stamp(now + timedelta(seconds=delay)),
            "attempts": 0,
        }
    return plan


def stays(pods: dict[str, dict[str, Any]]) -> str:
    """ "; ns/pod stays on the faulty device (protected namespace)" for holders the drain will not evict,
    so no report claims the device is free while a protected pod still uses it; "" when there are none."""
    kept = sorted(h for h, st in pods.items() if st.get("state") == "skipped")
    if not kept:
        return ""
    verb = "stays" if len(kept) == 1 else "stay"
    why = pods[kept[0]].get("why", "protected namespace")
    return f"; {', '.join(kept)} {verb} on the faulty device ({why})"


async def preview(ctx: Context, d: Decision, now: datetime) -> str:
    """Dry run of ``start``: what would be evicted and what stays (reads only). Shape: "would evict a/b, c/d;
    kube-system/x stays on the faulty device (protected namespace)"."""
    names, note = await _holders(ctx, d)
    plan = _plan_pods(ctx, names, now)
    evict = sorted(h for h, st in plan.items() if st["state"] == "pending")
    text = f"would evict {', '.join(evict)}" if evict else "no holder to evict"
    return text + stays(plan) + note


async def _persist(
    ctx: Context, node: str, p: Progress | None, extra: dict[str, str | None] | None = None
) -> None:
    ann: dict[str, str | None] = {key_for("drain"): p.encode() if p else None}
    if p:
        ann[FAULTS_ANNOTATION] = ",".join(p.data.get("uuids", []))
    ann.update(extra or {})
    await ctx.kube.annotate_node(node, ann)


async def _notice(
    ctx: Context, holders: dict[str, dict[str, Any]], node: str, uuid: str, now: datetime
) -> None:
    for h, st in holders.items():
        if st["mode"] != "after-notice" or st["state"] != "pending":
            continue
        ns, name = h.split("/", 1)
        msg = f"accelerator {uuid} on {node} is faulty; this pod will be evicted at {st['due']} (checkpoint now)"
        try:
            await ctx.kube.patch_pod_meta(ns, name, {"xpuwatch.io/eviction-notice": st["due"]})
        except Exception:  # the pod may be gone already; the drain loop notices that
            continue
        await ctx.report(
            "drain", "notice", ObjectRef("Pod", name, ns), Outcome("ok", msg), now, "EvictionNotice", True
        )


async def _holders(ctx: Context, d: Decision) -> tuple[list[str], str]:
    """Holders named by the alert plus, if configured, those in ``accelerator_allocated``; and a note
    when the allocation query failed (the drain goes on with the alert's holders: the taint is safe,
    and no pod is evicted on a guess)."""
    assert d.target is not None
    found = list(d.params.get("holders", []))
    url = ctx.settings.drain.prometheus_url
    if not url:
        return found, ""
    try:
        found += await holders_of(ctx.session, url, d.target.name, str(d.params["uuid"]))
    except AllocationError as exc:
        return found, f"; holders from alert labels only ({exc})"
    return sorted(set(found)), ""


async def start(ctx: Context, d: Decision, now: datetime) -> Outcome:
    """Taint, record the fault, plan evictions, then run one ``advance`` pass."""
    assert d.target is not None
    node, uuid = d.target.name, str(d.params["uuid"])
    no = await ctx.confirm("drain", "taint", {"node": node, "uuid": uuid}, now)
    if no:
        return Outcome("skipped", f"not tainted: {no.detail}")
    await ctx.kube.update_taints(
        node,
        lambda ts: (
            ts
            if any(t.key == TAINT_KEY for t in ts)
            else (*ts, Taint(TAINT_KEY, taint_value(uuid), "NoSchedule"))
        ),
    )
    names, note = await _holders(ctx, d)
    holders = _plan_pods(ctx, names, now)
    p = Progress(
        "drain", d.alert_key, "draining", now, {"uuids": [uuid], "pods": holders, "reason": d.reason}
    )
    await _persist(ctx, node, p)
    await ctx.report(
        "drain",
        "taint",
        _node_ref(node),
        Outcome("ok", f"tainted {TAINT_KEY}={taint_value(uuid)}:NoSchedule{stays(holders)}{note}"),
        now,
        "FaultyAcceleratorTainted",
        True,
    )
    await _notice(ctx, holders, node, uuid, now)
    return await advance(ctx, await ctx.kube.get_node(node), p, now)


async def extend(ctx: Context, d: Decision, now: datetime, p: Progress) -> Outcome:
    """Another faulty device (or the same one again) on a node already under drain."""
    assert d.target is not None
    uuid = str(d.params["uuid"])
    no = await ctx.confirm("drain", "extend", {"node": d.target.name, "uuid": uuid}, now)
    if no:
        return Outcome("skipped", f"not extended: {no.detail}")
    uuids = list(dict.fromkeys([*p.data.get("uuids", []), uuid]))
    pods = dict(p.data.get("pods", {}))
    names, _ = await _holders(ctx, d)
    new = {h: v for h, v in _plan_pods(ctx, names, now).items() if h not in pods}
    pods.update(new)
    healthy = {u: t for u, t in p.data.get("healthy", {}).items() if u != uuid}
    p = p.with_("draining", uuids=uuids, pods=pods, healthy=healthy)
    await _persist(ctx, d.target.name, p)
    await _notice(ctx, new, d.target.name, uuid, now)
    return await advance(ctx, await ctx.kube.get_node(d.target.name), p, now)


async def healthy(ctx: Context, d: Decision, now: datetime, p: Progress) -> Outcome:
    """One device's alert resolved: its healthy-for clock starts (the taint stays until all are healthy)."""
    assert d.target is not None
    p = p.with_(healthy={**p.data.get("healthy", {}), str(d.params["uuid"]): stamp(now)})
    await _persist(ctx, d.target.name, p)
    return Outcome("ok", f"{d.params['uuid']} healthy since {stamp(now)}")


async def mark_healthy(ctx: Context, node: str, p: Progress) -> Progress:
    """Persist ``p`` whose ``healthy`` map gained devices (their healthy-for clocks started); returns it."""
    await _persist(ctx, node, p)
    return p


async def lift(ctx: Context, node: str, p: Progress, now: datetime, why: str) -> Outcome:
    await ctx.kube.update_taints(node, lambda ts: tuple(t for t in ts if t.key != TAINT_KEY))
    last = json.dumps(
        {"finished": stamp(now), "uuids": p.data.get("uuids", []), "why": why, "alert": p.alert_key}
    )
    await _persist(
        ctx, node, None, {last_key_for("drain"): last, ACK_ANNOTATION: None, FAULTS_ANNOTATION: None}
    )
    out = Outcome("ok", f"taint lifted: {why}")
    await ctx.report("drain", "lift", _node_ref(node), out, now, "FaultyAcceleratorLifted", False)
    return out


async def advance(ctx: Context, node: NodeView, p: Progress, now: datetime) -> Outcome:
    """One pass: lift if acknowledged or healthy long enough, else evict holders that are due."""
    uuids = list(p.data.get("uuids", []))
    ack = node.annotations.get(ACK_ANNOTATION, "")
    if ack and (ack == "all" or ack in uuids):
        return await lift(ctx, node.name, p, now, f"acknowledged ({ACK_ANNOTATION}={ack})")
    healthy = p.data.get("healthy", {})
    since = [unstamp(healthy.get(u)) for u in uuids]
    healthy_since = max(since) if since and all(since) else None  # type: ignore[type-var]
    if healthy_since and now - healthy_since >= timedelta(seconds=ctx.settings.drain.healthy_for_seconds):
        return await lift(ctx, node.name, p, now, f"healthy since {stamp(healthy_since)}")
    pods: dict[str, dict[str, Any]] = {h: dict(v) for h, v in p.data.get("pods", {}).items()}
    todo = [h for h, st in pods.items() if st["state"] not in DONE_STATES]
    if not todo:
        if p.phase != "drained":
            p = p.with_("drained")
            await _persist(ctx, node.name, p)
        kept = stays(pods)
        return Outcome("ok", f"no holder to evict{kept}" if kept else "no holders left on the device")
    present = {f"{q.namespace}/{q.name}": q for q in await ctx.kube.pods_on_node(node.name)}
    if any(h in present and now >= (unstamp(pods[h]["due"]) or now) for h in todo):
        # Re-check before evicting: a device of this drain whose alert has not resolved must still fire.
        faulty = [u for u in uuids if u not in healthy] or uuids
        no = await ctx.confirm("drain", "evict", {"node": node.name, "uuid": faulty[0]}, now)
        if no:
            return Outcome(
                "blocked" if no.result in UNCONFIRMED else "skipped", f"evictions not run: {no.detail}"
            )
    blocked = 0
    for h in todo:
        st = pods[h]
        pod = present.get(h)
        due = now >= (unstamp(st["due"]) or now)
        if pod is None:
            st["state"] = "gone"
        elif st["mode"] == "wait-for-completion" and pod.phase in ("Succeeded", "Failed"):
            st["state"] = "completed"
        elif not due:
            continue
        else:
            ns, name = h.split("/", 1)
            result = await ctx.kube.evict(ns, name, ctx.settings.drain.eviction_grace_seconds)
            st["attempts"] = int(st.get("attempts", 0)) + 1
            st["state"] = {"evicted": "evicted", "gone": "gone", "blocked": "blocked"}.get(result, "error")
            reason = {"evicted": "Evicted", "gone": "Evicted", "blocked": "EvictionBlocked"}.get(
                result, "EvictionFailed"
            )
            detail = {
                "blocked": "eviction refused (429): PodDisruptionBudget; retrying",
                "error": "eviction failed (500 or other); retrying",
            }.get(result, f"evicted from faulty accelerator {','.join(uuids)}")
            await ctx.report(
                "drain",
                "evict",
                ObjectRef("Pod", name, ns),
                Outcome("ok" if result in ("evicted", "gone") else "blocked", detail),
                now,
                reason,
                result not in ("evicted", "gone"),
            )
            blocked += result in ("blocked", "error")
        pods[h] = st
        p = p.with_(pods=pods)
        await _persist(ctx, node.name, p)  # after every pod: a restart never repeats an eviction
    if all(st["state"] in DONE_STATES for st in pods.values()):
        p = p.with_("drained", pods=pods)
        await _persist(ctx, node.name, p)
        kept = stays(pods)
        if kept:
            return Outcome("ok", f"every other holder of the faulty device is off the node{kept}")
        return Outcome("ok", "all holders of the faulty device are off the node")
    return Outcome(
        "blocked" if blocked else "ok",
        f"{sum(st['state'] not in DONE_STATES for st in pods.values())} holder(s) left",
    )


def orphan(node: NodeView, now: datetime) -> Progress | None:
    """Progress for a node that carries our taint but no ``xpuwatch.io/drain`` record (the write after
    the taint was lost and the alert never came back): without it the taint could never be lifted."""
    ours = [t for t in node.taints if t.key == TAINT_KEY]
    if not ours:
        return None
    return Progress(
        "drain", "adopted", "drained", now, {"uuids": [ours[0].value], "pods": {}, "reason": "adopted"}
    )


async def adopt(ctx: Context, node: str, p: Progress, now: datetime) -> None:
    await _persist(ctx, node, p)
    msg = f"{TAINT_KEY} found without a drain record; adopted so it can be lifted (ack or healthy-for)"
    await ctx.report(
        "drain", "adopt", _node_ref(node), Outcome("ok", msg), now, "FaultyAcceleratorAdopted", True
    )


def progress_of(node: NodeView) -> Progress | None:
    return decode("drain", node.annotations.get(key_for("drain")))
