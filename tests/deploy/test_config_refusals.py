"""Values accepted at start that would break later are refused at start (issue 21, item 5): the real CLI of
each service, given a config holding one bad value, exits 2 with the one line
``xpuwatch: config error: <key>: <reason>``. Before this change every case below was accepted (exit 0, or
the exporter kept serving with every response failing), so each test failed.

Then a property: any numeric setting of any service, given inf, nan or a huge number, is refused naming
its key (the settings parsers, enumerated from their dataclasses where they are generic).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpuwatch.alerts import spec as alert_spec
from xpuwatch.alerts.cli import promtool_problem
from xpuwatch.alerts.relay import config as relay_config
from xpuwatch.exporter import settings as exporter_settings
from xpuwatch.exporter import validation
from xpuwatch.remediation import settings as remediation_settings
from xpuwatch.vendors import registry

ROOT = Path(__file__).resolve().parents[2]
HUGE_INT = 99999999999999999999  # YAML int past uint64: "no bound" where a bound was meant

EXPORTER = {"backends": {"sim": {"interval": 1}}}
RELAY = {
    "auth": {"bearer_token_file": "token"},
    "channels": {"ding": {"type": "dingtalk", "webhook_url_file": "url"}},
}
REMEDIATION = {"webhook": {"bearer_token_file": "token"}}


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPUWATCH_")}
    env["PYTHONPATH"] = str(ROOT)
    try:
        return subprocess.run(
            [sys.executable, "-m", "xpuwatch", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired as exc:  # the exporter accepted the value and is serving
        pytest.fail(f"{args[0]}: the bad value was accepted (still running after 30 s): {exc.stderr!r}")


def prepare(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("https://oapi.dingtalk.com/robot/send?access_token=t0\n")
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "empty").write_text("")
    (tmp_path / "blank").write_text("  \n\n")


def invoke(tmp_path: Path, service: str, over: dict[str, Any], extra: tuple[str, ...] = ()) -> Any:
    prepare(tmp_path)
    if service == "serve":
        web = over.pop("web.yml", None)
        (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(merged(EXPORTER, over)))
        args = ["serve", "--simulate", "--web.listen-address", "127.0.0.1:0", "--config", "cfg.yaml"]
        if web is not None:
            (tmp_path / "web.yml").write_text(yaml.safe_dump(web))
            args += ["--web.config.file", "web.yml"]
    elif service == "relay":
        (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(merged(RELAY, over)))
        args = ["relay", "--check", "--config", "cfg.yaml"]
    elif service == "remediate":
        (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(merged(REMEDIATION, over)))
        args = ["remediate", "--check", "--config", "cfg.yaml"]
    else:
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(over))
        args = ["rules", "generate", "--spec", "spec.yaml", "--out", "out"]
    return run_cli(*args, *extra, cwd=tmp_path)


CRLF_HEADER = {"http_server_config": {"headers": {"X-Frame-Options": "DENY\r\nSet-Cookie: a=b"}}}
CASES = [
    # exporter: a header value with CR/LF fails every response, probes included
    ("serve", {"web.yml": CRLF_HEADER}, "http_server_config.headers.X-Frame-Options"),
    (
        "serve",
        {"web.yml": {"http_server_config": {"headers": {"X-Content-Type-Options": "nosniff\n"}}}},
        "http_server_config.headers.X-Content-Type-Options",
    ),
    ("serve", {"backends": {"sim": {"interval": 1.0e308}}}, "backends.sim.interval"),
    ("serve", {"backends": {"sim": {"timeout": 1.0e308}}}, "backends.sim.timeout"),
    ("serve", {"backends": {"sim": {"max_output_bytes": HUGE_INT}}}, "backends.sim.max_output_bytes"),
    ("serve", {"pod_mapping": {"grace": 1.0e300}}, "pod_mapping.grace"),
    ("serve", {"backends": {"sim": {"seed": HUGE_INT}}}, "backends.sim.seed"),
    # relay: empty secret/token/URL files, non-http URLs, unknown severities, unbounded numbers
    ("relay", {"channels": {"ding": {"secret_file": "empty"}}}, "channels.ding.secret_file"),
    (
        "relay",
        {"auth": {"bearer_token_file": "blank", "basic_auth": {"username": "am", "password_file": "token"}}},
        "auth.bearer_token_file",
    ),
    ("relay", {"channels": {"ding": {"webhook_url_file": "empty"}}}, "channels.ding.webhook_url_file"),
    ("relay", {"alertmanager_url": "javascript:alert(1)"}, "alertmanager_url"),
    (
        "relay",
        {"channels": {"ding": {"mentions": {"all": True, "severities": ["apocalyptic"]}}}},
        "channels.ding.mentions.severities",
    ),
    ("relay", {"request_timeout_seconds": 1.0e308}, "request_timeout_seconds"),
    ("relay", {"max_body_bytes": HUGE_INT}, "max_body_bytes"),
    ("relay", {"retry": {"max_seconds": math.inf}}, "retry.max_seconds"),
    ("relay", {"dedup_window_seconds": math.nan}, "dedup_window_seconds"),
    # remediation: non-http URLs, empty token files, unbounded numbers
    ("remediate", {"notify_url": "javascript:alert(1)"}, "notify_url"),
    ("remediate", {"drain": {"prometheus_url": "javascript:alert(1)"}}, "drain.prometheus_url"),
    ("remediate", {"reclaim": {"hub_api_url": "file:///etc/passwd"}}, "reclaim.hub_api_url"),
    ("remediate", {"kube": {"host": "127.0.0.1:6443"}}, "kube.host"),
    ("remediate", {"notify_url": "http://relay:9852/x", "notify_token_file": "empty"}, "notify_token_file"),
    ("remediate", {"webhook": {"bearer_token_file": "blank"}}, "webhook.bearer_token_file"),
    ("remediate", {"guard": {"cooldown_seconds": 1.0e308}}, "guard.cooldown_seconds"),
    ("remediate", {"guard": {"max_view_age_seconds": math.nan}}, "guard.max_view_age_seconds"),
    ("remediate", {"webhook": {"max_body_bytes": HUGE_INT}}, "webhook.max_body_bytes"),
    ("remediate", {"tick_seconds": 1.0e308}, "tick_seconds"),
    # alert spec: what `promtool check rules` (Prometheus's RE2 regexes, PromQL strings) would refuse
    ("rules", {"exporter_job_selector": 'job=~"xpu(?=watch)"'}, "exporter_job_selector"),
    ("rules", {"cluster_selector": 'cluster=~"gpu-\\d+"'}, "cluster_selector"),
    (
        "rules",
        {"alerts": {"AcceleratorLowUtilization": {"workload_selector": 'workload_kind!~"(a)\\\\1"'}}},
        "alerts.AcceleratorLowUtilization.workload_selector",
    ),
    (
        "rules",
        {"recording": {"queue_resources": {"nvidia": "nvidia_com_(?!mig)"}}},
        "recording.queue_resources",
    ),
    (
        "rules",
        {"alerts": {"AcceleratorEccCorrectableStorm": {"threshold": math.inf}}},
        "alerts.AcceleratorEccCorrectableStorm.threshold",
    ),
    ("rules", {"runbook_base_url": "javascript:alert(1)"}, "runbook_base_url"),
    ("rules", {"alerts": {"AcceleratorLost": {"for": "1m1h"}}}, "alerts.AcceleratorLost.for"),
    (
        "rules",
        {"routing": {"hardware": {"repeat_interval": "300000000y"}}},
        "routing.hardware.repeat_interval",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("service", "over", "key"), CASES, ids=[f"{s}-{k}-{i}" for i, (s, _, k) in enumerate(CASES)]
)
def test_bad_value_is_refused_at_start_with_one_line(
    tmp_path: Path, service: str, over: dict[str, Any], key: str
) -> None:
    res = invoke(tmp_path, service, copy.deepcopy(over))
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"xpuwatch: config error: {key}"), lines[0]
    assert "Traceback" not in res.stderr and not (tmp_path / "out").exists()


def test_rules_generate_refuses_a_non_http_relay_url(tmp_path: Path) -> None:
    res = invoke(tmp_path, "rules", {}, ("--relay-url", "javascript:alert(1)"))
    assert res.returncode == 2
    assert res.stderr.strip().startswith(
        "xpuwatch: config error: --relay-url: must be an http:// or https://"
    )


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_promtool_complaints_become_one_line() -> None:
    """The oracle behind the spec checks: promtool's verdict on generated rules, as one line."""
    bad = "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: vector(1)\n    for: 5s5s\n"
    assert promtool_problem(bad) == (
        'promtool check rules failed on the generated rules: rules.yml: not a valid duration string: "5s5s"'
    )
    good = bad.replace("5s5s", "5s")
    assert promtool_problem(good) is None


