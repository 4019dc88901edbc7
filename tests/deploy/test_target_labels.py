"""The exporter's ServiceMonitor keeps Prometheus' target labels off device series, proven by a real Prometheus
running the scrape config prometheus-operator generates for it against a real sim exporter.

The scrape config is written out here from the operator's rules, as of prometheus-operator v0.93.0 (commit
6adcebc5076c, 24 commits after the tag; kube-prometheus-stack 88.5.3 ships v0.93.1):
``pkg/prometheus/promcfg.go`` ``generateServiceMonitorConfig`` (job name ``serviceMonitor/<ns>/<name>/<i>``,
``honor_labels`` through ``AddHonorLabels``, which forces false when the Prometheus sets
``overrideHonorLabels``), ``initRelabelings`` (``job`` -> ``__tmp_prometheus_job_name``), the selector and port
``keep`` rules, the ``node``/``pod``/``namespace``/``service``/``pod``/``container`` target labels,
``generateRunningFilter``, ``job`` from the Service name then from ``jobLabel``, ``endpoint``, then the
user's ``relabelings`` through ``generateRelabelConfig``, then ``appendShardingRelabelingWithLabel`` (one
shard: ``$(SHARD)`` is 0 once the config reloader substitutes it). Not emitted by a default
kube-prometheus-stack and left out: scrape-class relabelings and ``enforcedNamespaceLabel`` (both appended
after ours; docs/deploy.md "Target labels" says what they change). The golden file
``pkg/prometheus/testdata/SettingHonorLabels.golden`` is the same sequence for a ServiceMonitor without
relabelings.

There is no Kubernetes API here, so ``kubernetes_sd_configs`` (role ``endpoints``, the operator's default, or
``endpointslice``, the Prometheus' ``serviceDiscoveryRole: EndpointSlice``) is replaced by a
``static_configs`` entry whose labels are the ``__meta_kubernetes_*`` labels that role discovers for an
endpoint backed by a pod (Prometheus docs, kubernetes_sd_config, "endpoints" and "endpointslice"); Prometheus
relabels them like discovered ones and drops every ``__``-prefixed label afterwards. Scrape interval and timeout are shortened
to 1 s: label handling does not depend on them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.test_kustomize import render
from tests.ports import free_port
from xpuwatch.alerts.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SIM_NODE = "sim-node-1"  # the simulated fleet's node (vendors/sim_default.yaml)
EXPORTER_POD = "xpuwatch-exporter-nvidia-7xk2p"
DEAD_POD = "xpuwatch-exporter-amd-q8d2w"
TARGET_LABELS = ("namespace", "pod", "container", "service", "endpoint")


def _sanitize(name: str) -> str:
    """promcfg.go sanitizeLabelName: every character outside [a-zA-Z0-9_] becomes ``_``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _user_relabeling(r: dict[str, Any]) -> dict[str, Any]:
    """promcfg.go generateRelabelConfig: one ServiceMonitor RelabelConfig -> Prometheus' relabel_config."""
    out: dict[str, Any] = {}
    if r.get("sourceLabels"):
        out["source_labels"] = r["sourceLabels"]
    if "separator" in r:  # a pointer in the CRD: emitted when set, even to ""
        out["separator"] = r["separator"]
    if r.get("targetLabel"):
        out["target_label"] = r["targetLabel"]
    if r.get("regex"):
        out["regex"] = r["regex"]
    if r.get("modulus"):
        out["modulus"] = r["modulus"]
    if "replacement" in r:
        out["replacement"] = r["replacement"]
    if r.get("action"):
        out["action"] = r["action"].lower()
    return out


