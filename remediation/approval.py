"""Manual approval: which decisions wait for a human, their ids, and the exact commands to approve or deny.

Pure (no I/O). A decision needs approval when ``approval.actions[<action>]`` or ``approval.namespaces[<ns>]``
says ``manual`` (``ns``: the target's namespace, else the alert's ``namespace`` label), else
``approval.default``. Only the step that begins the work waits (drain ``start``/``extend``, resize ``start``,
reclaim ``notify``); what follows (evictions, the stop after the grace period) continues the approved work.
The id is a hash of the alert episode, action and target, so a repeat of the same alert (or a restarted
controller) finds the same pending decision and an approval annotation already on the object.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from .alert import Alert
from .policy import Decision, Target
from .settings import ApprovalSettings

STEPS = ("start", "extend", "notify")
APPROVE = "xpuwatch.io/approve"  # value: a decision id
DENY = "xpuwatch.io/deny"  # value: a decision id
APPROVED_BY = "xpuwatch.io/approved-by"  # optional, set by the approver: named in the audit line
PENDING = "xpuwatch.io/pending-approval"  # JSON: id, action, step, alert, expires


@dataclass(frozen=True)
class Pending:
    """A decision waiting for a human: the alert it answers, the decision, when it was asked, its expiry."""

    id: str
    alert: Alert
    decision: Decision
    created: datetime
    expires: datetime

    @property
    def target(self) -> Target:
        assert self.decision.target is not None
        return self.decision.target


def namespace_of(d: Decision, alert: Alert) -> str:
    return (d.target.namespace if d.target else "") or alert.label("namespace")


def needs_approval(d: Decision, alert: Alert, settings: ApprovalSettings) -> bool:
    """True when ``d`` begins work that ``settings`` says a human must approve first."""
    if d.step not in STEPS or d.target is None:
        return False
    ns = namespace_of(d, alert)
    modes = [settings.actions.get(d.action), settings.namespaces.get(ns) if ns else None]
    if "manual" in modes:
        return True
    if "auto" in modes:
        return False
    return settings.default == "manual"


def decision_id(d: Decision) -> str:
    """12 hex digits of sha256(alert key, action, target key): stable across repeats and restarts."""
    tkey = d.target.key if d.target else ""
    return hashlib.sha256(f"{d.alert_key}|{d.action}|{tkey}".encode()).hexdigest()[:12]


def kubectl_resource(t: Target) -> str:
    if t.kind == "node":
        return f"node {t.name}"
    if t.kind == "notebook":
        return f"-n {t.namespace} notebooks.kubeflow.org {t.name}"
    return f"-n {t.namespace} pod {t.name}"


def commands(t: Target, pid: str, api: str = "http://xpuwatch-remediation.xpuwatch.svc:9853") -> str:
    """The exact approve/deny commands for a pending decision (kubectl, or the controller's POST)."""
    res = kubectl_resource(t)
    return (
        f"approve: kubectl annotate {res} {APPROVE}={pid} {APPROVED_BY}=$USER --overwrite "
        f"(or curl -X POST -H 'Authorization: Bearer <token>' {api}/approve/{pid}); "
        f"deny: kubectl annotate {res} {DENY}={pid} --overwrite (or POST {api}/deny/{pid})"
    )
