"""Keeps ``benchmarks/fleet_scale.py`` working: the fleet benchmark at 256 devices x 1 hour against the real
VictoriaMetrics and vmalert it starts (5 s rule interval, two intervals, one run of each query, the recording rules replayed over the hour). Times are
not asserted (tests never time things); what is: VictoriaMetrics holds exactly the series the generator
says it sent (the exporter's series of 32 nodes, the scrape's 5 a node, the waiting pods'), one sample a
minute each; every dashboard, every rule group of alerts/generated/rules.yml and the report have figures;
the sizing row is printed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

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
        "--ahead",
        "10",
    ]
    done = subprocess.run(
        [sys.executable, "benchmarks/fleet_scale.py", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard: on a loaded 2-core machine the run takes minutes
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout

    types = re.search(r"^node types: (\d+), (\d+), (\d+), (\d+) series a node of 8 devices$", out, re.M)
    assert types, out
    assert re.search(r"^=== 256 devices \(32 nodes of 8\)$", out, re.M)
    assert re.search(r"^history: 1 h every 60 s \(60 samples a series, to 10 min after now\)$", out, re.M)
    loaded = re.search(r"^loaded: ([\d,]+) series \(([\d,]+) of waiting pods\), ([\d,]+) samples", out, re.M)
    assert loaded, out
    series, waiting, samples = (_int(x) for x in loaded.groups())
    # 32 nodes, 8 of each type, each with the exporter's series and the scrape's 5 (up, scrape_*)
    assert series - waiting == 8 * sum(int(x) for x in types.groups()) + 32 * 5
    assert samples >= 60 * (series - waiting)  # the waiting pods' series only while they wait
    assert samples <= 60 * series
    in_vm = re.search(
        r"^VictoriaMetrics \(bench flags\): ([\d,]+) series, RSS [\d,]+ MiB, data [\d,]+ MiB after the load$",
        out,
        re.M,
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
    assert re.search(REPORT, out, re.M), out
    assert re.search(rf"^\| 256 \| {in_vm[1]} \| ", out, re.M), out


# the report's line, then its queries one at a time (the profile: which dominate), the ten slowest
REPORT = (
    r"^report \(1 h to [-\d: ]+ UTC; load [\d.]+ on \d+ cores\): queries [\d.]+ s \(VictoriaMetrics CPU [\d.]+ s\), "
    r"figures [\d.]+ s, render [\d.]+ s, total [\d.]+ s, HTML [1-9]\d* KiB.*\n"
    r"report queries one at a time on a fresh VictoriaMetrics, slowest first \(all [\d.]+ s, VictoriaMetrics CPU "
    r"[\d.]+ s\):\n"
    r"(  +[\d.]+ ms \(CPU +\d+ ms\) +[\d,]+ series  \S.*\n){10}"
)


def test_the_report_alone_on_a_kept_history(tmp_path: Path) -> None:
    """``--only report --keep DIR``: the history loads once; a second run reuses it (the command docs/report.md
    gives for the 7-day, 2,048-device figure), against VictoriaMetrics as docs/deploy.md runs it."""
    args = ["--devices", "64", "--hours", "1", "--ahead", "10", "--only", "report", "--keep", str(tmp_path)]
    runs = [
        subprocess.run(
            [sys.executable, "benchmarks/fleet_scale.py", *args, "--vm-flags", "deployed"],
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=900,  # a hang guard: on a loaded 2-core machine the run takes minutes
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        assert re.search(REPORT, run.stdout, re.M), run.stdout
        assert "recorded series" not in run.stdout and "dashboards (" not in run.stdout
    assert re.search(r"^loaded: [\d,]+ series", runs[0].stdout, re.M)
    assert "history kept in" not in runs[0].stdout
    assert f"history kept in {tmp_path / '64'} from an earlier run (not loaded again)" in runs[1].stdout
    assert "loaded:" not in runs[1].stdout
    assert re.search(r"^VictoriaMetrics \(deployed flags\): [\d,]+ series, .* as kept$", runs[1].stdout, re.M)
