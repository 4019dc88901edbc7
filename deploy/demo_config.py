"""Demo plan: the configuration files of the local stack (pure; `deploy.demo` writes them and starts it).

Everything listens on 127.0.0.1. The alert rules and the Alertmanager config come from the same builders
as alerts/generated/ (alerts/rules.py, alerts/alertmanager.py) on a copy of alerts/spec.yaml whose
durations are shortened by :data:`DEMO_OVERRIDES` and :data:`DEMO_ROUTING`, so a fault reaches the chat
groups within seconds instead of the minutes production wants. Only durations change; every expression,
label, threshold, inhibition and route is the production one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xpuwatch.alerts.alertmanager import Endpoints, render_alertmanager
from xpuwatch.alerts.rules import render_rules
from xpuwatch.alerts.spec import Spec, load_spec

LOOPBACK = "127.0.0.1"
EXPORTER_JOB = "xpuwatch"  # matches the spec's exporter_job_selector (job=~"xpuwatch|xpuwatch-exporter")
SCRAPE_SECONDS = 1  # 1 s scrape and rule evaluation: the sim exporter polls every second
# Channels follow receivers: the relay channels are the default spec's hardware and performance receivers.
_ROUTING = load_spec().routing
WECOM_CHANNEL = _ROUTING.hardware.receiver
FEISHU_CHANNEL = _ROUTING.performance.receiver

# alert -> overrides (Spec.with_overrides). Why each: the demo tells a one-minute story. Everything not
# listed keeps its production duration and so stays quiet in a short demo.
DEMO_OVERRIDES: Mapping[str, Mapping[str, Any]] = {
    # resolves a minute after the last error (production: 10m), so the demo also shows a RESOLVED message
    "AcceleratorEccUncorrectable": {"window": "1m"},
    # overheat: 10 s instead of 5m/2m/10m of sustained heat
    "AcceleratorTemperatureHigh": {"for": "10s"},
    "AcceleratorTemperatureCritical": {"for": "10s"},
    "AcceleratorThermalThrottling": {"for": "10s"},
    # performance findings after 15-30 s instead of 2 h / 1 h
    "AcceleratorIdleNotebook": {"for": "15s"},
    "AcceleratorLowUtilization": {"for": "30s"},
}

# route -> (group_wait, group_interval, repeat_interval); production values are in alerts/spec.yaml.
DEMO_ROUTING: Mapping[str, tuple[str, str, str]] = {
    "hardware": ("1s", "10s", "1h"),
    "performance": ("5s", "30s", "12h"),
    "remediation": ("0s", "10s", "1h"),
}


@dataclass(frozen=True)
class Ports:
    """TCP ports on 127.0.0.1 of the processes the demo starts (bots and API stand-in run in-process)."""

    exporter: int
    prometheus: int
    alertmanager: int
    relay: int
    remediation: int


@dataclass(frozen=True)
class Files:
    """Where each file lives in the demo's working directory (build with ``Files.under(root)``)."""

    root: Path
    scenario: Path
    exporter_targets: Path
    rules: Path
    prometheus: Path
    prometheus_data: Path
    alertmanager: Path
    alertmanager_data: Path
    relay: Path
    outbox: Path
    remediation: Path
    audit: Path
    logs: Path
    relay_token: Path
    relay_password: Path
    remediation_token: Path
    wecom_url: Path
    feishu_url: Path

    @classmethod
    def under(cls, root: Path) -> Files:
        secrets = root / "secrets"
        return cls(
            root=root,
            scenario=root / "scenario.yaml",
            exporter_targets=root / "exporter-targets.json",
            rules=root / "rules.yml",
            prometheus=root / "prometheus.yml",
            prometheus_data=root / "prometheus-data",
            alertmanager=root / "alertmanager.yml",
            alertmanager_data=root / "alertmanager-data",
            relay=root / "relay.yaml",
            outbox=root / "relay-outbox.sqlite",
            remediation=root / "remediation.yaml",
            audit=root / "remediation-audit.jsonl",
            logs=root / "logs",
            relay_token=secrets / "relay-token",
            relay_password=secrets / "relay-notice-password",
            remediation_token=secrets / "remediation-token",
            wecom_url=secrets / "wecom-url",
            feishu_url=secrets / "feishu-url",
        )


