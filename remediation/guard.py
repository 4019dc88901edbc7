"""Guard: the one place that says no. A pure check of a ``Decision`` against guardrails (no I/O).

Order of checks (first refusal wins, so one reason is counted per decision): absent data, bogus alert
time, protected namespace, stale fleet view, duplicate alert (idempotency), cooldown, blast-radius cap.
An allowed decision runs in ``dry-run`` mode (Events, audit, messages only) unless dry-run is off.
Cap semantics follow NHC ``maxUnhealthy`` and NVSentinel's circuit breaker: nodes already disrupted by
us count, whatever the action, and a failed resize keeps its node counted until a human clears it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from .alert import Alert
from .policy import Decision, HistoryEntry, TargetState
from .settings import GuardSettings

Reason = Literal[
    "absent_data",
    "future_alert",
    "protected_namespace",
    "stale_view",
    "duplicate",
    "cooldown",
    "cap",
    "not_leader",
]
REASONS: tuple[Reason, ...] = (
    "absent_data",
    "future_alert",
    "protected_namespace",
    "stale_view",
    "duplicate",
    "cooldown",
    "cap",
    "not_leader",
)
INITIATING_STEPS = ("notify", "recommend", "start", "extend")


@dataclass(frozen=True)
class FleetView:
    """The controller's view of the fleet: node count, nodes currently disrupted by xpuwatch, and when
    this was read from the API server (None = never)."""

    nodes_total: int
    disrupted: frozenset[str]
    observed_at: datetime | None


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    mode: Literal["dry-run", "apply"]
    reason: Reason | None = None
    detail: str = ""


def cap(settings: GuardSettings, nodes_total: int) -> int:
    """Nodes that may be disrupted at once: min(absolute cap, floor(ratio x fleet))."""
    return max(0, min(settings.max_disrupted_nodes, math.floor(settings.max_disrupted_ratio * nodes_total)))


def check(
    decision: Decision,
    alert: Alert,
    state: TargetState,
    view: FleetView,
    history: Sequence[HistoryEntry],
    now: datetime,
    settings: GuardSettings,
) -> Verdict:
    """Allow or refuse ``decision``. Steps that only continue or undo work (stop, cancel, healthy, wait)
    are checked for data only: the guard refused or allowed their start already."""
    mode: Literal["dry-run", "apply"] = "dry-run" if settings.dry_run else "apply"

    def no(reason: Reason, detail: str) -> Verdict:
        return Verdict(False, mode, reason, detail)

    target = decision.target
    if decision.missing:
        return no("absent_data", f"alert lacks {', '.join(decision.missing)}")
    if not state.exists:
        return no("absent_data", f"{target.key if target else 'target'} not found")
    if alert.starts_at - now > timedelta(seconds=settings.max_clock_skew_seconds):
        return no("future_alert", f"alert starts at {alert.starts_at:%Y-%m-%dT%H:%M:%SZ}, after now")
    if target and target.namespace and target.namespace in settings.protected_namespaces:
        return no("protected_namespace", f"namespace {target.namespace} is protected")
    if decision.step not in INITIATING_STEPS:
        return Verdict(True, mode)
    if decision.disrupts_node and (
        view.observed_at is None or (now - view.observed_at).total_seconds() > settings.max_view_age_seconds
    ):
        return no("stale_view", "fleet view too old to judge the blast radius")
    tkey = target.key if target else ""
    p = state.progress
    if (p is not None and p.alert_key == decision.alert_key) or any(
        h.alert_key == decision.alert_key and h.action == decision.action and h.target_key == tkey
        for h in history
    ):
        return no("duplicate", f"alert {decision.alert_key} already handled")
    last = [
        h.at
        for h in history
        if h.action == decision.action and h.target_key == tkey and h.step in INITIATING_STEPS
    ]
    if state.last_finished:
        last.append(state.last_finished)
    cooldown = float(decision.params.get("cooldown_seconds", settings.cooldown_seconds))
    if decision.step != "extend" and last and now - max(last) < timedelta(seconds=cooldown):
        return no("cooldown", f"{decision.action} on {tkey} within {cooldown:.0f}s")
    if decision.disrupts_node and target and target.node not in view.disrupted:
        limit = cap(settings, view.nodes_total)
        if len(view.disrupted) >= limit:
            return no(
                "cap", f"{len(view.disrupted)} of {view.nodes_total} nodes already disrupted, cap {limit}"
            )
    return Verdict(True, mode)
