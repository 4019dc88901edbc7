"""Keeps ``benchmarks/dashboard_queries.py`` working: the benchmark run at its smallest size (4 devices, 1 s
scrapes and evaluations, one query run each) against the real Prometheus stack it starts. Figures are not
asserted (tests never time things); the report's shape is: every panel query run at Grafana's 6 h range,
every dashboard and rule group listed."""

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
    pytest.mark.skipif(not shutil.which("prometheus"), reason="prometheus not installed"),
]


def test_benchmark_runs_every_query_at_six_hours() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/dashboard_queries.py", "4", "1s", "1s", "1", "1"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    head = re.search(
        r"^4 devices, (\d+) head series, (\d+) queries, scrape 1s, range 6 h at a 20 s step$", out, re.M
    )
    assert head, out
    assert int(head[1]) > 0
    assert int(head[2]) == len(_targets())
    for uid in (d["uid"] for d in _dashboards()):
        assert re.search(rf"^  {re.escape(uid)}: \d+ ms$", out, re.M), uid
    groups = [g["name"] for g in yaml.safe_load(RULES.read_text())["groups"]]
    for group in groups:
        assert re.search(rf"^  {re.escape(group)}: \d+ ms = ", out, re.M), group
