"""Before/after against a real Prometheus holding a backfilled fortnight with a known change in the middle.

report.history writes 14 days of the synthetic fleet; at the middle (``MID``) the change is made: training
packed tighter (+15 points), idle notebooks culled, the afternoon queue cut to 30 minutes. Every before and
after figure of ``xpuwatch report --range 7d --compare 7d`` is checked against the value computed in Python
from the same model, per window.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.report.backfill import served
from xpuwatch.alerts.promapi import Prometheus
from xpuwatch.alerts.spec import load_spec
from xpuwatch.report import history
from xpuwatch.report.baseline import Baseline, Window, collect, figures
from xpuwatch.report.compare import COULD_HAVE_RUN, compare, count, duration

STEP = 900
DEVICES = 16
WEEK = 7 * 86400
END = int(time.time()) // STEP * STEP
MID = END - WEEK  # the change; its own scrape is missing (history.times)
START = END - 2 * WEEK + STEP
GIB = 1024.0**3
FLEET = history.fleet(DEVICES)
TIMES = {
    "before": [t for t in history.times(START, END, STEP, MID) if t < MID],
    "after": [t for t in history.times(START, END, STEP, MID) if t > MID],
}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    lines = history.openmetrics(DEVICES, START, END, STEP, change_at=MID)
    with served(tmp_path_factory.mktemp("fortnight"), lines) as url:
        yield url


@pytest.fixture(scope="module")
def windows(prometheus: str) -> dict[str, Baseline]:
    spec = load_spec()
    out = {}
    for name, end in (("before", MID), ("after", END)):
        w = Window(end=end, seconds=WEEK, step=STEP)
        out[name] = figures(collect(Prometheus(prometheus), spec, w), spec, w)
    return out


def _point(d: history.HistoryDevice, t: int) -> history.Point:
    return history.point(d, t, MID)


def _expected(window: str) -> dict[str, object]:
    """The report's figures for one window, from the model."""
    ts = TIMES[window]
    util = {(d.uuid, t): _point(d, t).utilization for d in FLEET for t in ts}
    pools = {}
    for model in {d.model for d in FLEET}:
        devs = [d for d in FLEET if d.model == model]
        means = [np.mean([util[d.uuid, t] for d in devs]) for t in ts]
        pools[model] = (
            np.mean([util[d.uuid, t] for d in devs for t in ts]),
            float(np.quantile(means, 0.95)),
            np.mean([_point(d, t).sm_occupancy for d in devs for t in ts]),
        )
    fleet_means = [np.mean([util[d.uuid, t] for d in FLEET]) for t in ts]
    nb_bytes = sum(
        _point(d, t).memory_used_bytes
        for d in FLEET
        for t in ts
        if d.shape == "notebook"
        and history.held(d, t, MID)
        and _point(d, t).utilization <= 0.05
        and _point(d, t).memory_used_bytes >= 268435456
    )
    waits: dict[tuple[str, str], float] = {}
    for t in ts:
        for p in history.waiting(t, START, MID):
            waits[p.namespace, p.pod] = max(waits.get((p.namespace, p.pod), 0.0), t - p.created)
    # cards that could have run the waiting pods (AcceleratorJobsQueuedWhileIdle): per vendor, at the moments
    # its pods waited, its devices held by nobody or held with a utilization P95 over the hour before < 5 %
    every = history.times(START, END, STEP, MID)
    could = 0.0
    for vendor, resource in (("nvidia", "nvidia_com_gpu"), ("huawei", "huawei_com_Ascend910")):
        devs = [d for d in FLEET if d.vendor == vendor]
        moments = [t for t in ts if any(p.resource == resource for p in history.waiting(t, START, MID))]
        cards = [
            sum(
                not history.held(d, t, MID)
                or np.quantile([_point(d, u).utilization for u in every if t - 3600 <= u <= t], 0.95) < 0.05
                for d in devs
            )
            for t in moments
        ]
        could += float(np.mean(cards))
    held = [(d, t) for d in FLEET for t in ts if history.held(d, t, MID)]
    held_idle = sum(_point(d, t).utilization <= 0.05 for d, t in held) / (len(FLEET) * len(ts))
    return {
        "pools": pools,
        "fleet": (np.mean(list(util.values())), float(np.quantile(fleet_means, 0.95))),
        "fleet_sm": np.mean([_point(d, t).sm_occupancy for d in FLEET for t in ts]),
        "notebook_gib": nb_bytes * STEP / WEEK / GIB,
        "pods_waited": len(waits),
        "wait_p95": float(np.quantile(list(waits.values()), 0.95)),
        "max_wait": max(waits.values()),
        "could_have_run": could,
        "held_idle": held_idle,
    }


