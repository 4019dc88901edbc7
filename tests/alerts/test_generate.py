"""The generated files are up to date, the spec is strict, and every alert has its runbook and promtool tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from xpuwatch.alerts import queue
from xpuwatch.alerts.alertmanager import Endpoints, build_config
from xpuwatch.alerts.cli import DEFAULT_OUT, render_all, stale_files
from xpuwatch.alerts.rules import (
    ALERT_READ_GROUPS,
    ALERTS,
    AlertingRule,
    RecordingRule,
    build_groups,
    records,
)
from xpuwatch.alerts.spec import (
    ACTIONS,
    CATEGORIES,
    DEFAULT_SPEC_PATH,
    SEVERITIES,
    SpecError,
    load_spec,
    parse_spec,
)
from xpuwatch.exporter import catalog

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL_TESTS = Path(__file__).parent / "promtool"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xpuwatch", "rules", "generate", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_committed_outputs_are_what_the_spec_generates() -> None:
    assert stale_files(DEFAULT_OUT, render_all(DEFAULT_SPEC_PATH, Endpoints())) == []


@pytest.mark.slow
def test_cli_check_passes_on_committed_files_and_fails_on_stale_ones(tmp_path: Path) -> None:
    assert _cli("--check").returncode == 0
    out = tmp_path / "gen"
    assert _cli("--out", str(out)).returncode == 0
    assert _cli("--check", "--out", str(out)).returncode == 0
    (out / "rules.yml").write_text("groups: []\n")
    stale = _cli("--check", "--out", str(out))
    assert stale.returncode == 1
    assert "stale:" in stale.stderr and "rules.yml" in stale.stderr


def test_cli_reports_a_bad_spec_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "spec.yaml"
    bad.write_text("alerts: [\n")
    result = _cli("--spec", str(bad), "--out", str(tmp_path / "o"))
    assert result.returncode == 2
    assert "not valid YAML" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("option", ["--spec", "--scrape-config", "--merge-into"])
def test_cli_names_a_file_that_is_not_text(tmp_path: Path, option: str) -> None:
    """A binary file given by mistake (a new user's ``--spec /bin/ls``): one line naming the option or the
    file and why, not the codec's bare words."""
    binary = tmp_path / "not-text"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\xd0\x9f\xff\xfe garbage")
    result = _cli(option, str(binary), "--out", str(tmp_path / "o"))
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"xpuwatch: config error: {option}: {binary} is not UTF-8 text (invalid start"
    )
    assert "Traceback" not in result.stderr and "codec" not in result.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_receiver_urls_and_credentials_are_inputs(tmp_path: Path) -> None:
    assert (
        _cli(
            "--out",
            str(tmp_path),
            "--relay-url",
            "http://relay.example:1/",
            "--remediator-url",
            "http://rem.example:2",
            "--relay-credentials-file",
            "/r",
            "--remediator-credentials-file",
            "/m",
        ).returncode
        == 0
    )
    cfg = yaml.safe_load((tmp_path / "alertmanager.yml").read_text())
    hooks = {r["name"]: r["webhook_configs"][0] for r in cfg["receivers"]}
    assert hooks["oncall-wecom"]["url"] == "http://relay.example:1/alertmanager/oncall-wecom"
    assert hooks["team-feishu"]["url"] == "http://relay.example:1/alertmanager/team-feishu"
    assert hooks["remediate"]["url"] == "http://rem.example:2/alertmanager/remediate"
    assert hooks["oncall-wecom"]["http_config"]["authorization"]["credentials_file"] == "/r"
    assert hooks["remediate"]["http_config"]["authorization"]["credentials_file"] == "/m"


def _raw_spec() -> dict:
    return yaml.safe_load(DEFAULT_SPEC_PATH.read_text())


def test_every_spec_value_needs_a_reason() -> None:
    raw = _raw_spec()
    raw["alerts"]["AcceleratorLost"]["for"] = {"value": "1m"}
    with pytest.raises(SpecError, match=r"alerts\.AcceleratorLost\.for"):
        parse_spec(raw)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("severity", "page", "not one of critical, warning, info"),
        ("category", "misc", "not one of hardware, performance"),
        ("action", "reboot", "not one of drain, reclaim, resize, none"),
        ("for", "5 minutes", "not a Prometheus duration"),
    ],
)
def test_spec_rejects_bad_values(key: str, value: str, message: str) -> None:
    raw = _raw_spec()
    raw["alerts"]["AcceleratorLost"][key] = {"value": value, "reason": "r"}
    with pytest.raises(SpecError, match=message):
        parse_spec(raw)


