"""Benchmark: a fleet's day in VictoriaMetrics, then every dashboard, rule group and the report against it.

Run from the repository root (issues 23 and 36; docs/deploy.md "Sizing")::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/fleet_scale.py --devices 2048,8192 --runs 3
    PYTHONPATH=$PWD .venv/bin/python benchmarks/fleet_scale.py --devices 16384 --layout --runs 3 --ahead 90
    PYTHONPATH=$PWD .venv/bin/python benchmarks/fleet_scale.py --devices 2048 --hours 168 --only report \
        --keep /var/tmp/xpuwatch-fleet

It measures what a deployment following docs/deploy.md runs. Per size it starts Debian's
``victoria-metrics`` (1.79) on loopback with its own ``-storageDataPath`` in a temporary directory and
exactly the flags of docs/deploy.md's ``victoria-metrics`` command line (read from the page at run time:
no raised query limit, ``-dedup.minScrapeInterval``; ``--vm-flag`` adds one for experiments), and:

1. **Loads** a synthetic history: ``--hours`` (24) before now of samples every ``--step`` seconds (default: the
   interval of the exporter's ServiceMonitor in deploy/kustomize/base/monitoring.yaml, 15 s), each sample
   stored ``--replicas`` (2) times, as an HA Prometheus pair remote-writes it with the replica label
   dropped, each replica at its own offset in the step (``replica_offset_ms``), and on to ``--ahead``
   minutes (30) after now so the queries below, all at "now", find fresh samples for the whole run (the load
   and the runs must end before the history does: at 16,384 devices the load alone takes 37 minutes on the
   quiet 2-core build machine, hence ``--ahead 90`` there; a run past the history's end prints NOT VALID and
   its row says so). The series are
   the exporter's own: the sim exporter (``xpuwatch serve --simulate``) is started once per node type and
   its /metrics read, so every name and label the rules, dashboards and report read is the one the
   exporter writes today. Node types (8 devices a node, node ``n`` of type ``n % 4``): A100s with one card
   in MIG mode (three slices), RTX 4090s with one card shared by two vGPU shares, MI250X and Ascend 910B;
   on each node most cards are held by a pod (the namespace and pod names made unique per node). Each
   node's series get the target labels of the ServiceMonitor (docs/deploy.md "Target labels":
   ``job="xpuwatch-exporter"``, ``instance="<node>/<vendor>"``) and ``cluster="fleet-<n // 512>"``, plus
   the scrape's own ``up`` and ``scrape_*`` series; kube-state-metrics' series of every node
   (``kube_node_info``, ``kube_node_spec_unschedulable``) and of the pods waiting for cards
   (``report.history.waiting``) are added. Values move over the day (utilization, power, memory, clocks,
   temperature; the energy counter integrates power; fault and error counters stay flat, as on a healthy
   fleet). The lines are VM's JSON import format (one line per series and replica with its arrays of values
   and millisecond timestamps, ``/api/v1/import``), generated per node with numpy and streamed (memory
   bounded by one node's lines). Printed: series and samples generated, series VM holds, load time, VM's
   RSS and data size after a flush.
2. **Recorded series**: vmalert's replay mode runs the recording groups of alerts/generated/rules.yml over
   the last 6 h at the evaluation interval, so the panels that read recorded series read 6 h of them, as
   under a ruler that ran all along (time printed; not part of any target).

Then ``--runs`` (3) runs on the loaded store, each of:

3. **Rules**: Debian's ``vmalert`` with alerts/generated/rules.yml (``--groups``: some of its groups),
   ``-evaluationInterval`` ``--interval`` (30 s) against VM, writing back to VM, notifying an Alertmanager
   stand-in, for ``--intervals`` (3) intervals; each group's evaluation time from vmalert's own /metrics
   (1.79: ``vmalert_iteration_duration_seconds_sum`` / ``_count`` per group, the most seen from its
   quantiles) as a share of the interval. The groups run concurrently, each rule after the other, on this
   machine's cores. Where the time goes (first run): every rule's expression timed as an instant query at
   now against VM (what vmalert sends), the slowest listed.
4. **Dashboards**: every panel query of every generated dashboard (read from dashboards/generated at run
   time, ``tests.dashboards.test_prometheus._targets``), each variable at Grafana's default "All" (its
   ``allValue``) and the device dashboard's uuid a MIG card, at Grafana's default range (the last 6 h, step
   20 s, ``$__rate_interval`` = max(step + scrape, 4 x scrape) with the history's scrape interval: 60 s at
   15 s), each run ``--query-runs`` times (3), timed to the last byte of the answer (decoding it is
   Grafana's); per dashboard the sum of the median times (a full refresh, queries one after another) and
   the slowest five queries with the series they return.
5. **Report**: ``xpuwatch report``'s code (``report.baseline.collect``/``figures``, chargeback, render,
   with its default concurrency) for the last ``--hours``, each run on an emptied result cache
   (``/internal/resetRollupResultCache``: a run pays the whole query, as the first report of a window does),
   time split into queries, figures and render, with VictoriaMetrics' CPU time for the queries; in the first
   run then every query alone, each on an emptied cache, slowest first with its CPU time (``profile``).

``--only rules`` measures the replay and rules only, ``--only report`` the report only. ``--keep DIR`` keeps
the loaded store in ``DIR/<devices>/`` (``history.json`` there says which history) and reuses it when a later
run asks for the same devices, ``--hours``, ``--step`` and ``--replicas`` (a long history for the report
loads once; another history replaces it); its result cache is emptied at each start.

Then per size a ready-to-paste markdown row of the docs/deploy.md sizing table: each figure the median of
the runs and, in brackets, their range. ``--layout`` measures docs/deploy.md's layout for several clusters
instead, each ruler in its own place: the central store with the groups of ``--central-groups`` (none by
default) and the dashboards and report, then one cluster's Prometheus with its share and every other group
(``cluster_prometheus``). Targets (issue 23), at 16,384 devices: every rule group under 10 % of its
interval, a full dashboard refresh under 2 s, the report under 60 s; a missed target is marked and its top
queries or rules printed. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import http.server
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.dashboards.test_prometheus import _dashboards, _targets, substitute
from tests.ports import free_port
from xpuwatch.alerts import queue
from xpuwatch.alerts.promapi import Prometheus
from xpuwatch.alerts.spec import load_spec
from xpuwatch.report import history
from xpuwatch.report.baseline import Window, collect, figures, requests
from xpuwatch.report.chargeback import by_team
from xpuwatch.report.render import html

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "alerts" / "generated" / "rules.yml"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
SERVICEMONITOR = ROOT / "deploy" / "kustomize" / "base" / "monitoring.yaml"
# The groups a ruler on the central store evaluates in docs/deploy.md's layout ("Several clusters, one view");
# each cluster's Prometheus evaluates the others, for its own share of the fleet. Measured (issue 36): the performance groups' per-device alerts (idle notebooks, power-starved and
# low-utilization cards, container memory hogs, application faults) read raw per-device series, so on a
# central ruler they cost what the whole fleet's devices cost: at 16,384 devices 44.9 % and 26.7 % of 30 s
# (shared machine under load), where each cluster's Prometheus evaluates them for its own 4,096. So every
# group runs in the clusters and the central store has no ruler of xpuwatch's; ``--central-groups`` measures
# another split.
CENTRAL_GROUPS: tuple[str, ...] = ()
DEVICES_PER_NODE = 8
NODES_PER_CLUSTER = 512
RANGE_S = 6 * 3600  # Grafana's default time range: now-6h
STEP_S = 20  # Grafana's $__interval for 6 h on a half-width panel (~1,080 points)
TARGET_RULE_SHARE, TARGET_REFRESH_S, TARGET_REPORT_S = 0.10, 2.0, 60.0

# One node of each type: the sim exporter's scenario format (docs/exporter.md). Device and slice ids as the
# sim numbers them (vendors/sim.py: MIG ids "<GI>/0", vGPU shares "0".."n-1", Ascend chips "<NPU>-0").


def _pod(ns: str, pod: str, container: str, kind: str, owner: str | None = None) -> dict[str, str]:
    out = {"namespace": ns, "pod": pod, "container": container, "workload_kind": kind}
    return {**out, "owner": owner} if owner else out


def _held(vendor: str, index: str, profile: str, pod: dict[str, str] | None) -> dict[str, Any]:
    ev: dict[str, Any] = {"at": 0, "device": f"{vendor}/{index}", "profile": profile}
    return {**ev, "pod": pod} if pod else ev


def _whole_cards(vendor: str, indices: Sequence[str]) -> list[dict[str, Any]]:
    """Workloads of cards 1-7 of ``indices``: six held (three training jobs, an inference service, an idle
    notebook, a memory-bound job), one free; card 0 is the caller's (slices or a card of its own)."""
    shapes: list[tuple[str, dict[str, str] | None]] = [
        ("training", _pod("ml", "train-0", "trainer", "job")),
        ("training", _pod("ml", "train-1", "trainer", "job")),
        ("inference", _pod("serving", "api-0", "server", "service")),
        ("idle_notebook", _pod("research", "jupyter-0", "notebook", "notebook", "alice")),
        ("training", _pod("nlp", "train-2", "trainer", "job")),
        ("idle", None),
        ("memory_bound", _pod("vision", "etl-0", "worker", "job")),
    ]
    return [_held(vendor, i, p, pod) for i, (p, pod) in zip(indices[1:], shapes, strict=True)]


