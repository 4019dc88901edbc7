"""The AlertmanagerConfig of overlays/kube-prometheus-stack, merged the way prometheus-operator merges it into
kube-prometheus-stack's Alertmanager config, routes every xpuwatch alert to the receivers the dedicated config
(alerts/generated/alertmanager.yml) gives it, with the Helm value docs/deploy.md names, and reaches nothing
without it. Checked by real amtool (``check-config``, ``config routes test``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_kustomize import render
from xpuwatch.alerts.alertmanager import scope_matchers

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "alerts" / "generated"

# kube-prometheus-stack's default `alertmanager.config` (chart 88.5.3; tests/fixtures/kube-prometheus-stack/
# alertmanager-config-88.5.3.yaml and its .source), verbatim: the global config the operator adds
# AlertmanagerConfig routes to. The same chart renders alertmanagerConfigSelector: {} and
# alertmanagerConfigNamespaceSelector: {} (templates/alertmanager/alertmanager.yaml), so it selects the
# AlertmanagerConfig in namespace xpuwatch whatever its labels.
KPS_FIXTURES = ROOT / "tests" / "fixtures" / "kube-prometheus-stack"
KPS_CONFIG = (KPS_FIXTURES / "alertmanager-config-88.5.3.yaml").read_text(encoding="utf-8")
AM_NAMESPACE = "monitoring"  # where the chart's Alertmanager runs (the Helm release's namespace)
# The operator's Secret store, (namespace, name, key) -> value: the Secret docs/deploy.md has users create.
SECRETS = {
    ("xpuwatch", "xpuwatch-alertmanager", "relay-token"): "r3lay",
    ("xpuwatch", "xpuwatch-alertmanager", "remediation-token"): "r3m",
}


def _escape(value: str) -> str:
    """v1alpha1 openMetricsEscape (alertmanager_config_types.go)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _matchers(ms: list[dict[str, Any]]) -> list[str]:
    """amcfg.go convertMatchersV2 for Alertmanager >= 0.22: matchType as given, else ``=~`` if regex else ``=``."""
    return [
        f'{m["name"]}{m.get("matchType") or ("=~" if m.get("regex") else "=")}"{_escape(m["value"])}"'
        for m in ms
    ]


def _route(r: dict[str, Any], prefix: str) -> dict[str, Any]:
    """amcfg.go convertRoute: receiver ``<ns>/<name>/<receiver>``, fields renamed, children recursively."""
    out: dict[str, Any] = {"receiver": prefix + r["receiver"]}
    if r.get("matchers"):
        out["matchers"] = _matchers(r["matchers"])
    for src, dst in (
        ("groupBy", "group_by"),
        ("groupWait", "group_wait"),
        ("groupInterval", "group_interval"),
    ):
        if src in r:
            out[dst] = r[src]
    if "repeatInterval" in r:
        out["repeat_interval"] = r["repeatInterval"]
    if r.get("continue"):
        out["continue"] = True
    if r.get("routes"):
        out["routes"] = [_route(c, prefix) for c in r["routes"]]
    return out


def _receiver(
    r: dict[str, Any], prefix: str, namespace: str, secrets: Mapping[tuple[str, str, str], str]
) -> dict[str, Any]:
    """amcfg.go convertReceiver/convertWebhookConfig/convertHTTPConfig: the bearer token is read from the Secret
    in the AlertmanagerConfig's own namespace and written inline."""
    hooks = []
    for h in r.get("webhookConfigs", []):
        auth = h["httpConfig"]["authorization"]
        ref = auth["credentials"]
        hooks.append(
            {
                "url": h["url"],
                "send_resolved": h["sendResolved"],
                "http_config": {
                    "authorization": {
                        "type": auth["type"],
                        "credentials": secrets[(namespace, ref["name"], ref["key"])],
                    }
                },
            }
        )
    return {"name": prefix + r["name"], "webhook_configs": hooks}