@pytest.mark.slow
def test_good_values_at_the_bounds_are_accepted(tmp_path: Path) -> None:
    """The bounds refuse only what breaks: the largest documented value of each still starts."""
    prepare(tmp_path)
    exporter_settings.parse(
        {
            "backends": {"sim": {"interval": 3600, "timeout": 3600, "stale_after": 86400}},
            "pod_mapping": {"grace": 86400, "interval": 3600},
        }
    )
    exporter_settings.parse({"backends": {"sim": {"max_output_bytes": validation.GIB}}})
    exporter_settings.parse_web_config(
        {
            "http_server_config": {
                "headers": {"Content-Security-Policy": "default-src 'self';\tframe-ancestors 'none'"}
            }
        }
    )
    relay_config.parse_settings(
        merged(
            RELAY,
            {
                "alertmanager_url": "https://am.example:9093/",
                "max_body_bytes": 64 * validation.MIB,
                "dedup_window_seconds": 0,
                "channels": {
                    "ding": {"secret_file": "token", "mentions": {"all": True, "severities": ["critical"]}}
                },
            },
        ),
        tmp_path,
        {},
    )
    remediation_settings.parse(
        merged(
            REMEDIATION,
            {
                "notify_url": "http://remediation:pw@relay:9852/alertmanager/x",
                "guard": {"cooldown_seconds": validation.MAX_DURATION_SECONDS},
            },
        ),
        tmp_path,
    )
    res = invoke(tmp_path, "rules", {"exporter_job_selector": 'job=~"xpu\\\\pL+|[[:alpha:]]+"'})
    assert res.returncode == 0, res.stderr  # RE2 classes Python's re lacks are fine for Prometheus


