"""The report against VictoriaMetrics (single node, Debian's `victoria-metrics`), where fleets are often
stored: the same backfilled week as tests/report/test_report.py, imported through VM's
/api/v1/import/prometheus (Prometheus text format, millisecond timestamps), read by the same report code
through VM's Prometheus-compatible query API; every figure equals the model's."""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.ports import free_port
from tests.report.test_report import (
    DEVICES,
    END,
    FLEET,
    POINTS,
    RANGE,
    START,
    STEP,
    TIMES,
    _could_have_run,
    _usage,
)
from xpuwatch.alerts.promapi import Prometheus
from xpuwatch.alerts.spec import load_spec
from xpuwatch.report import history
from xpuwatch.report.baseline import Window, collect, figures

pytestmark = pytest.mark.slow


def prometheus_text(lines: Iterable[str]) -> Iterator[str]:
    """OpenMetrics lines with timestamps in seconds -> Prometheus text lines with milliseconds, as VM's
    /api/v1/import/prometheus reads them (comments and ``# EOF`` dropped)."""
    for line in lines:
        if line.startswith("#"):
            continue
        sample, _, ts = line.rpartition(" ")
        yield f"{sample} {int(ts) * 1000}"


@pytest.fixture(scope="module")
def victoriametrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("victoria-metrics")
    assert binary, "Debian package victoria-metrics is required"
    tmp = tmp_path_factory.mktemp("vm")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            binary,
            f"-storageDataPath={tmp / 'data'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=30d",
            "-search.disableCache",
            # Prometheus' 5 m lookback: VM otherwise derives it from the samples' spacing (15 m here) and
            # shows a pod that stopped waiting as waiting one step longer
            "-search.maxStalenessInterval=5m",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "victoria-metrics did not start"
                time.sleep(0.3)
        body = "\n".join(prometheus_text(history.openmetrics(DEVICES, START, END, STEP))).encode() + b"\n"
        req = urllib.request.Request(f"{url}/api/v1/import/prometheus", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 204
        with urllib.request.urlopen(f"{url}/internal/force_flush", timeout=30) as r:
            assert r.status == 200
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_prometheus_text_for_vm_import() -> None:
    lines = ["# TYPE x gauge", 'x{a="1"} 0.5 1700000000', "# EOF"]
    assert list(prometheus_text(lines)) == ['x{a="1"} 0.5 1700000000000']


def test_report_figures_from_victoriametrics_match_the_model(victoriametrics: str, tmp_path: Path) -> None:
    spec = load_spec()
    w = Window(end=END, seconds=RANGE, step=STEP)
    b = figures(collect(Prometheus(victoriametrics), spec, w), spec, w)
    assert b.fleet.devices == DEVICES
    assert b.fleet.avg == pytest.approx(np.mean([p.utilization for p in POINTS.values()]), rel=1e-9)
    for pool in b.pools:
        devs = [d for d in FLEET if d.model == pool.model]
        assert pool.avg == pytest.approx(
            np.mean([POINTS[d.uuid, t].utilization for d in devs for t in TIMES])
        )
        means = [np.mean([POINTS[d.uuid, t].utilization for d in devs]) for t in TIMES]
        assert pool.p95 == pytest.approx(float(np.quantile(means, 0.95)), rel=1e-6)
    assert sorted(h.device_hours for h in b.hoarders) == [168.0] * 4
    assert b.pods_waited == 14 and b.max_wait_seconds == 3 * 3600 + 45 * 60
    assert {(q.namespace, q.resource): q.pods for q in b.waiting} == {
        ("ml", "nvidia.com/gpu"): 7,
        ("nlp", "huawei.com/Ascend910"): 7,
    }
    # the per-resource headline: VM evaluates the 1 h P95 inside the subquery and the label_replace/or
    # join as Prometheus does
    got_wait = {c.vendor: (c.free, c.held_idle, c.waited_seconds / 3600) for c in b.wait_capacity}
    want_wait = _could_have_run()
    assert got_wait.keys() == want_wait.keys()
    for vendor, figures_ in want_wait.items():
        assert got_wait[vendor] == pytest.approx(figures_), vendor
    assert b.fleet_hours.total == DEVICES * 168.0 and b.fleet_hours.unheld == 168.0
    assert b.coverage == 1.0
    got = {(u.namespace, u.owner, u.vendor, u.model): u for u in b.usage}
    want = _usage()
    assert got.keys() == want.keys()
    for k, (hours, idle, mem, kwh, from_power) in want.items():
        u = got[k]
        assert (u.device_hours, u.idle_hours, u.memory_gib_hours) == pytest.approx(
            (hours, idle, mem), rel=1e-9
        )
        assert u.energy_kwh_from_power == pytest.approx(from_power, rel=1e-9)
        assert u.energy_kwh == pytest.approx(kwh, rel=1e-9), k