def node_scenarios() -> list[dict[str, Any]]:
    """The four node types as sim scenarios, 8 devices each."""
    a100 = {
        "devices": [
            {
                "vendor": "nvidia",
                "model": "NVIDIA A100-SXM4-80GB",
                "count": 1,
                "mig": ["3g.40gb", "2g.20gb", "1g.10gb"],
            },
            {"vendor": "nvidia", "model": "NVIDIA A100-SXM4-80GB", "count": 7},
        ],
        "timeline": [
            {"at": 0, "device": "nvidia/0", "profile": "inference"},
            {
                "at": 0,
                "device": "nvidia/0",
                "slice": "2/0",
                "pod": _pod("serving", "llm-0", "server", "service"),
            },
            {
                "at": 0,
                "device": "nvidia/0",
                "slice": "3/0",
                "profile": "idle_notebook",
                "pod": _pod("research", "jupyter-mig", "notebook", "notebook", "bob"),
            },
            *_whole_cards("nvidia", [str(i) for i in range(8)]),
        ],
    }
    rtx = {
        "devices": [
            {"vendor": "nvidia", "model": "NVIDIA GeForce RTX 4090", "count": 7},
            {"vendor": "nvidia", "model": "NVIDIA GeForce RTX 4090", "count": 1, "vgpu": 2},
        ],
        "timeline": [
            *_whole_cards("nvidia", [str(i) for i in range(8)]),
            {"at": 0, "device": "nvidia/0", "profile": "compute_bound"},
            {"at": 0, "device": "nvidia/7", "slice": "0", "pod": _pod("vision", "ocr-0", "ocr", "service")},
            {
                "at": 0,
                "device": "nvidia/7",
                "slice": "1",
                "pod": _pod("vision", "ocr-batch", "worker", "job"),
            },
        ],
    }
    rtx["timeline"] = [e for e in rtx["timeline"] if not (e["device"] == "nvidia/7" and "slice" not in e)]
    mi250 = {
        "devices": [{"vendor": "amd", "model": "AMD Instinct MI250X", "count": 8}],
        "timeline": [
            {
                "at": 0,
                "device": "amd/0",
                "profile": "starved",
                "pod": _pod("research", "feeder-0", "feeder", "job"),
            },
            *_whole_cards("amd", [str(i) for i in range(8)]),
        ],
    }
    ascend = {
        "devices": [{"vendor": "huawei", "model": "Ascend910B", "count": 8}],
        "timeline": [
            {"at": 0, "device": "huawei/0-0", "profile": "compute_bound"},
            *_whole_cards("huawei", [f"{i}-0" for i in range(8)]),
        ],
    }
    return [{"seed": 7, "node": "TEMPLATE-NODE", "poll_interval": 1, **s} for s in (a100, rtx, mi250, ascend)]


@dataclass(frozen=True)
class TemplateSeries:
    """One series of a template node's /metrics: sample name, labels, value, whether it only rises."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    counter: bool


def _scrape(url: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                text: str = r.read().decode()
            if "accelerator_up{" in text:
                return text
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"no device series at {url} within {timeout_s:.0f} s")
        time.sleep(0.5)


def templates(tmp: Path) -> list[list[TemplateSeries]]:
    """Each node type's series, read from the sim exporter's /metrics after its first polls."""
    out = []
    procs = []
    try:
        ports = []
        for k, scenario in enumerate(node_scenarios()):
            path = tmp / f"node{k}.yaml"
            path.write_text(yaml.safe_dump(scenario))
            port = free_port()
            ports.append(port)
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "xpuwatch",
                        "serve",
                        "--simulate",
                        f"--sim-config={path}",
                        f"--web.listen-address=127.0.0.1:{port}",
                    ],
                    cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        for port in ports:
            _scrape(f"http://127.0.0.1:{port}/metrics")
        time.sleep(2.5)  # counters and rates after a few polls
        for port in ports:
            text = _scrape(f"http://127.0.0.1:{port}/metrics")
            series = []
            for fam in text_string_to_metric_families(text):
                for s in fam.samples:
                    if s.name.endswith("_created"):
                        continue  # creation times: not a series once scraped as OpenMetrics
                    counter = fam.type in ("counter", "histogram", "summary")
                    series.append(
                        TemplateSeries(s.name, tuple(sorted(s.labels.items())), float(s.value), counter)
                    )
            out.append(series)
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
    return out


# Label values made unique per node: who holds a card (the same pod name on two nodes would be one pod).
_PER_NODE = ("pod", "container_id", "pod_uid", "uid")


def _node_labels(
    labels: tuple[tuple[str, str], ...], n: int, node: str, target: dict[str, str]
) -> dict[str, str]:
    out = dict(target)
    for k, v in labels:
        if k == "node":
            v = node
        elif k in ("uuid", "parent_uuid"):
            v = f"{v}-{n:05x}" if v else v
        elif k in _PER_NODE and v:
            v = f"{v}-{n}"
        elif k == "namespace" and v:
            v = f"{v}-{n % 16}"
        elif k == "owner" and v:
            v = f"user{n % 40}"
        out[k] = v
    return out


class Formatter:
    """Per-series value arrays -> the comma-separated JSON numbers VM imports, fast: values quantized (ratios
    to 0.001, other gauges to 4 significant digits) and formatted through lookup tables of their strings."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._ratio = np.array([f"{k / 1000:g}" for k in range(1001)], dtype=object)
        self._mant: dict[int, np.ndarray] = {}
        self._const: dict[float, str] = {}

    def constant(self, v: float) -> str:
        s = self._const.get(v)
        if s is None:
            one = repr(v) if not v.is_integer() else str(int(v))
            s = self._const[v] = ",".join([one] * self.count)
        return s

    def ratio(self, a: np.ndarray) -> str:
        idx = np.clip(np.rint(a * 1000), 0, 1000).astype(np.int64)
        return ",".join(self._ratio[idx].tolist())

    def gauge(self, a: np.ndarray, scale: float) -> str:
        e = math.floor(math.log10(scale)) - 3 if scale > 0 else 0
        table = self._mant.get(e)
        if table is None:
            suffix = f"e{e}" if e else ""
            table = self._mant[e] = np.array([f"{m}{suffix}" for m in range(30000)], dtype=object)
        idx = np.clip(np.rint(a / 10.0**e), 0, 29999).astype(np.int64)
        return ",".join(table[idx].tolist())

    @staticmethod
    def integers(a: np.ndarray) -> str:
        return ",".join(map(str, a.astype(np.int64).tolist()))


def _values(s: TemplateSeries, i: int, t: np.ndarray, n: int, rng: np.random.Generator, f: Formatter) -> str:
    """Values of ``s``, series ``i`` of its node type, at Unix seconds ``t`` on node ``n``."""
    v = s.value
    phase = (n * 0.37 + i * 1.3) % (2 * math.pi)
    day = 0.5 + 0.5 * np.cos(2 * math.pi * ((t % 86400) / 86400 - 14 / 24))  # peak 14:00 UTC
    if s.counter:
        if "energy" in s.name:
            watts = 150.0 + 200.0 * day + 20.0 * np.sin(t / 977.0 + phase)
            step = float(t[1] - t[0]) if len(t) > 1 else 60.0
            return f.integers(v + np.cumsum(watts * step))
        if s.name.startswith(("process_cpu", "python_gc")):
            return f.integers(v + np.arange(len(t)) * 2)
        return f.constant(v)
    if s.name.endswith("_timestamp_seconds") and "start" not in s.name:
        return f.integers(t)  # last success: the scrape's own time
    if v == 0 or (v.is_integer() and abs(v) < 1000):
        return f.constant(v)  # flags, states, counts, info, throttle reasons
    noise = rng.standard_normal(len(t))
    if s.name.endswith("_ratio") and 0 <= v <= 1:
        return f.ratio(v + 0.2 * v * (day - 0.5) + 0.01 * np.sin(t / 977.0 + phase) + 0.003 * noise)
    if s.name.endswith("_seconds") or v < 0:
        return f.constant(v)
    wave = 1 + 0.04 * np.sin(t / 977.0 + phase) + 0.03 * (day - 0.5) + 0.005 * noise
    return f.gauge(np.maximum(v * wave, 0), abs(v))


