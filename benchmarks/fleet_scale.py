"""Benchmark: a fleet's day in VictoriaMetrics, then every dashboard, rule group and the report against it.

Run from the repository root (issue 23; docs/deploy.md "Sizing")::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/fleet_scale.py --devices 2048,8192,16384 [--hours 24]

Per size it starts Debian's ``victoria-metrics`` (1.79) on loopback with its own ``-storageDataPath`` in a
temporary directory and:

1. **Loads** a synthetic history: ``--hours`` (24) of samples every ``--step`` seconds (60: one scrape a
   minute, a quarter of the 15 s a real fleet scrapes at, so a day of 16,384 devices loads in minutes,
   at about a million samples a second), ending
   ``--ahead`` minutes (30) after now so the queries below, all at "now", find fresh samples for the whole
   run. The series are the exporter's own: the sim exporter (``xpuwatch serve --simulate``) is started once
   per node type and its /metrics read, so every name and label the rules, dashboards and report read is
   the one the exporter writes today. Node types (8 devices a node, node ``n`` of type ``n % 4``): A100s
   with one card in MIG mode (three slices), RTX 4090s with one card shared by two vGPU shares, MI250X and
   Ascend 910B; on each node most cards are held by a pod (the namespace and pod names made unique per
   node). Each node's series get the target labels of the ServiceMonitor (docs/deploy.md "Target labels":
   ``job="xpuwatch-exporter"``, ``instance="<node>/<vendor>"``) and ``cluster="fleet-<n // 512>"``, plus
   the scrape's own ``up`` and ``scrape_*`` series; kube-state-metrics series of the pods
   waiting for cards (``report.history.waiting``) are added per cluster. Values move over the day
   (utilization, power, memory, clocks, temperature; the energy counter integrates power; fault and error
   counters stay flat, as on a healthy fleet). The lines are VM's JSON import format (one line per series
   with its arrays of values and millisecond timestamps, ``/api/v1/import``), generated per node with numpy
   and streamed (memory bounded by one node's lines). Printed: series and samples generated, series VM
   counts, load time, VM's RSS and data size after a flush.
2. **Recorded series**: vmalert's replay mode runs the recording groups of alerts/generated/rules.yml over
   the last 6 h at the evaluation interval, so the panels that read recorded series read 6 h of them, as
   under a ruler that ran all along (time printed; not part of any target).
3. **Rules**: Debian's ``vmalert`` with alerts/generated/rules.yml, ``-evaluationInterval`` ``--interval``
   (30 s) against VM, writing back to VM, notifying an Alertmanager stand-in, for ``--intervals`` (3)
   intervals; each group's evaluation time from vmalert's own /metrics (1.79:
   ``vmalert_iteration_duration_seconds_sum`` / ``_count`` per group, the most seen from its quantiles) as
   a share of the interval. The groups run concurrently, each rule after the other, on this machine's
   cores. Where the time goes: every rule's expression timed as an instant query at now against VM (what
   vmalert sends), the slowest listed. Prometheus is not run: backfilling a day of this fleet into it
   (promtool from OpenMetrics text) takes far longer than VM's import.
4. **Dashboards**: every panel query of every generated dashboard (read from dashboards/generated at run
   time, ``tests.dashboards.test_prometheus._targets``), each variable at Grafana's default "All" (its
   ``allValue``) and the device dashboard's uuid a MIG card, at Grafana's default range (the last 6 h, step
   20 s, ``$__rate_interval`` = max(step + scrape, 4 x scrape) with the history's scrape interval: 240 s at
   60 s), each run ``--runs`` times (3), timed to the last byte of the answer (decoding it is Grafana's);
   per dashboard the sum of the median times (a full refresh, queries one after another) and the slowest
   five queries with the series they return.
5. **Report**: ``xpuwatch report``'s code (``report.baseline.collect``/``figures``, chargeback, render) for
   the last day, time split into queries, figures and render, and its five slowest queries.

Then per size a ready-to-paste markdown row of the docs/deploy.md sizing table. Targets (issue 23), at
16,384 devices: every rule group under 10 % of its interval, a full dashboard refresh under 2 s, the report
under 60 s; a missed target is marked and its top queries or rules printed. Nothing is asserted.
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
    waiting_series: int  # of them, kube-state-metrics' of the waiting pods
    samples: int
    seconds: float
    body_bytes: int


def history_times(hours: float, step: int, ahead_s: int, now: float) -> np.ndarray:
    end = int(now + ahead_s) // step * step
    start = end - int(hours * 3600)
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
    tpl: list[TemplateSeries], n: int, t: np.ndarray, stamps: str, f: Formatter
) -> tuple[bytes, int]:
    """Node ``n``'s JSON import lines and their series count: the exporter's series with the target labels
    the ServiceMonitor gives them (docs/deploy.md "Target labels": ``job="xpuwatch-exporter"``,
    ``instance="<node>/<vendor>"``, plus ``cluster``), and the scrape's own series."""
    node = f"gpu-node-{n:05d}"
    cluster = f"fleet-{n // NODES_PER_CLUSTER}"
    vendor = next((v for s in tpl for k, v in s.labels if k == "vendor"), "none")
    target = {"job": "xpuwatch-exporter", "instance": f"{node}/{vendor}", "cluster": cluster}
    rng = np.random.default_rng(n)
    tf = t.astype(np.float64)
    parts = []
    for i, s in enumerate(tpl):
        metric = {"__name__": s.name, **_node_labels(s.labels, n, node, target)}
        parts.append(
            f'{{"metric":{json.dumps(metric, separators=(",", ":"))},"values":[{_values(s, i, tf, n, rng, f)}],'
            f'"timestamps":[{stamps}]}}\n'
        )
    for name, value in SCRAPE_SERIES:
        metric = {"__name__": name, **target}
        value = value or float(len(tpl))
        parts.append(
            f'{{"metric":{json.dumps(metric, separators=(",", ":"))},"values":[{f.constant(value)}],'
            f'"timestamps":[{stamps}]}}\n'
        )
    return "".join(parts).encode(), len(tpl) + len(SCRAPE_SERIES)


