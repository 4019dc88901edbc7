"""Two clusters remote_write into a real VictoriaMetrics; dashboards, recording rules and global alerts work there.

The stack (tests/e2e/clusters_stack.py, started once for the module): clusters ``a`` and ``b``, each the
default sim fleet plus the fault timeline of tests/dashboards/test_prometheus.py with its own seed, each in
its own Debian Prometheus (``external_labels: {cluster: a|b}``), both writing into one VictoriaMetrics
single node; vmalert evaluates the global (performance) group there and notifies the real Alertmanager.

Checked: every recording-rule expression of alerts/generated/rules.yml, run against VictoriaMetrics, returns
series of both clusters; every dashboard query returns data with the cluster variable set to ``a`` and to
``b`` (and nothing of the other cluster); per-cluster sums in VictoriaMetrics equal what each Prometheus
says; the global alert reaches the Alertmanager from vmalert once per cluster.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dashboards.test_prometheus import (
    BUILTINS,
    RULES,
    Prom,
    _dashboards,
    _get,
    _scenario,
    _targets,
    grafana_regex_escape,
    substitute,
)
from tests.e2e.clusters_stack import FEDERATE_MATCH, PER_CLUSTER_GROUPS, Stack, missing_binaries, stack
from xpuwatch.alerts.queue import QUEUE
from xpuwatch.dashboards.sources import RECORDS
from xpuwatch.exporter import catalog as c

CLUSTERS = {"a": 11, "b": 12}  # cluster -> sim seed

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing_binaries()), reason=f"not installed: {missing_binaries()}"),
]


def _values(api: Prom, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"query": expr}
    if at is not None:
        params["time"] = at
    out = _get(f"{api.base}/api/v1/query?" + urllib.parse.urlencode(params))
    assert out["status"] == "success", out
    return out["data"]["result"]  # type: ignore[no-any-return]


def _clusters_in(result: list[dict[str, Any]]) -> set[str]:
    return {r["metric"].get("cluster", "") for r in result}


def _am_alerts(base: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{base}/api/v2/alerts", timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def _ready(s: Stack) -> bool:
    """Both clusters' faults, recorded P95 and hardware ALERTS in VictoriaMetrics, and vmalert's global
    alert for both clusters in the Alertmanager."""
    vm = s.vm
    firing = _values(vm, 'ALERTS{alertstate="firing", category="hardware"}')
    p95 = _values(vm, RECORDS.utilization_p95)
    lost = _values(vm, f"{c.UP} == 0")
    am = {
        a["labels"].get("cluster")
        for a in _am_alerts(s.alertmanager)
        if a["labels"]["alertname"] == "AcceleratorFaultApplication"
    }
    return all(set(CLUSTERS) <= _clusters_in(r) for r in (firing, p95, lost)) and set(CLUSTERS) <= am


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    scenarios = {}
    for name, seed in CLUSTERS.items():
        scenarios[name] = {**_scenario(), "seed": seed}
    tmp = tmp_path_factory.mktemp("clusters")
    with stack(tmp, scenarios) as s:
        deadline = time.monotonic() + 120
        while not _ready(s):
            if time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(Path(tmp).glob("*.log"))
                )
                raise RuntimeError(f"stack not ready within 120 s\n{logs}")
            time.sleep(1)
        time.sleep(3)  # a few more samples so every rate/increase window holds two
        yield s


def _recording_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text("utf-8"))["groups"]
    return [
        (r["record"] + str(r.get("labels", "")), r["expr"])
        for g in groups
        if g["name"] in PER_CLUSTER_GROUPS
        for r in g["rules"]
        if "record" in r
    ]


def test_every_recording_rule_expression_gives_both_clusters_in_victoriametrics(clusters: Stack) -> None:
    """Same series count per cluster as the cluster's own Prometheus gives, and data of both clusters for
    every expression the sim fleet and the kube-state-metrics stand-in feed (the memory- and compute-bound
    classes stay empty in both Prometheus servers: no default sim device sits in those corners; no Kueue or
    Volcano runs here, so their pending-workload record is empty too)."""
    at = time.time() - 5
    differ, both = {}, []
    for name, expr in _recording_exprs():
        result = _values(clusters.vm, expr, at)
        in_vm = {k: sum(1 for r in result if r["metric"].get("cluster") == k) for k in CLUSTERS}
        in_prom = {k: len(_values(prom, expr, at)) for k, prom in clusters.prometheus.items()}
        if in_vm != in_prom:
            differ[name] = (in_vm, in_prom)
        if _clusters_in(result) == set(CLUSTERS):
            both.append(name)
    assert differ == {}
    assert len(both) == len(_recording_exprs()) - 6, both


def _variables(dashboard: dict[str, Any], api: Prom, cluster: str) -> dict[str, str]:
    """Template variables as Grafana sets them with the cluster variable on ``cluster`` (others: All)."""
    values = {**BUILTINS, "cluster": grafana_regex_escape(cluster)}
    for var in dashboard["templating"]["list"]:
        if var["type"] == "datasource" or var["name"] == "cluster":
            continue
        selector, label = var["query"]["query"].removeprefix("label_values(").removesuffix(")").rsplit(",", 1)
        label = label.strip()
        found = sorted({s[label] for s in api.series(substitute(selector, values)) if label in s})
        assert found, f"{dashboard['uid']} cluster {cluster}: variable {var['name']} is empty"
        if var["multi"]:
            values[var["name"]] = "(" + "|".join(grafana_regex_escape(v) for v in found) + ")"
        else:
            mig = {s["uuid"] for s in api.series(f'{c.SLICE_INFO}{{cluster="{cluster}", slice_kind="mig"}}')}
            values[var["name"]] = sorted(mig & set(found))[0]
    return values


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_every_dashboard_query_returns_data_per_cluster_from_victoriametrics(
    clusters: Stack, cluster: str
) -> None:
    variables = {d["uid"]: _variables(d, clusters.vm, cluster) for d in _dashboards()}
    empty, leaked = [], []
    for t in _targets():
        expr = substitute(t.expr, variables[t.dashboard])
        if t.instant:
            result = _values(clusters.vm, expr)
        else:
            result = clusters.vm.query_range(expr, 30)["data"]["result"]
        if not result:
            empty.append(f"{t.dashboard}: {t.panel} [{t.ref}]")
        others = _clusters_in(result) - {cluster, ""}
        if others:
            leaked.append(f"{t.dashboard}: {t.panel} [{t.ref}] shows {sorted(others)}")
    assert (empty, leaked) == ([], [])


def test_per_cluster_sums_in_victoriametrics_equal_each_prometheus(clusters: Stack) -> None:
    at = time.time() - 5  # long enough ago for remote_write to have delivered it
    checks = {
        "devices": (f"sum by (cluster) ({RECORDS.node_devices})", f"sum({RECORDS.node_devices})"),
        "memory used": (f"sum by (cluster) ({c.MEMORY_USED})", f"sum({c.MEMORY_USED})"),
        "power": (f"sum by (cluster) ({c.POWER})", f"sum({c.POWER})"),
        "allocated": (f"count by (cluster) ({c.ALLOCATED} == 1)", f"count({c.ALLOCATED} == 1)"),
    }
    for what, (global_expr, local_expr) in checks.items():
        in_vm = {r["metric"]["cluster"]: float(r["value"][1]) for r in _values(clusters.vm, global_expr, at)}
        in_prom = {}
        for cluster, prom in clusters.prometheus.items():
            (row,) = _values(prom, local_expr, at)
            in_prom[cluster] = float(row["value"][1])
        assert in_vm == pytest.approx(in_prom, rel=1e-9), what
    # different seeds: the two clusters really differ, so a mixed-up cluster label would show
    memory = {
        r["metric"]["cluster"]: r["value"][1] for r in _values(clusters.vm, checks["memory used"][0], at)
    }
    assert memory["a"] != memory["b"]


def test_global_alert_reaches_alertmanager_from_vmalert_once_per_cluster(clusters: Stack) -> None:
    alerts = [
        a
        for a in _am_alerts(clusters.alertmanager)
        if a["labels"]["alertname"] == "AcceleratorFaultApplication"
    ]
    assert sorted(a["labels"]["cluster"] for a in alerts) == ["a", "b"]
    assert {a["generatorURL"].split("/")[2] for a in alerts} == {clusters.vmalert.split("/")[2]}
    assert {(a["labels"]["namespace"], a["labels"]["code"]) for a in alerts} == {("ml-team", "13")}
    # per-cluster alerts come from each cluster's Prometheus, labelled by its external label
    hardware = {
        (a["labels"]["alertname"], a["labels"].get("cluster"))
        for a in _am_alerts(clusters.alertmanager)
        if a["labels"].get("category") == "hardware"
    }
    assert {("AcceleratorEccUncorrectable", "a"), ("AcceleratorEccUncorrectable", "b")} <= hardware


def test_the_documented_federation_matcher_takes_every_recording_rule_and_no_raw_reading(
    clusters: Stack,
) -> None:
    """docs/deploy.md's /federate matcher against a real Prometheus: all recorded names, identity and
    liveness, nothing else (the old `level:.*` matched no recording rule)."""
    url = f"{clusters.prometheus['a'].base}/federate?" + urllib.parse.urlencode({"match[]": FEDERATE_MATCH})
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    names = {m for m in re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M)}
    recorded = {name.split("{")[0] for name, _ in _recording_exprs()}
    # Kueue/Volcano pending workloads: no such scheduler in this stack, so nothing is recorded to federate
    assert names == recorded - {QUEUE.workloads_pending} | {c.UP, c.INFO}
    assert 'cluster="a"' in text  # federation adds the external label
    deploy = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text("utf-8")
    assert FEDERATE_MATCH in deploy