@dataclass(frozen=True)
class Loaded:
    series: int
    ksm_series: int  # of them, kube-state-metrics' (nodes, waiting pods)
    samples: int
    seconds: float
    body_bytes: int


def history_times(hours: float, step: int, ahead_s: int, now: float) -> np.ndarray:
    """Sample times (Unix seconds), every ``step`` from ``hours`` before ``now`` to ``ahead_s`` after it: a
    window of ``hours`` ending at any moment from ``now`` until ``ahead_s`` later lies in the history whole
    (until issue 36 the history was ``hours`` long in all, so a long ``--ahead`` cut the report's window)."""
    end = int(now + ahead_s) // step * step
    start = int(now - hours * 3600) // step * step
    return np.arange(start + step, end + 1, step, dtype=np.int64)


# The series a Prometheus adds per target (https://prometheus.io/docs/concepts/jobs_instances/), and
# their values on this fleet's scrapes.
SCRAPE_SERIES = (
    ("up", 1.0),
    ("scrape_duration_seconds", 0.012),
    ("scrape_samples_scraped", 0.0),
    ("scrape_samples_post_metric_relabeling", 0.0),
    ("scrape_series_added", 0.0),
)


def node_lines(
    tpl: list[TemplateSeries], n: int, t: np.ndarray, stamps: Sequence[str], f: Formatter
) -> tuple[bytes, int]:
    """Node ``n``'s JSON import lines and their series count: the exporter's series with the target labels
    the ServiceMonitor gives them (docs/deploy.md "Target labels": ``job="xpuwatch-exporter"``,
    ``instance="<node>/<vendor>"``, plus ``cluster``), and the scrape's own series. Each series is written
    once per entry of ``stamps`` (the millisecond timestamps each Prometheus replica scraped at, joined):
    an HA pair's remote writes store every sample twice, with the same labels (the replica label dropped)
    and the two replicas' own scrape offsets, for VictoriaMetrics' ``-dedup.minScrapeInterval`` to thin."""
    node = f"gpu-node-{n:05d}"
    cluster = f"fleet-{n // NODES_PER_CLUSTER}"
    vendor = next((v for s in tpl for k, v in s.labels if k == "vendor"), "none")
    target = {"job": "xpuwatch-exporter", "instance": f"{node}/{vendor}", "cluster": cluster}
    rng = np.random.default_rng(n)
    tf = t.astype(np.float64)
    parts = []
    for i, s in enumerate(tpl):
        metric = {"__name__": s.name, **_node_labels(s.labels, n, node, target)}
        head = f'{{"metric":{json.dumps(metric, separators=(",", ":"))},"values":[{_values(s, i, tf, n, rng, f)}],'
        parts += [f'{head}"timestamps":[{st}]}}\n' for st in stamps]
    for name, value in SCRAPE_SERIES:
        metric = {"__name__": name, **target}
        value = value or float(len(tpl))
        head = f'{{"metric":{json.dumps(metric, separators=(",", ":"))},"values":[{f.constant(value)}],'
        parts += [f'{head}"timestamps":[{st}]}}\n' for st in stamps]
    return "".join(parts).encode(), len(tpl) + len(SCRAPE_SERIES)


KSM_NODE_INFO, KSM_UNSCHEDULABLE = "kube_node_info", "kube_node_spec_unschedulable"


def ksm_node_labels(n: int, cluster: bool = True) -> dict[str, str]:
    """kube-state-metrics' labels of node ``n``'s series (the target's ``job``/``instance`` included)."""
    out = {"job": "kube-state-metrics", "instance": "ksm:8080", "node": f"gpu-node-{n:05d}"}
    return {**out, "cluster": f"fleet-{n // NODES_PER_CLUSTER}"} if cluster else out


def ksm_pod_series(p: history.WaitingPod) -> tuple[tuple[str, dict[str, str], int], ...]:
    """kube-state-metrics' series of a pod waiting for cards, as (name, labels besides cluster, namespace and
    pod, value): its request, Pending phase, unscheduled condition and creation time (what
    ``alerts.queue`` reads)."""
    return (
        (queue.KSM_REQUESTS, {"container": "main", "resource": p.resource, "unit": "integer"}, p.count),
        (queue.KSM_PHASE, {"uid": p.pod, "phase": "Pending"}, 1),
        (queue.KSM_SCHEDULED, {"uid": p.pod, "condition": "false"}, 1),
        (queue.KSM_CREATED, {"uid": p.pod}, int(p.created)),
    )


def ksm_lines(nodes: int, t: np.ndarray) -> tuple[bytes, int, int]:
    """kube-state-metrics series: each node's ``kube_node_info`` and ``kube_node_spec_unschedulable`` (0),
    which ``AcceleratorMissing`` joins, and of the pods waiting for cards (``report.history.waiting``), per
    cluster, present only while they wait, as KSM's are. Lines, series, samples."""
    clusters = math.ceil(nodes / NODES_PER_CLUSTER)
    start = int(t[0])
    pods: dict[tuple[str, str], tuple[history.WaitingPod, list[int]]] = {}
    for ts in t.tolist():
        for p in history.waiting(ts, start):
            pods.setdefault((p.namespace, p.pod), (p, []))[1].append(ts)
    lines, series, samples = [], 0, 0
    stamps = [x * 1000 for x in t.tolist()]
    for n in range(nodes):
        for name, value in ((KSM_NODE_INFO, 1), (KSM_UNSCHEDULABLE, 0)):
            metric = {"__name__": name, **ksm_node_labels(n)}
            lines.append(json.dumps({"metric": metric, "values": [value] * len(t), "timestamps": stamps}))
            series += 1
            samples += len(t)
    for c in range(clusters):
        for p, ts in pods.values():
            base = {
                "job": "kube-state-metrics",
                "instance": "ksm:8080",
                "cluster": f"fleet-{c}",
                "namespace": p.namespace,
                "pod": p.pod,
            }
            for name, extra, value in ksm_pod_series(p):
                metric = {"__name__": name, **base, **extra}
                lines.append(
                    json.dumps(
                        {"metric": metric, "values": [value] * len(ts), "timestamps": [x * 1000 for x in ts]}
                    )
                )
                series += 1
                samples += len(ts)
    return ("\n".join(lines) + "\n").encode() if lines else b"", series, samples


def _duration_s(text: str) -> int:
    """A Prometheus duration of one unit (``15s``, ``1m``) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return max(1, round(int(text[: -len(unit)]) * units[unit]))
    raise ValueError(f"not a duration: {text!r}")


def scrape_interval_s() -> int:
    """The scrape interval of the exporter's ServiceMonitor (deploy/kustomize/base/monitoring.yaml), s."""
    for doc in yaml.safe_load_all(SERVICEMONITOR.read_text()):
        if doc and doc.get("kind") == "ServiceMonitor" and doc["metadata"]["name"] == "xpuwatch-exporter":
            return _duration_s(doc["spec"]["endpoints"][0]["interval"])
    raise SystemExit(f"fleet_scale: no xpuwatch-exporter ServiceMonitor in {SERVICEMONITOR}")


def documented_vm_flags() -> list[str]:
    """The flags docs/deploy.md runs VictoriaMetrics with: its ``victoria-metrics ...`` command line (the
    benchmark replaces only ``-storageDataPath`` and adds its loopback ``-httpListenAddr``)."""
    for line in DEPLOY_DOC.read_text().splitlines():
        if line.startswith("victoria-metrics "):
            return line.split()[1:]
    raise SystemExit(f"fleet_scale: no 'victoria-metrics ...' command line in {DEPLOY_DOC}")


