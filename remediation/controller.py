"""Controller: alert -> state read -> policy.decide -> guard.check -> action step -> audit, Event, metrics.

Also the ``tick`` that resumes and follows running work from the objects' annotations (drain notice
periods and PDB retries, MIG state, reclaim grace periods, lifting healthy faults), so a restarted or
newly elected controller continues instead of repeating. Everything runs under one lock: decisions are
serialized, which is what makes the blast-radius cap exact under a storm of concurrent webhooks.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import aiohttp

from . import approval, guard, policy, recheck
from .actions import Context, Outcome, drain, reclaim, resize
from .alert import Alert
from .audit import Audit
from .guard import FleetView, Verdict
from .jupyterhub import Hub, ProbeError
from .kube import Kube, KubeError, NodeView, ObjectRef
from .lease import Elector
from .notice import deliver, payload
from .policy import Decision, HistoryEntry, Target, TargetState
from .progress import RECLAIM_LABEL, Progress, decode, key_for, last_time, stamp, unstamp
from .recheck import Recheck
from .settings import Settings
from .telemetry import Telemetry

log = logging.getLogger(__name__)


class NotLeader(Exception):
    """This replica does not hold the Lease; the webhook answers 503 so Alertmanager retries."""


class Unavailable(Exception):
    """The API server could not be read; the webhook answers 503 so Alertmanager retries."""


def _disrupted(nodes: Iterable[NodeView]) -> frozenset[str]:
    """Nodes with our running work, or carrying our taint even if the progress write was lost."""
    return frozenset(
        n.name
        for n in nodes
        if key_for("drain") in n.annotations
        or key_for("resize") in n.annotations
        or any(t.key == drain.TAINT_KEY for t in n.taints)
    )


RELEASE = {
    "drain": "fix the device, then kubectl annotate node {node} xpuwatch.io/fault-ack=all (lifts the taint)",
    "resize": "fix MIG, then kubectl annotate node {node} xpuwatch.io/resize- xpuwatch.io/cordon-reason- "
    "and kubectl uncordon {node}",
}


@dataclass(frozen=True)
class Held:
    """A node xpuwatch holds: tainted by a drain or cordoned by a resize ``since`` (the work's start; a
    taint without a record: first seen now), ``why`` the phase or reason."""

    node: str
    action: str
    since: datetime
    why: str


def held_nodes(nodes: Iterable[NodeView], now: datetime) -> tuple[Held, ...]:
    """Every node xpuwatch holds, from the nodes' annotations and taints (pure)."""
    out = []
    for n in nodes:
        for action, mod in (("drain", drain), ("resize", resize)):
            p = mod.progress_of(n)
            if p is not None:
                out.append(
                    Held(n.name, action, p.started_at, f"{p.phase}, {p.data.get('reason', '')}".strip(", "))
                )
        if key_for("drain") not in n.annotations and any(t.key == drain.TAINT_KEY for t in n.taints):
            out.append(Held(n.name, "drain", now, "taint without a drain record"))
    return tuple(out)


