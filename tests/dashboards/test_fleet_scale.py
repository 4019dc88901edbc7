"""Keeps ``benchmarks/fleet_scale.py`` working: the fleet benchmark at 256 devices x 1 hour against the real
VictoriaMetrics (run with docs/deploy.md's flags) and vmalert it starts (5 s rule interval, two intervals,
one run, one run of each query, the recording rules replayed over the hour). Times are not asserted (tests
never time things); what is: VictoriaMetrics holds exactly the series the generator says it sent (the
exporter's series of 32 nodes, the scrape's 5 a node, kube-state-metrics'), one sample every 15 s (the
ServiceMonitor's interval) from each of an HA pair's two replicas; every dashboard, every rule group of
alerts/generated/rules.yml and the report have figures; the sizing row is printed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.dashboards.test_prometheus import ENV, ROOT, RULES, _dashboards, _targets

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("victoria-metrics") and shutil.which("vmalert")),
        reason="victoria-metrics (Debian package: victoria-metrics, vmalert) not installed",
    ),
]


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def test_fleet_benchmark_measures_every_dashboard_rule_group_and_the_report() -> None:
    args = [
        "--devices",
        "256",
        "--hours",
        "1",
        "--interval",
        "5",
        "--intervals",
        "2",
        "--runs",
        "1",
        "--query-runs",
        "1",
        "--ahead",
        "10",
    ]
    done = subprocess.run(
        [sys.executable, "benchmarks/fleet_scale.py", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout

    types = re.search(r"^node types: (\d+), (\d+), (\d+), (\d+) series a node of 8 devices$", out, re.M)
    assert types, out
    assert re.search(r"^=== 256 devices \(32 nodes of 8\)$", out, re.M)
    assert re.search(r"^VictoriaMetrics .*-dedup\.minScrapeInterval=15s.* \(docs/deploy\.md\)$", out, re.M)
    assert re.search(
        r"^history: 1 h every 15 s \(240 samples a series, to 10 min after now\), 2 replica\(s\)$", out, re.M
    )
    loaded = re.search(
        r"^loaded: ([\d,]+) series \(([\d,]+) of kube-state-metrics\), ([\d,]+) samples", out, re.M
    )
    assert loaded, out
    series, ksm, samples = (_int(x) for x in loaded.groups())
    # 32 nodes, 8 of each type, each with the exporter's series and the scrape's 5 (up, scrape_*), and
    # kube-state-metrics' two series of each node
    assert series - ksm == 8 * sum(int(x) for x in types.groups()) + 32 * 5 and ksm >= 2 * 32
    assert samples >= 2 * 240 * (series - ksm) + 240 * 2 * 32  # the waiting pods' series only while they wait
    assert samples <= 2 * 240 * series
    in_vm = re.search(
        r"^VictoriaMetrics: ([\d,]+) series, RSS [\d,]+ MiB, data [\d,]+ MiB after the load$", out, re.M
    )
    assert in_vm, out
    assert _int(in_vm[1]) == series
    assert re.search(
        r"^recorded series for the dashboards: vmalert replay of [1-9]\d* recording rules over the last 1 h at 5 s",
        out,
        re.M,
    )

    head = re.search(r"^dashboards \((\d+) queries, 6 h at 20 s, median of 1\): all [\d,]+ ms;", out, re.M)
    assert head, out
    assert int(head[1]) == len(_targets())
    for uid in (d["uid"] for d in _dashboards()):
        assert re.search(rf"^  {re.escape(uid)}: [\d,]+ ms", out, re.M), uid
    for group in (g["name"] for g in yaml.safe_load(RULES.read_text())["groups"]):
        assert re.search(
            rf"^  {re.escape(group)}: [\d,]+ ms = [\d.]+% of the interval \(most [\d,]+ ms = [\d.]+%; [1-9]\d* evaluations\)",
            out,
            re.M,
        ), group
    assert re.search(r"^slowest rules \(their expression as an instant query at now, median\):$", out, re.M)
    assert re.search(
        r"^report \(1 h\): queries [\d.]+ s, figures [\d.]+ s, render [\d.]+ s, total [\d.]+ s, HTML [1-9]\d* KiB"
        r".*\n(  +[\d.]+ ms  \S.*\n){5}",  # its five slowest queries
        out,
        re.M,
    ), out
    assert re.search(rf"^\| 256 \| {in_vm[1]} \| ", out, re.M), out
