"""Alertmanager config builder: spec + receiver endpoints -> alertmanager.yml (routing tree, inhibition), pure.

Two streams, split on the ``category`` label the rules set: hardware to the on-call WeCom group via the
relay, performance to the owning team's Feishu group via the relay, grouped and quiet. Alerts whose
``action`` is not ``none`` also go (``continue: true``) to the remediation controller. The paging path's own
alerts (``category="meta"``: relay, controller, Alertmanager) go to a receiver of their own that does not need
the on-call bot: the relay channel ``routing.meta.relay_channel`` (another bot, so a revoked WeCom key still
reaches people) and, when given, an out-of-band webhook that does not pass through the relay at all
(``Endpoints.meta_url``: a dead relay still reaches someone). Inhibition runs
before routing, so an inhibited alert reaches neither people nor the controller. The syntax is the one
Alertmanager 0.25 accepts (``matchers``, ``authorization.credentials_file``; no ``url_file``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xpuwatch.alerts.rules import dump_yaml
from xpuwatch.alerts.spec import RouteSpec, Spec

# Relay channels (contract): the receiver names are the channel names of the relay's URL path.
CHANNEL_HARDWARE = "oncall-wecom"
CHANNEL_PERFORMANCE = "team-feishu"
REMEDIATE_PATH = "/alertmanager/remediate"


@dataclass(frozen=True)
class Endpoints:
    """Where the receivers post and which files hold their bearer tokens.

    Defaults are the in-cluster Services of deploy/ (namespace ``xpuwatch``; relay on 9852, remediation
    controller on 9853, per the cross-team contract), reachable from an Alertmanager in another namespace,
    and the paths where prometheus-operator mounts a Secret named ``xpuwatch`` listed in the Alertmanager's
    ``spec.secrets`` (``/etc/alertmanager/secrets/<secret>/<key>``), keys ``relay-token`` and
    ``remediation-token``.
    """

    relay_url: str = "http://xpuwatch-relay.xpuwatch.svc:9852"
    remediator_url: str = "http://xpuwatch-remediation.xpuwatch.svc:9853"
    relay_credentials_file: str = "/etc/alertmanager/secrets/xpuwatch/relay-token"
    remediator_credentials_file: str = "/etc/alertmanager/secrets/xpuwatch/remediation-token"
    meta_url: str = ""
    """Out-of-band webhook for the ``meta`` alerts (a second relay on another node, an incident tool's
    webhook, an SMS gateway); "" = none, the meta alerts then reach people only through the relay."""
    meta_credentials_file: str = ""
    """Bearer token file for ``meta_url``; "" = no Authorization header."""


def _webhook(url: str, credentials_file: str) -> dict[str, Any]:
    hook: dict[str, Any] = {"url": url, "send_resolved": True}
    if credentials_file:
        hook["http_config"] = {"authorization": {"type": "Bearer", "credentials_file": credentials_file}}
    return hook


def _route(r: RouteSpec, matchers: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "receiver": r.receiver,
        "matchers": matchers,
        "group_by": list(r.group_by),
        "group_wait": r.group_wait,
        "group_interval": r.group_interval,
        "repeat_interval": r.repeat_interval,
        **extra,
    }


def build_config(spec: Spec, endpoints: Endpoints = Endpoints()) -> dict[str, Any]:
    """The alertmanager.yml document as a dict (keys in the order Alertmanager's docs list them)."""
    ro, inh = spec.routing, spec.inhibition
    relay = endpoints.relay_url.rstrip("/")
    actions = "|".join(ro.remediation_actions)
    critical_device = ['category="hardware"', 'severity="critical"', 'uuid=~".+"']
    receivers: dict[str, dict[str, Any]] = {
        ro.hardware.receiver: _webhook(
            f"{relay}/alertmanager/{CHANNEL_HARDWARE}", endpoints.relay_credentials_file
        ),
        ro.performance.receiver: _webhook(
            f"{relay}/alertmanager/{CHANNEL_PERFORMANCE}", endpoints.relay_credentials_file
        ),
        ro.remediation.receiver: _webhook(
            endpoints.remediator_url.rstrip("/") + REMEDIATE_PATH, endpoints.remediator_credentials_file
        ),
    }
    if ro.capacity is not None and ro.capacity.receiver not in receivers:
        receivers[ro.capacity.receiver] = _webhook(
            f"{relay}/alertmanager/{ro.capacity.receiver}", endpoints.relay_credentials_file
        )
    capacity = (
        [_route(ro.capacity, [f'alertname=~"{"|".join(ro.capacity_alerts)}"'])]
        if ro.capacity is not None
        else []
    )
    meta: list[dict[str, Any]] = []
    meta_hooks: list[dict[str, Any]] = []
    if ro.meta is not None:
        meta_hooks = [
            _webhook(f"{relay}/alertmanager/{ro.meta_relay_channel}", endpoints.relay_credentials_file)
        ]
        if endpoints.meta_url:
            meta_hooks.append(_webhook(endpoints.meta_url, endpoints.meta_credentials_file))
        meta = [_route(ro.meta, ['category="meta"'])]
    if ro.root_receiver not in receivers:
        raise ValueError(f"routing.root_receiver {ro.root_receiver!r} is none of {sorted(receivers)}")
    return {
        "route": {
            "receiver": ro.root_receiver,
            "group_by": list(ro.root_group_by),
            "routes": [
                _route(ro.remediation, [f'action=~"{actions}"'], **{"continue": True}),
                *meta,
                _route(ro.hardware, ['category="hardware"']),
                *capacity,
                _route(ro.performance, ['category="performance"']),
            ],
        },
        "inhibit_rules": [
            {
                "source_matchers": critical_device,
                "target_matchers": ['category="performance"'],
                "equal": list(inh.critical_hardware_silences_performance),
            },
            {
                "source_matchers": critical_device,
                "target_matchers": ['category="hardware"', 'severity=~"warning|info"'],
                "equal": list(inh.critical_hardware_silences_hardware_warnings),
            },
            {
                "source_matchers": ['alertname="XpuwatchExporterDown"'],
                "target_matchers": ['category=~"hardware|performance"', 'alertname!="XpuwatchExporterDown"'],
                "equal": list(inh.exporter_down_silences_node),
            },
        ],
        "receivers": [{"name": name, "webhook_configs": [hook]} for name, hook in receivers.items()]
        + ([{"name": ro.meta.receiver, "webhook_configs": meta_hooks}] if ro.meta is not None else []),
    }


def render_alertmanager(spec: Spec, endpoints: Endpoints = Endpoints()) -> str:
    """alertmanager.yml text for the spec and endpoints."""
    return dump_yaml(build_config(spec, endpoints))