class VictoriaMetrics:
    """Debian's single-node VictoriaMetrics on loopback with its own data directory, run with exactly the
    flags docs/deploy.md deploys it with (``documented_vm_flags``), plus ``extra`` flags if given."""

    def __init__(self, data: Path, extra: Sequence[str] = ()) -> None:
        binary = shutil.which("victoria-metrics")
        if not binary:
            raise SystemExit("fleet_scale: needs Debian's victoria-metrics (/usr/bin/victoria-metrics)")
        # VictoriaMetrics keeps its query results (the rollup result cache) in the data directory across
        # restarts: a kept history (--keep) would answer a repeated report from it. Each start is without it.
        for cached in data.glob("cache/rollupResult*"):
            shutil.rmtree(cached) if cached.is_dir() else cached.unlink()
        self.data = data
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.flags = [
            *(f for f in documented_vm_flags() if not f.startswith("-storageDataPath=")),
            *extra,
        ]
        self.proc = subprocess.Popen(
            [binary, f"-storageDataPath={data}", f"-httpListenAddr=127.0.0.1:{self.port}", *self.flags],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("victoria-metrics did not start") from None
                time.sleep(0.3)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def cpu_seconds(self) -> float:
        """CPU time VictoriaMetrics has used so far, user and system (/proc/<pid>/stat)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def reset_cache(self) -> None:
        """Empty VictoriaMetrics' query result cache (``/internal/resetRollupResultCache``, 1.79): the next
        query pays its whole cost, as the first report of a window does, not the cost of what an earlier
        run of the same query left cached."""
        self.read("/internal/resetRollupResultCache")

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.data.rglob("*") if p.is_file())

    def read(self, path: str, params: dict[str, Any] | None = None, timeout: float = 600) -> bytes:
        """The answer's body: what a query costs the server and the wire (decoding it is the client's)."""
        url = f"{self.url}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return bytes(r.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{exc.code} from {path}: {exc.read().decode()[:500]}") from None

    def get(self, path: str, params: dict[str, Any] | None = None, timeout: float = 600) -> Any:
        body = self.read(path, params, timeout).decode()
        return json.loads(body) if body.startswith("{") else body

    def flush(self) -> None:
        self.get("/internal/force_flush")

    def import_lines(self, chunks: Iterator[bytes]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        conn.request("POST", "/api/v1/import", body=chunks, encode_chunked=True)
        r = conn.getresponse()
        body = r.read()
        conn.close()
        if r.status != 204:
            raise RuntimeError(f"import: {r.status} {body[:500]!r}")


def replica_offset_ms(n: int, replica: int, step: int) -> int:
    """Where in each ``step`` replica ``replica`` of an HA Prometheus pair scrapes node ``n`` (ms): the
    first at the step's start, the second 1 s to ``step`` - 1 s later, spread over the nodes (Prometheus
    derives a target's offset from a hash of the target and the server's external labels)."""
    if replica == 0:
        return 0
    span = max(1, step * 1000 - 2000)
    return 1000 + (n * 7919 + replica * 104729) % span


def load(
    vm: VictoriaMetrics, devices: int, t: np.ndarray, tpls: list[list[TemplateSeries]], replicas: int = 1
) -> Loaded:
    """``devices`` devices' history at times ``t`` into ``vm``, one streamed request per 64 nodes; each
    sample ``replicas`` times (an HA pair: 2), at each replica's own offset in the step."""
    nodes = math.ceil(devices / DEVICES_PER_NODE)
    f = Formatter(len(t))
    step = int(t[1] - t[0]) if len(t) > 1 else 60
    ms = t * 1000
    base = ",".join(map(str, ms.tolist()))
    counts = {"series": 0, "bytes": 0}

    def batch(first: int, last: int) -> Iterator[bytes]:
        for n in range(first, last):
            stamps = [base] + [
                ",".join(map(str, (ms + replica_offset_ms(n, r, step)).tolist())) for r in range(1, replicas)
            ]
            body, k = node_lines(tpls[n % len(tpls)], n, t, stamps, f)
            counts["series"] += k
            counts["bytes"] += len(body)
            yield body

    t0 = time.perf_counter()
    for first in range(0, nodes, 64):
        vm.import_lines(batch(first, min(nodes, first + 64)))
    ksm, ksm_series, ksm_samples = ksm_lines(nodes, t)
    if ksm:
        vm.import_lines(iter([ksm]))
    vm.flush()
    seconds = time.perf_counter() - t0
    series = counts["series"] + ksm_series
    return Loaded(
        series,
        ksm_series,
        counts["series"] * len(t) * replicas + ksm_samples,
        seconds,
        counts["bytes"] + len(ksm),
    )


def vm_series_count(vm: VictoriaMetrics, t: np.ndarray) -> int:
    """Series VM holds with a sample at the history's times ``t``: ``count(last_over_time(<name>[span]))``
    at the last of them for every metric name (one
    query per name, so that none selects more series than the store's ``-search.maxUniqueTimeseries``
    allows; ``/api/v1/series/count`` counts index entries, which concurrent imports of one series can make
    more than one), waiting up to a minute for the import to be indexed."""
    deadline = time.monotonic() + 60
    last = -1
    while True:
        names = vm.get("/api/v1/label/__name__/values")["data"]
        n = 0
        span = int(t[-1] - t[0]) + 1
        for name in names:
            query = {"query": f"count(last_over_time({name}[{span}s]))", "time": int(t[-1])}
            result = vm.get("/api/v1/query", query)["data"]["result"]
            n += int(float(result[0]["value"][1])) if result else 0
        if n == last or time.monotonic() > deadline:
            return n
        last = n
        time.sleep(2)


# ---- dashboards


@dataclass(frozen=True)
class Timed:
    seconds: float
    series: int
    what: str
    expr: str


def dashboard_variables(vm: VictoriaMetrics, scrape_s: int) -> dict[str, dict[str, str]]:
    """Each dashboard's variables as Grafana interpolates them on open: multi-value variables at their
    default "All" (``allValue``), the single uuid a MIG card's (the device dashboard's richest card)."""
    rate = max(STEP_S + scrape_s, 4 * scrape_s)
    builtins = {
        "__interval": f"{STEP_S}s",
        "__rate_interval": f"{rate}s",
        "__range": f"{RANGE_S}s",
        "__range_s": str(RANGE_S),
    }
    mig = vm.get(
        "/api/v1/series", {"match[]": 'accelerator_slice_info{slice_kind="mig"}', "start": time.time() - 3600}
    )["data"]
    uuid = sorted(s["uuid"] for s in mig)[0]
    out = {}
    for d in _dashboards():
        values = dict(builtins)
        for var in d["templating"]["list"]:
            if var["type"] == "datasource":
                continue
            if var.get("multi") and var.get("includeAll"):
                values[var["name"]] = var.get("allValue") or ".*"
            else:
                values[var["name"]] = uuid
        out[d["uid"]] = values
    return out


def dashboards(vm: VictoriaMetrics, scrape_s: int, runs: int) -> list[tuple[str, Timed]]:
    """(dashboard uid, median time of a panel query) for every panel query."""
    variables = dashboard_variables(vm, scrape_s)
    out = []
    for t in _targets():
        expr = substitute(t.expr, variables[t.dashboard])
        times, series = [], 0
        for _ in range(runs):
            end = time.time()
            params: dict[str, Any] = {"query": expr}
            path = "/api/v1/query"
            if not t.instant:
                path = "/api/v1/query_range"
                params.update(start=end - RANGE_S, end=end, step=STEP_S)
            start = time.perf_counter()
            body = vm.read(path, params)
            times.append(time.perf_counter() - start)
            series = len(json.loads(body)["data"]["result"])
        out.append((t.dashboard, Timed(statistics.median(times), series, f"{t.panel} [{t.ref}]", expr)))
    return out


# ---- rules


