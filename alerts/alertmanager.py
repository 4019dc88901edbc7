"""Alertmanager config builder: spec + receiver endpoints -> alertmanager.yml (routing tree, inhibition), pure.

Two streams, split on the ``category`` label the rules set: hardware to the on-call group via the relay,
performance to the owning team's group via the relay, grouped and quiet. **Channels follow receivers**: every
receiver that reaches people posts to the relay channel of its own name (``<relay>/alertmanager/<receiver>``),
whatever the platform behind it (WeCom, Feishu, DingTalk), and hardware, performance and capacity may share
one receiver (one bot). Alerts whose ``action`` is not ``none`` also go (``continue: true``) to the
remediation controller, unless ``routing.remediation.enabled`` is false. The paging path's own alerts
(``category="meta"``: relay, controller, Alertmanager) go to a receiver of their own that does not need the
on-call bot: the relay channel ``routing.meta.relay_channel`` (another bot where there is one, so a revoked
on-call key still reaches people) and, when given, an out-of-band webhook that does not pass through the relay
at all (``Endpoints.meta_url``: a dead relay still reaches someone). Inhibition runs before routing, so an
inhibited alert reaches neither people nor the controller. The syntax is the one Alertmanager 0.25 accepts
(``matchers``, ``authorization.credentials_file``; no ``url_file``).

:func:`build_fragment` is xpuwatch's part alone for an Alertmanager that already routes other alerts: one route
subtree whose matchers take only xpuwatch's alerts (:func:`scope_matchers`), its receivers, and its inhibit rules
scoped the same way, ready to add under the user's own tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xpuwatch.alerts.rules import HEADER, dump_yaml
from xpuwatch.alerts.spec import CATEGORIES, RouteSpec, Spec

REMEDIATE_PATH = "/alertmanager/remediate"
RELAY_PATH = "/alertmanager/"  # + channel name (= receiver name): the relay's webhook path
# The alerts `xpuwatch rules test-page` sends, one per category, each with its own name: kube-prometheus-stack's
# default inhibit rule (severity=critical silences warning/info of the same alertname and namespace) would
# otherwise mute the performance test page under the hardware one. They carry action=none: never remediated.
TEST_PAGE_ALERTS = {
    "hardware": "XpuwatchTestPageHardware",
    "performance": "XpuwatchTestPagePerformance",
    "meta": "XpuwatchTestPageMeta",
}


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


def relay_channel_url(endpoints: Endpoints, channel: str) -> str:
    """The relay URL a receiver of that name posts to: ``<relay>/alertmanager/<channel>``."""
    return endpoints.relay_url.rstrip("/") + RELAY_PATH + channel


def build_config(spec: Spec, endpoints: Endpoints = Endpoints()) -> dict[str, Any]:
    """The alertmanager.yml document as a dict (keys in the order Alertmanager's docs list them)."""
    ro, inh = spec.routing, spec.inhibition
    critical_device = ['category="hardware"', 'severity="critical"', 'uuid=~".+"']
    receivers: dict[str, list[dict[str, Any]]] = {
        name: [_webhook(relay_channel_url(endpoints, name), endpoints.relay_credentials_file)]
        for name in ro.people
    }
    routes: list[dict[str, Any]] = []
    if ro.remediation_enabled:
        receivers[ro.remediation.receiver] = [
            _webhook(
                endpoints.remediator_url.rstrip("/") + REMEDIATE_PATH, endpoints.remediator_credentials_file
            )
        ]
        actions = "|".join(ro.remediation_actions)
        routes.append(_route(ro.remediation, [f'action=~"{actions}"'], **{"continue": True}))
    if ro.meta is not None:
        meta_hooks = [
            _webhook(relay_channel_url(endpoints, ro.meta_relay_channel), endpoints.relay_credentials_file)
        ]
        if endpoints.meta_url:
            meta_hooks.append(_webhook(endpoints.meta_url, endpoints.meta_credentials_file))
        receivers[ro.meta.receiver] = meta_hooks
        routes.append(_route(ro.meta, ['category="meta"']))
    routes.append(_route(ro.hardware, ['category="hardware"']))
    if ro.capacity is not None:
        routes.append(_route(ro.capacity, [f'alertname=~"{"|".join(ro.capacity_alerts)}"']))
    routes.append(_route(ro.performance, ['category="performance"']))
    return {
        "route": {"receiver": ro.root_receiver, "group_by": list(ro.root_group_by), "routes": routes},
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
        "receivers": [{"name": name, "webhook_configs": hooks} for name, hooks in receivers.items()],
    }


# Every alert name xpuwatch sends starts with one of these (the rules', the test pages'; tests/alerts check it).
ALERT_NAME_PREFIXES = ("Accelerator", "Xpuwatch")


def scope_matchers() -> list[str]:
    """Matchers that take xpuwatch's alerts and nothing else: its categories and its alert-name prefixes
    (another mixin's alert may well carry ``category="hardware"``)."""
    return [
        f'category=~"{"|".join(CATEGORIES)}"',
        f'alertname=~"({"|".join(ALERT_NAME_PREFIXES)}).+"',
    ]


def build_fragment(spec: Spec, endpoints: Endpoints = Endpoints()) -> dict[str, Any]:
    """xpuwatch's part of an existing Alertmanager's config, as a dict with the keys of alertmanager.yml:
    ``route.routes`` holds one route (the subtree: :func:`scope_matchers`, then :func:`build_config`'s routes)
    to put first under the user's ``route.routes``; ``receivers`` and ``inhibit_rules`` (each side scoped to
    xpuwatch's alert names) to append to theirs. The subtree has no ``continue``: xpuwatch alerts stop there
    and never reach the user's catch-all."""
    config = build_config(spec, endpoints)
    scope = scope_matchers()
    names = scope[1:]
    root = config["route"]
    subtree = {
        "receiver": root["receiver"],
        "matchers": scope,
        "group_by": root["group_by"],
        "routes": root["routes"],
    }
    inhibit = [
        {
            "source_matchers": [*rule["source_matchers"], *names],
            "target_matchers": [*rule["target_matchers"], *names],
            "equal": rule["equal"],
        }
        for rule in config["inhibit_rules"]
    ]
    return {"route": {"routes": [subtree]}, "receivers": config["receivers"], "inhibit_rules": inhibit}


def merge_fragment(existing: Mapping[str, Any], fragment: Mapping[str, Any]) -> dict[str, Any]:
    """``existing`` (a decoded alertmanager.yml) with the fragment added the way its header says: the subtree
    first under ``route.routes``, the receivers and inhibit rules appended; every other key as it was.
    Raises ValueError when ``existing`` has no root route or a receiver of the same name (rename one: the
    receiver names are relay channel names)."""
    out = dict(existing)
    route = out.get("route")
    if not isinstance(route, dict) or "receiver" not in route:
        raise ValueError("the existing config has no root route with a receiver")
    mine = {r["name"] for r in fragment["receivers"]}
    theirs = {r.get("name") for r in out.get("receivers") or [] if isinstance(r, dict)}
    clash = sorted(mine & theirs)
    if clash:
        raise ValueError(f"receivers {clash} exist in both; rename yours or xpuwatch's (routing.*.receiver)")
    out["route"] = {**route, "routes": [*fragment["route"]["routes"], *(route.get("routes") or [])]}
    out["receivers"] = [*(out.get("receivers") or []), *fragment["receivers"]]
    out["inhibit_rules"] = [*(out.get("inhibit_rules") or []), *fragment["inhibit_rules"]]
    return out


def render_fragment(spec: Spec, endpoints: Endpoints = Endpoints()) -> str:
    """alertmanager-fragment.yml: :func:`build_fragment` with a header saying where each part goes."""
    header = (
        "# xpuwatch's part of an Alertmanager config that already routes other alerts (docs/alerts.md, \"Routing\n"
        '# in your setup"). Put the one route under route.routes FIRST (before your catch-alls: it takes only\n'
        "# xpuwatch's alerts, and they stop there), append the receivers to receivers and the inhibit rules to\n"
        "# inhibit_rules, then run `amtool check-config`.\n"
    )
    return HEADER + header + dump_yaml(build_fragment(spec, endpoints)).removeprefix(HEADER)


def render_alertmanager(spec: Spec, endpoints: Endpoints = Endpoints()) -> str:
    """alertmanager.yml text for the spec and endpoints."""
    return dump_yaml(build_config(spec, endpoints))
