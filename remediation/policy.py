"""Policy: the PURE mapping from (alert, target state, history, clock) to a ``Decision`` (no I/O).

The policy file's rules pick the action by the alert's ``action`` label and alertname; the object's
persisted ``Progress`` picks the step. Policy never refuses: whether a step may run is the guard's call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from .alert import Alert
from .progress import Progress
from .settings import Rule, Settings

Step = Literal[
    "ignore",  # nothing to do (no rule, resolved without progress, already done)
    "wait",  # progress exists and its next step is not due
    "notify",  # reclaim: notice to the owner, grace period starts
    "stop",  # reclaim: stop the notebook
    "cancel",  # reclaim: GPU or notebook activity resumed
    "recommend",  # resize: record a recommendation
    "start",  # drain / resize-apply: begin disrupting the node
    "extend",  # drain: another faulty device on an already drained node
    "healthy",  # drain: the device's alert resolved; start the healthy-for clock
]


@dataclass(frozen=True)
class Target:
    """The object an action works on. ``kind``: node (drain, MIG resize), pod (JupyterHub notebook pod,
    HAMi workload pod) or notebook (Kubeflow Notebook CR)."""

    kind: Literal["node", "pod", "notebook"]
    name: str
    namespace: str = ""
    node: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class TargetState:
    """What the target's annotations say: running progress of this action and when the last one ended."""

    progress: Progress | None = None
    last_finished: datetime | None = None
    exists: bool = True


@dataclass(frozen=True)
class HistoryEntry:
    """One executed (or dry-run) step, kept in memory by the controller."""

    alert_key: str
    action: str
    step: str
    target_key: str
    at: datetime
    mode: str


@dataclass(frozen=True)
class Decision:
    """``initiates``: begins a new remediation (idempotency and cooldown apply). ``disrupts_node``: would
    newly cordon or taint ``target.node`` (the blast-radius cap applies). ``missing``: required alert labels
    that were absent. ``params``: rule params plus what the policy derived (user, server, direction...)."""

    action: str
    step: Step
    target: Target | None
    alert_key: str
    reason: str
    params: Mapping[str, Any] = field(default_factory=dict)
    initiates: bool = False
    disrupts_node: bool = False
    missing: tuple[str, ...] = ()


def match_rule(alert: Alert, rules: Sequence[Rule]) -> Rule | None:
    """First rule whose action equals the alert's ``action`` label and whose alertnames (if any) list it."""
    for rule in rules:
        if rule.action == alert.action and (not rule.alertnames or alert.name in rule.alertnames):
            return rule
    return None


def _missing(alert: Alert, names: Sequence[str]) -> tuple[str, ...]:
    return tuple(n for n in names if not alert.label(n))


def jupyterhub_server(pod: str, owner: str) -> tuple[str, str]:
    """(user, server name) from a KubeSpawner pod name: ``jupyter-<user>`` is the default server,
    ``jupyter-<user>--<server>`` a named one (KubeSpawner ``pod_name_template`` default)."""
    stem = pod.removeprefix("jupyter-")
    user, sep, server = stem.partition("--")
    return (owner or user), (server if sep else "")


def decide(
    alert: Alert,
    state: TargetState,
    history: Sequence[HistoryEntry],
    now: datetime,
    settings: Settings,
) -> Decision:
    """Map one alert to the next step. Pure; ``now`` is the injected clock."""
    if alert.action == "none":
        return Decision("none", "ignore", None, alert.key, "alert carries action=none")
    rule = match_rule(alert, settings.rules)
    if rule is None:
        return Decision(
            "none", "ignore", None, alert.key, f"no rule for action={alert.action} alertname={alert.name}"
        )
    params = dict(rule.params)
    if rule.action == "reclaim":
        return _reclaim(alert, state, now, settings, params)
    if rule.action == "drain":
        return _drain(alert, state, history, params)
    return _resize(alert, state, settings, params)


