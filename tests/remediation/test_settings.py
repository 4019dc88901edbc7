"""Config file parsing: defaults are the safe ones; every bad key is named in the error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xpuwatch.remediation.settings import ConfigError, Rule, load, parse


def test_defaults_are_safe() -> None:
    s = parse({"webhook": {"allow_unauthenticated": True}})
    assert s.guard.dry_run is True
    assert (s.guard.max_disrupted_nodes, s.guard.max_disrupted_ratio) == (1, 0.1)
    assert s.resize.mode == "recommend"
    assert "kube-system" in s.guard.protected_namespaces
    assert s.webhook.listen_port == 9853


def test_full_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("abc\n")
    (tmp_path / "hub").write_text("hubtok")
    (tmp_path / "cfg.yaml").write_text(
        """
rules:
  - {action: drain}
  - {action: reclaim, alertnames: [AcceleratorIdleNotebook], params: {platform: kubeflow, grace_seconds: 60}}
webhook: {bearer_token_file: token, max_body_bytes: 2048}
guard: {dry_run: false, max_disrupted_nodes: 3, protected_namespaces: [prod]}
reclaim: {hub_api_url: "http://hub:8081/hub/api", hub_token_file: hub}
drain: {default_mode: immediate, namespace_modes: {train: wait-for-completion}}
notify_url: http://relay:9852/alertmanager/team-feishu
"""
    )
    s = load(tmp_path / "cfg.yaml")
    assert s.rules[1] == Rule(
        "reclaim", ("AcceleratorIdleNotebook",), {"platform": "kubeflow", "grace_seconds": 60}
    )
    assert (s.webhook.bearer_token, s.webhook.max_body_bytes) == ("abc", 2048)
    assert (s.guard.dry_run, s.guard.max_disrupted_nodes, s.guard.protected_namespaces) == (
        False,
        3,
        ("prod",),
    )
    assert s.reclaim.hub_token == "hubtok"
    assert s.drain.namespace_modes == {"train": "wait-for-completion"}
    assert s.notify_url == "http://relay:9852/alertmanager/team-feishu"


@pytest.mark.parametrize(
    ("raw", "msg"),
    [
        ([], "top level: expected a mapping"),
        ({}, "webhook: set bearer_token_file/_env or basic_auth"),
        (
            {"webhook": {"basic_auth": {"username": "am"}}},
            "webhook.basic_auth: password_file, password_env or password_hash_file required",
        ),
        ({"webhook": {"basic_auth": {"password_file": "x"}}}, "webhook.basic_auth.username: required"),
        (
            {"webhook": {"bearer_token_env": "XPUWATCH_UNSET_VAR"}},
            "webhook.bearer_token_env: environment variable 'XPUWATCH_UNSET_VAR' is unset",
        ),
        ({"nope": 1}, "nope: unknown key"),
        ({"rules": [{"action": "reboot"}]}, "rules[0].action: expected one of reclaim, resize, drain"),
        (
            {"rules": [{"action": "drain", "alertnames": "X"}]},
            "rules[0].alertnames: expected a list of strings",
        ),
        ({"guard": {"max_disrupted_nodes": -1}}, "guard.max_disrupted_nodes: expected a non-negative number"),
        ({"guard": {"dry_run": "no"}}, "guard.dry_run: expected true/false"),
        ({"guard": {"max_disrupted_ratio": 2}}, "guard.max_disrupted_ratio: expected 0..1"),
        ({"guard": {"cap": 1}}, "guard.cap: unknown key"),
        (
            {"webhook": {"bearer_token": "x"}},
            "webhook.bearer_token: use bearer_token_file/_env or basic_auth",
        ),
        ({"webhook": {"bearer_token_file": "/nonexistent/x"}}, "webhook.bearer_token_file: cannot read"),
        ({"drain": {"default_mode": "now"}}, "drain.default_mode: expected one of"),
        ({"drain": {"namespace_modes": {"a": "later"}}}, "drain.namespace_modes: values must be one of"),
        ({"resize": {"mode": "yolo"}}, "resize.mode: expected recommend or apply"),
        ({"tick_seconds": 0}, "tick_seconds: expected a positive number"),
        (
            {"drain": {"eviction_grace_seconds": "5m"}},
            "drain.eviction_grace_seconds: expected a non-negative integer",
        ),
        ({"kube": {"host": 5}}, "kube.host: expected a string"),
        # issue 37: settings under which a feature silently never works (each accepted on main)
        ({"approval": {"expire_seconds": 0}}, "approval.expire_seconds: expected more than 0"),
        ({"reclaim": {"hub_timeout_seconds": 0}}, "reclaim.hub_timeout_seconds: expected more than 0"),
        ({"leader": {"retry_period_seconds": 0}}, "leader.retry_period_seconds: expected more than 0"),
        (
            {"approval": {"namespaces": {"Training": "manual"}}},
            "approval.namespaces.Training: 'Training' is not a namespace name",
        ),
        (
            {"approval": {"namespaces": {"ml_team": "manual"}}},
            "approval.namespaces.ml_team: 'ml_team' is not",
        ),
        ({"approval": {"namespaces": {"a" * 64: "manual"}}}, f"approval.namespaces.{'a' * 64}: 'aaa"),
        ({"drain": {"namespace_modes": {"-ml": "immediate"}}}, "drain.namespace_modes.-ml: '-ml' is not"),
        (
            {"guard": {"protected_namespaces": ["kube system"]}},
            "guard.protected_namespaces: 'kube system' is",
        ),
    ],
)
def test_errors_name_the_key(raw: object, msg: str) -> None:
    if isinstance(raw, dict) and raw and "webhook" not in raw:
        raw = {**raw, "webhook": {"allow_unauthenticated": True}}
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert str(err.value).startswith(msg)


def test_bad_yaml(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("rules: [")
    with pytest.raises(
        ConfigError,
        match=r"^--config: .*/c.yaml is not valid YAML: line 1, column 9: expected the node content",
    ):
        load(tmp_path / "c.yaml")


def test_the_documented_example_parses() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "remediation.md").read_text()
    block = doc.split("## Configuration", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    import yaml

    raw = yaml.safe_load(block)
    raw["reclaim"].pop("hub_token_file")  # the secret file does not exist here
    raw["webhook"].pop("bearer_token_file")
    assert raw.pop("notify_token_file") == "/etc/xpuwatch/relay-token"
    raw["webhook"]["bearer_token_env"] = "XPUWATCH_DOC_TOKEN"
    os.environ["XPUWATCH_DOC_TOKEN"] = "t"
    try:
        s = parse(raw)
    finally:
        del os.environ["XPUWATCH_DOC_TOKEN"]
    assert s.guard.dry_run is True and [r.action for r in s.rules] == ["drain", "reclaim", "resize"]


def test_basic_auth_forms(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret\n")
    s = parse({"webhook": {"basic_auth": {"username": "am", "password_file": "pw"}}}, tmp_path)
    assert (s.webhook.basic_user, s.webhook.basic_password, s.webhook.basic_password_hash) == (
        "am",
        "s3cret",
        None,
    )
    (tmp_path / "hash").write_text("$2b$04$abcdefghijklmnopqrstuu\n")
    s = parse({"webhook": {"basic_auth": {"username": "am", "password_hash_file": "hash"}}}, tmp_path)
    assert s.webhook.basic_password_hash == b"$2b$04$abcdefghijklmnopqrstuu"


@pytest.mark.slow
def test_startup_failures_are_one_line(tmp_path: Path) -> None:
    """No Kubernetes credentials, a bad --listen, a port out of range: a clear line and exit 2."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    cfg = tmp_path / "rem.yaml"
    cfg.write_text("webhook: {allow_unauthenticated: true, listen_port: 0}\n")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(PYTHONPATH=str(root), HOME=str(tmp_path))

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "xpuwatch", "remediate", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=root,
        )

    res = run("--config", str(cfg))
    assert res.returncode == 2 and "no Kubernetes credentials" in res.stderr and "Traceback" not in res.stderr
    res = run("--config", str(cfg), "--listen", "nonsense")
    assert res.returncode == 2 and "xpuwatch: config error: --web.listen-address: 'nonsense'" in res.stderr
    cfg.write_text("webhook: {allow_unauthenticated: true, listen_port: 99999}\n")
    res = run("--config", str(cfg), "--check")
    assert res.returncode == 2 and "webhook.listen_port: 99999 is not a port" in res.stderr


def test_namespace_names_that_kubernetes_accepts_pass() -> None:
    s = parse(
        {
            "webhook": {"allow_unauthenticated": True},
            "approval": {
                "namespaces": {"ml-team": "manual", "a" * 63: "auto", "0": "auto"},
                "expire_seconds": 1,
            },
            "guard": {"protected_namespaces": ["kube-system", "team-7"]},
        }
    )
    assert s.approval.namespaces["ml-team"] == "manual" and s.approval.expire_seconds == 1.0