@pytest.mark.slow
@pytest.mark.parametrize("window", ["before", "after"])
def test_each_window_matches_the_model(windows: dict[str, Baseline], window: str) -> None:
    b, want = windows[window], _expected(window)
    for pool in b.pools:
        avg, p95, sm = want["pools"][pool.model]  # type: ignore[index]
        assert (pool.avg, pool.p95, pool.sm_occupancy) == pytest.approx((avg, p95, sm), rel=1e-9)
    assert (b.fleet.avg, b.fleet.p95) == pytest.approx(want["fleet"], rel=1e-9)
    assert b.fleet.sm_occupancy == pytest.approx(want["fleet_sm"], rel=1e-9)
    assert b.notebook_memory_gib == pytest.approx(want["notebook_gib"], rel=1e-9)
    assert b.pods_waited == want["pods_waited"]
    assert b.wait_p95_seconds == pytest.approx(want["wait_p95"])
    assert b.max_wait_seconds == want["max_wait"]
    assert b.could_have_run == pytest.approx(want["could_have_run"], rel=1e-9)
    assert b.fleet_hours.share("held_idle") == pytest.approx(want["held_idle"], rel=1e-9)
    assert b.alerts_by_category == {}  # backfilled data has no ALERTS history


@pytest.mark.slow
def test_the_comparison_shows_what_the_change_bought(windows: dict[str, Baseline]) -> None:
    cmp = compare(windows["before"], windows["after"])
    before, after = _expected("before"), _expected("after")
    p95 = cmp.get("fleet", "P95 utilization")
    assert (p95.before, p95.after) == pytest.approx((before["fleet"][1], after["fleet"][1]), rel=1e-9)  # type: ignore[index]
    # the change as the model makes it: notebooks culled, queue capped at 30 minutes, training up
    assert cmp.get("fleet", "memory held by idle notebooks").after == 0.0
    notebooks = sum(d.shape == "notebook" for d in FLEET)  # one at 16 devices, holding 12 GiB
    assert before["notebook_gib"] == pytest.approx(notebooks * 12.0 * len(TIMES["before"]) * STEP / WEEK)
    assert cmp.get("fleet", "longest wait").before == 3 * 3600 + 45 * 60
    assert cmp.get("fleet", "longest wait").after <= 1800 - STEP  # type: ignore[operator]
    assert p95.delta is not None and p95.delta > 0.03  # training (7 of 16 cards) +15 points, capped at 100 %
    for scope in ("NVIDIA A100-SXM4-80GB", "Ascend910B"):
        c = cmp.get(scope, "average utilization")
        assert c.delta is not None and c.delta > 0
    idle = cmp.get("fleet", COULD_HAVE_RUN)
    assert (idle.before, idle.after) == pytest.approx(
        (before["could_have_run"], after["could_have_run"]), rel=1e-9
    )
    held_idle = cmp.get("fleet", "card-hours held idle")
    assert (held_idle.before, held_idle.after) == pytest.approx((before["held_idle"], after["held_idle"]))
    points = round(100 * (after["fleet"][1] - before["fleet"][1]))  # type: ignore[index]
    parts = [
        f"P95 up {points} points",
        f"queue P95 down from {duration(before['wait_p95'])} to {duration(after['wait_p95'])}",  # type: ignore[arg-type]
    ]
    fewer = round(before["could_have_run"] - after["could_have_run"], 1)  # type: ignore[operator]
    if fewer:
        parts.append(
            f"{count(abs(fewer))} {'fewer' if fewer > 0 else 'more'} free or idle cards while jobs waited"
        )
    parts.append(f"card-hours held idle down from {before['held_idle']:.0%} to {after['held_idle']:.0%}")
    assert cmp.headline == ", ".join(parts)


@pytest.mark.slow
def test_report_cli_compares_two_weeks(prometheus: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    argv = [sys.executable, "-m", "xpuwatch", "report", "--prometheus", prometheus]
    argv += ["--range", "7d", "--compare", "7d", "--step", "15m", "--end", str(END)]
    argv += ["--timezone", "Asia/Shanghai", "-o", str(out)]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert re.match(r"P95 up \d+ points, queue P95 down from 3h 45m to \d+m", run.stdout), run.stdout
    page = out.read_text()
    assert page.count("<svg") == 7  # the card-hours of both windows, the baseline's four plots, two more
    assert page.index('id="hours-answer"') < page.index('id="compare-headline"') < page.index('id="compare"')
    assert 'id="compare"' in page and "memory held by idle notebooks" in page
    assert "before (dotted) | after" in page
    # the same explicit windows: --compare-end names the before window's end
    run2 = subprocess.run(
        [*argv[:-2], "--compare-end", str(MID), "-o", str(tmp_path / "r2.html")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run2.returncode == 0 and run2.stdout.splitlines()[0] == run.stdout.splitlines()[0]