# --- property: every numeric setting refuses inf, nan and huge ---------------------------------------------

BAD_NUMBERS = st.one_of(
    st.sampled_from([math.inf, -math.inf, math.nan]),
    st.floats(min_value=1e13, max_value=1.7e308),
    st.integers(min_value=10**13, max_value=10**400),
)


def _remediation_numeric_keys() -> list[tuple[str, ...]]:
    s = remediation_settings.Settings()
    keys: list[tuple[str, ...]] = [("tick_seconds",)]
    for section in ("webhook", "guard", "reclaim", "resize", "drain", "leader"):
        for f in dataclasses.fields(getattr(s, section)):
            default = getattr(getattr(s, section), f.name)
            numeric = isinstance(default, int | float) and not isinstance(default, bool)
            if numeric or (default is None and f.name.endswith("_seconds")):
                keys.append((section, f.name))
    return keys


def _spec_numeric_keys() -> list[tuple[str, ...]]:
    doc = yaml.safe_load(alert_spec.DEFAULT_SPEC_PATH.read_text())
    keys = []
    for name, params in doc["alerts"].items():
        for k, p in params.items():
            if isinstance(p["value"], int | float) and not isinstance(p["value"], bool):
                keys.append(("alerts", name, k))
    return keys


NUMERIC = (
    [("exporter", ("backends", "sim", k)) for k in ("interval", "timeout", "stale_after", "max_output_bytes")]
    + [("exporter", ("pod_mapping", k)) for k in ("interval", "timeout", "max_backoff", "grace")]
    + [
        ("relay", k)
        for k in [
            ("max_body_bytes",),
            ("dedup_window_seconds",),
            ("max_delivery_age_seconds",),
            ("request_timeout_seconds",),
            ("retry", "initial_seconds"),
            ("retry", "max_seconds"),
            ("retry", "multiplier"),
            ("channels", "ding", "max_parts"),
            ("channels", "ding", "rate_limits[0]", "count"),
            ("channels", "ding", "rate_limits[0]", "per_seconds"),
        ]
    ]
    + [("remediation", k) for k in _remediation_numeric_keys()]
)


