"""A user spec overlays the defaults (the kubernetes-mixin habit): any subset of keys, validated by key path.

`xpuwatch rules generate --spec partial.yaml` lays the file over alerts/spec.yaml; these tests run the real
CLI on small user specs and compare with the committed output, and check that the job and cluster
selectors reach every expression that reads exporter series.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from xpuwatch.alerts.rules import build_groups, records, render_rules
from xpuwatch.alerts.spec import DEFAULT_SPEC_PATH, load_user_spec, overlay, parse_spec
from xpuwatch.exporter import catalog as c

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "alerts" / "generated"
DEFAULTS = yaml.safe_load(DEFAULT_SPEC_PATH.read_text("utf-8"))


def _generate(tmp_path: Path, user: str) -> tuple[int, str, Path]:
    spec = tmp_path / "partial.yaml"
    spec.write_text(user)
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "xpuwatch", "rules", "generate", f"--spec={spec}", f"--out={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode, result.stderr, out


def _changed(a: str, b: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


@pytest.mark.slow
def test_one_threshold_regenerates_rules_that_differ_only_there(tmp_path: Path) -> None:
    rc, err, out = _generate(tmp_path, "alerts:\n  AcceleratorTemperatureHigh:\n    core_celsius: 85\n")
    assert rc == 0, err
    changed = _changed((GENERATED / "rules.yml").read_text(), (out / "rules.yml").read_text())
    assert sorted(changed) == sorted(
        [
            '-      accelerator_temperature_celsius{job=~"xpuwatch|xpuwatch-exporter", sensor="core"} >= 80',
            '-      description: \'{{ if eq $labels.sensor "hotspot" }}Hotspot temperature {{ $value | printf '
            '"%.0f" }} °C (threshold 95 °C for 5m; the device reports no core temperature){{ else }}Core '
            'temperature {{ $value | printf "%.0f" }} °C (threshold 80 °C for 5m){{ end }} on {{ $labels.vendor }} '
            "device {{ $labels.device }} ({{ $labels.model }}, {{ $labels.uuid }}) on {{ $labels.node }}.'",
            '+      accelerator_temperature_celsius{job=~"xpuwatch|xpuwatch-exporter", sensor="core"} >= 85',
            '+      description: \'{{ if eq $labels.sensor "hotspot" }}Hotspot temperature {{ $value | printf '
            '"%.0f" }} °C (threshold 95 °C for 5m; the device reports no core temperature){{ else }}Core '
            'temperature {{ $value | printf "%.0f" }} °C (threshold 85 °C for 5m){{ end }} on {{ $labels.vendor }} '
            "device {{ $labels.device }} ({{ $labels.model }}, {{ $labels.uuid }}) on {{ $labels.node }}.'",
        ]
    )
    assert (out / "alertmanager.yml").read_text() == (GENERATED / "alertmanager.yml").read_text()


@pytest.mark.slow
def test_one_for_with_its_own_reason(tmp_path: Path) -> None:
    rc, err, out = _generate(
        tmp_path,
        "alerts:\n  AcceleratorLost:\n    for: {value: 3m, reason: our driver resets take two minutes}\n",
    )
    assert rc == 0, err
    changed = _changed((GENERATED / "rules.yml").read_text(), (out / "rules.yml").read_text())
    assert [line for line in changed if "for:" in line] == ["-    for: 1m", "+    for: 3m"]
    assert len(changed) == 4  # the `for` and the description that quotes it
    assert "has not answered for 3m" in changed[-1]


@pytest.mark.slow
def test_job_selector_labels_and_disabled_alerts(tmp_path: Path) -> None:
    user = (
        "exporter_job_selector: 'job=\"gpu-metrics\"'\n"
        "alert_labels: {team: gpu-infra}\n"
        "disabled_alerts: [AcceleratorLowSmOccupancy, AcceleratorPowerStarved]\n"
    )
    rc, err, out = _generate(tmp_path, user)
    assert rc == 0, err
    groups = yaml.safe_load((out / "rules.yml").read_text())["groups"]
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    names = {r["alert"] for r in alerts}
    assert "AcceleratorLowSmOccupancy" not in names and "AcceleratorPowerStarved" not in names
    assert len(names) == len(DEFAULTS["alerts"]) - 2
    assert {r["labels"]["team"] for r in alerts} == {"gpu-infra"}
    text = (out / "rules.yml").read_text()
    assert "xpuwatch-exporter" not in text
    assert 'accelerator_up{job="gpu-metrics"}' in text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("user", "message"),
    [
        (
            "alerts:\n  AcceleratorTemperatureHigh:\n    core_celcius: 85\n",
            "alerts.AcceleratorTemperatureHigh.core_celcius: not a key",
        ),
        ("alerts:\n  AcceleratorTempHigh:\n    for: 5m\n", "alerts.AcceleratorTempHigh: not a key"),
        (
            "alerts:\n  AcceleratorLost:\n    for: soon\n",
            "alerts.AcceleratorLost.for: 'soon' is not a Prometheus duration",
        ),
        (
            "alerts:\n  AcceleratorTemperatureHigh:\n    core_celsius: hot\n",
            "alerts.AcceleratorTemperatureHigh.core_celsius: 'hot'",
        ),
        (
            "exporter_job_selector: xpuwatch\n",
            "exporter_job_selector: 'xpuwatch' is not a list of label matchers",
        ),
        (
            "cluster_selector: 'cluster=east'\n",
            "cluster_selector: 'cluster=east' is not a list of label matchers",
        ),
        ("alert_labels: {severity: low}\n", "alert_labels.severity: set per alert"),
        ("alert_labels: {'team-x': a}\n", "alert_labels: 'team-x' is not a label name"),
        ("disabled_alerts: [AcceleratorNope]\n", "disabled_alerts: no alerts named ['AcceleratorNope']"),
        (
            "recording:\n  p95_window: {reason: no value}\n",
            "recording.p95_window: expected {value: ..., reason: ...}",
        ),
        ("routing:\n  hardware: oncall\n", "routing.hardware: expected a mapping"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, user: str, message: str) -> None:
    rc, err, _ = _generate(tmp_path, user)
    assert rc == 2
    assert message in err, err
    assert "Traceback" not in err


def test_an_empty_user_spec_and_the_full_spec_give_the_defaults(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    default_rules = (GENERATED / "rules.yml").read_text()
    assert render_rules(load_user_spec(empty)) == default_rules
    assert render_rules(load_user_spec(DEFAULT_SPEC_PATH)) == default_rules


def test_overlay_keeps_the_reason_given_and_names_the_source() -> None:
    merged: dict[str, Any] = overlay(
        DEFAULTS,
        {
            "alerts": {
                "AcceleratorLost": {"for": "2m"},
                "AcceleratorMissing": {"for": {"value": "9m", "reason": "r"}},
            }
        },
        source="site.yaml",
    )
    assert merged["alerts"]["AcceleratorLost"]["for"] == {"value": "2m", "reason": "set by site.yaml"}
    assert merged["alerts"]["AcceleratorMissing"]["for"] == {"value": "9m", "reason": "r"}
    assert (
        merged["alerts"]["AcceleratorLost"]["severity"] == DEFAULTS["alerts"]["AcceleratorLost"]["severity"]
    )
    assert DEFAULTS["alerts"]["AcceleratorLost"]["for"]["value"] == "1m"  # the defaults are not modified


_EXPORTER = sorted((m.name for m in c.catalog()), key=len, reverse=True)


def test_job_and_cluster_selectors_reach_every_exporter_series() -> None:
    job, cluster, ksm = 'job="gpu"', 'cluster="east"', 'job="ksm"'
    spec = parse_spec(
        overlay(
            DEFAULTS,
            {"exporter_job_selector": job, "cluster_selector": cluster, "kube_state_metrics_selector": ksm},
        )
    )
    r = records(spec)
    recorded = {getattr(r, f) for f in r.__dataclass_fields__}
    names = re.compile(
        r"(?<![\w:\"])("
        + "|".join(
            map(
                re.escape,
                [
                    *_EXPORTER,
                    "up",
                    "kube_node_info",
                    "kube_node_spec_unschedulable",
                    *sorted(recorded, key=len, reverse=True),
                ],
            )
        )
        + r")(?![\w:])(\{[^}]*\})?"
    )
    # meta alerts read the relay, the controller or Alertmanager through their own job selector
    own = {
        a.name: v.value
        for a in spec.alerts
        if a.category == "meta"
        for k, v in a.params.items()
        if k.endswith("_selector")
    }
    seen: set[str] = set()
    for group in build_groups(spec):
        for rule in group.rules:
            for m in names.finditer(rule.expr):
                name, braces = m.group(1), m.group(2) or ""
                seen.add(name)
                where = f"{getattr(rule, 'record', None) or getattr(rule, 'alert', '')}: {m.group(0)}"
                assert cluster in braces, where
                if name in recorded:
                    assert "job=" not in braces, where  # recorded series were filtered when recorded
                elif name.startswith("kube_"):
                    assert ksm in braces, where
                elif getattr(rule, "alert", "") in own:  # the relay's / controller's up: their own job
                    assert own[rule.alert] in braces, where  # type: ignore[union-attr]
                else:
                    assert job in braces, where
    assert {c.UP, c.ECC_ERRORS, c.ALLOCATED, "up", "kube_node_info", r.node_devices} <= seen