def operator_merge(
    base: dict[str, Any],
    amc: dict[str, Any],
    strategy: str,
    am_namespace: str = AM_NAMESPACE,
    secrets: Mapping[tuple[str, str, str], str] = SECRETS,
) -> dict[str, Any]:
    """What prometheus-operator writes for an Alertmanager whose global config is ``base`` and which selects the
    one AlertmanagerConfig ``amc``, for ``alertmanagerConfigMatcherStrategy.type`` = ``strategy`` ("" is the
    default, OnNamespace) and an Alertmanager >= 0.22 in ``am_namespace``.

    Follows prometheus-operator v0.93.0 (commit f8fafd475f3d132e239432ae6172de60a6cb6516)
    pkg/alertmanager/amcfg.go: ``AddAlertmanagerConfigs`` (inhibit rules appended after the global ones,
    each through the enforcer's ``processInhibitRule``; the converted top route through ``processRoute``;
    the AlertmanagerConfig routes placed *before* the global routes), ``getEnforcer`` (None -> noopEnforcer;
    OnNamespaceExceptForAlertmanagerNamespace -> otherNamespaceEnforcer, a no-op for an AlertmanagerConfig in
    the Alertmanager's namespace; anything else -> namespaceEnforcer), ``namespaceEnforcer`` (appends
    ``namespace="<ns>"`` to the top route's matchers and to both sides of every inhibit rule),
    ``continueToNextRoute`` (the top route always gets ``continue: true``), ``convertRoute`` and
    ``makeNamespacedString`` (``<ns>/<name>/<receiver>``)."""
    ns, name = amc["metadata"]["namespace"], amc["metadata"]["name"]
    prefix = f"{ns}/{name}/"
    enforce = strategy not in ("None",) and not (
        strategy == "OnNamespaceExceptForAlertmanagerNamespace" and ns == am_namespace
    )
    ns_matcher = f'namespace="{ns}"'
    cfg = yaml.safe_load(yaml.safe_dump(base))
    spec = amc["spec"]
    for rule in spec.get("inhibitRules", []):
        ir: dict[str, Any] = {
            "source_matchers": _matchers(rule.get("sourceMatch", [])),
            "target_matchers": _matchers(rule.get("targetMatch", [])),
            "equal": list(rule.get("equal", [])),
        }
        if enforce:
            for side in ("source_matchers", "target_matchers"):
                if ns_matcher not in ir[side]:
                    ir[side].append(ns_matcher)
        cfg.setdefault("inhibit_rules", []).append(ir)
    top = _route(spec["route"], prefix)
    if enforce:
        top["matchers"] = [*top.get("matchers", []), ns_matcher]
    top["continue"] = True
    cfg["receivers"] += [_receiver(r, prefix, ns, secrets) for r in spec["receivers"]]
    cfg["route"]["routes"] = [top, *cfg["route"].get("routes", [])]
    return cfg


def _amc() -> dict[str, Any]:
    (amc,) = [o for o in render("overlays/kube-prometheus-stack") if o["kind"] == "AlertmanagerConfig"]
    return amc


