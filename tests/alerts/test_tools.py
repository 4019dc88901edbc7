"""The generated files pass the real tools: promtool check/test rules, amtool check-config and routes test.

Uses Debian's prometheus (promtool 2.42) and prometheus-alertmanager (amtool 0.25), installed by scripts/test.sh.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "alerts" / "generated"
PROMTOOL_TESTS = sorted((Path(__file__).parent / "promtool").glob("*_test.yml"))

pytestmark = pytest.mark.skipif(
    not (shutil.which("promtool") and shutil.which("amtool")), reason="promtool/amtool not installed"
)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_promtool_check_rules_accepts_rules_yml() -> None:
    result = _run("promtool", "check", "rules", str(GENERATED / "rules.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    groups = yaml.safe_load((GENERATED / "rules.yml").read_text())["groups"]
    assert f"SUCCESS: {sum(len(g['rules']) for g in groups)} rules found" in result.stdout


def test_promtool_check_rules_accepts_the_prometheusrule_groups(tmp_path: Path) -> None:
    pr = yaml.safe_load((GENERATED / "prometheusrule.yaml").read_text())
    extracted = tmp_path / "pr-rules.yml"
    extracted.write_text(yaml.safe_dump({"groups": pr["spec"]["groups"]}))
    result = _run("promtool", "check", "rules", str(extracted))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("test_file", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(test_file: Path) -> None:
    result = _run("promtool", "test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.slow
def test_promtool_unit_tests_catch_a_wrong_threshold(tmp_path: Path) -> None:
    """The unit tests are not vacuous: the same tests fail against rules built with another threshold."""
    from xpuwatch.alerts.rules import render_rules
    from xpuwatch.alerts.spec import load_spec

    generated = tmp_path / "alerts" / "generated"
    generated.mkdir(parents=True)
    spec = load_spec().with_overrides({"AcceleratorTemperatureHigh": {"core_celsius": 86}})
    (generated / "rules.yml").write_text(render_rules(spec))
    tests = tmp_path / "tests" / "alerts" / "promtool"
    tests.mkdir(parents=True)
    shutil.copy(PROMTOOL_TESTS[0].parent / "hardware_test.yml", tests)
    result = _run("promtool", "test", "rules", str(tests / "hardware_test.yml"))
    assert result.returncode == 1
    assert "AcceleratorTemperatureHigh" in result.stdout + result.stderr


def test_amtool_check_config_accepts_alertmanager_yml() -> None:
    result = _run("amtool", "check-config", str(GENERATED / "alertmanager.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 inhibit rules" in result.stdout and "4 receivers" in result.stdout


def test_amtool_accepts_the_meta_receiver_with_an_out_of_band_webhook(tmp_path: Path) -> None:
    """--meta-url adds a second webhook (with or without a token file) that Alertmanager 0.25 accepts."""
    from xpuwatch.alerts.alertmanager import Endpoints, render_alertmanager
    from xpuwatch.alerts.spec import load_spec

    for creds in ("", "/etc/alertmanager/secrets/pager/token"):
        path = tmp_path / "alertmanager.yml"
        path.write_text(
            render_alertmanager(
                load_spec(), Endpoints(meta_url="https://pager.example/hook", meta_credentials_file=creds)
            )
        )
        result = _run("amtool", "check-config", str(path))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "4 receivers" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (
            ["category=hardware", "severity=critical", "action=drain", "alertname=AcceleratorLost"],
            "remediate,oncall-wecom",
        ),
        (
            ["category=hardware", "severity=warning", "action=none", "alertname=AcceleratorTemperatureHigh"],
            "oncall-wecom",
        ),
        (
            [
                "category=performance",
                "severity=warning",
                "action=none",
                "alertname=AcceleratorLowUtilization",
            ],
            "team-feishu",
        ),
        (
            [
                "category=performance",
                "severity=warning",
                "action=reclaim",
                "alertname=AcceleratorIdleNotebook",
            ],
            "remediate,team-feishu",
        ),
        (
            [
                "category=performance",
                "severity=warning",
                "action=resize",
                "alertname=AcceleratorSliceMemoryBound",
            ],
            "remediate,team-feishu",
        ),
        (["alertname=SomethingElse"], "team-feishu"),
        (
            ["category=meta", "severity=critical", "action=none", "alertname=XpuwatchRelayDown"],
            "xpuwatch-meta",
        ),
    ],
)
def test_amtool_routes_each_category_to_its_receiver(labels: list[str], receivers: str) -> None:
    result = _run(
        "amtool",
        "config",
        "routes",
        "test",
        f"--config.file={GENERATED / 'alertmanager.yml'}",
        f"--verify.receivers={receivers}",
        *labels,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receivers
