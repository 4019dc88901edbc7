"""Routing that fits the site: channels follow receivers (DingTalk-only with one or two robots), no remediation
controller, and xpuwatch's fragment merged into an Alertmanager that already routes other alerts
(kube-prometheus-stack 88.5.3's default config and a hand-written tree). The site specs and configs are the
files docs/alerts.md shows (docs/examples/routing/); amtool (``check-config``, ``config routes test``) is the
oracle for what Alertmanager makes of them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import re2
import yaml

from xpuwatch.alerts.alertmanager import (
    ALERT_NAME_PREFIXES,
    TEST_PAGE_ALERTS,
    Endpoints,
    build_config,
    build_fragment,
    merge_fragment,
    scope_matchers,
)
from xpuwatch.alerts.alertmanagerconfig import from_fragment
from xpuwatch.alerts.cli import scrape_config_problem
from xpuwatch.alerts.relay.config import parse_settings
from xpuwatch.alerts.rules import AlertingRule, build_groups
from xpuwatch.alerts.spec import DEFAULT_SPEC_PATH, SpecError, load_spec, load_user_spec, overlay, parse_spec
from xpuwatch.alerts.testpage import channels

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "routing"
KPS = ROOT / "tests" / "fixtures" / "kube-prometheus-stack" / "alertmanager-config-88.5.3.yaml"
RELAY = "http://xpuwatch-relay.xpuwatch.svc:9852/alertmanager/"


def site(name: str) -> Any:
    return load_user_spec(EXAMPLES / name)


def spec_with(user: Mapping[str, Any]) -> Any:
    return parse_spec(overlay(yaml.safe_load(DEFAULT_SPEC_PATH.read_text()), user))


def hooks(config: Mapping[str, Any]) -> dict[str, list[str]]:
    return {r["name"]: [h["url"] for h in r["webhook_configs"]] for r in config["receivers"]}


def amtool(*args: str) -> str:
    exe = shutil.which("amtool")
    assert exe, "amtool is required (Debian package prometheus-alertmanager)"
    out = subprocess.run([exe, *args], capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def write(tmp: Path, name: str, config: Mapping[str, Any]) -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    assert "SUCCESS" in amtool("check-config", str(path))
    return path


def routes(config: Path, labels: Mapping[str, str]) -> list[str]:
    """The receivers ``amtool config routes test`` resolves for one label set, in order."""
    out = amtool(
        "config", "routes", "test", f"--config.file={config}", *(f"{k}={v}" for k, v in labels.items())
    )
    return out.strip().split(",")


def alert(name: str, spec: Any = None) -> dict[str, str]:
    """An alert of the generated rules as Alertmanager sees it: its name and the rule's labels."""
    for g in build_groups(spec or load_spec()):
        for r in g.rules:
            if isinstance(r, AlertingRule) and r.alert == name:
                return {"alertname": name, **r.labels}
    raise KeyError(name)


# ------------------------------------------------------------------------ channels follow receivers
def test_dingtalk_two_robots_every_receiver_posts_to_its_own_channel() -> None:
    spec = site("dingtalk-two-bots.yaml")
    config = build_config(spec)
    assert hooks(config) == {
        "ops-dingtalk": [RELAY + "ops-dingtalk"],
        "team-dingtalk": [RELAY + "team-dingtalk"],
        "remediate": ["http://xpuwatch-remediation.xpuwatch.svc:9853/alertmanager/remediate"],
        "xpuwatch-meta": [RELAY + "team-dingtalk"],  # the meta alerts follow the performance receiver
    }
    assert config["route"]["receiver"] == "team-dingtalk"
    assert channels(spec) == {
        "hardware": "ops-dingtalk",
        "performance": "team-dingtalk",
        "meta": "team-dingtalk",
    }
    amc = from_fragment(build_fragment(spec))
    assert {r["name"]: r["webhookConfigs"][0]["url"] for r in amc["spec"]["receivers"]} == {
        name: urls[0] for name, urls in hooks(config).items()
    }