def _amtool(*args: str) -> str:
    amtool = shutil.which("amtool")
    assert amtool, "amtool is required (Debian package prometheus-alertmanager)"
    out = subprocess.run([amtool, *args], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _routes(config: Path, labels: Mapping[str, str]) -> set[str]:
    """Receivers ``amtool config routes test`` resolves for one alert's label set."""
    return _test(config, labels)[0]


def _test(config: Path, labels: Mapping[str, str]) -> tuple[set[str], list[str]]:
    """``amtool config routes test --tree``: (receivers, the matched leaf routes as ``{matchers}  receiver: r``
    with the ``xpuwatch/xpuwatch/`` receiver prefix removed and the AlertmanagerConfig's top route named
    ``default-route`` as the dedicated config's root is), so two configs can be compared route for route."""
    out = _amtool(
        "config",
        "routes",
        "test",
        "--tree",
        f"--config.file={config}",
        *(f"{k}={v}" for k, v in labels.items()),
    )
    lines = [ln for ln in out.splitlines() if ln.strip()]
    leaves = [
        re.sub(r"^[\s│├└─]*", "", ln).replace("receiver: xpuwatch/xpuwatch/", "receiver: ") for ln in lines
    ]
    return set(lines[-1].split(",")), [ln for ln in leaves[:-1] if "receiver:" in ln]


def _write(tmp: Path, name: str, cfg: dict[str, Any]) -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert "SUCCESS" in _amtool("check-config", str(path))
    return path


def _alerts() -> list[dict[str, str]]:
    """Every alert of the generated rules with the labels routing reads (alertname + the rule's labels)."""
    groups = yaml.safe_load((GENERATED / "rules.yml").read_text())["groups"]
    return [{"alertname": r["alert"], **r["labels"]} for g in groups for r in g["rules"] if "alert" in r]


# Representative alerts and where they must land (receiver names of the generated config, docs/alerts.md).
EXPECTED = {
    "AcceleratorEccUncorrectable": {"remediate", "oncall-wecom"},  # hardware, action=drain
    "AcceleratorEccCorrectableStorm": {"oncall-wecom"},  # hardware, action=none
    "XpuwatchExporterDown": {"oncall-wecom"},
    "AcceleratorLowUtilization": {"team-feishu"},  # performance
    "AcceleratorIdleNotebook": {"remediate", "team-feishu"},  # action=reclaim
    "AcceleratorSliceMemoryBound": {"remediate", "team-feishu"},  # action=resize
    "AcceleratorPoolSaturated": {"team-feishu"},  # capacity
    "AcceleratorQueueTimeHigh": {"team-feishu"},  # capacity
}
WORKLOAD = ({}, {"namespace": "team-a"})
TOP = scope_matchers()  # the AlertmanagerConfig's top-route matchers: xpuwatch's categories and alert names


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("am")
    base = yaml.safe_load(KPS_CONFIG)
    amc = _amc()
    return {
        s or "OnNamespace (default)": _write(tmp, f"{s or 'default'}.yml", operator_merge(base, amc, s))
        for s in ("None", "", "OnNamespace", "OnNamespaceExceptForAlertmanagerNamespace")
    }


@pytest.mark.slow
def test_with_strategy_none_every_xpuwatch_alert_reaches_its_receivers(configs: dict[str, Path]) -> None:
    alerts = _alerts()
    assert set(EXPECTED) <= {a["alertname"] for a in alerts}
    prefix = "xpuwatch/xpuwatch/"
    for alert in alerts:
        dedicated, leaves = _test(GENERATED / "alertmanager.yml", alert)
        if alert["alertname"] in EXPECTED:
            assert dedicated == EXPECTED[alert["alertname"]], alert
        for extra in WORKLOAD:
            got, got_leaves = _test(configs["None"], {**alert, **extra})
            assert got == {prefix + r for r in dedicated}, (alert, extra)
            # the same leaf routes, hence the same grouping and timing (capacity vs performance route)
            assert got_leaves == leaves, (alert, extra)
    capacity = 'alertname=~"AcceleratorQueueTimeHigh|AcceleratorPoolSaturated|AcceleratorPoolUnderused"'
    saturated = next(a for a in alerts if a["alertname"] == "AcceleratorPoolSaturated")
    assert _test(configs["None"], saturated)[1] == [f"{{{capacity}}}  receiver: team-feishu"]


def test_with_strategy_none_other_alerts_keep_the_charts_routes(configs: dict[str, Path]) -> None:
    # the top route's category matcher keeps the cluster's other alerts out of the xpuwatch receivers
    assert _routes(configs["None"], {"alertname": "Watchdog", "severity": "none"}) == {"null"}
    crash = {"alertname": "KubePodCrashLooping", "severity": "warning", "namespace": "xpuwatch"}
    assert _routes(configs["None"], crash) == {"null"}


@pytest.mark.parametrize(
    "strategy", ["OnNamespace (default)", "OnNamespace", "OnNamespaceExceptForAlertmanagerNamespace"]
)
def test_with_a_namespace_strategy_no_xpuwatch_alert_is_routed(
    configs: dict[str, Path], strategy: str
) -> None:
    """The operator's default adds namespace="xpuwatch"; xpuwatch alerts carry the workload's namespace or
    none, so they fall through to the chart's 'null' receiver: the Helm value in docs/deploy.md is needed."""
    for alert in _alerts():
        if alert["alertname"] not in EXPECTED:
            continue
        for extra in WORKLOAD:
            assert _routes(configs[strategy], {**alert, **extra}) == {"null"}, (strategy, alert, extra)


def test_the_transformation_adds_the_namespace_matcher_only_when_enforced() -> None:
    base, amc = yaml.safe_load(KPS_CONFIG), _amc()
    enforced = operator_merge(base, amc, "")
    top = enforced["route"]["routes"][0]
    assert top["receiver"] == "xpuwatch/xpuwatch/team-feishu" and top["continue"] is True
    assert top["matchers"] == [*TOP, 'namespace="xpuwatch"']
    assert enforced["route"]["routes"][1] == {"receiver": "null", "matchers": ['alertname = "Watchdog"']}
    ours = enforced["inhibit_rules"][len(base["inhibit_rules"]) :]
    assert ours and all('namespace="xpuwatch"' in r["source_matchers"] + r["target_matchers"] for r in ours)
    none = operator_merge(base, amc, "None")
    fragment = yaml.safe_load((GENERATED / "alertmanager-fragment.yml").read_text())
    assert none["inhibit_rules"][len(base["inhibit_rules"]) :] == fragment["inhibit_rules"]
    assert none["route"]["routes"][0]["matchers"] == TOP
    # in the Alertmanager's own namespace the Except strategy would not enforce either
    moved = {**amc, "metadata": {**amc["metadata"], "namespace": AM_NAMESPACE}}
    there = {(AM_NAMESPACE, name, key): v for (_, name, key), v in SECRETS.items()}
    except_ = operator_merge(base, moved, "OnNamespaceExceptForAlertmanagerNamespace", secrets=there)
    assert except_["route"]["routes"][0]["matchers"] == TOP