def ksm_lines(clusters: int, t: np.ndarray) -> tuple[bytes, int, int]:
    """kube-state-metrics series of the pods waiting for cards (``report.history.waiting``), per cluster:
    present only while they wait, as KSM's are. Lines, series, samples."""
    start = int(t[0])
    pods: dict[tuple[str, str], tuple[history.WaitingPod, list[int]]] = {}
    for ts in t.tolist():
        for p in history.waiting(ts, start):
            pods.setdefault((p.namespace, p.pod), (p, []))[1].append(ts)
    lines, series, samples = [], 0, 0

    for c in range(clusters):
        for p, ts in pods.values():
            base = {
                "job": "kube-state-metrics",
                "instance": "ksm:8080",
                "cluster": f"fleet-{c}",
                "namespace": p.namespace,
                "pod": p.pod,
            }
            for name, extra, value in (
                (
                    queue.KSM_REQUESTS,
                    {"container": "main", "resource": p.resource, "unit": "integer"},
                    p.count,
                ),
                (queue.KSM_PHASE, {"uid": p.pod, "phase": "Pending"}, 1),
                (queue.KSM_SCHEDULED, {"uid": p.pod, "condition": "false"}, 1),
                (queue.KSM_CREATED, {"uid": p.pod}, int(p.created)),
            ):
                metric = {"__name__": name, **base, **extra}
                lines.append(
                    json.dumps(
                        {"metric": metric, "values": [value] * len(ts), "timestamps": [x * 1000 for x in ts]}
                    )
                )
                series += 1
                samples += len(ts)
    return ("\n".join(lines) + "\n").encode() if lines else b"", series, samples


# VictoriaMetrics' flags. "bench": limits raised so that a slow query is measured, not refused. "deployed": as
# docs/deploy.md deploys it (its defaults: queries over 30 s or 300,000 series refused, results cached).
VM_FLAGS = {
    "bench": (
        # Prometheus' 5 m lookback (VM otherwise derives it from the samples' spacing)
        "-search.maxStalenessInterval=5m",
        # a fleet's per-device queries touch more than the default 300,000 series; measure them
        # rather than have them refused
        "-search.maxUniqueTimeseries=100000000",
        "-search.maxQueryDuration=10m",
        "-search.maxSamplesPerQuery=100000000000",
    ),
    "deployed": (),
}


