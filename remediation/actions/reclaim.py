"""Reclaim an idle notebook: notice to the owner, then stop it after a grace period unless it woke up.

Both signals must agree (remediation.md 1.3): the GPU alert (memory held, compute ~0) AND the
notebook's own activity, from the Hub's ``last_activity`` (JupyterHub) or ``/api/kernels`` (Kubeflow; a
busy kernel is activity now). A failed probe is never read as idle (kubeflow#7160): the step is blocked.
Stop = Hub ``DELETE /users/{u}/server[s/{name}]``, or the ``kubeflow-resource-stopped`` annotation on the
Notebook (what the Kubeflow UI's stop does). Progress: annotation ``xpuwatch.io/reclaim`` plus label
``xpuwatch.io/reclaim-pending=true`` on the pod (JupyterHub) or Notebook (Kubeflow) so the tick finds it.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from ..alert import PayloadError, parse_time
from ..jupyterhub import BusyKernel, ProbeError, kernels_activity
from ..kube import KubeError, ObjectRef
from ..notice import deliver, payload
from ..policy import Decision, Target
from ..progress import RECLAIM_LABEL, Progress, decode, key_for, last_key_for, stamp
from . import Context, Outcome

STOP_ANNOTATION = "kubeflow-resource-stopped"


def _ref(t: Target) -> ObjectRef:
    if t.kind == "notebook":
        return ObjectRef("Notebook", t.name, t.namespace, api_version="kubeflow.org/v1")
    return ObjectRef("Pod", t.name, t.namespace)


async def last_activity(ctx: Context, prm: Any, target: Target) -> datetime | None:
    """The notebook's own last activity; None = active now (busy kernel). Raises ``ProbeError``; a
    server that is not running raises too (nothing to reclaim, and no guess)."""
    if prm.get("platform") == "kubeflow":
        url = ctx.settings.reclaim.kernels_url.format(namespace=target.namespace, name=target.name)
        try:
            return await kernels_activity(ctx.session, url, None, ctx.settings.reclaim.hub_timeout_seconds)
        except BusyKernel:
            return None
    if ctx.hub is None:
        raise ProbeError("no JupyterHub configured (reclaim.hub_api_url)")
    act = await ctx.hub.server_activity(str(prm["user"]), str(prm.get("server", "")))
    if act is None or not act.running:
        raise ProbeError("server is not running or still pending")
    if act.last_activity is None:
        raise ProbeError("hub reports no last_activity")
    return act.last_activity


async def _write(ctx: Context, t: Target, ann: dict[str, str | None], pending: bool | None) -> None:
    labels: dict[str, str | None] = {} if pending is None else {RECLAIM_LABEL: "true" if pending else None}
    try:
        if t.kind == "notebook":
            await ctx.kube.patch_notebook_meta(t.namespace, t.name, ann, labels)
        else:
            await ctx.kube.patch_pod_meta(t.namespace, t.name, ann, labels)
    except KubeError as exc:
        if exc.status != 404:  # a stopped server's pod disappears: nothing left to record on
            raise


async def notify(ctx: Context, d: Decision, now: datetime) -> Outcome:
    """Probe; if idle for ``idle_seconds``, message the owner and persist the notice (grace starts)."""
    assert d.target is not None
    prm = d.params
    try:
        last = await last_activity(ctx, prm, d.target)
    except ProbeError as exc:
        return Outcome("blocked", f"activity probe failed, not acting: {exc}")
    if last is None:
        return Outcome("skipped", "a kernel is busy")
    idle = (now - last).total_seconds()
    if idle < float(prm["idle_seconds"]):
        return Outcome("skipped", f"notebook active {idle:.0f}s ago")
    deadline = now + timedelta(seconds=float(prm.get("grace_seconds", ctx.settings.reclaim.grace_seconds)))
    who = prm.get("user") or d.target.name
    msg = (
        f"{who}: your notebook {d.target.namespace}/{d.target.name} holds a GPU but has been idle since {stamp(last)}. "
        f"It will be stopped at {stamp(deadline)} unless you use it again."
    )
    labels = {"owner": str(prm.get("user", "")), "namespace": d.target.namespace, "pod": d.target.name}
    if not await deliver(
        ctx.session,
        ctx.settings,
        payload(labels, "Idle notebook will be stopped", msg, now),
    ):
        return Outcome("blocked", "could not deliver the notice to the owner; not starting the grace period")
    keep = {k: prm[k] for k in ("platform", "user", "server", "idle_seconds") if k in prm}
    p = Progress(
        "reclaim",
        d.alert_key,
        "notified",
        now,
        {**keep, "deadline": stamp(deadline), "last_activity": last.isoformat()},
    )
    await _write(ctx, d.target, {key_for("reclaim"): p.encode()}, True)
    out = Outcome("ok", msg)
    await ctx.report("reclaim", "notify", _ref(d.target), out, now, "ReclaimNotice", True)
    return out


async def cancel(ctx: Context, t: Target, now: datetime, why: str) -> Outcome:
    await _write(ctx, t, {key_for("reclaim"): None}, False)
    out = Outcome("ok", f"reclaim cancelled: {why}")
    await ctx.report("reclaim", "cancel", _ref(t), out, now, "ReclaimCancelled", False)
    return out


async def stop(ctx: Context, t: Target, p: Progress, now: datetime) -> Outcome:
    """Re-probe; cancel if activity resumed after the notice, else stop the server."""
    prm = p.data
    pod = f"{t.name}-0" if t.kind == "notebook" else t.name  # notebook-controller's StatefulSet pod
    no = await ctx.confirm("reclaim", "stop", {"namespace": t.namespace, "pod": pod}, now)
    if no and no.result == "cleared":
        return await cancel(ctx, t, now, f"GPU no longer idle ({no.detail})")
    if no:
        return Outcome("blocked", f"not stopped: {no.detail}")
    try:
        last = await last_activity(ctx, prm, t)
    except ProbeError as exc:
        return Outcome("blocked", f"activity probe failed, not acting: {exc}")
    if last is None:
        return await cancel(ctx, t, now, "a kernel is busy")
    try:  # full precision: the Hub reports microseconds, and "later than at notice" must be exact
        notified: datetime | None = parse_time(prm.get("last_activity"), "last_activity")
    except PayloadError:
        notified = None
    if (
        notified is None
        or last > notified
        or (now - last).total_seconds() < float(prm.get("idle_seconds", 0))
    ):
        return await cancel(ctx, t, now, f"activity resumed at {stamp(last)}")
    try:
        if prm.get("platform") == "kubeflow":
            await ctx.kube.patch_notebook_meta(t.namespace, t.name, {STOP_ANNOTATION: stamp(now)})
            detail = f"set {STOP_ANNOTATION} on Notebook {t.namespace}/{t.name}"
        else:
            assert ctx.hub is not None
            done = await ctx.hub.stop_server(str(prm["user"]), str(prm.get("server", "")))
            detail = f"stopped JupyterHub server {prm['user']}/{prm.get('server', '')}" + (
                "" if done else " (stopping)"
            )
    except ProbeError as exc:
        return Outcome("blocked", f"stop failed: {exc}")
    last_rec = json.dumps({"finished": stamp(now), "alert": p.alert_key, "result": "stopped"})
    await _write(ctx, t, {key_for("reclaim"): None, last_key_for("reclaim"): last_rec}, False)
    out = Outcome("ok", detail)
    await ctx.report("reclaim", "stop", _ref(t), out, now, "ReclaimStopped", False)
    return out


def progress_of(annotations: Any) -> Progress | None:
    return decode("reclaim", (annotations or {}).get(key_for("reclaim")))