class _Alertmanager(http.server.BaseHTTPRequestHandler):
    """Stands in for Alertmanager's API v2 (``POST /api/v2/alerts``, answered 200 with no body, as
    Alertmanager's OpenAPI spec says): vmalert needs a notifier, and what it sends is not measured here."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def alertmanager() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Alertmanager)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _own(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
        return str(r.read().decode())


@dataclass(frozen=True)
class GroupEval:
    group: str
    mean_s: float
    most_s: float
    count: int


def replay_recording(
    vm: VictoriaMetrics, seconds: int, interval_s: int, delay_s: float, tmp: Path, since: int | None = None
) -> tuple[float, int, int]:
    """The recording rules' series for the last ``seconds`` (or from ``since``, a unix time, to now), as a
    ruler running all along would have written them: vmalert's replay mode (``-replay.timeFrom``/
    ``-replay.timeTo``: range queries at the evaluation interval, written to ``vm``) on the groups of
    alerts/generated/rules.yml that only record. Without this the dashboards' panels on recorded series would
    read a few minutes, not 6 h. Returns (seconds taken, recording rules, the unix time replayed to)."""
    binary = shutil.which("vmalert")
    if not binary:
        raise SystemExit("fleet_scale: needs Debian's vmalert")
    doc = yaml.safe_load(RULES.read_text())
    groups = [g for g in doc["groups"] if all("record" in r for r in g["rules"])]
    path = tmp / "recording.yml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    end = int(time.time()) // interval_s * interval_s
    start = end - seconds if since is None else since
    iso = "%Y-%m-%dT%H:%M:%SZ"
    t0 = time.perf_counter()
    done = subprocess.run(
        [
            binary,
            f"-rule={path}",
            f"-datasource.url={vm.url}",
            f"-remoteWrite.url={vm.url}",
            f"-evaluationInterval={interval_s}s",
            f"-replay.timeFrom={time.strftime(iso, time.gmtime(start))}",
            f"-replay.timeTo={time.strftime(iso, time.gmtime(end))}",
            # chained rules read their inputs after the remote write flushed them
            "-remoteWrite.flushInterval=500ms",
            f"-replay.rulesDelay={delay_s:g}s",
            "-httpListenAddr=127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"vmalert replay exited {done.returncode}: {done.stderr[-2000:]}")
    vm.flush()
    return time.perf_counter() - t0, sum(len(g["rules"]) for g in groups), end


def rules_file(groups: Sequence[str] | None, tmp: Path) -> Path:
    """alerts/generated/rules.yml, or a copy holding only ``groups`` (in the committed order)."""
    if groups is None:
        return RULES
    doc = yaml.safe_load(RULES.read_text())
    unknown = set(groups) - {g["name"] for g in doc["groups"]}
    if unknown:
        raise SystemExit(f"fleet_scale: no rule group {', '.join(sorted(unknown))} in {RULES}")
    path = tmp / f"rules-{len(groups)}-{time.monotonic_ns()}.yml"
    path.write_text(yaml.safe_dump({"groups": [g for g in doc["groups"] if g["name"] in groups]}))
    return path


def rule_groups(
    vm: VictoriaMetrics, interval_s: int, intervals: int, tmp: Path, groups: Sequence[str] | None = None
) -> list[GroupEval]:
    """Run vmalert on the committed rules (``groups`` of them, default all) for ``intervals`` evaluation
    intervals; each group's evaluation time from vmalert's /metrics (1.79: the summary
    ``vmalert_iteration_duration_seconds{group=...}``)."""
    binary = shutil.which("vmalert")
    if not binary:
        raise SystemExit("fleet_scale: needs Debian's vmalert")
    rules = rules_file(groups, tmp)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with alertmanager() as am:
        proc = subprocess.Popen(
            [
                binary,
                f"-rule={rules}",
                f"-datasource.url={vm.url}",
                f"-remoteWrite.url={vm.url}",
                f"-notifier.url={am}",
                f"-evaluationInterval={interval_s}s",
                f"-httpListenAddr=127.0.0.1:{port}",
            ],
            stdout=(tmp / "vmalert.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        try:
            time.sleep(interval_s * intervals + 5)
            text = _own(url)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    if proc.returncode not in (0, -15) and "vmalert_iteration" not in text:
        raise RuntimeError(f"vmalert exited {proc.returncode}: {(tmp / 'vmalert.log').read_text()[-2000:]}")
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    most: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.startswith("vmalert_iteration_duration_seconds"):
                continue
            g = s.labels.get("group", "")
            if s.name.endswith("_sum"):
                sums[g] = s.value
            elif s.name.endswith("_count"):
                counts[g] = int(s.value)
            elif "quantile" in s.labels and not math.isnan(s.value):
                most[g] = max(most.get(g, 0.0), s.value)
    return [
        GroupEval(g, sums[g] / counts[g], most.get(g, sums[g] / counts[g]), counts[g])
        for g in sorted(sums)
        if counts.get(g)
    ]


def rule_costs(
    vm: VictoriaMetrics, runs: int, groups: Sequence[str] | None = None
) -> list[tuple[str, Timed]]:
    """(group, median time of the rule's expression as an instant query at now) for every rule (of
    ``groups``, default all)."""
    out = []
    for g in yaml.safe_load(RULES.read_text())["groups"]:
        if groups is not None and g["name"] not in groups:
            continue
        for r in g["rules"]:
            times, series = [], 0
            for _ in range(runs):
                start = time.perf_counter()
                body = vm.read("/api/v1/query", {"query": r["expr"]})
                times.append(time.perf_counter() - start)
                series = len(json.loads(body)["data"]["result"])
            name = r.get("alert") or r.get("record")
            out.append((g["name"], Timed(statistics.median(times), series, name, r["expr"])))
    return out


# ---- report


@dataclass(frozen=True)
class ReportTime:
    queries_s: float
    figures_s: float
    render_s: float
    html_bytes: int

    @property
    def total_s(self) -> float:
        return self.queries_s + self.figures_s + self.render_s


@dataclass(frozen=True)
class QueryTime:
    seconds: float  # from sending the query to the last byte of its decoded answer
    cpu_seconds: float  # VictoriaMetrics' CPU time meanwhile (user + system): less moved by other load
    series: int
    title: str


def _window(hours: float, end: float | None) -> Window:
    """The report's window for the ``hours`` before ``end`` (default now), as report/cli.py builds it: its
    default step (a minute for a day), not the history's sample interval."""
    return Window.ending(int(time.time() if end is None else end), int(hours * 3600))


def report(vm: VictoriaMetrics, hours: float, end: float | None = None) -> ReportTime:
    """``xpuwatch report``'s path for the ``hours`` before ``end`` (default now), with its default
    concurrency: queries, figures, render. The store's result cache is emptied first, so that a run
    after the first pays the whole query as the first did."""
    w = _window(hours, end)
    spec = load_spec()
    prom = Prometheus(vm.url, timeout=600, max_answer_bytes=2**31)
    vm.reset_cache()
    t0 = time.perf_counter()
    answers = collect(prom, spec, w)
    t1 = time.perf_counter()
    b = figures(answers, spec, w)
    by_team(b.usage)
    t2 = time.perf_counter()
    page = html(b, time.time())
    t3 = time.perf_counter()
    return ReportTime(t1 - t0, t2 - t1, t3 - t2, len(page.encode()))


def profile(vm: VictoriaMetrics, hours: float, end: float | None = None) -> list[QueryTime]:
    """Every query of the report alone, one after another, each on an emptied result cache (else a query
    would be answered from the report's own run, or share a rollup an earlier one cached), slowest first:
    which ones dominate."""
    w = _window(hours, end)
    prom = Prometheus(vm.url, timeout=600, max_answer_bytes=2**31)
    out = []
    for r in requests(load_spec(), w):
        vm.reset_cache()
        cpu0, t0 = vm.cpu_seconds(), time.perf_counter()
        got = prom.gather([r], 1)[r.key]
        out.append(QueryTime(time.perf_counter() - t0, vm.cpu_seconds() - cpu0, len(got), r.title))
    return sorted(out, key=lambda q: -q.seconds)


# ---- one cluster's Prometheus (--layout)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _line_prefix(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}} " if inner else f"{name} "


class ClusterTargets:
    """Stands in for one cluster's exporters and its kube-state-metrics, for a real Prometheus to scrape
    (Prometheus' text format 0.0.4): ``/node/<n>`` serves node ``n``'s series as the sim exporter wrote
    them for its node type (``templates``, node labels made unique as ``node_lines`` makes them, no
    target labels: Prometheus adds ``job``/``instance``, the cluster is its external label), values moving
    as ``_values`` moves them, at the scrape's time; ``/ksm`` serves every node's ``kube_node_info`` and
    ``kube_node_spec_unschedulable`` and the pods waiting for cards now (``report.history.waiting``)."""

    def __init__(self, nodes: int, tpls: list[list[TemplateSeries]], start: float) -> None:
        self.nodes, self.start = nodes, start
        self.series: list[list[tuple[str, TemplateSeries, float]]] = []
        for n in range(nodes):
            node = f"gpu-node-{n:05d}"
            self.series.append(
                [
                    (
                        _line_prefix(s.name, _node_labels(s.labels, n, node, {})),
                        s,
                        (n * 0.37 + i * 1.3) % 6.283,
                    )
                    for i, s in enumerate(tpls[n % len(tpls)])
                ]
            )
        self.vendors = [next((v for s in t for k, v in s.labels if k == "vendor"), "none") for t in tpls]

    def instance(self, n: int) -> str:
        return f"gpu-node-{n:05d}/{self.vendors[n % len(self.vendors)]}"

    def node_body(self, n: int, t: float) -> bytes:
        day = 0.5 + 0.5 * math.cos(2 * math.pi * ((t % 86400) / 86400 - 14 / 24))
        out = []
        for prefix, s, phase in self.series[n]:
            v = s.value
            wave = math.sin(t / 977.0 + phase)
            if s.counter:
                if "energy" in s.name:
                    v += (t - self.start) * (150.0 + 200.0 * day)
                elif s.name.startswith(("process_cpu", "python_gc")):
                    v += (t - self.start) / 30
            elif s.name.endswith("_timestamp_seconds") and "start" not in s.name:
                v = float(int(t))
            elif v == 0 or (v.is_integer() and abs(v) < 1000) or s.name.endswith("_seconds") or v < 0:
                pass
            elif s.name.endswith("_ratio") and 0 <= v <= 1:
                v = min(1.0, max(0.0, round(v + 0.2 * v * (day - 0.5) + 0.01 * wave, 3)))
            else:
                v = max(0.0, v * (1 + 0.04 * wave + 0.03 * (day - 0.5)))
            out.append(f"{prefix}{v:.6g}\n")
        return "".join(out).encode()

    def ksm_body(self, t: float) -> bytes:
        out = []
        for n in range(self.nodes):
            labels = {"node": f"gpu-node-{n:05d}"}
            out.append(_line_prefix(KSM_NODE_INFO, labels) + "1\n")
            out.append(_line_prefix(KSM_UNSCHEDULABLE, labels) + "0\n")
        for p in history.waiting(t, self.start - 86400):
            base = {"namespace": p.namespace, "pod": p.pod}
            for name, extra, value in ksm_pod_series(p):
                out.append(_line_prefix(name, {**base, **extra}) + f"{value}\n")
        return "".join(out).encode()

    @contextlib.contextmanager
    def serve(self) -> Iterator[int]:
        targets = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                now = time.time()
                if self.path == "/ksm":
                    body = targets.ksm_body(now)
                elif (
                    self.path.startswith("/node/")
                    and self.path[6:].isdigit()
                    and int(self.path[6:]) < targets.nodes
                ):
                    body = targets.node_body(int(self.path[6:]), now)
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield int(server.server_address[1])
        finally:
            server.shutdown()
            server.server_close()