class VictoriaMetrics:
    """Debian's single-node VictoriaMetrics on loopback with its own data directory; ``flags`` a key of
    ``VM_FLAGS``."""

    def __init__(self, data: Path, flags: str = "bench") -> None:
        binary = shutil.which("victoria-metrics")
        if not binary:
            raise SystemExit("fleet_scale: needs Debian's victoria-metrics (/usr/bin/victoria-metrics)")
        # VictoriaMetrics keeps its query results (the rollup result cache) in the data directory across
        # restarts: a kept history (--keep) would answer a repeated report from it. Each run starts without
        # it, so it pays the whole query, as the first report of a week does.
        for cached in data.glob("cache/rollupResult*"):
            shutil.rmtree(cached) if cached.is_dir() else cached.unlink()
        self.data = data
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                binary,
                f"-storageDataPath={data}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                "-retentionPeriod=30d",
                *VM_FLAGS[flags],
            ],
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


def load(vm: VictoriaMetrics, devices: int, t: np.ndarray, tpls: list[list[TemplateSeries]]) -> Loaded:
    """``devices`` devices' history at times ``t`` into ``vm``, one streamed request per 64 nodes."""
    nodes = math.ceil(devices / DEVICES_PER_NODE)
    f = Formatter(len(t))
    stamps = ",".join(str(x * 1000) for x in t.tolist())
    counts = {"series": 0, "bytes": 0}

    def batch(first: int, last: int) -> Iterator[bytes]:
        for n in range(first, last):
            body, k = node_lines(tpls[n % len(tpls)], n, t, stamps, f)
            counts["series"] += k
            counts["bytes"] += len(body)
            yield body

    t0 = time.perf_counter()
    for first in range(0, nodes, 64):
        vm.import_lines(batch(first, min(nodes, first + 64)))
    ksm, ksm_series, ksm_samples = ksm_lines(math.ceil(nodes / NODES_PER_CLUSTER), t)
    if ksm:
        vm.import_lines(iter([ksm]))
    vm.flush()
    seconds = time.perf_counter() - t0
    series = counts["series"] + ksm_series
    return Loaded(
        series, ksm_series, counts["series"] * len(t) + ksm_samples, seconds, counts["bytes"] + len(ksm)
    )