def test_overrides_shorten_durations_and_keep_reasons() -> None:
    spec = load_spec().with_overrides({"AcceleratorEccUncorrectable": {"for": "0s", "window": "30s"}})
    a = spec.alert("AcceleratorEccUncorrectable")
    assert (a.for_, a.value("window")) == ("0s", "30s")
    assert a.params["window"].reason.startswith("long enough")
    rule = next(
        r
        for g in build_groups(spec)
        for r in g.rules
        if isinstance(r, AlertingRule) and r.alert == "AcceleratorEccUncorrectable"
    )
    assert (
        rule.expr
        == 'increase(accelerator_ecc_errors_total{job=~"xpuwatch|xpuwatch-exporter", type="uncorrected"}[30s]) > 0'
    )
    with pytest.raises(SpecError, match="unknown alerts"):
        load_spec().with_overrides({"NoSuchAlert": {}})


def test_alert_labels_follow_the_contract() -> None:
    spec = load_spec()
    rules = [r for g in build_groups(spec) for r in g.rules if isinstance(r, AlertingRule)]
    assert {r.alert for r in rules} == set(ALERTS)
    for r in rules:
        assert r.labels["category"] in CATEGORIES
        assert r.labels["severity"] in SEVERITIES
        assert r.labels["action"] in ACTIONS
        assert set(r.annotations) == {"summary", "description", "runbook_url"}
        assert r.annotations["runbook_url"] == f"{spec.runbook_base_url}/{r.alert}.md"
        assert "$value" in r.annotations["description"], r.alert