class Controller:
    def __init__(
        self,
        settings: Settings,
        kube: Kube,
        session: aiohttp.ClientSession,
        clock: Callable[[], datetime],
        audit: Audit | None = None,
        telemetry: Telemetry | None = None,
        hub: Hub | None = None,
        elector: Elector | None = None,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.session = session
        self.clock = clock
        self.audit = audit or Audit(settings.audit_path)
        self.telemetry = telemetry or Telemetry()
        self.elector = elector
        self.history: deque[HistoryEntry] = deque(maxlen=10000)
        self.view = FleetView(0, frozenset(), None)
        self.lock = asyncio.Lock()
        self._refusal_events: dict[tuple[str, str], datetime] = {}
        # Dry run: nodes it said it would disrupt (node -> when), counted by the cap like real ones, so a
        # dry run reports what the cap would allow instead of "would drain" for every alert of a storm.
        self._dry_disrupted: dict[str, datetime] = {}
        self._recheck_notices: dict[tuple[str, str, str, str], datetime] = {}
        self.held: tuple[Held, ...] = ()
        self.pending: dict[str, approval.Pending] = {}
        self._hold_pages: dict[str, datetime] = {}
        self.telemetry.max_hold.set(settings.guard.max_hold_seconds)
        self.ctx = Context(kube, settings, session, hub, self.report, self.confirm)

    @property
    def mode(self) -> str:
        return "dry-run" if self.settings.guard.dry_run else "apply"

    def leading(self, now: datetime) -> bool:
        return self.elector is None or self.elector.is_leader(now)

    # -- reporting --------------------------------------------------------------------------------
    async def report(
        self, action: str, step: str, ref: ObjectRef, out: Outcome, now: datetime, reason: str, warning: bool
    ) -> None:
        """One step: audit line, Kubernetes Event, metric. An Event that cannot be written is counted,
        never fatal."""
        mode = self.mode
        self.telemetry.actions.labels(action, out.result, mode).inc()
        self.audit.write(
            now,
            "step",
            action=action,
            step=step,
            mode=mode,
            result=out.result,
            detail=out.detail,
            object={"kind": ref.kind, "namespace": ref.namespace, "name": ref.name},
        )
        try:
            await self.kube.emit_event(
                ref, reason, f"[{mode}] {out.detail}", now, "Warning" if warning else "Normal"
            )
        except KubeError as exc:
            self.telemetry.errors.labels("events").inc()
            log.warning("event %s on %s/%s not written: %s", reason, ref.kind, ref.name, exc)

    # -- manual approval ---------------------------------------------------------------------------
    async def _annotations(self, t: Target) -> Mapping[str, str]:
        if t.kind == "node":
            return (await self.kube.get_node(t.name)).annotations
        if t.kind == "pod":
            pod = await self.kube.get_pod(t.namespace, t.name)
            return pod.annotations if pod else {}
        nb = await self.kube.get_notebook(t.namespace, t.name)
        return ((nb or {}).get("metadata") or {}).get("annotations") or {}

    async def _annotate(self, t: Target, ann: dict[str, str | None]) -> None:
        if t.kind == "node":
            await self.kube.annotate_node(t.name, ann)
        elif t.kind == "pod":
            await self.kube.patch_pod_meta(t.namespace, t.name, ann)
        else:
            await self.kube.patch_notebook_meta(t.namespace, t.name, ann)

    async def _ask(self, alert: Alert, d: Decision, state: TargetState, now: datetime) -> dict[str, str]:
        """A decision that waits for a human: recorded (annotation, Event, notice with the commands) once;
        an approval or denial already on the object (a restart, a repeat) is taken at once."""
        assert d.target is not None
        pid = approval.decision_id(d)
        answer = {
            "alert": alert.key,
            "action": d.action,
            "step": d.step,
            "result": "pending",
            "approval": pid,
        }
        if pid in self.pending:
            return {**answer, "detail": f"awaiting approval {pid}"}
        expires = now + timedelta(seconds=self.settings.approval.expire_seconds)
        p = approval.Pending(pid, alert, d, now, expires)
        self.pending[pid] = p
        try:
            ann = await self._annotations(d.target)
        except KubeError as exc:
            self.telemetry.errors.labels("apiserver").inc()
            raise Unavailable(str(exc)) from None
        if ann.get(approval.APPROVE) == pid or ann.get(approval.DENY) == pid:
            return await self._settle(p, ann.get(approval.APPROVE) == pid, _by_annotation(ann), now)
        how = approval.commands(d.target, pid)
        detail = f"{d.action} {d.step} on {d.target.key} waits for approval {pid} ({d.reason}); {how}"
        self.audit.write(
            now,
            "approval",
            state="pending",
            id=pid,
            alert=alert.key,
            action=d.action,
            step=d.step,
            target=d.target.key,
            expires=stamp(expires),
            detail=detail,
        )
        record = json.dumps(
            {"id": pid, "action": d.action, "step": d.step, "alert": alert.key, "expires": stamp(expires)}
        )
        try:
            await self._annotate(d.target, {approval.PENDING: record})
            await self.kube.emit_event(_ref(d.target), "ApprovalRequired", detail, now, "Warning")
        except KubeError:
            self.telemetry.errors.labels("apiserver").inc()
        labels = {"node": d.target.node, "namespace": d.target.namespace}
        if alert.label("category"):
            labels["category"] = alert.label("category")
        await deliver(
            self.session,
            self.settings,
            payload(labels, f"approve {d.action} on {d.target.key}? ({pid})", detail, now),
        )
        return {**answer, "detail": detail}

    async def decide_pending(self, pid: str, approve: bool, by: str) -> dict[str, str] | None:
        """An approval or denial through the authenticated POST; None for an unknown id."""
        async with self.lock:
            p = self.pending.get(pid)
            if p is None:
                return None
            return await self._settle(p, approve, by, self.clock())

    async def _settle(self, p: approval.Pending, approve: bool, by: str, now: datetime) -> dict[str, str]:
        """Approve (the guard runs again on the state of now, then the step) or deny a pending decision."""
        self.pending.pop(p.id, None)
        t = p.target
        try:
            await self._annotate(
                t,
                {
                    approval.PENDING: None,
                    approval.APPROVE: None,
                    approval.DENY: None,
                    approval.APPROVED_BY: None,
                },
            )
        except KubeError:
            self.telemetry.errors.labels("apiserver").inc()
        base = {"alert": p.alert.key, "action": p.decision.action, "approval": p.id}
        if not approve:
            self.history.append(
                HistoryEntry(p.decision.alert_key, p.decision.action, "denied", t.key, now, "apply")
            )
            detail = f"{p.decision.action} on {t.key} denied ({p.id}) by {by}"
            self.audit.write(now, "approval", state="denied", id=p.id, by=by, target=t.key, detail=detail)
            try:
                await self.kube.emit_event(_ref(t), "ApprovalDenied", detail, now, "Normal")
            except KubeError:
                self.telemetry.errors.labels("events").inc()
            return {**base, "step": p.decision.step, "result": "denied", "detail": detail}
        state = await self._state(p.decision.action, t)
        d = policy.decide(p.alert, state, tuple(self.history), now, self.settings)
        if d.disrupts_node:
            try:
                await self.refresh_view(now)
            except KubeError as exc:
                self.telemetry.errors.labels("apiserver").inc()
                raise Unavailable(str(exc)) from None
        v = guard.check(
            d, p.alert, state, self._guard_view(now), tuple(self.history), now, self.settings.guard
        )
        self.audit.write(
            now,
            "approval",
            state="approved",
            id=p.id,
            by=by,
            target=t.key,
            step=d.step,
            allowed=v.allowed,
            refusal=v.reason,
        )
        self._audit_decision(p.alert, d, v, now)
        if d.step in ("ignore", "wait"):
            return {**base, "step": d.step, "result": "skipped", "detail": f"approved by {by}; {d.reason}"}
        if not v.allowed:
            return {**await self._refuse(d, v, now), "approval": p.id}
        return {**await self._act(p.alert, d, state, now), "approval": p.id, "by": by}

    async def _tick_approvals(self, now: datetime) -> None:
        """Expire pending decisions past ``approval.expire_seconds``; take approvals and denials written
        as annotations on their objects."""
        for p in list(self.pending.values()):
            if now >= p.expires:
                self.pending.pop(p.id, None)
                # the episode's repeats are duplicates now; a new episode of the alert asks again
                self.history.append(
                    HistoryEntry(
                        p.decision.alert_key, p.decision.action, "expired", p.target.key, now, "apply"
                    )
                )
                detail = f"approval {p.id} for {p.decision.action} on {p.target.key} expired unanswered"
                self.audit.write(
                    now, "approval", state="expired", id=p.id, target=p.target.key, detail=detail
                )
                try:
                    await self._annotate(p.target, {approval.PENDING: None})
                    await self.kube.emit_event(_ref(p.target), "ApprovalExpired", detail, now, "Normal")
                except KubeError:
                    self.telemetry.errors.labels("apiserver").inc()
                await deliver(
                    self.session,
                    self.settings,
                    payload({"node": p.target.node, "namespace": p.target.namespace}, detail, detail, now),
                )
                continue
            try:
                ann = await self._annotations(p.target)
            except KubeError:
                self.telemetry.errors.labels("apiserver").inc()
                continue
            if p.id in (ann.get(approval.APPROVE), ann.get(approval.DENY)):
                try:
                    await self._settle(p, ann.get(approval.APPROVE) == p.id, _by_annotation(ann), now)
                except Unavailable:
                    self.pending[p.id] = p  # retried at the next tick

    async def _resolved_unseen(self, node: str, p: Progress, now: datetime) -> Progress:
        """A drain's device whose alert no longer fires in Prometheus but whose resolved notification never
        came (Alertmanager restarted, the webhook lost): its healthy-for clock starts now, as the resolved
        notification would have started it, so the taint cannot stay forever. Only with
        ``recheck.prometheus_url``; not for adopted taints (their uuid is the taint's sanitized value)."""
        url = self.settings.recheck.prometheus_url
        healthy = dict(p.data.get("healthy", {}))
        waiting = [u for u in p.data.get("uuids", []) if u not in healthy]
        if not url or p.alert_key == "adopted" or not waiting:
            return p
        for uuid in waiting:
            r = await recheck.still_holds(
                self.session,
                url,
                "drain",
                {"node": node, "uuid": uuid},
                self.settings.recheck.timeout_seconds,
            )
            self.telemetry.rechecks.labels("drain", "healthy", r.result).inc()
            if r.result == "cleared":
                healthy[uuid] = stamp(now)
                self.audit.write(
                    now,
                    "recheck",
                    action="drain",
                    step="healthy",
                    result="cleared",
                    query=r.query,
                    detail=f"{uuid} on {node} no longer fires without a resolved notification: healthy since now",
                )
        if len(healthy) == len(p.data.get("healthy", {})):
            return p
        return await drain.mark_healthy(self.ctx, node, p.with_(healthy=healthy))

    # -- re-check before acting ------------------------------------------------------------------
    async def confirm(
        self, action: str, step: str, labels: Mapping[str, str], now: datetime
    ) -> Recheck | None:
        """Right before a disruptive step: None when ``ALERTS`` still fires for ``labels`` (or no
        ``recheck.prometheus_url`` is set); else the ``Recheck`` saying why not. Every answer is counted;
        a cancellation is audited each time and announced (Event + notice) once per target, step and
        result per cooldown, so a tick that keeps finding the condition cleared is not a storm."""
        url = self.settings.recheck.prometheus_url
        if not url:
            return None
        r = await recheck.still_holds(
            self.session, url, action, labels, self.settings.recheck.timeout_seconds
        )
        self.telemetry.rechecks.labels(action, step, r.result).inc()
        if r.result == "holds":
            return None
        if r.result in recheck.UNCONFIRMED:
            self.telemetry.errors.labels("prometheus").inc()
        target = labels.get("node") or f"{labels.get('namespace', '')}/{labels.get('pod', '')}"
        verb = "cancelled" if r.result == "cleared" else "not run"
        detail = f"{action} {step} on {target} {verb}: {r.detail}"
        log.warning("%s", detail)
        self.audit.write(
            now, "recheck", action=action, step=step, result=r.result, query=r.query, detail=detail
        )
        key = (action, step, target, r.result)
        last = self._recheck_notices.get(key)
        if last is not None and (now - last).total_seconds() < self.settings.guard.cooldown_seconds:
            return r
        self._recheck_notices[key] = now
        ref = (
            ObjectRef("Node", labels["node"])
            if labels.get("node")
            else ObjectRef("Pod", labels.get("pod", ""), labels.get("namespace", ""))
        )
        try:
            await self.kube.emit_event(ref, "RemediationCancelled", detail, now, "Warning")
        except KubeError:
            self.telemetry.errors.labels("events").inc()
        category = "hardware" if action == "drain" else "performance"
        await deliver(
            self.session,
            self.settings,
            payload(
                {
                    "node": labels.get("node", ""),
                    "namespace": labels.get("namespace", ""),
                    "category": category,
                },
                f"{action} {step} {verb}",
                detail,
                now,
            ),
        )
        return r

    # -- fleet view -------------------------------------------------------------------------------
    async def refresh_view(self, now: datetime) -> list[NodeView]:
        nodes = await self.kube.list_nodes()
        self.view = FleetView(len(nodes), _disrupted(nodes), now)
        self.telemetry.disrupted.set(len(self.view.disrupted))
        self.held = held_nodes(nodes, now)
        self.telemetry.held_age.clear()
        for h in self.held:
            self.telemetry.held_age.labels(h.node, h.action).set((now - h.since).total_seconds())
        return nodes

    async def page_held(self, now: datetime) -> list[str]:
        """Nodes held past ``guard.max_hold_seconds``: a notice to the hardware channel and a Warning Event
        naming each, again every ``max_hold_seconds`` while it stays held. Returns the nodes paged."""
        limit = self.settings.guard.max_hold_seconds
        paged = []
        held = {h.node for h in self.held}
        self._hold_pages = {n: t for n, t in self._hold_pages.items() if n in held}
        for h in self.held:
            age = (now - h.since).total_seconds()
            last = self._hold_pages.get(h.node)
            if age <= limit or (last is not None and (now - last).total_seconds() < limit):
                continue
            self._hold_pages[h.node] = now
            paged.append(h.node)
            detail = (
                f"node {h.node} held by xpuwatch ({h.action}: {h.why}) for {age / 3600:.1f} h, over "
                f"guard.max_hold_seconds ({limit / 3600:.1f} h): {RELEASE[h.action].format(node=h.node)}"
            )
            log.warning("%s", detail)
            self.audit.write(
                now, "held_too_long", node=h.node, action=h.action, age_seconds=age, detail=detail
            )
            try:
                await self.kube.emit_event(
                    ObjectRef("Node", h.node), "RemediationHeldTooLong", detail, now, "Warning"
                )
            except KubeError:
                self.telemetry.errors.labels("events").inc()
            await deliver(
                self.session,
                self.settings,
                payload(
                    {"node": h.node, "category": "hardware", "severity": "warning"},
                    f"node {h.node} held by xpuwatch for {age / 3600:.1f} h",
                    detail,
                    now,
                ),
            )
        return paged

    def _guard_view(self, now: datetime) -> FleetView:
        """The view the guard judges by: in dry run, plus the nodes the dry run would have disrupted within
        the cooldown (the time a real drain would at least keep them)."""
        if not self.settings.guard.dry_run or not self._dry_disrupted:
            return self.view
        horizon = now - timedelta(seconds=self.settings.guard.cooldown_seconds)
        self._dry_disrupted = {n: t for n, t in self._dry_disrupted.items() if t > horizon}
        v = self.view
        return FleetView(v.nodes_total, v.disrupted | frozenset(self._dry_disrupted), v.observed_at)

    # -- alerts -----------------------------------------------------------------------------------
    async def handle(self, alerts: list[Alert]) -> list[dict[str, str]]:
        """Handle one webhook's alerts in order; returns a summary per alert. Raises ``NotLeader`` or
        ``Unavailable`` (nothing acted on after that point; Alertmanager resends the whole group). In dry
        run, a webhook of several alerts also gets one line (audit, log, notice) of what the cap allows:
        "would drain 3; 97 held by the cap"."""
        out = []
        async with self.lock:
            for alert in alerts:
                self.telemetry.alerts.labels(alert.status).inc()
                now = self.clock()
                if not self.leading(now):
                    self.telemetry.refusals.labels("not_leader").inc()
                    raise NotLeader()
                out.append(await self._handle_one(alert, now))
            summary = dry_run_summary(out) if self.settings.guard.dry_run and len(out) > 1 else ""
            categories = {a.label("category") for a in alerts}
            if summary:
                now = self.clock()
                log.info("dry run: %s", summary)
                self.audit.write(now, "summary", mode="dry-run", detail=summary)
                await deliver(
                    self.session,
                    self.settings,
                    payload(
                        {"category": categories.pop()}
                        if len(categories) == 1 and "" not in categories
                        else {},
                        f"[dry-run] {summary}",
                        summary,
                        now,
                    ),
                )
        return out

    async def _state(self, action: str, t: Target | None) -> TargetState:
        if t is None or not t.name:
            return TargetState()
        try:
            if t.kind == "node":
                node = await self.kube.get_node(t.name)
                ann = node.annotations
            elif t.kind == "pod":
                pod = await self.kube.get_pod(t.namespace, t.name)
                if pod is None:
                    return TargetState(exists=False)
                ann = pod.annotations
            else:
                nb = await self.kube.get_notebook(t.namespace, t.name)
                if nb is None:
                    return TargetState(exists=False)
                ann = (nb.get("metadata") or {}).get("annotations") or {}
        except KubeError as exc:
            if exc.status == 404:
                return TargetState(exists=False)
            self.telemetry.errors.labels("apiserver").inc()
            raise Unavailable(str(exc)) from None
        return TargetState(decode(action, ann.get(key_for(action))), last_time(ann, action))

    async def _handle_one(self, alert: Alert, now: datetime) -> dict[str, str]:
        probe = policy.decide(alert, TargetState(), tuple(self.history), now, self.settings)
        if probe.action == "none":
            self.telemetry.decisions.labels("none", "ignore").inc()
            return {"alert": alert.key, "action": "none", "step": "ignore", "detail": probe.reason}
        if probe.disrupts_node and self.view.observed_at is not None:
            # In a storm most alerts hit the cap; the guard can tell that without reading the object
            # (a node with running work is in view.disrupted, so an unread state could only allow more).
            early = guard.check(
                probe,
                alert,
                TargetState(),
                self._guard_view(now),
                tuple(self.history),
                now,
                self.settings.guard,
            )
            if early.reason == "cap":
                self.telemetry.decisions.labels(probe.action, probe.step).inc()
                self._audit_decision(alert, probe, early, now)
                return await self._refuse(probe, early, now)
        state = await self._state(probe.action, probe.target)
        d = policy.decide(alert, state, tuple(self.history), now, self.settings)
        self.telemetry.decisions.labels(d.action, d.step).inc()
        if d.step in ("ignore", "wait"):
            return {"alert": alert.key, "action": d.action, "step": d.step, "detail": d.reason}
        if d.disrupts_node and (
            self.view.observed_at is None
            or (now - self.view.observed_at).total_seconds() > self.settings.guard.max_view_age_seconds
        ):
            try:
                await self.refresh_view(now)
            except KubeError as exc:
                self.telemetry.errors.labels("apiserver").inc()
                raise Unavailable(str(exc)) from None
        v = guard.check(d, alert, state, self._guard_view(now), tuple(self.history), now, self.settings.guard)
        self._audit_decision(alert, d, v, now)
        if not v.allowed:
            return await self._refuse(d, v, now)
        if v.mode == "dry-run":
            manual = approval.needs_approval(d, alert, self.settings.approval)
            return await self._dry_run(d, now, alert.label("category"), manual)
        if approval.needs_approval(d, alert, self.settings.approval):
            return await self._ask(alert, d, state, now)
        return await self._act(alert, d, state, now)

    async def _act(self, alert: Alert, d: Decision, state: TargetState, now: datetime) -> dict[str, str]:
        """Execute an allowed decision; history, fleet view and the answer follow its outcome."""
        try:
            out = await self._execute(d, state, now)
        except KubeError as exc:
            self.telemetry.errors.labels("apiserver").inc()
            out = Outcome("failed", f"API server: {exc}")
            self.telemetry.actions.labels(d.action, "failed", "apply").inc()
            self.audit.write(
                now, "step", action=d.action, step=d.step, mode="apply", result="failed", detail=out.detail
            )
        if out.result == "ok" or (d.step in ("start", "extend") and out.result == "blocked"):
            self.history.append(
                HistoryEntry(d.alert_key, d.action, d.step, d.target.key if d.target else "", now, "apply")
            )
        # A failed start may have tainted or cordoned before failing: count it until a refresh says no.
        if d.disrupts_node and d.target and out.result in ("ok", "blocked", "failed"):
            self.view = FleetView(
                self.view.nodes_total, self.view.disrupted | {d.target.node}, self.view.observed_at
            )
            self.telemetry.disrupted.set(len(self.view.disrupted))
        return {
            "alert": alert.key,
            "action": d.action,
            "step": d.step,
            "result": out.result,
            "detail": out.detail,
        }

    def _audit_decision(self, alert: Alert, d: Decision, v: Verdict, now: datetime) -> None:
        self.audit.write(
            now,
            "decision",
            alert=alert.key,
            alertname=alert.name,
            action=d.action,
            step=d.step,
            target=d.target.key if d.target else "",
            reason=d.reason,
            allowed=v.allowed,
            mode=v.mode,
            refusal=v.reason,
            refusal_detail=v.detail,
        )

    async def _refuse(self, d: Decision, v: Verdict, now: datetime) -> dict[str, str]:
        assert v.reason is not None
        detail = v.detail
        if v.reason == "cap" and v.mode == "dry-run":
            detail = f"would be held by the cap: {detail} (the dry run counts the nodes it would disrupt)"
        self.telemetry.refusals.labels(v.reason).inc()
        # One Event per target and reason per cooldown: duplicates are Alertmanager's repeats, and a
        # storm of refused alerts must not turn into a storm of Events on the API server.
        key = (d.target.key if d.target else "", v.reason)
        last = self._refusal_events.get(key)
        quiet = last is not None and (now - last).total_seconds() < self.settings.guard.cooldown_seconds
        if d.target and v.reason != "duplicate" and not quiet:
            self._refusal_events[key] = now
            ref = _ref(d.target)
            try:
                await self.kube.emit_event(
                    ref,
                    "RemediationRefused",
                    f"{d.action} {d.step} refused ({v.reason}): {detail}",
                    now,
                    "Warning",
                )
            except KubeError:
                self.telemetry.errors.labels("events").inc()
        return {
            "alert": d.alert_key,
            "action": d.action,
            "step": d.step,
            "refused": v.reason,
            "detail": detail,
        }

    async def _dry_run(
        self, d: Decision, now: datetime, category: str = "", manual: bool = False
    ) -> dict[str, str]:
        """Report what ``d`` would do (audit, Event, log, and a notice to the relay channel under the
        triggering alert's ``category``, so a drain for a hardware fault reaches the hardware channel)."""
        detail = f"would {d.step} {d.action} on {d.target.key if d.target else '?'}: {d.reason}"
        if d.action == "resize" and d.step == "recommend":
            out = await resize.recommend(self.ctx, d, now, dry_run=True)
            detail = f"would recommend: {out.detail}"
        elif d.action == "drain" and d.step in ("start", "extend") and d.target:
            detail = f"{detail}; {await drain.preview(self.ctx, d, now)}"
        elif d.action == "reclaim" and d.step == "notify" and d.target:
            # Reads only: say whether the notebook's own activity would let the reclaim go ahead.
            try:
                last = await reclaim.last_activity(self.ctx, d.params, d.target)
                seen = "a kernel is busy" if last is None else f"last activity {last:%Y-%m-%dT%H:%M:%SZ}"
            except ProbeError as exc:
                seen = f"activity probe failed ({exc}), would not act"
            detail = f"{detail}; {seen}"
        if manual:
            detail += "; would first wait for a human's approval (approval: manual)"
        await self.report(
            d.action,
            d.step,
            _ref(d.target) if d.target else ObjectRef("Node", ""),
            Outcome("ok", detail),
            now,
            "DryRun",
            False,
        )
        labels = {
            "node": d.target.node if d.target else "",
            "namespace": d.target.namespace if d.target else "",
            **({"category": category} if category else {}),
        }
        await deliver(
            self.session,
            self.settings,
            payload(labels, f"[dry-run] {d.action} {d.step}", detail, now),
        )
        self.history.append(
            HistoryEntry(d.alert_key, d.action, d.step, d.target.key if d.target else "", now, "dry-run")
        )
        if d.disrupts_node and d.target:
            self._dry_disrupted[d.target.node] = now
        return {
            "alert": d.alert_key,
            "action": d.action,
            "step": d.step,
            "result": "dry-run",
            "detail": detail,
        }

    async def _execute(self, d: Decision, state: TargetState, now: datetime) -> Outcome:
        assert d.target is not None
        p = state.progress
        if d.action == "reclaim":
            if d.step == "notify":
                return await reclaim.notify(self.ctx, d, now)
            if d.step == "stop" and p:
                return await reclaim.stop(self.ctx, d.target, p, now)
            if d.step == "cancel":
                return await reclaim.cancel(self.ctx, d.target, now, d.reason)
        if d.action == "drain":
            if d.step == "start":
                return await drain.start(self.ctx, d, now)
            if d.step == "extend" and p:
                return await drain.extend(self.ctx, d, now, p)
            if d.step == "healthy" and p:
                return await drain.healthy(self.ctx, d, now, p)
        if d.action == "resize":
            if d.step == "recommend":
                return await resize.recommend(self.ctx, d, now, dry_run=False)
            if d.step == "start":
                return await resize.start(self.ctx, d, now)
        return Outcome("skipped", f"no executor for {d.action}/{d.step}")

    # -- the resume/follow loop -------------------------------------------------------------------
    async def tick(self) -> list[dict[str, str]]:
        """One pass over running work (leader only; dry-run has no running work). Returns summaries."""
        now = self.clock()
        done: list[dict[str, str]] = []
        if not self.leading(now):
            return done
        async with self.lock:
            try:
                nodes = await self.refresh_view(now)
            except KubeError as exc:
                self.telemetry.errors.labels("apiserver").inc()
                log.warning("tick: cannot list nodes: %s", exc)
                return done
            await self.page_held(now)
            if self.settings.guard.dry_run:
                return done
            await self._tick_approvals(now)
            for node in nodes:
                for action, mod in (("drain", drain), ("resize", resize)):
                    p = mod.progress_of(node)
                    if p is None and action == "drain" and key_for("drain") not in node.annotations:
                        p = drain.orphan(node, now)  # our taint, progress write lost: adopt it
                        if p is not None:
                            try:
                                await drain.adopt(self.ctx, node.name, p, now)
                            except KubeError:
                                self.telemetry.errors.labels("apiserver").inc()
                            continue
                    if p is None:
                        continue
                    if action == "drain":
                        p = await self._resolved_unseen(node.name, p, now)
                    try:
                        out = await mod.advance(self.ctx, node, p, now)
                    except KubeError as exc:
                        self.telemetry.errors.labels("apiserver").inc()
                        out = Outcome("failed", str(exc))
                    done.append(
                        {
                            "target": f"node/{node.name}",
                            "action": action,
                            "result": out.result,
                            "detail": out.detail,
                        }
                    )
            done += await self._tick_reclaim(now)
            try:
                await self.refresh_view(now)
            except KubeError:
                self.telemetry.errors.labels("apiserver").inc()
        return done

    async def _tick_reclaim(self, now: datetime) -> list[dict[str, str]]:
        done: list[dict[str, str]] = []
        sel = f"{RECLAIM_LABEL}=true"
        try:
            found: list[tuple[Target, object]] = [
                (Target("pod", q.name, q.namespace, q.node), q.annotations)
                for q in await self.kube.pods_labelled(sel)
            ]
            try:
                for nb in await self.kube.notebooks_labelled(sel):
                    meta = nb.get("metadata") or {}
                    found.append(
                        (
                            Target("notebook", meta.get("name", ""), meta.get("namespace", "")),
                            meta.get("annotations"),
                        )
                    )
            except KubeError as exc:
                if exc.status != 404:  # 404: the Notebook CRD is not installed
                    raise
        except KubeError as exc:
            self.telemetry.errors.labels("apiserver").inc()
            log.warning("tick: cannot list reclaim candidates: %s", exc)
            return done
        for t, ann in found:
            p = reclaim.progress_of(ann)
            if p is None or p.phase != "notified":
                continue
            deadline = unstamp(p.data.get("deadline"))
            if deadline is None or now < deadline:
                continue
            try:
                out = await reclaim.stop(self.ctx, t, p, now)
            except KubeError as exc:
                out = Outcome("failed", str(exc))
            done.append({"target": t.key, "action": "reclaim", "result": out.result, "detail": out.detail})
        return done


def _by_annotation(ann: Mapping[str, str]) -> str:
    """Who approved, as far as the object says: ``xpuwatch.io/approved-by`` when the approver set it (the
    API server's audit log has the authenticated user of the annotate call)."""
    who = ann.get(approval.APPROVED_BY, "")
    return f"{who} (kubectl annotate)" if who else "kubectl annotate (user in the API server's audit log)"


def _ref(t: Target) -> ObjectRef:
    if t.kind == "node":
        return ObjectRef("Node", t.name)
    if t.kind == "notebook":
        return ObjectRef("Notebook", t.name, t.namespace, api_version="kubeflow.org/v1")
    return ObjectRef("Pod", t.name, t.namespace)


def dry_run_summary(results: Sequence[Mapping[str, str]]) -> str:
    """What a dry run of one webhook would have done, per action: "would drain 3; 97 held by the cap"
    ("" when it would start nothing and nothing was held). Pure: ``results`` are ``handle``'s entries."""
    would = Counter(
        r["action"]
        for r in results
        if r.get("result") == "dry-run" and r.get("step") in guard.INITIATING_STEPS
    )
    held = Counter(r["action"] for r in results if r.get("refused") == "cap")
    parts = []
    for action in sorted(set(would) | set(held)):
        text = f"would {action} {would[action]}"
        if held[action]:
            text += f"; {held[action]} held by the cap"
        parts.append(text)
    return "; ".join(parts)