def _reclaim(
    alert: Alert, state: TargetState, now: datetime, settings: Settings, params: dict[str, Any]
) -> Decision:
    platform = params.get("platform", "jupyterhub")
    required = ("namespace", "pod", "owner") if platform == "jupyterhub" else ("namespace", "pod")
    missing = _missing(alert, required)
    ns, pod = alert.label("namespace"), alert.label("pod")
    if platform == "kubeflow":
        # notebook-controller names the StatefulSet pod <notebook>-0.
        target = Target(
            "notebook", alert.label("notebook") or pod.removesuffix("-0"), ns, alert.label("node")
        )
    else:
        user, server = jupyterhub_server(pod, alert.label("owner"))
        params.update(user=user, server=server)
        target = Target("pod", pod, ns, alert.label("node"))
    params["platform"] = platform
    if missing:
        return Decision(
            "reclaim", "notify", target, alert.key, "required labels absent", params, True, False, missing
        )
    grace = float(params.get("grace_seconds", settings.reclaim.grace_seconds))
    params.setdefault("idle_seconds", settings.reclaim.idle_seconds)
    p = state.progress
    if alert.status == "resolved":
        if p and p.phase == "notified":
            return Decision("reclaim", "cancel", target, alert.key, "GPU no longer idle", params)
        return Decision("reclaim", "ignore", target, alert.key, "resolved, nothing running")
    if p is None:
        params["deadline"] = now + timedelta(seconds=grace)
        return Decision(
            "reclaim", "notify", target, alert.key, "GPU idle while allocated", params, initiates=True
        )
    if p.phase == "notified":
        deadline = p.started_at + timedelta(seconds=grace)
        if now >= deadline:
            return Decision("reclaim", "stop", target, p.alert_key, "grace period over", params)
        return Decision(
            "reclaim", "wait", target, p.alert_key, f"grace period until {deadline:%H:%M:%SZ}", params
        )
    return Decision("reclaim", "ignore", target, alert.key, f"already {p.phase}")


def _drain(
    alert: Alert, state: TargetState, history: Sequence[HistoryEntry], params: dict[str, Any]
) -> Decision:
    missing = _missing(alert, ("node", "uuid"))
    node, uuid = alert.label("node"), alert.label("uuid")
    target = Target("node", node, "", node)
    params.update(uuid=uuid)
    holder = (alert.label("namespace"), alert.label("pod"))
    if all(holder):
        params["holders"] = [f"{holder[0]}/{holder[1]}"]
    p = state.progress
    if missing:
        return Decision(
            "drain", "start", target, alert.key, "required labels absent", params, True, True, missing
        )
    if alert.status == "resolved":
        if p and uuid in p.data.get("uuids", ()) and uuid not in p.data.get("healthy", {}):
            return Decision("drain", "healthy", target, alert.key, f"{uuid} alert resolved", params)
        return Decision("drain", "ignore", target, alert.key, "resolved, nothing to lift")
    if p is None:
        return Decision("drain", "start", target, alert.key, f"faulty accelerator {uuid}", params, True, True)
    if uuid not in p.data.get("uuids", ()) or uuid in p.data.get("healthy", {}):
        # A new fault on a node already drained, or the same device failing again while being lifted.
        return Decision(
            "drain", "extend", target, alert.key, f"faulty accelerator {uuid}", params, True, False
        )
    return Decision("drain", "wait", target, p.alert_key, f"drain in progress ({p.phase})", params)


def _resize(alert: Alert, state: TargetState, settings: Settings, params: dict[str, Any]) -> Decision:
    kind = alert.label("slice_kind") or "mig"
    direction = params.get("direction") or ("memory" if "memory" in alert.name.lower() else "compute")
    params.update(direction=direction, slice_kind=kind, uuid=alert.label("uuid"), model=alert.label("model"))
    params.update(profile=alert.label("profile"), slice_id=alert.label("slice_id"))
    if alert.status == "resolved":
        return Decision("resize", "ignore", None, alert.key, "resolved")
    if kind == "vgpu":
        missing = _missing(alert, ("namespace", "pod"))
        target = Target("pod", alert.label("pod"), alert.label("namespace"), alert.label("node"))
        return Decision(
            "resize",
            "recommend",
            target,
            alert.key,
            f"HAMi share is {direction}-bound",
            params,
            True,
            False,
            missing,
        )
    missing = _missing(alert, ("node", "uuid", "model", "profile"))
    target = Target("node", alert.label("node"), "", alert.label("node"))
    apply = settings.resize.mode == "apply" and params.get("mode") == "apply"
    if not apply:
        return Decision(
            "resize",
            "recommend",
            target,
            alert.key,
            f"slice is {direction}-bound",
            params,
            True,
            False,
            missing,
        )
    if state.progress is not None:
        return Decision(
            "resize", "wait", target, state.progress.alert_key, f"resize {state.progress.phase}", params
        )
    return Decision(
        "resize", "start", target, alert.key, f"slice is {direction}-bound", params, True, True, missing
    )