def test_one_robot_takes_everything_and_the_inhibitions_stay(tmp_path: Path) -> None:
    spec = site("dingtalk-one-bot.yaml")
    config = build_config(spec)
    assert hooks(config) == {
        "ops-dingtalk": [RELAY + "ops-dingtalk"],
        "remediate": ["http://xpuwatch-remediation.xpuwatch.svc:9853/alertmanager/remediate"],
        "xpuwatch-meta": [RELAY + "ops-dingtalk"],
    }
    assert config["inhibit_rules"] == build_config(load_spec())["inhibit_rules"]
    path = write(tmp_path, "one.yml", config)
    assert routes(path, alert("AcceleratorEccUncorrectable")) == ["remediate", "ops-dingtalk"]
    assert routes(path, alert("AcceleratorLowUtilization")) == ["ops-dingtalk"]
    assert routes(path, alert("AcceleratorQueueTimeHigh")) == ["ops-dingtalk"]
    assert routes(path, alert("XpuwatchRelayDown")) == ["xpuwatch-meta"]
    # the routes (and so grouping and timing) stay apart: a page groups by node, a finding by namespace
    assert _leaf(path, alert("AcceleratorTemperatureHigh")) == '{category="hardware"}'
    assert _leaf(path, alert("AcceleratorLowUtilization")) == '{category="performance"}'
    assert _leaf(path, alert("AcceleratorPoolUnderused")).startswith('{alertname=~"AcceleratorQueueTimeHigh')


def test_the_relay_configs_shown_have_a_channel_for_every_receiver(tmp_path: Path) -> None:
    for spec_file, relay_file in (
        ("dingtalk-two-bots.yaml", "relay-dingtalk-two-bots.yaml"),
        ("dingtalk-one-bot.yaml", "relay-dingtalk-one-bot.yaml"),
    ):
        doc = yaml.safe_load((EXAMPLES / relay_file).read_text())
        for key, value in list(_file_keys(doc)):  # point the secret files at real ones
            path = tmp_path / Path(value).name
            url = "https://oapi.dingtalk.com/robot/send?access_token=t"
            path.write_text(url if "url" in key[-1] else "SECx")
            _set(doc, key, str(path))
        settings = parse_settings(doc, tmp_path, {})
        assert set(channels(site(spec_file)).values()) == set(settings.channels), relay_file


def _file_keys(doc: Any, prefix: tuple[Any, ...] = ()) -> Any:
    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(k, str) and k.endswith("_file") and isinstance(v, str):
                yield (*prefix, k), v
            else:
                yield from _file_keys(v, (*prefix, k))


def _set(doc: Any, key: tuple[Any, ...], value: str) -> None:
    for k in key[:-1]:
        doc = doc[k]
    doc[key[-1]] = value


# ------------------------------------------------------------------------ no remediation controller
def test_without_a_controller_no_remediate_receiver_route_token_or_controller_alert(tmp_path: Path) -> None:
    spec = site("no-remediation.yaml")
    config = build_config(spec)
    text = yaml.safe_dump(config)
    assert "remediat" not in text  # no route, receiver, URL or token file
    path = write(tmp_path, "no-remediation.yml", config)
    assert routes(path, alert("AcceleratorEccUncorrectable", spec)) == ["oncall-wecom"]  # action=drain kept
    alerts = {r.alert for g in build_groups(spec) for r in g.rules if isinstance(r, AlertingRule)}
    assert not {a for a in alerts if a.startswith("XpuwatchRemediation")}
    assert {"XpuwatchRelayDown", "AcceleratorEccUncorrectable"} <= alerts
    with_controller = {
        r.alert for g in build_groups(load_spec()) for r in g.rules if isinstance(r, AlertingRule)
    }
    assert with_controller - alerts == {
        "XpuwatchRemediationDown",
        "XpuwatchRemediationActionsFailing",
        "XpuwatchRemediationCapReached",
        "XpuwatchRemediationRecheckFailing",
        "XpuwatchRemediationNodeHeldTooLong",
    }