def _nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    if path[-2:-1] == ("rate_limits[0]",):
        return _nested((*path[:-2], "rate_limits"), [{"count": 1, "per_seconds": 1, path[-1]: value}])
    doc: Any = value
    for part in reversed(path):
        doc = {part: doc}
    return doc


def _backend_numeric_options() -> list[tuple[str, str]]:
    return [
        (name, key)
        for name, spec in sorted(registry.all_specs().items())
        for key, kind in sorted(spec.options.items())
        if kind in ("seconds", "int", "number")
    ]


@settings(max_examples=200, deadline=None)
@given(option=st.sampled_from(_backend_numeric_options()), value=BAD_NUMBERS)
def test_any_numeric_backend_option_refuses_inf_nan_and_huge(option: tuple[str, str], value: Any) -> None:
    name, key = option
    spec = registry.all_specs()[name]
    if spec.options[key] == "number" and not isinstance(value, int) and math.isfinite(value):
        value = math.inf  # a "number" option is any finite number: only inf/nan/overflow are bad there
    if spec.options[key] == "number" and isinstance(value, int) and value < 10**309:
        value = 10**400
    with pytest.raises(ValueError) as err:
        registry.check_options(spec, {key: value}, f"backends.{name}")
    assert str(err.value).startswith(f"backends.{name}.{key}: "), str(err.value)


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("secrets")
    prepare(base)
    return base


def test_the_property_covers_every_numeric_setting() -> None:
    keys = {".".join(k) for _, k in NUMERIC}
    assert {"guard.cooldown_seconds", "webhook.max_body_bytes", "drain.eviction_grace_seconds"} <= keys
    assert len(_spec_numeric_keys()) >= 5


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setting=st.sampled_from(NUMERIC), value=BAD_NUMBERS)
def test_any_numeric_setting_refuses_inf_nan_and_huge(secrets: Path, setting: Any, value: Any) -> None:
    service, path = setting
    key = ".".join(path)
    if service == "exporter":
        with pytest.raises(exporter_settings.ConfigError) as err:
            exporter_settings.parse(merged(EXPORTER, _nested(path, value)))
    elif service == "relay":
        with pytest.raises(relay_config.ConfigError) as err:
            relay_config.parse_settings(merged(RELAY, _nested(path, value)), secrets, {})
    else:
        with pytest.raises(remediation_settings.ConfigError) as err:
            remediation_settings.parse(merged(REMEDIATION, _nested(path, value)), secrets)
    assert str(err.value).startswith(key), (key, value, str(err.value))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(path=st.sampled_from(_spec_numeric_keys()), value=st.sampled_from([math.inf, math.nan, 10**400]))
def test_any_spec_threshold_refuses_non_finite(path: tuple[str, ...], value: Any) -> None:
    """Thresholds are compared in PromQL (float64), so any finite value is a threshold; inf, nan and ints
    past float64 are not."""
    defaults = yaml.safe_load(alert_spec.DEFAULT_SPEC_PATH.read_text())
    with pytest.raises(alert_spec.SpecError) as err:
        alert_spec.parse_spec(alert_spec.overlay(defaults, _nested(path, value)))
    assert str(err.value).startswith(".".join(path)), str(err.value)