@dataclass(frozen=True)
class Component:
    """A process of the stack: its name, command line and the URL that answers 200 once it is ready."""

    name: str
    argv: tuple[str, ...]
    ready_url: str


def components(
    prometheus_bin: str, alertmanager_bin: str, python: str, ports: Ports, files: Files
) -> tuple[Component, ...]:
    """The stack's processes in start order. Python components run as ``python -m xpuwatch``."""
    xpuwatch = (python, "-m", "xpuwatch")
    return (
        Component(
            "prometheus",
            (
                prometheus_bin,
                f"--config.file={files.prometheus}",
                f"--storage.tsdb.path={files.prometheus_data}",
                f"--web.listen-address={LOOPBACK}:{ports.prometheus}",
                f"--web.external-url={url(ports.prometheus)}",
            ),
            url(ports.prometheus, "/-/ready"),
        ),
        Component(
            "alertmanager",
            (
                alertmanager_bin,
                f"--config.file={files.alertmanager}",
                f"--storage.path={files.alertmanager_data}",
                f"--web.listen-address={LOOPBACK}:{ports.alertmanager}",
                "--cluster.listen-address=",  # no gossip port: a single local instance
                f"--web.external-url={url(ports.alertmanager)}",
            ),
            url(ports.alertmanager, "/-/ready"),
        ),
        Component("relay", (*xpuwatch, "relay", "--config", str(files.relay)), url(ports.relay, "/readyz")),
        Component(
            "remediation",
            (*xpuwatch, "remediate", "--config", str(files.remediation)),
            url(ports.remediation, "/readyz"),  # 200 once it leads and has listed the nodes
        ),
        Component(
            "exporter",
            (
                *xpuwatch,
                "serve",
                "--simulate",
                "--sim-config",
                str(files.scenario),
                "--web.listen-address",
                f"{LOOPBACK}:{ports.exporter}",
            ),
            url(ports.exporter, "/readyz"),
        ),
    )


def url(port: int, path: str = "") -> str:
    return f"http://{LOOPBACK}:{port}{path}"


def demo_spec(spec: Spec) -> Spec:
    """The spec with the demo's short durations (see DEMO_OVERRIDES, DEMO_ROUTING)."""
    spec = spec.with_overrides(DEMO_OVERRIDES)
    routes = {}
    for name, (wait, interval, repeat) in DEMO_ROUTING.items():
        route = getattr(spec.routing, name)
        routes[name] = dataclasses.replace(
            route, group_wait=wait, group_interval=interval, repeat_interval=repeat
        )
    return dataclasses.replace(spec, routing=dataclasses.replace(spec.routing, **routes))


def rules_text(spec: Spec) -> str:
    """rules.yml for the demo spec."""
    return render_rules(spec)


def alertmanager_text(spec: Spec, ports: Ports, files: Files) -> str:
    """alertmanager.yml: receivers at the local relay and remediation controller, tokens from files."""
    return render_alertmanager(
        spec,
        Endpoints(
            relay_url=url(ports.relay),
            remediator_url=url(ports.remediation),
            relay_credentials_file=str(files.relay_token),
            remediator_credentials_file=str(files.remediation_token),
        ),
    )


