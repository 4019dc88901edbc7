"""Benchmark: series and samples/s through remote_write, and dashboard query time in VictoriaMetrics vs Prometheus.

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/remote_write.py [DEVICES_PER_MODEL]``
(default 16: 2 clusters x 64 simulated devices). Starts the two-cluster stack of tests/e2e/clusters_stack.py
(two Debian Prometheus servers remote-writing into Debian's VictoriaMetrics single node, vmalert, a real
Alertmanager) with the fleet of benchmarks/dashboard_queries.py in each cluster at 5 s scrapes and rule
evaluation, waits ``WARMUP_S``, then prints per cluster the head series and the samples/s sent
(Prometheus' own ``prometheus_tsdb_head_series`` and the increase of ``prometheus_remote_storage_samples_total``
over ``RATE_S``, read from its /metrics),
the series VictoriaMetrics holds, and the median time (5 runs) of a full refresh of every dashboard with the
cluster variable on ``a``: against VictoriaMetrics and against cluster a's own Prometheus (where the
variable is All: the cluster label is external there). Nothing is
asserted.
"""

from __future__ import annotations

import re
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from benchmarks.dashboard_queries import scenario
from tests.dashboards.test_prometheus import Prom, _dashboards, _get, _targets, substitute
from tests.e2e.clusters_stack import stack
from tests.e2e.test_clusters_vm import _variables

WARMUP_S = 90
RATE_S = 30


def _scalar(api: Prom, expr: str) -> float:
    out = _get(f"{api.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    result = out["data"]["result"]
    return float(result[0]["value"][1]) if result else float("nan")


def _own(api: Prom, name: str) -> float:
    """Sum of ``name``'s samples on the server's own /metrics (the test Prometheus does not scrape itself)."""
    with urllib.request.urlopen(f"{api.base}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(m) for m in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def _refresh_s(api: Prom, variables: dict[str, dict[str, str]]) -> tuple[float, dict[str, float]]:
    """Sum over every panel query of the median of 5 runs (range queries: last minute at a 1 s step)."""
    per_board: dict[str, float] = {}
    for t in _targets():
        expr = substitute(t.expr, variables[t.dashboard])
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            api.query_range(expr, 60) if not t.instant else api.query(expr)
            runs.append(time.perf_counter() - start)
        per_board[t.dashboard] = per_board.get(t.dashboard, 0.0) + statistics.median(runs)
    return sum(per_board.values()), per_board


def main() -> None:
    per_model = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    scenarios = {name: {**scenario(per_model), "seed": seed} for name, seed in (("a", 1), ("b", 2))}
    with tempfile.TemporaryDirectory() as tmp, stack(Path(tmp), scenarios, "5s") as s:
        time.sleep(WARMUP_S)
        print(
            f"2 clusters x {4 * per_model} simulated devices, 5 s scrape and evaluation, after {WARMUP_S} s"
        )
        sent = {
            name: _own(prom, "prometheus_remote_storage_samples_total") for name, prom in s.prometheus.items()
        }
        time.sleep(RATE_S)
        for name, prom in s.prometheus.items():
            series = _own(prom, "prometheus_tsdb_head_series")
            rate = (_own(prom, "prometheus_remote_storage_samples_total") - sent[name]) / RATE_S
            print(f"  cluster {name}: {series:.0f} head series, {rate:.0f} samples/s sent by remote_write")
        for name in s.prometheus:
            vm_series = _scalar(s.vm, f'count({{__name__=~".+", cluster="{name}"}})')
            print(f"  VictoriaMetrics: {vm_series:.0f} series of cluster {name}")
        in_vm = {d["uid"]: _variables(d, s.vm, "a") for d in _dashboards()}
        # cluster a's own Prometheus has no cluster label (it is an external label): the variable is All there
        in_prom = {uid: {**v, "cluster": ".*"} for uid, v in in_vm.items()}
        for label, api, variables in (
            ("VictoriaMetrics", s.vm, in_vm),
            ("Prometheus a", s.prometheus["a"], in_prom),
        ):
            total, per_board = _refresh_s(api, variables)
            boards = ", ".join(
                f"{uid.removeprefix('xpuwatch-')} {ms * 1000:.0f}" for uid, ms in sorted(per_board.items())
            )
            print(f"  full refresh against {label}: {total * 1000:.0f} ms ({boards} ms)")


if __name__ == "__main__":
    main()
