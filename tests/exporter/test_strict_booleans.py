"""Every service reads its YAML with YAML 1.2's booleans (exporter.validation.load_yaml) and refuses a
boolean written as a string (issue 37). Each fails on main: ``mentions.all: "false"`` read as true (every
firing DingTalk message mentioned the whole group), ``dry_run: off`` switched dry-run off, ``enabled: no``
was read as false."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuwatch.alerts.relay.config import ConfigError as RelayConfigError
from xpuwatch.alerts.relay.config import load_settings
from xpuwatch.exporter.settings import ConfigError, load
from xpuwatch.exporter.validation import load_yaml
from xpuwatch.remediation import settings as remediation


def test_only_true_and_false_are_booleans() -> None:
    doc = load_yaml("a: no\nb: true\nc: 'false'\nd: off\ne: FALSE\nf: Yes\nno: 1\n")
    assert doc == {"a": "no", "b": True, "c": "false", "d": "off", "e": False, "f": "Yes", "no": 1}


@pytest.mark.parametrize("value", ['"false"', "no", "off", "'true'"])
def test_the_relay_refuses_a_boolean_written_as_text(tmp_path: Path, value: str) -> None:
    (tmp_path / "relay.yaml").write_text(
        "auth: {bearer_token_env: T}\n"
        "channels:\n"
        "  oncall:\n"
        "    type: dingtalk\n"
        "    webhook_url_env: U\n"
        f"    mentions: {{all: {value}}}\n"
    )
    env = {"T": "token", "U": "https://oapi.dingtalk.com/robot/send?access_token=x"}
    with pytest.raises(
        RelayConfigError, match=r"channels\.oncall\.mentions\.all: must be true or false, got"
    ):
        load_settings(tmp_path / "relay.yaml", env)


@pytest.mark.parametrize("value", ['"false"', "off", "no"])
def test_remediation_refuses_a_boolean_written_as_text(tmp_path: Path, value: str) -> None:
    (tmp_path / "r.yaml").write_text(
        f"webhook: {{allow_unauthenticated: true}}\nguard: {{dry_run: {value}}}\n"
    )
    with pytest.raises(remediation.ConfigError, match=r"guard\.dry_run: expected true/false, got '"):
        remediation.load(tmp_path / "r.yaml")
    (tmp_path / "r.yaml").write_text("webhook: {allow_unauthenticated: true}\nguard: {dry_run: false}\n")
    assert remediation.load(tmp_path / "r.yaml").guard.dry_run is False


@pytest.mark.parametrize("value", ['"false"', "no"])
def test_the_exporter_refuses_a_boolean_written_as_text(tmp_path: Path, value: str) -> None:
    (tmp_path / "x.yaml").write_text(f"pod_mapping: {{enabled: {value}}}\n")
    with pytest.raises(ConfigError, match=r"pod_mapping\.enabled: must be true or false"):
        load(str(tmp_path / "x.yaml"), {}, {})