def test_an_empty_action_list_points_at_the_switch() -> None:
    with pytest.raises(SpecError, match=r"routing\.remediation\.enabled: false"):
        spec_with({"routing": {"remediation": {"actions": []}}})


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"routing": {"remediation": {"receiver": "team-feishu"}}}, r"routing\.remediation\.receiver"),
        ({"routing": {"meta": {"receiver": "oncall-wecom"}}}, r"routing\.meta\.receiver"),
        (
            {"routing": {"meta": {"relay_channel": "oncall-wecom"}}},
            r"routing\.meta\.relay_channel.*another bot",
        ),
        ({"routing": {"root_receiver": "nobody"}}, r"routing\.root_receiver"),
        (
            {"routing": {"remediation": {"enabled": "no"}}},
            r"routing\.remediation\.enabled: expected true or false",
        ),
    ],
)
def test_combinations_that_cannot_work_are_refused(user: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_with(user)


def test_one_bot_may_carry_the_meta_alerts_and_a_controller_less_site_may_reuse_the_name() -> None:
    one = spec_with({"routing": {"hardware": {"receiver": "ops"}, "performance": {"receiver": "ops"}}})
    assert one.routing.meta_relay_channel == "ops"
    reuse = spec_with({"routing": {"remediation": {"enabled": False, "receiver": "team-feishu"}}})
    assert "remediate" not in hooks(build_config(reuse))


# ------------------------------------------------------------------------ the fragment in an existing tree
EXPECTED = {  # alert -> receivers, in the default spec's names
    "AcceleratorEccUncorrectable": ["remediate", "oncall-wecom"],
    "AcceleratorTemperatureHigh": ["oncall-wecom"],
    "AcceleratorLowUtilization": ["team-feishu"],
    "AcceleratorIdleNotebook": ["remediate", "team-feishu"],
    "AcceleratorQueueTimeHigh": ["team-feishu"],
    "AcceleratorPoolUnderused": ["team-feishu"],
    "XpuwatchRelayDown": ["xpuwatch-meta"],
    "XpuwatchAlertmanagerNotificationsFailing": ["xpuwatch-meta"],
}
TEST_PAGES = {"hardware": ["oncall-wecom"], "performance": ["team-feishu"], "meta": ["xpuwatch-meta"]}


def _leaf(config: Path, labels: Mapping[str, str]) -> str:
    """The last matched route's matchers, as ``amtool config routes test --tree`` prints them."""
    out = amtool(
        "config",
        "routes",
        "test",
        "--tree",
        f"--config.file={config}",
        *(f"{k}={v}" for k, v in labels.items()),
    )
    return [ln for ln in out.splitlines() if "receiver:" in ln][-1].split("receiver:")[0].strip(" │├└─")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("existing", "theirs"),
    [
        # kube-prometheus-stack 88.5.3's default: everything to 'null', Watchdog to 'null'
        (KPS, {"Watchdog": ["null"], "KubePodCrashLooping": ["null"]}),
        # a hand-written tree: a team route, every critical alert to a pager, a catch-all
        (
            EXAMPLES / "existing-alertmanager.yml",
            {"DbDown": ["db-pager"], "NodeDown": ["ops-pager"], "X": ["ops-mail"]},
        ),
    ],
)
def test_the_fragment_merges_into_an_existing_tree(
    tmp_path: Path, existing: Path, theirs: dict[str, Any]
) -> None:
    base = yaml.safe_load(existing.read_text())
    before = write(tmp_path, "before.yml", base)
    merged = write(tmp_path, "merged.yml", merge_fragment(base, build_fragment(load_spec())))
    dedicated = tmp_path / "dedicated.yml"
    dedicated.write_text(yaml.safe_dump(build_config(load_spec())))
    for name, receivers in EXPECTED.items():
        labels = alert(name)
        for extra in ({}, {"namespace": "team-a"}):
            assert routes(merged, {**labels, **extra}) == receivers, (name, extra)
            assert _leaf(merged, {**labels, **extra}) == _leaf(dedicated, {**labels, **extra}), name
    for category, receivers in TEST_PAGES.items():
        page = {"alertname": TEST_PAGE_ALERTS[category], "category": category, "action": "none"}
        assert routes(merged, page) == receivers
    # the site's own alerts route as before, a foreign alert that happens to carry category="hardware" too
    labels = {
        "Watchdog": {"severity": "none"},
        "KubePodCrashLooping": {"severity": "warning", "namespace": "xpuwatch"},
        "DbDown": {"team": "db", "severity": "critical"},
        "NodeDown": {"severity": "critical", "category": "hardware"},
        "X": {"category": "performance"},
    }
    for name, receivers in theirs.items():
        own = {"alertname": name, **labels[name]}
        assert routes(merged, own) == routes(before, own) == receivers, name
    # the site's inhibit rules first and untouched, then xpuwatch's, each side scoped to its alerts
    merged_doc = yaml.safe_load(merged.read_text())
    assert merged_doc["inhibit_rules"][: len(base.get("inhibit_rules", []))] == base.get("inhibit_rules", [])
    for rule in merged_doc["inhibit_rules"][len(base.get("inhibit_rules", [])) :]:
        assert (
            scope_matchers()[1] in rule["source_matchers"] and scope_matchers()[1] in rule["target_matchers"]
        )


