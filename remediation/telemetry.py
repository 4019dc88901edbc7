"""The controller's own Prometheus metrics (prometheus-client), on a registry passed in per instance."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

ACTIONS_TOTAL = "xpuwatch_remediation_actions_total"
DECISIONS_TOTAL = "xpuwatch_remediation_decisions_total"
REFUSALS_TOTAL = "xpuwatch_remediation_guard_refusals_total"
ALERTS_TOTAL = "xpuwatch_remediation_alerts_received_total"
WEBHOOK_TOTAL = "xpuwatch_remediation_webhook_requests_total"
LEADER = "xpuwatch_remediation_leader"
DISRUPTED = "xpuwatch_remediation_disrupted_nodes"
ERRORS_TOTAL = "xpuwatch_remediation_errors_total"
RECHECKS_TOTAL = "xpuwatch_remediation_rechecks_total"
HELD_AGE = "xpuwatch_remediation_held_node_age_seconds"
MAX_HOLD = "xpuwatch_remediation_max_hold_seconds"


class Telemetry:
    """Counters and gauges; names above (prometheus-client appends nothing: counters are declared
    without the ``_total`` suffix, which the library adds)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.actions = Counter(
            ACTIONS_TOTAL.removesuffix("_total"),
            "Remediation steps executed, by action, result (ok|failed|blocked|skipped) and mode (apply|dry-run).",
            ["action", "result", "mode"],
            registry=r,
        )
        self.decisions = Counter(
            DECISIONS_TOTAL.removesuffix("_total"),
            "Policy decisions by action and step (including ignore and wait).",
            ["action", "step"],
            registry=r,
        )
        self.refusals = Counter(
            REFUSALS_TOTAL.removesuffix("_total"),
            "Decisions refused by the guard, by reason.",
            ["reason"],
            registry=r,
        )
        self.alerts = Counter(
            ALERTS_TOTAL.removesuffix("_total"),
            "Alerts received in webhook payloads, by status.",
            ["status"],
            registry=r,
        )
        self.webhook = Counter(
            WEBHOOK_TOTAL.removesuffix("_total"),
            "Webhook requests by HTTP status code.",
            ["code"],
            registry=r,
        )
        self.errors = Counter(
            ERRORS_TOTAL.removesuffix("_total"),
            "Failures talking to the API server, JupyterHub, notebooks or the relay, by component.",
            ["component"],
            registry=r,
        )
        self.rechecks = Counter(
            RECHECKS_TOTAL.removesuffix("_total"),
            "Re-checks of the alert in Prometheus right before a disruptive step, by action, step and result "
            "(holds: acted; cleared: cancelled; unreachable: not acted, fail safe).",
            ["action", "step", "result"],
            registry=r,
        )
        self.leader = Gauge(LEADER, "1 while this replica holds the Lease.", registry=r)
        self.held_age = Gauge(
            HELD_AGE,
            "Seconds since xpuwatch tainted (drain) or cordoned (resize) the node, one series per node it holds.",
            ["node", "action"],
            registry=r,
        )
        self.max_hold = Gauge(
            MAX_HOLD,
            "guard.max_hold_seconds: a node held longer is paged to a human.",
            registry=r,
        )
        self.disrupted = Gauge(DISRUPTED, "Nodes currently cordoned or tainted by xpuwatch.", registry=r)