def prometheus_config(ports: Ports, files: Files) -> dict[str, Any]:
    """prometheus.yml: scrape the exporter (job ``xpuwatch``) and the stack's own /metrics every second.

    The exporter's target comes from a file (``file_sd_configs``) that the demo writes only once the
    exporter answers, so Prometheus never records it as down while it is still starting (which would
    make XpuwatchExporterDown pending) and its first scrape follows the simulator's start closely.
    """

    def job(name: str, port: int) -> dict[str, Any]:
        return {"job_name": name, "static_configs": [{"targets": [f"{LOOPBACK}:{port}"]}]}

    return {
        "global": {"scrape_interval": f"{SCRAPE_SECONDS}s", "evaluation_interval": f"{SCRAPE_SECONDS}s"},
        "rule_files": [str(files.rules)],
        "alerting": {
            "alertmanagers": [{"static_configs": [{"targets": [f"{LOOPBACK}:{ports.alertmanager}"]}]}]
        },
        "scrape_configs": [
            {"job_name": EXPORTER_JOB, "file_sd_configs": [{"files": [str(files.exporter_targets)]}]},
            job("xpuwatch-relay", ports.relay),
            job("xpuwatch-remediation", ports.remediation),
            job("alertmanager", ports.alertmanager),
            job("prometheus", ports.prometheus),
        ],
    }


def exporter_targets(ports: Ports) -> list[dict[str, Any]]:
    """The file_sd document naming the exporter (written once it is ready)."""
    return [{"targets": [f"{LOOPBACK}:{ports.exporter}"], "labels": {}}]


def relay_config(ports: Ports, files: Files) -> dict[str, Any]:
    """relay.yaml (alerts/relay/config.py format): two channels at the stand-in bots, bearer auth for
    Alertmanager plus basic auth for the remediation controller's notices (see remediation_config)."""
    return {
        "listen_address": f"{LOOPBACK}:{ports.relay}",
        "outbox": str(files.outbox),
        "alertmanager_url": url(ports.alertmanager),
        "retry": {"initial_seconds": 1, "max_seconds": 5, "multiplier": 2},
        "auth": {
            "bearer_token_file": str(files.relay_token),
            "basic_auth": {"username": "remediation", "password_file": str(files.relay_password)},
        },
        "channels": {
            WECOM_CHANNEL: {"type": "wecom", "webhook_url_file": str(files.wecom_url), "timezone": "UTC"},
            FEISHU_CHANNEL: {
                "type": "feishu",
                "webhook_url_file": str(files.feishu_url),
                "keyword": "xpuwatch",
                "timezone": "UTC",
            },
        },
    }


def remediation_config(ports: Ports, files: Files, kube_url: str, relay_password: str) -> dict[str, Any]:
    """remediation.yaml (remediation/settings.py format): dry-run, API at the in-process stand-in.

    The guard's ratio is raised to 1.0 because the sim fleet is one node: with the production 10 % the
    blast-radius cap of a one-node fleet is 0 and every drain would be refused (docs/remediation.md).
    Notices go to the relay channel of their category, as the alerts do: hardware (a drain for an ECC
    fault) to WeCom, performance (a reclaim) to Feishu. The relay's basic-auth user travels in the URLs
    (aiohttp sends URL user info as basic auth).
    """
    return {
        "rules": [
            {"action": "drain"},
            {
                "action": "reclaim",
                "alertnames": ["AcceleratorIdleNotebook"],
                "params": {"platform": "jupyterhub"},
            },
            {"action": "resize", "params": {"mode": "recommend"}},
        ],
        "webhook": {
            "listen_host": LOOPBACK,
            "listen_port": ports.remediation,
            "bearer_token_file": str(files.remediation_token),
        },
        "drain": {"prometheus_url": url(ports.prometheus)},  # holders of shared devices
        "guard": {"dry_run": True, "max_disrupted_nodes": 1, "max_disrupted_ratio": 1.0},
        "leader": {"lease_namespace": "xpuwatch", "identity": "xpuwatch-demo", "retry_period_seconds": 1},
        "kube": {"host": kube_url},
        "audit_path": str(files.audit),
        "tick_seconds": 2,
        "notify": {
            category: f"http://remediation:{relay_password}@{LOOPBACK}:{ports.relay}/alertmanager/{channel}"
            for category, channel in (("hardware", WECOM_CHANNEL), ("performance", FEISHU_CHANNEL))
        },
    }