def operator_scrape_config(
    sm: dict[str, Any],
    i: int,
    targets: list[dict[str, Any]],
    *,
    role: str = "endpoints",
    override_honor_labels: bool = False,
) -> dict[str, Any]:
    """The scrape config prometheus-operator generates for endpoint ``i`` of ServiceMonitor ``sm`` (``role``
    endpoints, the default, or endpointslice; one shard), with ``targets`` (static_configs entries) standing
    for the discovered endpoints."""
    spec, ep = sm["spec"], sm["spec"]["endpoints"][i]
    assert set(spec["selector"]) == {"matchLabels"}, "only matchLabels is written out here"
    assert "port" in ep, "only named ports are written out here"
    relabel: list[dict[str, Any]] = [{"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}]
    for k in sorted(spec["selector"]["matchLabels"]):
        s = _sanitize(k)
        relabel.append(
            {
                "action": "keep",
                "source_labels": [
                    f"__meta_kubernetes_service_label_{s}",
                    f"__meta_kubernetes_service_labelpresent_{s}",
                ],
                "regex": f"({spec['selector']['matchLabels'][k]});true",
            }
        )
    sd = "endpointslice" if role == "endpointslice" else "endpoint"
    relabel.append(
        {"action": "keep", "source_labels": [f"__meta_kubernetes_{sd}_port_name"], "regex": ep["port"]}
    )
    kind = [f"__meta_kubernetes_{sd}_address_target_kind", f"__meta_kubernetes_{sd}_address_target_name"]
    relabel += [
        {
            "source_labels": kind,
            "separator": ";",
            "regex": "Node;(.*)",
            "replacement": "${1}",
            "target_label": "node",
        },
        {
            "source_labels": kind,
            "separator": ";",
            "regex": "Pod;(.*)",
            "replacement": "${1}",
            "target_label": "pod",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
    ]
    if ep.get("filterRunning", True):
        relabel.append(
            {
                "action": "drop",
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "regex": "(Failed|Succeeded)",
            }
        )
    for label in spec.get("targetLabels", []):
        relabel.append(
            {
                "source_labels": [f"__meta_kubernetes_service_label_{_sanitize(label)}"],
                "target_label": _sanitize(label),
                "regex": "(.+)",
                "replacement": "${1}",
            }
        )
    for label in spec.get("podTargetLabels", []):
        relabel.append(
            {
                "source_labels": [f"__meta_kubernetes_pod_label_{_sanitize(label)}"],
                "target_label": _sanitize(label),
                "regex": "(.+)",
                "replacement": "${1}",
            }
        )
    relabel.append(
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job", "replacement": "${1}"}
    )
    if spec.get("jobLabel"):
        relabel.append(
            {
                "source_labels": [f"__meta_kubernetes_service_label_{_sanitize(spec['jobLabel'])}"],
                "target_label": "job",
                "regex": "(.+)",
                "replacement": "${1}",
            }
        )
    relabel.append({"target_label": "endpoint", "replacement": ep["port"]})
    relabel += [_user_relabeling(r) for r in ep.get("relabelings", [])]
    relabel += [
        {
            "source_labels": ["__address__", "__tmp_hash"],
            "target_label": "__tmp_hash",
            "regex": "(.+);",
            "replacement": "$1",
            "action": "replace",
        },
        {"source_labels": ["__tmp_hash"], "target_label": "__tmp_hash", "modulus": 1, "action": "hashmod"},
        {"source_labels": ["__tmp_hash", "__tmp_disable_sharding"], "regex": "0;|.+;.+", "action": "keep"},
    ]
    return {
        "job_name": f"serviceMonitor/{sm['metadata']['namespace']}/{sm['metadata']['name']}/{i}",
        "honor_labels": bool(ep.get("honorLabels", False)) and not override_honor_labels,
        "static_configs": targets,
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "relabel_configs": relabel,
    }


def endpoints_target(
    address: str,
    service: dict[str, Any],
    pod: str,
    node: str,
    pod_labels: dict[str, str],
    role: str = "endpoints",
) -> dict[str, Any]:
    """The ``__meta_kubernetes_*`` labels the ``role`` (endpoints or endpointslice) discovers for ``address``,
    an endpoint of ``service`` (its first port) backed by a running pod ``pod`` on ``node``."""
    meta = service["metadata"]
    sd = "endpointslice" if role == "endpointslice" else "endpoint"
    labels = {
        f"__meta_kubernetes_{sd}_port_name": service["spec"]["ports"][0]["name"],
        f"__meta_kubernetes_{sd}_port_protocol": "TCP",
        f"__meta_kubernetes_{sd}_address_target_kind": "Pod",
        f"__meta_kubernetes_{sd}_address_target_name": pod,
    }
    if role == "endpointslice":
        labels |= {
            "__meta_kubernetes_endpointslice_name": f"{meta['name']}-x7q2k",
            "__meta_kubernetes_endpointslice_address_type": "IPv4",
            "__meta_kubernetes_endpointslice_endpoint_conditions_ready": "true",
            "__meta_kubernetes_endpointslice_endpoint_node_name": node,
        }
    else:
        labels |= {
            "__meta_kubernetes_endpoints_name": meta["name"],
            "__meta_kubernetes_endpoint_ready": "true",
            "__meta_kubernetes_endpoint_node_name": node,
        }
    labels |= {
        "__meta_kubernetes_namespace": meta["namespace"],
        "__meta_kubernetes_service_name": meta["name"],
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_ip": address.rsplit(":", 1)[0],
        "__meta_kubernetes_pod_node_name": node,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_ready": "true",
        "__meta_kubernetes_pod_container_name": "exporter",
        "__meta_kubernetes_pod_container_port_name": "metrics",
        "__meta_kubernetes_pod_controller_kind": "DaemonSet",
        "__meta_kubernetes_pod_controller_name": pod.rsplit("-", 1)[0],
    }
    for k, v in meta.get("labels", {}).items():
        labels[f"__meta_kubernetes_service_label_{_sanitize(k)}"] = v
        labels[f"__meta_kubernetes_service_labelpresent_{_sanitize(k)}"] = "true"
    for k, v in pod_labels.items():
        labels[f"__meta_kubernetes_pod_label_{_sanitize(k)}"] = v
        labels[f"__meta_kubernetes_pod_labelpresent_{_sanitize(k)}"] = "true"
    return {"targets": [address], "labels": labels}


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def _query(base: str, q: str) -> list[dict[str, Any]]:
    doc = _get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q}))
    assert doc["status"] == "success", doc
    return doc["data"]["result"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def sim_exporter() -> Iterator[str]:
    """A real ``xpuwatch serve --simulate`` (its default fleet: 18 cards, 13 held by a workload); host:port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPUWATCH_") and k != "NODE_NAME"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xpuwatch",
            "serve",
            "--simulate",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _own_series(address: str, name: str) -> set[frozenset[tuple[str, str]]]:
    """The label sets the exporter itself serves for ``name``."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        frozenset(s.labels.items())
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    }