def vm_series_count(vm: VictoriaMetrics) -> int:
    """Series VM holds (its /api/v1/series/count), waiting up to a minute for the import to be indexed."""
    deadline = time.monotonic() + 60
    last = -1
    while True:
        n = int(vm.get("/api/v1/series/count")["data"][0])
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
    vm: VictoriaMetrics, seconds: int, interval_s: int, delay_s: float, tmp: Path
) -> tuple[float, int]:
    """The recording rules' series for the last ``seconds``, as a ruler running all along would have
    written them: vmalert's replay mode (``-replay.timeFrom``/``-replay.timeTo``: range queries at the
    evaluation interval, written to ``vm``) on the groups of alerts/generated/rules.yml that only record.
    Without this the dashboards' panels on recorded series would read a few minutes, not 6 h. Returns
    (seconds taken, recording rules)."""
    binary = shutil.which("vmalert")
    if not binary:
        raise SystemExit("fleet_scale: needs Debian's vmalert")
    doc = yaml.safe_load(RULES.read_text())
    groups = [g for g in doc["groups"] if all("record" in r for r in g["rules"])]
    path = tmp / "recording.yml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    end = int(time.time()) // interval_s * interval_s
    iso = "%Y-%m-%dT%H:%M:%SZ"
    t0 = time.perf_counter()
    done = subprocess.run(
        [
            binary,
            f"-rule={path}",
            f"-datasource.url={vm.url}",
            f"-remoteWrite.url={vm.url}",
            f"-evaluationInterval={interval_s}s",
            f"-replay.timeFrom={time.strftime(iso, time.gmtime(end - seconds))}",
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
    return time.perf_counter() - t0, sum(len(g["rules"]) for g in groups)


def rule_groups(vm: VictoriaMetrics, interval_s: int, intervals: int, tmp: Path) -> list[GroupEval]:
    """Run vmalert on the committed rules for ``intervals`` evaluation intervals; each group's evaluation
    time from vmalert's /metrics (1.79: the summary ``vmalert_iteration_duration_seconds{group=...}``)."""
    binary = shutil.which("vmalert")
    if not binary:
        raise SystemExit("fleet_scale: needs Debian's vmalert")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with alertmanager() as am:
        proc = subprocess.Popen(
            [
                binary,
                f"-rule={RULES}",
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


def rule_costs(vm: VictoriaMetrics, runs: int) -> list[tuple[str, Timed]]:
    """(group, median time of the rule's expression as an instant query at now) for every rule."""
    out = []
    for g in yaml.safe_load(RULES.read_text())["groups"]:
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


def _window(hours: float, step: int, end: float | None) -> Window:
    """The report's window for the ``hours`` before ``end`` (default now), as report/cli.py builds it."""
    seconds = int(hours * 3600)
    step = max(step, seconds // 2016 // 60 * 60)
    return Window(end=int(time.time() if end is None else end) // step * step, seconds=seconds, step=step)


def report(vm: VictoriaMetrics, hours: float, step: int, end: float | None = None) -> ReportTime:
    """``xpuwatch report``'s path for the ``hours`` before ``end`` (default now), with its default
    concurrency: queries, figures, render."""
    w = _window(hours, step, end)
    spec = load_spec()
    prom = Prometheus(vm.url, timeout=600, max_answer_bytes=2**31)
    t0 = time.perf_counter()
    answers = collect(prom, spec, w)
    t1 = time.perf_counter()
    b = figures(answers, spec, w)
    by_team(b.usage)
    t2 = time.perf_counter()
    page = html(b, time.time())
    t3 = time.perf_counter()
    return ReportTime(t1 - t0, t2 - t1, t3 - t2, len(page.encode()))


def profile(vm: VictoriaMetrics, hours: float, step: int, end: float | None = None) -> list[QueryTime]:
    """Every query of the report alone, one after another, slowest first: which ones dominate. Run on a
    VictoriaMetrics started afresh (its result cache empty), else each would be answered from the report's
    own run."""
    w = _window(hours, step, end)
    prom = Prometheus(vm.url, timeout=600, max_answer_bytes=2**31)
    out = []
    for r in requests(load_spec(), w):
        cpu0, t0 = vm.cpu_seconds(), time.perf_counter()
        got = prom.gather([r], 1)[r.key]
        out.append(QueryTime(time.perf_counter() - t0, vm.cpu_seconds() - cpu0, len(got), r.title))
    return sorted(out, key=lambda q: -q.seconds)


# ---- one size


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _ms(s: float) -> str:
    return f"{s * 1000:,.0f} ms"


def _history(
    vm: VictoriaMetrics, devices: int, a: argparse.Namespace, tpls: list[list[TemplateSeries]]
) -> tuple[np.ndarray, Loaded | None]:
    """The sample times of the history in ``vm``: loaded now, or (``--keep``) the times of the one loaded
    into the kept directory by an earlier run of the same ``--devices``, ``--hours`` and ``--step``
    (``history.json`` there says which), then None for what loading took."""
    marker = vm.data.parent / "history.json"
    want = {"devices": devices, "hours": a.hours, "step": a.step}
    if a.keep and marker.exists():
        got = json.loads(marker.read_text())
        if {k: got.get(k) for k in want} == want:
            return np.arange(got["first"], got["last"] + 1, a.step, dtype=np.int64), None
    t = history_times(a.hours, a.step, a.ahead * 60, time.time())
    loaded = load(vm, devices, t, tpls)
    if a.keep:
        marker.write_text(json.dumps({**want, "first": int(t[0]), "last": int(t[-1])}))
    return t, loaded


def run_size(devices: int, a: argparse.Namespace, tpls: list[list[TemplateSeries]]) -> str:
    """Everything for one size (``--only report``: the report only); returns its markdown table row."""
    print(
        f"\n=== {devices:,} devices ({math.ceil(devices / DEVICES_PER_NODE):,} nodes of {DEVICES_PER_NODE})",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="fleet-vm-") as tmp_:
        tmp = Path(tmp_)
        home = Path(a.keep) / str(devices) if a.keep else tmp
        home.mkdir(parents=True, exist_ok=True)
        vm = VictoriaMetrics(home / "data", a.vm_flags)
        try:
            t, loaded = _history(vm, devices, a, tpls)
            in_vm = vm_series_count(vm)
            rss, disk = vm.rss_bytes(), vm.disk_bytes()
            per_day = in_vm * 86400 // a.step
            ahead = (int(t[-1]) - time.time()) / 60
            until = f"to {ahead:.0f} min after now" if ahead >= 0 else f"ending {-ahead:.0f} min ago"
            print(f"history: {a.hours:g} h every {a.step} s ({len(t)} samples a series, {until})")
            if loaded is not None:
                print(
                    f"loaded: {loaded.series:,} series ({loaded.waiting_series:,} of waiting pods), {loaded.samples:,} samples, {loaded.body_bytes / 2**30:.2f} GiB"
                    f" of JSON lines in {loaded.seconds:.1f} s ({loaded.samples / loaded.seconds / 1e6:.2f} M samples/s)"
                )
            else:
                print(f"history kept in {home} from an earlier run (not loaded again)")
            print(
                f"VictoriaMetrics ({a.vm_flags} flags): {in_vm:,} series, RSS {_mib(rss)}, data {_mib(disk)} "
                + ("after the load" if loaded is not None else "as kept"),
                flush=True,
            )
            worst_txt, refresh_txt = "-", "-"
            if a.only == "all":
                worst_txt, refresh_txt = _rules_and_dashboards(vm, a, tmp)

            end = min(time.time(), float(t[-1]))
            cpu0 = vm.cpu_seconds()
            rep = report(vm, a.hours, a.step, end)
            cpu = vm.cpu_seconds() - cpu0
            miss = "  MISSES TARGET" if rep.total_s > TARGET_REPORT_S else ""
            print(
                f"report ({a.hours:g} h to {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(end))}; load "
                f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores): queries {rep.queries_s:.2f} s "
                f"(VictoriaMetrics CPU {cpu:.1f} s), figures {rep.figures_s:.2f} s, render {rep.render_s:.2f} s, "
                f"total {rep.total_s:.2f} s, HTML {rep.html_bytes / 1024:.0f} KiB{miss}",
                flush=True,
            )
            rss_end = vm.rss_bytes()
            vm.close()
            vm = VictoriaMetrics(home / "data", a.vm_flags)  # its result cache empty again
            prof = profile(vm, a.hours, a.step, end)
            print(
                f"report queries one at a time on a fresh VictoriaMetrics, slowest first (all "
                f"{sum(q.seconds for q in prof):.2f} s, VictoriaMetrics CPU {sum(q.cpu_seconds for q in prof):.1f} s):"
            )
            for q in prof[: a.top]:
                print(
                    f"  {q.seconds * 1000:8.1f} ms (CPU {q.cpu_seconds * 1000:6.0f} ms) {q.series:7,} series  {q.title}"
                )
            print(f"VictoriaMetrics RSS at the end: {_mib(rss_end)}", flush=True)
        finally:
            vm.close()
    return (
        f"| {devices:,} | {in_vm:,} | {per_day / 1e6:,.0f} M | {_mib(max(rss, rss_end))} | {_mib(disk)} | "
        f"{worst_txt} | {refresh_txt} | {rep.total_s:.1f} s |"
    )


def _rules_and_dashboards(vm: VictoriaMetrics, a: argparse.Namespace, tmp: Path) -> tuple[str, str]:
    """Recorded series (replay), rule groups and dashboards: printed; their cells of the table row."""
    replayed = min(RANGE_S, int(a.hours * 3600))
    replay_s, recorded = replay_recording(vm, replayed, a.interval, a.replay_delay, tmp)
    print(
        f"recorded series for the dashboards: vmalert replay of {recorded} recording rules over the"
        f" last {replayed / 3600:g} h at {a.interval} s in {replay_s:.1f} s",
        flush=True,
    )
    groups = rule_groups(vm, a.interval, a.intervals, tmp)
    worst = max(groups, key=lambda g: g.mean_s) if groups else None
    print(f"rule groups (vmalert, {a.interval} s interval, {a.intervals} intervals; mean / most seen):")
    for g in groups:
        share = g.mean_s / a.interval
        miss = "  MISSES TARGET" if share > TARGET_RULE_SHARE else ""
        print(
            f"  {g.group}: {_ms(g.mean_s)} = {share:.1%} of the interval (most {_ms(g.most_s)} = "
            f"{g.most_s / a.interval:.1%}; {g.count} evaluations){miss}"
        )
    costs = rule_costs(vm, a.runs)
    print("slowest rules (their expression as an instant query at now, median):")
    for group, tm in sorted(costs, key=lambda x: -x[1].seconds)[: a.top]:
        print(f"  {tm.seconds * 1000:8.1f} ms {tm.series:7,} series  {group}: {tm.what}")
    print(flush=True)

    timings = dashboards(vm, a.step, a.runs)
    per_dash: dict[str, float] = {}
    for uid, tm in timings:
        per_dash[uid] = per_dash.get(uid, 0.0) + tm.seconds
    total = sum(per_dash.values())
    slowest_uid = max(per_dash, key=lambda u: per_dash[u])
    print(
        f"dashboards ({len(timings)} queries, 6 h at {STEP_S} s, median of {a.runs}): "
        f"all {_ms(total)}; slowest {slowest_uid} {_ms(per_dash[slowest_uid])}"
        f" (target < {_ms(TARGET_REFRESH_S)} at 16,384 devices)"
    )
    for uid in sorted(per_dash):
        miss = "  MISSES TARGET" if per_dash[uid] > TARGET_REFRESH_S else ""
        print(f"  {uid}: {_ms(per_dash[uid])}{miss}")
        for _, tm in sorted((x for x in timings if x[0] == uid), key=lambda x: -x[1].seconds)[:5]:
            print(f"      {tm.seconds * 1000:8.1f} ms {tm.series:7,} series  {tm.what}")
    print(flush=True)
    worst_txt = f"{worst.mean_s / a.interval:.1%} ({worst.group})" if worst else "-"
    refresh_txt = f"{_ms(total)} ({slowest_uid.removeprefix('xpuwatch-')} {_ms(per_dash[slowest_uid])})"
    return worst_txt, refresh_txt


HEADER = (
    "| devices | active series | samples/day (60 s) | VictoriaMetrics RSS | VictoriaMetrics disk (1 day) | "
    "worst rule group (% of interval) | full dashboard refresh (slowest dashboard) | report (--hours) |\n"
    "|---:|---:|---:|---:|---:|---|---|---:|"
)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--devices", default="2048", help="comma-separated fleet sizes (default 2048)")
    ap.add_argument("--hours", type=float, default=24.0, help="history length (default 24)")
    ap.add_argument("--step", type=int, default=60, help="seconds between the history's samples (default 60)")
    ap.add_argument("--ahead", type=int, default=30, help="minutes of history after now (default 30)")
    ap.add_argument("--interval", type=int, default=30, help="vmalert evaluation interval, s (default 30)")
    ap.add_argument("--intervals", type=int, default=3, help="intervals vmalert runs (default 3)")
    ap.add_argument(
        "--replay-delay",
        type=float,
        default=1.0,
        help="seconds between recording rules in vmalert's replay (-replay.rulesDelay; default 1)",
    )
    ap.add_argument("--runs", type=int, default=3, help="runs of each query (median; default 3)")
    ap.add_argument(
        "--top", type=int, default=10, help="slowest rules and report queries listed (default 10)"
    )
    ap.add_argument(
        "--only",
        choices=("all", "report"),
        default="all",
        help="report: measure the report only (no recorded series, rules or dashboards)",
    )
    ap.add_argument(
        "--keep",
        metavar="DIR",
        default=None,
        help="keep VictoriaMetrics' data in DIR/<devices>/ and reuse it when a later run asks for the same "
        "--devices, --hours and --step (a week of 2,048 devices takes a quarter of an hour to load)",
    )
    ap.add_argument(
        "--vm-flags",
        choices=tuple(VM_FLAGS),
        default="bench",
        help="bench (default): VictoriaMetrics' query limits raised so slow queries are measured; deployed: "
        "as docs/deploy.md runs it (its defaults: 30 s and 300,000 series a query, results cached)",
    )
    a = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in a.devices.split(",")]
    except ValueError:
        ap.error(f"--devices: {a.devices!r} is not a comma-separated list of integers")
    if any(s < DEVICES_PER_NODE for s in sizes) or a.step <= 0 or a.hours <= 0:
        ap.error(f"--devices at least {DEVICES_PER_NODE}, --step and --hours positive")
    with tempfile.TemporaryDirectory(prefix="fleet-tpl-") as tmp:
        tpls = templates(Path(tmp))
    print(f"node types: {', '.join(str(len(t)) for t in tpls)} series a node of {DEVICES_PER_NODE} devices")
    rows = [run_size(n, a, tpls) for n in sizes]
    print("\nsizing table rows (docs/deploy.md):")
    print(HEADER)
    for row in rows:
        print(row)


if __name__ == "__main__":
    main()
