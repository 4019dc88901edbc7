"""Benchmark: cost of every dashboard query on a real Prometheus scraping a large simulated fleet.

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/dashboard_queries.py [DEVICES_PER_MODEL]``
(default 64, i.e. 256 devices on one node). Starts Debian's Prometheus with alerts/generated/rules.yml, the
sim exporter and the pipeline stand-in (the same stack as tests/dashboards/test_prometheus.py), waits for
a minute of data, then runs each panel query 5 times as Grafana would (range queries over the last minute
at a 1 s step for time series, instant queries otherwise) and prints the median time per query, the
slowest ones, and the series each returns. Nothing is asserted.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.dashboards.test_prometheus import _dashboards, _targets, resolve, stack, substitute

MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090", "AMD Instinct MI250X", "Ascend910B")
PROFILES = ("training", "inference", "idle_notebook", "memory_bound", "compute_bound", "starved", "idle")


def scenario(per_model: int) -> dict[str, object]:
    """``per_model`` devices of each model, profiles in rotation, every NVIDIA device held by a job."""
    devices: list[dict[str, object]] = [{"model": m, "count": per_model} for m in MODELS]
    devices[0]["mig"] = ["3g.40gb", "2g.20gb", "1g.10gb"]
    devices[1]["vgpu"] = 2
    timeline: list[dict[str, object]] = []
    for i in range(per_model):
        for vendor in ("amd", "huawei"):
            timeline.append({"at": 0, "device": f"{vendor}/{i}", "profile": PROFILES[i % 7]})
    for i in range(2 * per_model):
        pod = {"namespace": f"team-{i % 8}", "pod": f"job-{i}", "workload_kind": "job"}
        timeline.append({"at": 0, "device": f"nvidia/{i}", "profile": PROFILES[i % 7], "pod": pod})
    return {"seed": 1, "poll_interval": 5, "devices": devices, "timeline": timeline}


def main() -> None:
    per_model = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    with tempfile.TemporaryDirectory() as tmp, stack(Path(tmp), scenario(per_model), "5s") as prom:
        time.sleep(60)
        variables = {d["uid"]: resolve(d, prom) for d in _dashboards()}
        timings = []
        for t in _targets():
            expr = substitute(t.expr, variables[t.dashboard])
            runs = []
            series = 0
            for _ in range(5):
                start = time.perf_counter()
                out = prom.query_range(expr, 60) if not t.instant else prom.query(expr)
                runs.append(time.perf_counter() - start)
                series = len(out["data"]["result"])
            timings.append((statistics.median(runs), t, series))
    total = sum(m for m, _, _ in timings)
    print(f"{4 * per_model} devices, {len(timings)} queries, sum of medians {total * 1000:.0f} ms")
    for uid in sorted({t.dashboard for _, t, _ in timings}):
        ms = sum(m for m, t, _ in timings if t.dashboard == uid) * 1000
        print(f"  {uid}: {ms:.0f} ms for a full refresh")
    print("slowest:")
    for median, t, series in sorted(timings, key=lambda x: x[0], reverse=True)[:8]:
        print(f"  {median * 1000:7.1f} ms  {series:5d} series  {t.dashboard}: {t.panel} [{t.ref}]")


if __name__ == "__main__":
    main()