def _prom_get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read().decode())


def _prom_own(url: str, name: str) -> float:
    """The sum of Prometheus' own metric ``name`` on its /metrics (it does not scrape itself here)."""
    return sum(
        s.value
        for fam in text_string_to_metric_families(_own(url))
        for s in fam.samples
        if s.name == name and not math.isnan(s.value)
    )


def cluster_prometheus(devices: int, a: argparse.Namespace, tpls: list[list[TemplateSeries]]) -> list[str]:
    """One cluster's Prometheus in its own place (docs/deploy.md, "Several clusters, one view"): Debian's
    Prometheus scraping the cluster's ``devices`` (512 nodes of 8: one cluster of the fleet) every
    ``a.step`` seconds (the ServiceMonitor's 15 s) from ``ClusterTargets``, with its name as the external
    label ``cluster``, evaluating ``a.cluster_groups`` every ``a.interval`` seconds. After
    ``a.cluster_warmup`` minutes of scraping (65: the groups' longest window over raw series, 1 h, full;
    their ``[1d]`` windows read recorded node series, a few per node, and see only the warm-up), each group's
    evaluation time (``/api/v1/rules``: ``evaluationTime`` of every evaluation) over ``a.runs`` runs of
    ``a.intervals`` intervals. Prometheus' history is the warm-up, not a day: its TSDB cannot be backfilled
    with a day of this fleet in reasonable time (promtool reads OpenMetrics text), and the rules read
    nothing older than the warm-up covers except those small recorded series. Returns the printed lines of
    its figures."""
    binary = shutil.which("prometheus")
    if not binary:
        raise SystemExit("fleet_scale: --layout needs Debian's prometheus")
    nodes = math.ceil(devices / DEVICES_PER_NODE)
    print(
        f"\n=== one cluster's Prometheus: {devices:,} devices ({nodes:,} nodes of {DEVICES_PER_NODE})",
        flush=True,
    )
    targets = ClusterTargets(nodes, tpls, time.time())
    with tempfile.TemporaryDirectory(prefix="fleet-prom-") as tmp_, targets.serve() as port:
        tmp = Path(tmp_)
        rules = rules_file(a.cluster_groups, tmp)
        statics = [
            {
                "targets": [f"127.0.0.1:{port}"],
                "labels": {"__metrics_path__": f"/node/{n}", "instance": targets.instance(n)},
            }
            for n in range(nodes)
        ]
        config = {
            "global": {
                "scrape_interval": f"{a.step}s",
                "scrape_timeout": f"{min(a.step, 10)}s",
                "evaluation_interval": f"{a.interval}s",
                "external_labels": {"cluster": "fleet-0"},
            },
            "rule_files": [str(rules)],
            "scrape_configs": [
                {"job_name": "xpuwatch-exporter", "honor_labels": True, "static_configs": statics},
                {
                    "job_name": "kube-state-metrics",
                    "honor_labels": True,
                    "metrics_path": "/ksm",
                    "static_configs": [
                        {"targets": [f"127.0.0.1:{port}"], "labels": {"instance": "ksm:8080"}}
                    ],
                },
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom_port = free_port()
        url = f"http://127.0.0.1:{prom_port}"
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=(tmp / "prometheus.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/-/ready", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(
                            f"prometheus did not start: {(tmp / 'prometheus.log').read_text()[-2000:]}"
                        ) from None
                    time.sleep(0.5)
            warm_until = time.monotonic() + a.cluster_warmup * 60
            while (left := warm_until - time.monotonic()) > 0:
                time.sleep(min(left, 300))
                up = _prom_get(f"{url}/api/v1/query?query=sum(up)")["data"]["result"]
                print(
                    f"  warm-up: {max(0.0, warm_until - time.monotonic()) / 60:.0f} min left, head series "
                    f"{_prom_own(url, 'prometheus_tsdb_head_series'):,.0f}, targets up "
                    f"{up[0]['value'][1] if up else '?'} of {nodes + 1}",
                    flush=True,
                )
            shares: dict[str, list[float]] = {g: [] for g in a.cluster_groups}
            most: dict[str, float] = {g: 0.0 for g in a.cluster_groups}
            counts: dict[str, int] = {g: 0 for g in a.cluster_groups}
            for run in range(1, a.runs + 1):
                seen: dict[str, dict[str, float]] = {g: {} for g in a.cluster_groups}
                until = time.monotonic() + a.interval * a.intervals
                while time.monotonic() < until:
                    for g in _prom_get(f"{url}/api/v1/rules")["data"]["groups"]:
                        if g["name"] in seen and g.get("lastEvaluation", "").startswith("2"):
                            seen[g["name"]][g["lastEvaluation"]] = float(g["evaluationTime"])
                    time.sleep(1)
                line = [f"--- cluster run {run} of {a.runs}:"]
                for g, evals in seen.items():
                    if evals:
                        mean = statistics.mean(evals.values())
                        shares[g].append(mean / a.interval)
                        most[g] = max(most[g], *evals.values())
                        counts[g] += len(evals)
                        line.append(f"{g.removeprefix('xpuwatch.')} {mean / a.interval:.1%}")
                print(" ".join(line), flush=True)
            missed = _prom_own(url, "prometheus_rule_group_iterations_missed_total")
            head = _prom_own(url, "prometheus_tsdb_head_series")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    out = [
        f"head series {head:,.0f}; {a.cluster_warmup:g} min of scrapes every {a.step} s before measuring; rule"
        f" group iterations missed {missed:.0f}"
    ]
    for g in a.cluster_groups:
        if not shares[g]:
            out.append(f"  {g}: no evaluation seen")
            continue
        miss = "  MISSES TARGET" if statistics.median(shares[g]) > TARGET_RULE_SHARE else ""
        out.append(
            f"  {g}: {spread(shares[g], _num_pct, ' %')} of {a.interval} s (most {_ms(most[g])}; "
            f"{counts[g]} evaluations){miss}"
        )
    return out


# ---- one size


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _num_pct(x: float) -> str:
    return f"{x * 100:.1f}"


def _num_ms(s: float) -> str:
    return f"{s * 1000:,.0f}"


def _ms(s: float) -> str:
    return f"{s * 1000:,.0f} ms"


@dataclass(frozen=True)
class RunFigures:
    """One run's figures on the loaded store: the worst rule group, the dashboards' full refresh, the report;
    None where ``--only`` left it out (or, for the worst group, no ruler ran)."""

    worst: GroupEval | None
    refresh_s: float | None
    per_dashboard: dict[str, float]
    report_s: float | None
    past_end: bool = False  # the rules or dashboards ran after the history's last sample: not valid


def spread(values: Sequence[float], fmt: Any, unit: str = "") -> str:
    """The median of ``values`` with their range when there are several: ``4.4% (4.1-4.9)``."""
    mid = fmt(statistics.median(values)) + unit
    return mid if len(values) < 2 else f"{mid} ({fmt(min(values))}-{fmt(max(values))})"


def measure(
    vm: VictoriaMetrics,
    a: argparse.Namespace,
    tmp: Path,
    run: int,
    groups: Sequence[str] | None,
    end: float | None = None,
) -> RunFigures:
    """Run ``run`` of the rules (vmalert on ``groups``), every dashboard and the report (for the hours
    before ``end``, default now), or of what ``a.only`` names; printed. The first run also lists the slowest
    rules and, for the report, every query alone (``profile``)."""
    print(f"--- run {run} of {a.runs}", flush=True)
    worst = None
    ruled = groups is None or bool(groups)  # --layout with no central group: no ruler on the store
    if a.only in ("all", "rules"):
        evals = rule_groups(vm, a.interval, a.intervals, tmp, groups) if ruled else []
        worst = max(evals, key=lambda g: g.mean_s) if evals else None
        print(
            f"rule groups (vmalert, {a.interval} s interval, {a.intervals} intervals; mean / most seen):"
            if ruled
            else "rule groups: none on the central store (every group in the clusters' Prometheus)"
        )
        for g in evals:
            share = g.mean_s / a.interval
            miss = "  MISSES TARGET" if share > TARGET_RULE_SHARE else ""
            print(
                f"  {g.group}: {_ms(g.mean_s)} = {share:.1%} of the interval (most {_ms(g.most_s)} = "
                f"{g.most_s / a.interval:.1%}; {g.count} evaluations){miss}"
            )
        if run == 1 and ruled:
            costs = rule_costs(vm, a.query_runs, groups)
            print("slowest rules (their expression as an instant query at now, median):")
            for group, tm in sorted(costs, key=lambda x: -x[1].seconds)[: a.top]:
                print(f"  {tm.seconds * 1000:8.1f} ms {tm.series:7,} series  {group}: {tm.what}")
        print(flush=True)
    if a.only == "rules":
        return RunFigures(worst, None, {}, None, _past_end(end))

    total: float | None = None
    per_dash: dict[str, float] = {}
    if a.only == "all":
        if not ruled:
            # No ruler on the store (the layout: the clusters' Prometheus record and remote-write all along):
            # the recorded series end where the last replay ended, and an instant panel on a record read
            # minutes later finds none (the layout's first measurement timed those panels empty). Replayed
            # on to now, as the clusters would have written them.
            since, replay_s = a.replayed_until, 0.0
            if int(time.time()) // a.interval * a.interval > since:
                replay_s, _, a.replayed_until = replay_recording(
                    vm, 0, a.interval, a.replay_delay, tmp, since
                )
            print(
                f"recorded series replayed on to now ({a.replayed_until - since} s more) in {replay_s:.1f} s"
            )
        timings = dashboards(vm, a.step, a.query_runs)
        for uid, tm in timings:
            per_dash[uid] = per_dash.get(uid, 0.0) + tm.seconds
        total = sum(per_dash.values())
        slowest_uid = max(per_dash, key=lambda u: per_dash[u])
        print(
            f"dashboards ({len(timings)} queries, 6 h at {STEP_S} s, median of {a.query_runs}): "
            f"all {_ms(total)}; slowest {slowest_uid} {_ms(per_dash[slowest_uid])}"
            f" (target < {_ms(TARGET_REFRESH_S)} at 16,384 devices)"
        )
        for uid in sorted(per_dash):
            miss = "  MISSES TARGET" if per_dash[uid] > TARGET_REFRESH_S else ""
            print(f"  {uid}: {_ms(per_dash[uid])}{miss}")
            for _, tm in sorted((x for x in timings if x[0] == uid), key=lambda x: -x[1].seconds)[:5]:
                print(f"      {tm.seconds * 1000:8.1f} ms {tm.series:7,} series  {tm.what}")
        print(flush=True)
    past_end = a.only == "all" and _past_end(end)  # the report alone reads up to the history's end only

    end = min(time.time(), end) if end is not None else time.time()
    cpu0 = vm.cpu_seconds()
    rep = report(vm, a.hours, end)
    cpu = vm.cpu_seconds() - cpu0
    miss = "  MISSES TARGET" if rep.total_s > TARGET_REPORT_S else ""
    print(
        f"report ({a.hours:g} h to {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(end))}; load "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores): queries {rep.queries_s:.2f} s "
        f"(VictoriaMetrics CPU {cpu:.1f} s), figures {rep.figures_s:.2f} s, render {rep.render_s:.2f} s, "
        f"total {rep.total_s:.2f} s, HTML {rep.html_bytes / 1024:.0f} KiB{miss}",
        flush=True,
    )
    if run == 1:
        prof = profile(vm, a.hours, end)
        print(
            f"report queries one at a time, each on an emptied result cache, slowest first (all "
            f"{sum(q.seconds for q in prof):.2f} s, VictoriaMetrics CPU {sum(q.cpu_seconds for q in prof):.1f} s):"
        )
        for q in prof[: a.top]:
            print(
                f"  {q.seconds * 1000:8.1f} ms (CPU {q.cpu_seconds * 1000:6.0f} ms) {q.series:7,} series  {q.title}"
            )
        print(flush=True)
    return RunFigures(worst, total, per_dash, rep.total_s, past_end)


def _past_end(end: float | None) -> bool:
    """True, with a line saying so, when now is past ``end``, the history's last sample: the rule groups
    and dashboards read up to now, so they read past the history and their figures are not valid (at
    16,384 devices the load outlasts the default ``--ahead``)."""
    if end is None or time.time() <= end:
        return False
    print(
        f"NOT VALID: the history ended {(time.time() - end) / 60:.0f} min before now, and the rule groups and "
        "dashboards above read up to now: rerun with a larger --ahead (longer than the load and the runs)",
        flush=True,
    )
    return True


HISTORY_MARKER = "history.json"


def kept_history(home: Path, want: dict[str, Any]) -> tuple[np.ndarray, int] | None:
    """``--keep``: the sample times and series count of the history an earlier run loaded into
    ``home``/data, when its ``home``/history.json says it was generated with the same ``want`` (devices,
    hours, step, replicas). Otherwise None, and that data directory is removed, so that a new history
    is loaded into an empty store, not on top of another."""
    marker = home / HISTORY_MARKER
    if marker.exists():
        got = json.loads(marker.read_text())
        if {k: got.get(k) for k in want} == want:
            return np.arange(got["first"], got["last"] + 1, want["step"], dtype=np.int64), int(got["series"])
        marker.unlink()
    shutil.rmtree(home / "data", ignore_errors=True)
    return None


def run_size(
    devices: int, a: argparse.Namespace, tpls: list[list[TemplateSeries]], groups: Sequence[str] | None = None
) -> str:
    """Everything for one size: the store loaded once (or, ``--keep``, found loaded), then ``a.runs`` runs
    of the rules (``groups``, default all), dashboards and report (``--only``: of one of them); returns its
    markdown table row (medians, and the range over the runs; "-" for what was not measured)."""
    print(
        f"\n=== {devices:,} devices ({math.ceil(devices / DEVICES_PER_NODE):,} nodes of {DEVICES_PER_NODE})",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="fleet-vm-") as tmp_:
        tmp = Path(tmp_)
        home = Path(a.keep) / str(devices) if a.keep else tmp
        home.mkdir(parents=True, exist_ok=True)
        want = {"devices": devices, "hours": a.hours, "step": a.step, "replicas": a.replicas}
        kept = kept_history(home, want) if a.keep else None
        vm = VictoriaMetrics(home / "data", a.vm_flag)
        try:
            extra = f", with --vm-flag {' '.join(a.vm_flag)}" if a.vm_flag else ""
            print(f"VictoriaMetrics {' '.join(vm.flags)} (docs/deploy.md{extra})")
            if kept is None:
                t = history_times(a.hours, a.step, a.ahead * 60, time.time())
                loaded = load(vm, devices, t, tpls, a.replicas)
                in_vm = vm_series_count(vm, t)
                until = f"{a.hours:g} h before now to {a.ahead} min after"
            else:
                # counted when it was loaded: the replay and rules of earlier runs wrote series of their own
                (t, in_vm), loaded = kept, None
                ahead = (int(t[-1]) - time.time()) / 60
                until = (
                    f"kept, to {ahead:.0f} min after now"
                    if ahead >= 0
                    else f"kept, ending {-ahead:.0f} min ago"
                )
            rss, disk = vm.rss_bytes(), vm.disk_bytes()
            per_day = in_vm * 86400 // a.step * a.replicas
            print(f"history every {a.step} s ({len(t)} samples a series, {until}), {a.replicas} replica(s)")
            if loaded is not None:
                print(
                    f"loaded: {loaded.series:,} series ({loaded.ksm_series:,} of kube-state-metrics), {loaded.samples:,} samples, {loaded.body_bytes / 2**30:.2f} GiB"
                    f" of JSON lines in {loaded.seconds:.1f} s ({loaded.samples / loaded.seconds / 1e6:.2f} M samples/s)"
                )
                if a.keep:
                    (home / HISTORY_MARKER).write_text(
                        json.dumps({**want, "first": int(t[0]), "last": int(t[-1]), "series": in_vm})
                    )
            else:
                print(f"history kept in {home} from an earlier run (not loaded again)")
                if a.only != "report" and int(t[-1]) < time.time():
                    print(
                        "  (it ended before now: the rules and dashboards, which read up to now, see less of it)"
                    )
            print(
                f"VictoriaMetrics: {in_vm:,} series, RSS {_mib(rss)}, data {_mib(disk)} "
                + ("after the load" if loaded is not None else "as kept"),
                flush=True,
            )

            if a.only != "report":
                replayed = min(RANGE_S, int(a.hours * 3600))
                replay_s, recorded, a.replayed_until = replay_recording(
                    vm, replayed, a.interval, a.replay_delay, tmp
                )
                print(
                    f"recorded series for the dashboards: vmalert replay of {recorded} recording rules over the"
                    f" last {replayed / 3600:g} h at {a.interval} s in {replay_s:.1f} s",
                    flush=True,
                )
            runs = [measure(vm, a, tmp, r, groups, float(t[-1])) for r in range(1, a.runs + 1)]
            rss_end = vm.rss_bytes()
            print(f"VictoriaMetrics RSS at the end: {_mib(rss_end)}", flush=True)
        finally:
            vm.close()
    worsts = [r.worst for r in runs if r.worst is not None]
    invalid = "not valid (the history ended before the run: --ahead)"
    stale = any(r.past_end for r in runs)
    if stale:
        worst_txt = invalid if worsts else "-"
    elif worsts:
        names = [w.group for w in worsts]
        name = max(set(names), key=names.count)
        worst_txt = spread([w.mean_s / a.interval for w in worsts], _num_pct, " %") + f" ({name})"
    else:
        worst_txt = "-"
    refresh_txt = "-"
    if runs[0].per_dashboard and stale:
        refresh_txt = invalid
    elif runs[0].per_dashboard:
        medians = {u: statistics.median(r.per_dashboard[u] for r in runs) for u in runs[0].per_dashboard}
        uid = max(medians, key=medians.__getitem__)  # the slowest dashboard, by its median
        refresh = spread([r.refresh_s or 0.0 for r in runs], _num_ms, " ms")
        dash = spread([r.per_dashboard[uid] for r in runs], _num_ms, " ms")
        refresh_txt = f"{refresh} ({uid.removeprefix('xpuwatch-')} {dash})"
    reports = [r.report_s for r in runs if r.report_s is not None]
    report_txt = spread(reports, lambda x: f"{x:.1f}", " s") if reports else "-"
    return (
        f"| {devices:,} | {in_vm:,} | {per_day / 1e6:,.0f} M | {_mib(max(rss, rss_end))} | {_mib(disk)} | "
        f"{worst_txt} | {refresh_txt} | {report_txt} |"
    )


HEADER = (
    "| devices | active series | samples/day stored | VictoriaMetrics RSS | VictoriaMetrics disk (1 day) | "
    "worst rule group (% of interval) | full dashboard refresh (slowest dashboard) | report (--hours) |\n"
    "|---:|---:|---:|---:|---:|---|---|---:|"
)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--devices", default="2048", help="comma-separated fleet sizes (default 2048)")
    ap.add_argument("--hours", type=float, default=24.0, help="history length (default 24)")
    ap.add_argument(
        "--step",
        type=int,
        default=None,
        help="seconds between the history's samples (default: the exporter ServiceMonitor's interval, 15)",
    )
    ap.add_argument(
        "--replicas", type=int, default=2, help="Prometheus replicas storing each sample (default 2: HA pair)"
    )
    ap.add_argument(
        "--ahead",
        type=int,
        default=30,
        help="minutes of history after now (default 30): longer than the load and the runs (90 at 16,384 "
        "devices); a run past the history's end is reported not valid",
    )
    ap.add_argument("--interval", type=int, default=30, help="vmalert evaluation interval, s (default 30)")
    ap.add_argument("--intervals", type=int, default=3, help="intervals vmalert runs (default 3)")
    ap.add_argument(
        "--replay-delay",
        type=float,
        default=1.0,
        help="seconds between recording rules in vmalert's replay (-replay.rulesDelay; default 1)",
    )
    ap.add_argument("--runs", type=int, default=3, help="runs of rules, dashboards and report (default 3)")
    ap.add_argument("--query-runs", type=int, default=3, help="runs of each query (median; default 3)")
    ap.add_argument(
        "--top", type=int, default=10, help="slowest rules and report queries listed (default 10)"
    )
    ap.add_argument(
        "--only",
        choices=("all", "rules", "report"),
        default="all",
        help="rules: the rule groups only (after the recorded series' replay; no dashboards, no report); "
        "report: the report only (no replay, rules or dashboards)",
    )
    ap.add_argument(
        "--keep",
        metavar="DIR",
        default=None,
        help="keep VictoriaMetrics' data in DIR/<devices>/ and reuse it when a later run asks for the same "
        "--devices, --hours, --step and --replicas (another history replaces it); for the report over a "
        "long window (a week of 2,048 devices takes a quarter of an hour to load at one sample a minute)",
    )
    ap.add_argument(
        "--groups",
        help="comma-separated rule groups vmalert evaluates (default all of alerts/generated/rules.yml)",
    )
    ap.add_argument(
        "--vm-flag",
        action="append",
        default=[],
        help="a VictoriaMetrics flag added to docs/deploy.md's, e.g. a raised query limit (experiments "
        "only: the table uses none; repeat for several)",
    )
    ap.add_argument(
        "--layout",
        action="store_true",
        help="docs/deploy.md's layout: the central store with the aggregate groups only, and one cluster's "
        "Prometheus with the per-device groups for its share (see cluster_prometheus)",
    )
    ap.add_argument(
        "--cluster-warmup",
        type=float,
        default=65.0,
        help="--layout: minutes the cluster's Prometheus scrapes before its groups are read (default 65: the "
        "longest raw-series window of the cluster groups, 1 h, is full)",
    )
    ap.add_argument(
        "--cluster-devices",
        type=int,
        default=NODES_PER_CLUSTER * DEVICES_PER_NODE,
        help="--layout: devices in one cluster (default 4,096: 512 nodes, the fleet's clusters)",
    )
    ap.add_argument(
        "--skip-central", action="store_true", help="--layout: measure the cluster's Prometheus only"
    )
    ap.add_argument("--skip-cluster", action="store_true", help="--layout: measure the central store only")
    ap.add_argument(
        "--central-groups",
        default=",".join(CENTRAL_GROUPS),
        help="--layout: comma-separated groups a central ruler evaluates, each cluster's Prometheus the others "
        "(default none: every group in the clusters, docs/deploy.md; e.g. xpuwatch.performance.device,"
        "xpuwatch.performance for the layout before issue 36)",
    )
    a = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in a.devices.split(",")]
    except ValueError:
        ap.error(f"--devices: {a.devices!r} is not a comma-separated list of integers")
    if a.step is None:
        a.step = scrape_interval_s()
    if (
        any(s < DEVICES_PER_NODE for s in sizes)
        or a.step <= 0
        or a.hours <= 0
        or a.runs < 1
        or a.replicas < 1
    ):
        ap.error(f"--devices at least {DEVICES_PER_NODE}; --step, --hours, --runs and --replicas positive")
    if a.layout and a.only == "report":
        ap.error("--layout measures the rulers' places: use it with --only all or rules")
    if a.skip_central and a.skip_cluster:
        ap.error("--skip-central and --skip-cluster leave nothing to measure")
    groups = [g for g in a.groups.split(",") if g] if a.groups else None
    every = [g["name"] for g in yaml.safe_load(RULES.read_text())["groups"]]
    a.central_groups = [g for g in a.central_groups.split(",") if g]  # "" : none
    if set(a.central_groups) - set(every):
        ap.error(f"--central-groups: unknown group(s) {sorted(set(a.central_groups) - set(every))}")
    a.cluster_groups = [g for g in every if g not in a.central_groups]
    with tempfile.TemporaryDirectory(prefix="fleet-tpl-") as tmp:
        tpls = templates(Path(tmp))
    print(f"node types: {', '.join(str(len(t)) for t in tpls)} series a node of {DEVICES_PER_NODE} devices")
    if a.layout:
        rows = []
        if not a.skip_central:
            rows = [run_size(n, a, tpls, a.central_groups) for n in sizes]
        cluster = [] if a.skip_cluster else cluster_prometheus(a.cluster_devices, a, tpls)
        if rows:
            print("\nlayout (docs/deploy.md, Sizing): central store and ruler")
            print(HEADER)
            for row in rows:
                print(row)
        if cluster:
            print(f"\none cluster's Prometheus ({a.cluster_devices:,} devices), its groups:")
            for line in cluster:
                print(line)
        return
    rows = [run_size(n, a, tpls, groups) for n in sizes]
    print("\nsizing table rows (docs/deploy.md):")
    print(HEADER)
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