def test_every_metric_in_the_rules_is_a_catalog_metric_or_a_recording_rule() -> None:
    spec = load_spec()
    known = (
        {m.name for m in catalog.catalog()}
        | set(vars(records(spec)).values())
        | set(vars(queue.QUEUE).values())
        | {"up"}
        # the relay's and the controller's own metrics, as the catalog declares them
        | {m.name for m in (*catalog.RELAY_METRICS, *catalog.REMEDIATION_METRICS)}
    )
    text = (DEFAULT_OUT / "rules.yml").read_text()
    exprs = [r["expr"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
    used = set()
    for expr in exprs:
        without_strings = re.sub(r'"[^"]*"', '""', expr)
        used |= set(
            re.findall(
                r"\b((?:accelerator|xpuwatch|device|slice|node|vendor_model|instance_node|vendor|pod|namespace_resource|queue|holder)[a-z0-9_:]*)\b",
                without_strings,
            )
        )
    label_names = {
        "node",
        "device",
        "vendor",
        "pod",
        "queue",
        "vendor_model",
        "instance_node",
        "slice",
        "slice_id",
    }
    assert used - label_names - known == set()


def test_prometheusrule_holds_the_same_groups() -> None:
    rules = yaml.safe_load((DEFAULT_OUT / "rules.yml").read_text())
    pr = yaml.safe_load((DEFAULT_OUT / "prometheusrule.yaml").read_text())
    assert (pr["apiVersion"], pr["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert pr["metadata"]["name"] == "xpuwatch"
    assert pr["spec"]["groups"] == rules["groups"]
    assert [g["name"] for g in rules["groups"]] == [
        "xpuwatch.recording",
        "xpuwatch.recording.node",
        "xpuwatch.recording.team",
        "xpuwatch.recording.holder",
        "xpuwatch.hardware",
        "xpuwatch.performance.device",
        "xpuwatch.performance",
        "xpuwatch.meta",
    ]


def test_records_an_alert_reads_come_before_it_or_from_the_device_recording_group() -> None:
    """Prometheus and vmalert evaluate groups concurrently and one group's rules in order: an alert reads a
    record of its own group fresh only when the record comes first, and a record of another group at most
    one interval old, which is accepted for the device records of ``xpuwatch.recording`` and the holder
    judgements of ``xpuwatch.recording.holder`` (docs/alerts.md) and nowhere else: no alert reads the node
    or team aggregates."""
    groups = build_groups(load_spec())
    names = {g.name: {r.record for r in g.rules if isinstance(r, RecordingRule)} for g in groups}
    for g in groups:
        seen: set[str] = set()
        for rule in g.rules:
            if isinstance(rule, RecordingRule):
                seen.add(rule.record)
                continue
            read = set(re.findall(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b", rule.expr))
            assert read <= seen.union(*(names[n] for n in ALERT_READ_GROUPS)), (rule.alert, read - seen)


def test_telemetry_missing_reads_an_hour_of_one_series_per_device_and_signal() -> None:
    """The hour it looks back over is of the presence record written just before it in the hardware group
    (one series per device and signal), not of every raw sensor, subsystem and ECC series (at 2,048
    devices: 324 ms an evaluation, the costliest rule, before)."""
    spec = load_spec()
    (hardware,) = [g for g in build_groups(spec) if g.name == "xpuwatch.hardware"]
    first = hardware.rules[0]
    assert isinstance(first, RecordingRule) and first.record == records(spec).telemetry_series
    (alert,) = [
        r for r in hardware.rules if isinstance(r, AlertingRule) and r.alert == "AcceleratorTelemetryMissing"
    ]
    assert re.findall(r"max_over_time\((\S+?)\[1h\]\)", alert.expr) == [records(spec).telemetry_series]
    for family in (catalog.TEMPERATURE, catalog.ECC_ERRORS, catalog.HEALTH):
        assert f'"metric", "{family}"' in first.expr
        assert family not in alert.expr


def test_fault_codes_fold_case_only_where_a_code_has_letters() -> None:
    """NVIDIA XIDs are digits: a plain alternation (a set lookup in Prometheus and VictoriaMetrics); Ascend
    hex codes keep (?i) so a lower-case code from the tool still matches."""
    spec = load_spec()
    groups = {g.name: g for g in build_groups(spec)}
    (critical,) = [
        r for r in groups["xpuwatch.hardware"].rules if getattr(r, "alert", "") == "AcceleratorFaultCritical"
    ]
    assert 'vendor="nvidia", code=~"48|62|' in critical.expr
    assert 'vendor="huawei", code=~"(?i)80E3A201|' in critical.expr


def test_every_alert_has_a_runbook_page() -> None:
    for name in ALERTS:
        page = ROOT / "docs" / "runbooks" / f"{name}.md"
        assert page.is_file(), page
        text = page.read_text()
        for section in ("## What it means", "## Confirm", "## What to do", "## Remediation"):
            assert section in text, (name, section)


def test_every_alert_has_a_not_yet_and_a_firing_promtool_step() -> None:
    steps: dict[str, set[bool]] = {name: set() for name in ALERTS}
    for path in PROMTOOL_TESTS.glob("*_test.yml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for step in test.get("alert_rule_test", []):
                steps[step["alertname"]].add(bool(step["exp_alerts"]))
    assert {n: s for n, s in steps.items() if s != {True, False}} == {}


def test_alertmanager_inhibition_uses_spec_equal_labels() -> None:
    cfg = build_config(load_spec())
    assert [r["equal"] for r in cfg["inhibit_rules"]] == [
        ["cluster", "node", "uuid"],
        ["cluster", "node", "uuid"],
        ["cluster", "node"],
    ]


def test_committed_alertmanager_uses_the_documented_defaults() -> None:
    cfg = yaml.safe_load((DEFAULT_OUT / "alertmanager.yml").read_text())
    hooks = {r["name"]: r["webhook_configs"][0] for r in cfg["receivers"]}
    assert {n: h["url"] for n, h in hooks.items()} == {
        "oncall-wecom": "http://xpuwatch-relay.xpuwatch.svc:9852/alertmanager/oncall-wecom",
        "team-feishu": "http://xpuwatch-relay.xpuwatch.svc:9852/alertmanager/team-feishu",
        "remediate": "http://xpuwatch-remediation.xpuwatch.svc:9853/alertmanager/remediate",
        # the paging path's own alerts: a bot other than the on-call one (no out-of-band URL by default)
        "xpuwatch-meta": "http://xpuwatch-relay.xpuwatch.svc:9852/alertmanager/team-feishu",
    }
    assert {n: h["http_config"]["authorization"]["credentials_file"] for n, h in hooks.items()} == {
        "oncall-wecom": "/etc/alertmanager/secrets/xpuwatch/relay-token",
        "team-feishu": "/etc/alertmanager/secrets/xpuwatch/relay-token",
        "remediate": "/etc/alertmanager/secrets/xpuwatch/remediation-token",
        "xpuwatch-meta": "/etc/alertmanager/secrets/xpuwatch/relay-token",
    }
    assert all(h["send_resolved"] is True for h in hooks.values())


def test_meta_alerts_reach_a_receiver_that_does_not_need_the_relay_when_given_one() -> None:
    """category=meta has its own route and receiver: the relay's non-on-call bot, plus --meta-url outside the
    relay. The on-call WeCom channel is never the meta receiver's way out."""
    spec = load_spec()
    cfg = build_config(spec, Endpoints(meta_url="https://pager.example/hook", meta_credentials_file="/s/tok"))
    (route,) = [r for r in cfg["route"]["routes"] if r["matchers"] == ['category="meta"']]
    assert route["receiver"] == "xpuwatch-meta" and "continue" not in route
    (meta,) = [r for r in cfg["receivers"] if r["name"] == "xpuwatch-meta"]
    assert [h["url"] for h in meta["webhook_configs"]] == [
        "http://xpuwatch-relay.xpuwatch.svc:9852/alertmanager/team-feishu",
        "https://pager.example/hook",
    ]
    assert meta["webhook_configs"][1]["http_config"]["authorization"]["credentials_file"] == "/s/tok"
    assert all("oncall-wecom" not in h["url"] for h in meta["webhook_configs"])
    meta_alerts = {a.name for a in spec.alerts if a.category == "meta"}
    assert {"XpuwatchRelayDown", "XpuwatchRelayMessagesFailing", "XpuwatchRemediationDown"} <= meta_alerts
    without_hook = build_config(spec, Endpoints(meta_url="https://pager.example/hook"))
    (meta,) = [r for r in without_hook["receivers"] if r["name"] == "xpuwatch-meta"]
    assert "http_config" not in meta["webhook_configs"][1]


def test_meta_receiver_must_not_be_the_on_call_bot() -> None:
    data = yaml.safe_load(DEFAULT_SPEC_PATH.read_text())
    data["routing"]["meta"]["relay_channel"]["value"] = "oncall-wecom"
    with pytest.raises(SpecError, match=r"routing\.meta\.relay_channel"):
        parse_spec(data)
    data = yaml.safe_load(DEFAULT_SPEC_PATH.read_text())
    data["routing"]["meta"]["receiver"]["value"] = "oncall-wecom"
    with pytest.raises(SpecError, match=r"routing\.meta\.receiver"):
        parse_spec(data)


@pytest.mark.slow
def test_cli_meta_url_adds_the_out_of_band_webhook(tmp_path: Path) -> None:
    result = _cli("--out", str(tmp_path), "--meta-url", "https://pager.example/hook")
    assert result.returncode == 0, result.stderr
    cfg = yaml.safe_load((tmp_path / "alertmanager.yml").read_text())
    (meta,) = [r for r in cfg["receivers"] if r["name"] == "xpuwatch-meta"]
    assert [h["url"] for h in meta["webhook_configs"]][1:] == ["https://pager.example/hook"]


@pytest.mark.slow
def test_a_site_spec_reaches_the_kustomize_tree(tmp_path: Path) -> None:
    """`rules generate --spec site.yaml` writes the PrometheusRule and AlertmanagerConfig copies the overlays
    apply, so tuned thresholds are deployed (before, only alerts/generated changed and `apply -k` shipped the
    defaults); --check names a stale copy."""
    kustomize = tmp_path / "kustomize"
    (kustomize / "base").mkdir(parents=True)
    site = tmp_path / "site.yaml"
    site.write_text("alerts:\n  AcceleratorTemperatureHigh:\n    core_celsius: 77\n")
    args = ("--spec", str(site), "--out", str(tmp_path / "gen"), "--kustomize", str(kustomize))
    result = _cli(*args)
    assert result.returncode == 0, result.stderr
    rule = (kustomize / "base" / "prometheusrule.yaml").read_text()
    assert rule == (tmp_path / "gen" / "prometheusrule.yaml").read_text()
    assert ">= 77" in rule
    amc = kustomize / "components" / "alertmanagerconfig" / "alertmanagerconfig.yaml"
    assert amc.read_text() == (tmp_path / "gen" / "alertmanagerconfig.yaml").read_text()
    assert _cli(*args, "--check").returncode == 0
    amc.write_text("stale\n")
    check = _cli(*args, "--check")
    assert check.returncode == 1 and f"stale: {amc}" in check.stderr


@pytest.mark.slow
def test_out_elsewhere_leaves_the_checkout_kustomize_tree_alone(tmp_path: Path) -> None:
    before = (ROOT / "deploy" / "kustomize" / "base" / "prometheusrule.yaml").read_text()
    site = tmp_path / "site.yaml"
    site.write_text("alerts:\n  AcceleratorTemperatureHigh:\n    core_celsius: 77\n")
    assert _cli("--spec", str(site), "--out", str(tmp_path / "gen")).returncode == 0
    assert (ROOT / "deploy" / "kustomize" / "base" / "prometheusrule.yaml").read_text() == before


def test_a_missing_spec_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    result = _cli("--spec", str(tmp_path / "nonexist.yaml"), "--out", str(tmp_path / "gen"))
    assert result.returncode == 2
    assert result.stderr == (
        f"xpuwatch: config error: --spec: cannot read {tmp_path / 'nonexist.yaml'}: No such file or directory\n"
    )