def test_the_scope_takes_every_xpuwatch_alert_and_the_test_pages() -> None:
    (_, names) = scope_matchers()
    pattern = names.split("=~", 1)[1].strip('"')
    every = [a.name for a in load_spec().alerts] + list(TEST_PAGE_ALERTS.values())
    assert all(re2.fullmatch(pattern, n) for n in every)
    assert all(n.startswith(ALERT_NAME_PREFIXES) for n in every)
    assert not re2.fullmatch(pattern, "KubePodCrashLooping")


def test_a_receiver_name_clash_is_refused_with_the_names() -> None:
    base = {"route": {"receiver": "team-feishu"}, "receivers": [{"name": "team-feishu"}]}
    with pytest.raises(ValueError, match=r"\['team-feishu'\] exist in both"):
        merge_fragment(base, build_fragment(load_spec()))


@pytest.mark.slow
def test_cli_merge_into_writes_a_config_amtool_accepts(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    result = subprocess.run(
        [sys.executable, "-m", "xpuwatch", "rules", "generate", "--spec", str(EXAMPLES / "dingtalk-two-bots.yaml"),
         "--merge-into", str(EXAMPLES / "existing-alertmanager.yml"), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    merged = out / "alertmanager-merged.yml"
    assert "SUCCESS" in amtool("check-config", str(merged))
    assert routes(merged, alert("AcceleratorLost")) == ["remediate", "ops-dingtalk"]
    assert routes(merged, {"alertname": "NodeDown", "severity": "critical"}) == ["ops-pager"]


# ------------------------------------------------------------------------ the exporter's job
@pytest.mark.parametrize(
    ("jobs", "ok"),
    [
        (["prometheus", "xpuwatch"], True),
        (["xpuwatch-exporter"], True),
        (["prometheus", "gpu-metrics"], False),
        (["xpuwatch-exporter-2"], False),  # regexes are anchored, as in Prometheus
        ([], False),
    ],
)
def test_the_job_selector_is_checked_against_a_scrape_config(jobs: list[str], ok: bool) -> None:
    doc = {"scrape_configs": [{"job_name": j, "static_configs": [{"targets": ["h:1"]}]} for j in jobs]}
    problem = scrape_config_problem(load_spec(), doc, "prometheus.yml")
    if ok:
        assert problem is None
    else:
        assert problem is not None
        assert f"matches no scrape job of prometheus.yml ({', '.join(jobs) or 'none'})" in problem
    site_spec = spec_with({"exporter_job_selector": 'job="gpu-metrics", cluster="a"'})
    assert (scrape_config_problem(site_spec, doc, "p.yml") is None) == ("gpu-metrics" in jobs)


@pytest.mark.slow
def test_cli_refuses_a_selector_no_scrape_job_matches(tmp_path: Path) -> None:
    prom = tmp_path / "prometheus.yml"
    prom.write_text(yaml.safe_dump({"scrape_configs": [{"job_name": "gpu-metrics"}]}))
    result = subprocess.run(
        [sys.executable, "-m", "xpuwatch", "rules", "generate", "--out", str(tmp_path / "o"),
         "--scrape-config", str(prom)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "exporter_job_selector" in result.stderr and "gpu-metrics" in result.stderr
    assert not (tmp_path / "o").exists()


def test_the_docs_show_the_example_files_verbatim() -> None:
    """docs/alerts.md and docs/relay.md show the site specs and relay configs as they are here (and so as
    these tests run them); the existing tree is named."""
    docs = (ROOT / "docs" / "alerts.md").read_text() + (ROOT / "docs" / "relay.md").read_text()
    for path in sorted(EXAMPLES.iterdir()):
        if path.name == "existing-alertmanager.yml":
            assert f"docs/examples/routing/{path.name}" in docs
        else:
            assert path.read_text() in docs, path.name


def test_endpoints_flags_still_apply_to_every_channel() -> None:
    config = build_config(site("dingtalk-one-bot.yaml"), Endpoints(relay_url="http://relay.monitoring:9852/"))
    assert hooks(config)["ops-dingtalk"] == ["http://relay.monitoring:9852/alertmanager/ops-dingtalk"]
