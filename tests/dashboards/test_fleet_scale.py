"""Keeps ``benchmarks/fleet_scale.py`` working: the fleet benchmark at 256 devices x 1 hour against the real
VictoriaMetrics (run with docs/deploy.md's flags) and vmalert it starts (5 s rule interval, two intervals,
one run, one run of each query, the recording rules replayed over the hour). Times are not asserted (tests
never time things); what is: VictoriaMetrics holds exactly the series the generator says it sent (the
exporter's series of 32 nodes, the scrape's 5 a node, kube-state-metrics'), one sample every 15 s (the
ServiceMonitor's interval) from each of an HA pair's two replicas; every dashboard, every rule group of
alerts/generated/rules.yml and the report have figures; the sizing row is printed. ``--keep`` reuses a
loaded store only for the same history and empties it for another."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.dashboards.test_prometheus import ENV, ROOT, RULES, _dashboards, _targets

runs_the_benchmark = pytest.mark.skipif(
    not (shutil.which("victoria-metrics") and shutil.which("vmalert")),
    reason="victoria-metrics (Debian package: victoria-metrics, vmalert) not installed",
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    """``benchmarks/fleet_scale.py`` with ``args``, as a user runs it, its output captured."""
    return subprocess.run(
        [sys.executable, "benchmarks/fleet_scale.py", *args],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard: on a loaded 2-core machine the run takes minutes
    )


@pytest.mark.slow
@runs_the_benchmark
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
    done = _bench(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout

    types = re.search(r"^node types: (\d+), (\d+), (\d+), (\d+) series a node of 8 devices$", out, re.M)
    assert types, out
    assert re.search(r"^=== 256 devices \(32 nodes of 8\)$", out, re.M)
    assert re.search(r"^VictoriaMetrics .*-dedup\.minScrapeInterval=15s.* \(docs/deploy\.md\)$", out, re.M)
    assert re.search(
        r"^history every 15 s \(280 samples a series, 1 h before now to 10 min after\), 2 replica\(s\)$",
        out,
        re.M,
    )
    loaded = re.search(
        r"^loaded: ([\d,]+) series \(([\d,]+) of kube-state-metrics\), ([\d,]+) samples", out, re.M
    )
    assert loaded, out
    series, ksm, samples = (_int(x) for x in loaded.groups())
    # 32 nodes, 8 of each type, each with the exporter's series and the scrape's 5 (up, scrape_*), and
    # kube-state-metrics' two series of each node
    assert series - ksm == 8 * sum(int(x) for x in types.groups()) + 32 * 5 and ksm >= 2 * 32
    # 70 minutes at 15 s; the waiting pods' series only while they wait
    assert samples >= 2 * 280 * (series - ksm) + 280 * 2 * 32
    assert samples <= 2 * 280 * series
    in_vm = re.search(
        r"^VictoriaMetrics: ([\d,]+) series, RSS [\d,]+ MiB, data [\d,]+ MiB after the load$",
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
    r"report queries one at a time, each on an emptied result cache, slowest first \(all [\d.]+ s, "
    r"VictoriaMetrics CPU "
    r"[\d.]+ s\):\n"
    r"(  +[\d.]+ ms \(CPU +\d+ ms\) +[\d,]+ series  \S.*\n){10}"
)


@pytest.mark.slow
@runs_the_benchmark
def test_the_report_alone_on_a_kept_history(tmp_path: Path) -> None:
    """``--only report --keep DIR``: the history loads once; a second run reuses it (the command docs/report.md
    gives for the 7-day, 2,048-device figure), against VictoriaMetrics as docs/deploy.md runs it, with the
    history as the sizing runs load it (15 s, an HA pair)."""
    args = ["--devices", "64", "--hours", "1", "--ahead", "10", "--only", "report", "--keep", str(tmp_path)]
    args += ["--runs", "2"]  # the second run's report on an emptied result cache too
    runs = [_bench(*args) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        assert re.search(
            r"^VictoriaMetrics .*-dedup\.minScrapeInterval=15s.* \(docs/deploy\.md\)$", run.stdout, re.M
        )
        assert re.search(
            r"^history every 15 s \(280 samples a series, .*\), 2 replica\(s\)$", run.stdout, re.M
        )
        assert re.search(REPORT, run.stdout, re.M), run.stdout
        assert "recorded series" not in run.stdout and "dashboards (" not in run.stdout
        assert "rule groups" not in run.stdout
        assert re.search(
            r"^\| 64 \| [\d,]+ \| [\d,]+ M \| [\d,]+ MiB \| [\d,]+ MiB \| - \| - \| [\d.]+ s \([\d.]+-[\d.]+\) \|$",
            run.stdout,
            re.M,
        ), run.stdout
        assert len(re.findall(r"^report \(1 h to ", run.stdout, re.M)) == 2
    first = re.search(r"^VictoriaMetrics: ([\d,]+) series, .* after the load$", runs[0].stdout, re.M)
    assert first, runs[0].stdout
    assert re.search(r"^loaded: [\d,]+ series", runs[0].stdout, re.M)
    assert "history kept in" not in runs[0].stdout
    assert f"history kept in {tmp_path / '64'} from an earlier run (not loaded again)" in runs[1].stdout
    assert "loaded:" not in runs[1].stdout
    # the series counted at the load, not again (the kept store may hold what earlier runs wrote)
    assert re.search(rf"^VictoriaMetrics: {first[1]} series, .* as kept$", runs[1].stdout, re.M), runs[
        1
    ].stdout


def _benchmark() -> object:
    spec = importlib.util.spec_from_file_location("fleet_scale", ROOT / "benchmarks" / "fleet_scale.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fleet_scale", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_kept_store_is_reused_only_for_the_same_history(tmp_path: Path) -> None:
    """``--keep``: the store's data is reused when history.json names the same devices, hours, step and
    replicas; for any other history (or a marker from before the replicas were recorded) it is removed, so
    that the new history is not loaded on top of the old one."""
    fleet: Any = _benchmark()
    want = {"devices": 64, "hours": 1.0, "step": 15, "replicas": 2}

    def keep(marker: dict[str, Any] | None) -> Path:
        home = tmp_path / str(len(list(tmp_path.iterdir())))
        (home / "data" / "small").mkdir(parents=True)
        (home / "data" / "small" / "part").write_text("samples")
        if marker is not None:
            (home / "history.json").write_text(json.dumps(marker))
        return home

    same = keep({**want, "first": 1000, "last": 1000 + 239 * 15, "series": 2_345})
    got = fleet.kept_history(same, want)
    assert got is not None
    times, series = got
    assert series == 2_345 and len(times) == 240 and times[0] == 1000 and times[-1] == 1000 + 239 * 15
    assert (same / "data" / "small" / "part").exists()

    for other in (
        {**want, "hours": 2.0},
        {**want, "step": 60},
        {**want, "replicas": 1},
        {k: v for k, v in want.items() if k != "replicas"},  # written before the HA pair was loaded
    ):
        home = keep({**other, "first": 1000, "last": 1000 + 239 * 15, "series": 2_345})
        assert fleet.kept_history(home, want) is None, other
        assert not (home / "data").exists() and not (home / "history.json").exists()
    home = keep(None)  # a load that never finished: no marker
    assert fleet.kept_history(home, want) is None
    assert not (home / "data").exists()


def test_the_history_covers_the_window_before_now_and_a_run_past_its_end_is_not_valid(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The history is ``--hours`` before now and ``--ahead`` after it (a window of ``--hours`` ending at any
    moment of the run lies in it whole); a run that outlasts it is reported not valid rather than timed on
    an empty tail: at 16,384 devices the 37-minute load outlasted the default 30 minutes ahead and the
    dashboards, reading up to now, found no recorded series and took a fifth of their time."""
    fleet: Any = _benchmark()
    now = 1_800_000_007.0
    t = fleet.history_times(24, 15, 90 * 60, now)
    assert t[0] == 1_800_000_000 - 86400 + 15 and t[-1] == 1_800_000_000 + 90 * 60
    assert len(t) == (86400 + 90 * 60) // 15 and set(np.diff(t)) == {15}
    assert t[0] <= now + 3600 - 86400  # a day's report an hour into the run: its window is in the history

    assert fleet._past_end(time.time() - 600) is True  # ended 10 minutes ago
    assert "NOT VALID: the history ended 10 min before now" in capsys.readouterr().out
    assert fleet._past_end(time.time() + 3600) is False and fleet._past_end(None) is False
    assert capsys.readouterr().out == ""


@pytest.mark.slow
@runs_the_benchmark
def test_the_layouts_central_store_replays_the_records_on_before_each_runs_dashboards() -> None:
    """With no ruler on the central store (the layout: the clusters' Prometheus record all along), the
    records end where the replay ended; each run replays them on to now before its dashboards, so an
    instant panel on a record (the waste board's holder tables) is timed on the series a store would hold,
    not on none (the layout's first measurement at 16,384 devices timed those panels empty)."""
    args = ["--devices", "256", "--hours", "1", "--interval", "5", "--runs", "2", "--query-runs", "1"]
    args += ["--ahead", "10", "--layout", "--skip-cluster"]
    done = _bench(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert len(re.findall(r"^rule groups: none on the central store", out, re.M)) == 2, out
    topups = re.findall(r"^recorded series replayed on to now \((\d+) s more\) in [\d.]+ s$", out, re.M)
    assert len(topups) == 2, out
    assert "NOT VALID" not in out