def _series(base: str, q: str) -> set[frozenset[tuple[str, str]]]:
    return {frozenset((k, v) for k, v in r["metric"].items() if k != "__name__") for r in _query(base, q)}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("role", "override_honor_labels"),
    [("endpoints", False), ("endpoints", True), ("endpointslice", False)],
    ids=["as-shipped", "overrideHonorLabels", "endpointslice"],
)
def test_device_series_keep_the_workloads_labels_and_none_of_the_exporter_pods(
    sim_exporter: str, tmp_path: Path, role: str, override_honor_labels: bool
) -> None:
    binary = shutil.which("prometheus")
    assert binary, "Debian package prometheus is required"
    objs = render("overlays/mixed")
    (sm,) = [
        o for o in objs if o["kind"] == "ServiceMonitor" and o["metadata"]["name"] == "xpuwatch-exporter"
    ]
    (svc,) = [o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == "xpuwatch-exporter"]
    (ds,) = [
        o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "xpuwatch-exporter-nvidia"
    ]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    dead = f"127.0.0.1:{free_port()}"  # nothing listens: an exporter that is down
    amd_labels = {**pod_labels, "xpuwatch.io/vendor": "amd"}
    targets = [
        endpoints_target(sim_exporter, svc, EXPORTER_POD, SIM_NODE, pod_labels, role),
        endpoints_target(dead, svc, DEAD_POD, "gpu-node-2", amd_labels, role),
    ]
    job = operator_scrape_config(sm, 0, targets, role=role, override_honor_labels=override_honor_labels)
    assert job["honor_labels"] is not override_honor_labels
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": [job]}, sort_keys=False))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    prom = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    job_name = "xpuwatch-exporter"  # jobLabel: the Service's app.kubernetes.io/name
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if len(_query(base, "count_over_time(up[1m]) >= 2")) == 2:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and prom.poll() is None, (
                "Prometheus did not scrape both targets"
            )
            time.sleep(0.3)

        # device series: a card nobody holds has no namespace/pod, a held one the workload's; nothing names
        # the exporter pod
        cards = {dict(s)["uuid"]: dict(s) for s in _series(base, "accelerator_up")}
        assert len(cards) == 18
        held = {u: (c["namespace"], c["pod"]) for u, c in cards.items() if "pod" in c}
        assert len(held) == 13 and held["GPU-c19da510-79e8-fe29-ceae-3bb42ec3a044"] == (
            "ml-team",
            "train-llm-0",
        )
        free = [c for c in cards.values() if "pod" not in c]
        assert len(free) == 5 and not any(set(TARGET_LABELS) & set(c) for c in free)
        assert (
            _query(base, 'count by (namespace) (accelerator_temperature_celsius{namespace="xpuwatch"})') == []
        )
        everything = _query(base, '{__name__=~".+", job="xpuwatch-exporter"}')
        assert everything and not [
            r["metric"]
            for r in everything
            if EXPORTER_POD in r["metric"].values() or {"service", "endpoint"} & set(r["metric"])
        ]
        assert not [r["metric"] for r in everything if any(k.startswith("exported_") for k in r["metric"])]
        # ... exactly the exporter's own labels plus job and instance
        extra = {("job", job_name), ("instance", f"{SIM_NODE}/nvidia")}
        for name in ("accelerator_up", "accelerator_temperature_celsius"):
            own = _own_series(sim_exporter, name)
            assert _series(base, name) == {s | extra for s in own}, name

        # up: the exporter target is named by its node and vendor, nothing of its pod
        assert {(frozenset(r["metric"].items()), r["value"][1]) for r in _query(base, "up")} == {
            (frozenset({("__name__", "up"), ("job", job_name), ("instance", f"{SIM_NODE}/nvidia")}), "1"),
            (frozenset({("__name__", "up"), ("job", job_name), ("instance", "gpu-node-2/amd")}), "0"),
        }
        selector = load_spec().exporter_job_selector
        assert len(_query(base, f"up{{{selector}}}")) == 2
        # XpuwatchExporterDown's own expression names the dead exporter's target
        rules = yaml.safe_load((ROOT / "alerts" / "generated" / "rules.yml").read_text("utf-8"))
        (down,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "XpuwatchExporterDown"]
        assert _series(base, down["expr"]) == {frozenset({("job", job_name), ("instance", "gpu-node-2/amd")})}
    finally:
        prom.terminate()
        prom.wait(timeout=10)


def test_every_exporter_daemonset_gives_its_pods_a_distinct_vendor_label() -> None:
    """instance is ``<node>/<xpuwatch.io/vendor>``: unique per target only while every exporter DaemonSet
    labels its pods with its own vendor (two DaemonSets may run on a node carrying two vendors' labels)."""
    sets = [o for o in render("overlays/mixed") if o["kind"] == "DaemonSet"]
    vendors = [o["spec"]["template"]["metadata"]["labels"].get("xpuwatch.io/vendor") for o in sets]
    assert len(sets) == 10 and None not in vendors and len(set(vendors)) == len(sets)
