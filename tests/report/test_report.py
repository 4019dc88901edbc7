"""The baseline report against a real Prometheus holding a week of backfilled history.

A week of the synthetic fleet (report.history) is written as OpenMetrics, backfilled with Debian's
`promtool tsdb create-blocks-from openmetrics`, served by Debian's `prometheus`, and read by the report. Every
figure is checked against the value computed in Python from the same model the history was written from;
the HTML is rendered by headless Chromium (Debian `chromium`) to a PNG.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zoneinfo
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.ports import free_port
from tests.report.backfill import served
from tests.report.prom_standin import HEAD, StandIn, serve
from xpuwatch.alerts.promapi import PromError, Prometheus, duration
from xpuwatch.alerts.spec import load_spec
from xpuwatch.report import chargeback, history
from xpuwatch.report.baseline import Baseline, ReportError, Window, collect, figures

STEP = 900
DEVICES = 16
RANGE = 7 * 86400
# The last UTC midnight: recent data (Prometheus' retention is relative to now), and a week of whole days, so
# every afternoon's wait (history.waiting, 13:00-17:00 UTC) lies in the window whole, whatever hour the suite
# runs (ending at now, a run between 13:00 and 17:00 cut today's wait short: 24.5 h waited, not 28 h)
END = int(time.time()) // 86400 * 86400
START = END - RANGE + STEP  # the first sample lies inside the window whether ranges are open or closed
TIMES = range(START, END + 1, STEP)
GIB = 1024.0**3


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(tmp_path_factory.mktemp("week"), history.openmetrics(DEVICES, START, END, STEP)) as url:
        yield url


# ---------------------------------------------------------------- expected values, from the same model
FLEET = history.fleet(DEVICES)
POINTS = {(d.uuid, t): history.point(d, t) for d in FLEET for t in TIMES}


def _pool_p95(model: str) -> float:
    devs = [d for d in FLEET if d.model == model]
    means = [np.mean([POINTS[d.uuid, t].utilization for d in devs]) for t in TIMES]
    return float(np.quantile(means, 0.95))


def _idle(d: history.HistoryDevice, t: int) -> bool:
    p = POINTS[d.uuid, t]
    return p.utilization <= 0.05 and p.memory_used_bytes >= 268435456


@pytest.mark.slow
def test_report_figures_match_the_backfilled_week(prometheus: str) -> None:
    spec = load_spec()
    w = Window(end=END, seconds=RANGE, step=STEP)
    seen: list[str] = []
    b = figures(collect(Prometheus(prometheus), spec, w, seen.append), spec, w)
    assert "pool P95" in seen and len(seen) >= 20  # the progress callback saw every query

    assert b.fleet.devices == DEVICES
    assert b.fleet.avg == pytest.approx(np.mean([p.utilization for p in POINTS.values()]), rel=1e-9)
    for pool in b.pools:
        devs = [d for d in FLEET if d.model == pool.model]
        assert pool.devices == len(devs) == 4
        assert pool.avg == pytest.approx(
            np.mean([POINTS[d.uuid, t].utilization for d in devs for t in TIMES])
        )
        assert pool.p95 == pytest.approx(_pool_p95(pool.model), rel=1e-9)
    assert {p.model for p in b.pools} == {m for _, m, *_ in history.POOLS}

    # hoarders: device-hours held with memory and compute ~0, by namespace/owner
    want: dict[tuple[str, str], float] = {}
    for d in FLEET:
        if d.holder is not None:
            n = sum(_idle(d, t) for t in TIMES)
            if n:
                key = (d.holder.namespace, d.holder.owner)
                want[key] = want.get(key, 0.0) + n * STEP / 3600
    assert {(h.namespace, h.owner): h.device_hours for h in b.hoarders} == pytest.approx(want)
    assert sorted(want.values()) == [168.0] * 4  # two stale jobs and two notebooks, idle all week

    notebooks = {(n.namespace, n.pod): (n.idle_hours, n.held_hours) for n in b.idle_notebooks}
    assert notebooks == {
        (d.holder.namespace, d.holder.pod): (168.0, 168.0)
        for d in FLEET
        if d.holder is not None and d.holder.workload_kind == "notebook"
    }

    # slices: the notebook on a 1g.10gb MIG slice holds 96 % of it and computes 1 %: memory-bound
    assert [
        (s.slice_id, round(s.memory_ratio, 6), round(s.compute_ratio, 6), s.advice.split(":")[0])
        for s in b.slices
        if s.slice_id != "100"
    ] == [("1/0", 0.96, 0.01, "memory-bound") for d in FLEET if d.slice_id]
    # the Ascend vNPU (size only, no usage reading) is listed with no ratio rather than a guess (issue 22)
    vnpus = [s for s in b.slices if s.slice_id == "100"]
    ascend = next(d for d in FLEET if d.vendor == "huawei")
    assert [(s.node, s.device, s.profile, s.advice) for s in vnpus] == [
        (
            ascend.node,
            ascend.device,
            "vir10_3c_16g",
            "no usage reading for this slice (size only, e.g. an Ascend vNPU): judge by its device",
        )
    ]
    assert all(np.isnan(s.memory_ratio) and np.isnan(s.compute_ratio) for s in vnpus)

    # memory vs compute per device: the mean framebuffer ratio and mean SM occupancy of each device
    for p in b.devices:
        d = next(x for x in FLEET if x.uuid == p.uuid)
        assert p.memory_ratio == pytest.approx(
            np.mean([POINTS[d.uuid, t].memory_used_bytes for t in TIMES]) / d.memory_total_bytes
        )
        assert p.compute_ratio == pytest.approx(
            np.mean([POINTS[d.uuid, t].sm_occupancy for t in TIMES]), abs=1e-12
        )
        assert p.compute_source == "sm_occupancy"

    # queue: the pods that waited, the longest wait, idle capacity while they waited
    waiting = {t: history.waiting(t, START) for t in TIMES}
    pods = {(p.namespace, p.pod) for ps in waiting.values() for p in ps}
    assert b.pods_waited == len(pods) == 14
    assert (
        b.max_wait_seconds
        == max(t - p.created for t, ps in waiting.items() for p in ps)
        == 3 * 3600 + 45 * 60
    )
    assert {(q.namespace, q.resource): q.pods for q in b.waiting} == {
        ("ml", "nvidia.com/gpu"): 7,
        ("nlp", "huawei.com/Ascend910"): 7,
    }
    # two stale jobs and two notebooks, each one card held idle all week
    assert sorted(h.cards for h in b.hoarders) == pytest.approx([1.0] * 4)
    peak = max(v for _, v in b.pending_curve)
    assert peak == 12 and min(v for _, v in b.pending_curve) == 0  # 8 GPUs + 4 NPUs; nothing at night
    assert b.alerts == {}  # backfilled data has no ALERTS history


# resource (as kube-state-metrics writes it) -> the vendor whose cards can run it (spec queue_resources)
VENDOR_OF = {"nvidia_com_gpu": "nvidia", "huawei_com_Ascend910": "huawei"}


def _could_have_run() -> dict[str, tuple[float, float, float]]:
    """Per vendor pods waited for: (free, held idle, hours waited), computed from the model the way
    AcceleratorJobsQueuedWhileIdle counts: at each moment a pod of that vendor waited, its devices held by
    nobody, and those held whose utilization P95 over the hour before was under 5 %; the mean over those
    moments."""
    out: dict[str, tuple[float, float, float]] = {}
    for vendor in sorted(set(VENDOR_OF.values())):
        moments = [
            t for t in TIMES if any(VENDOR_OF[p.resource] == vendor for p in history.waiting(t, START))
        ]
        devs = [d for d in FLEET if d.vendor == vendor]
        free, idle = [], []
        for t in moments:
            free.append(sum(d.holder is None for d in devs))
            hour = [u for u in TIMES if t - 3600 <= u <= t]
            idle.append(
                sum(
                    d.holder is not None
                    and float(np.quantile([POINTS[d.uuid, u].utilization for u in hour], 0.95)) < 0.05
                    for d in devs
                )
            )
        out[vendor] = (float(np.mean(free)), float(np.mean(idle)), len(moments) * STEP / 3600)
    return out


def _naive_idle_while_waiting() -> float:
    """The old headline: Σ(1 - utilization) over every device of every vendor, busy ones too, averaged over
    the moments any pod waited."""
    busy = [t for t in TIMES if history.waiting(t, START)]
    return float(np.mean([sum(1 - POINTS[d.uuid, t].utilization for d in FLEET) for t in busy]))


@pytest.fixture(scope="module")
def week(prometheus: str) -> Baseline:
    spec = load_spec()
    w = Window(end=END, seconds=RANGE, step=STEP)
    return figures(collect(Prometheus(prometheus), spec, w), spec, w)


@pytest.mark.slow
def test_the_headline_counts_only_cards_that_could_have_run_the_waiting_jobs(week: Baseline) -> None:
    """Issue 34: "38.7 cards' worth of capacity idle while 14 jobs waited" summed (1 - utilization) over every
    device of every vendor, busy cards included. Now, per vendor the pods waited for, only that vendor's
    cards free or held idle by AcceleratorJobsQueuedWhileIdle's definition count, and the headline says so
    per resource. The naive figure of this fleet is far from it: a headline built on it fails here."""
    want = _could_have_run()
    got = {c.vendor: (c.free, c.held_idle, c.waited_seconds / 3600) for c in week.wait_capacity}
    assert got.keys() == want.keys()
    for vendor, figures_ in want.items():
        assert got[vendor] == pytest.approx(figures_), vendor
    # 16 devices, 4 per pool: NVIDIA's stale job and notebook and Ascend's stale job sit idle; the one free
    # card is an AMD card, which no waiting pod asked for
    assert want == {"nvidia": (0.0, 2.0, 28.0), "huawei": (0.0, 1.0, 14.0)}
    naive = _naive_idle_while_waiting()
    assert naive > 2 * sum(f + i for f, i, _ in want.values())  # busy and other vendors' cards were in it
    assert week.could_have_run == 3.0
    assert week.headline == (
        "14 jobs waited for cards (longest 3h 45m). "
        "While nlp waited for 4 huawei.com/Ascend910: 0 free and 1 held idle Ascend910B cards could have run "
        "them (mean over the 14 h they waited). "
        "While ml waited for 8 nvidia.com/gpu: 0 free and 2 held idle nvidia cards could have run them "
        "(mean over the 28 h they waited)."
    )
    assert f"{naive:.1f}" not in week.headline


@pytest.mark.slow
def test_card_hours_split_into_unheld_held_idle_and_held_busy(week: Baseline) -> None:
    """Where every card-hour went, per pool, against the model: present x hours, split by whether a pod
    held the card and whether its utilization was at most 5 % at the step."""
    for pool in week.card_hours:
        devs = [d for d in FLEET if d.model == pool.model]
        held = [(d, t) for d in devs for t in TIMES if d.holder is not None]
        idle = [(d, t) for d, t in held if POINTS[d.uuid, t].utilization <= 0.05]
        busy = [POINTS[d.uuid, t].utilization for d, t in held if POINTS[d.uuid, t].utilization > 0.05]
        h = STEP / 3600
        assert pool.total == pytest.approx(len(devs) * len(TIMES) * h)
        assert (pool.held_idle, pool.held_busy) == pytest.approx((len(idle) * h, len(busy) * h))
        assert pool.busy_utilization == pytest.approx(np.mean(busy))
    fleet = week.fleet_hours
    assert fleet.total == 16 * 168.0 and fleet.unheld == 168.0  # one free card of the 16
    assert week.hours_answer.startswith("Of 2,688 card-hours, 6.2% were held by nobody, ")
    assert week.coverage == 1.0 and week.rules_ran is False


def _usage() -> dict[tuple[str, str, str, str], tuple[float, float, float, float, float]]:
    """Chargeback computed independently from the model: (device-hours, idle hours, memory GiB-hours,
    kWh, kWh from power x time) per (namespace, owner, vendor, model). Every held card has one holder; a
    card with an energy counter is charged from its second sample on (rate() needs two), one with power
    only from its first."""
    out: dict[tuple[str, str, str, str], tuple[float, float, float, float, float]] = {}
    h = STEP / 3600
    for d in FLEET:
        if d.holder is None:
            continue
        counter = d.vendor in history.ENERGY_COUNTER_VENDORS
        joules = sum(history.power_watts(d, t) * STEP for t in TIMES if not counter or t > START)
        row = (
            len(TIMES) * h,
            sum(POINTS[d.uuid, t].utilization <= 0.05 for t in TIMES) * h,
            sum(POINTS[d.uuid, t].memory_used_bytes for t in TIMES) * h / GIB,
            joules / 3.6e6,
            0.0 if counter else joules / 3.6e6,
        )
        key = (d.holder.namespace, d.holder.owner, d.vendor, d.model)
        prev = out.get(key, (0.0,) * 5)
        out[key] = tuple(a + b for a, b in zip(prev, row, strict=True))  # type: ignore[assignment]
    return out


@pytest.mark.slow
def test_chargeback_sums_equal_the_models_device_hours_and_energy(prometheus: str) -> None:
    spec = load_spec()
    w = Window(end=END, seconds=RANGE, step=STEP)
    b = figures(collect(Prometheus(prometheus), spec, w), spec, w)
    got = {
        (u.namespace, u.owner, u.vendor, u.model): (
            u.device_hours,
            u.idle_hours,
            u.memory_gib_hours,
            u.energy_kwh,
            u.energy_kwh_from_power,
        )
        for u in b.usage
    }
    want = _usage()
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-9), k
    # every held card is charged all week; Ascend's energy is power x time, the others' from the counter
    assert sum(u.device_hours for u in b.usage) == 15 * 168.0  # 15 of the 16 cards are held
    assert {u.vendor for u in b.usage if u.energy_kwh_from_power} == {"huawei"}
    teams = chargeback.by_team(b.usage)
    assert sum(t.device_hours for t in teams) == pytest.approx(sum(v[0] for v in want.values()))
    assert sum(t.energy_kwh for t in teams) == pytest.approx(sum(v[3] for v in want.values()))


@pytest.mark.slow
def test_report_cli_writes_html_that_chromium_renders(prometheus: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    prices = tmp_path / "report.yaml"  # every model but AMD's priced: its cost and its teams' are n/a
    prices.write_text(
        "prices:\n  currency: CNY\n  card_hour:\n    NVIDIA H100 80GB HBM3: 28\n    nvidia.com/gpu: 16\n"
        "    huawei.com/Ascend910: 12\n  kwh: 0.85\n"
    )
    victim = tmp_path / "victim"  # a link planted in the CSV folder is replaced, never written through
    victim.write_text("precious\n")
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "usage_by_team.csv").symlink_to(victim)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "xpuwatch",
            "report",
            "--prometheus",
            prometheus,
            "--range",
            "7d",
            "--step",
            "15m",
            "--end",
            str(END),
            "--timezone",
            "Asia/Shanghai",
            "--csv",
            str(tmp_path / "csv"),
            "--config",
            str(prices),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert (
        "14 jobs waited for cards (longest 3h 45m). While nlp waited for 4 huawei.com/Ascend910" in run.stdout
    )
    assert "no card-hour price for AMD Instinct MI300X (504.0 device-hours): its cost is n/a" in run.stderr
    assert victim.read_text() == "precious\n" and not (tmp_path / "csv" / "usage_by_team.csv").is_symlink()
    page = out.read_text()
    end_local = dt.datetime.fromtimestamp(END, zoneinfo.ZoneInfo("Asia/Shanghai")).strftime("%Y-%m-%d %H:%M")
    assert f"to {end_local} CST (UTC+08:00)</h1>" in page
    assert "nvidia.com/gpu" in page and "nvidia_com_gpu" not in page
    assert "time (Asia/Shanghai)" in page and "framebuffer" not in page
    assert 'id="usage-teams"' in page and "estimated as power x time" in page
    costs = ["card_cost", "energy_cost", "currency"]
    with (tmp_path / "csv" / "usage_by_team.csv").open() as f:
        teams = list(csv.DictReader(f))
    assert list(teams[0]) == [*chargeback.TEAM_COLUMNS, *costs]
    want = _usage()
    assert sum(float(r["device_hours"]) for r in teams) == pytest.approx(sum(v[0] for v in want.values()))
    # the two kWh columns add up to the energy once (energy_kwh held energy_kwh_from_power as well)
    kwh = sum(float(r["energy_kwh_counter"]) + float(r["energy_kwh_from_power"]) for r in teams)
    assert kwh == pytest.approx(sum(v[3] for v in want.values()), abs=0.01)
    assert sum(float(r["energy_cost"]) for r in teams) == pytest.approx(0.85 * kwh, abs=0.02)
    with (tmp_path / "csv" / "usage_by_model.csv").open() as f:
        models = list(csv.DictReader(f))
    assert list(models[0]) == [*chargeback.MODEL_COLUMNS, *costs]
    assert {(r["vendor"], r["model"]) for r in models} == {(v, m) for v, m, *_ in history.POOLS}
    # card cost = device-hours x the model's price (H100 its own, A100 nvidia.com/gpu's); MI300X unpriced
    price = {"NVIDIA H100 80GB HBM3": 28.0, "NVIDIA A100-SXM4-80GB": 16.0, "Ascend910B": 12.0}
    for r in models:
        hours = sum(v[0] for k, v in want.items() if k[3] == r["model"])
        if r["model"] in price:
            assert float(r["card_cost"]) == pytest.approx(price[r["model"]] * hours, abs=0.005)
        else:
            assert r["card_cost"] == "" and r["vendor"] == "amd"
        assert r["currency"] == "CNY"
    for r in teams:  # a team holding an AMD card has no card cost rather than a partial one
        rows = {k: v for k, v in want.items() if (k[0], k[1]) == (r["namespace"], r["owner"])}
        if any(k[2] == "amd" for k in rows):
            assert r["card_cost"] == ""
        else:
            assert float(r["card_cost"]) == pytest.approx(
                sum(price[k[3]] * v[0] for k, v in rows.items()), abs=0.01
            )
    assert "No card-hour price for AMD Instinct MI300X (504.0 h)" in page
    assert page.count("<svg") == 5  # where the card-hours went, pools, curves, scatter, queue
    assert re.search(r'(src|href)="(https?:)?//', page) is None  # self-contained: nothing fetched
    assert 'id="hoarders"' in page and 'id="slices"' in page and "memory-bound" in page
    assert "vir10_3c_16g" in page and "no usage reading for this slice" in page  # the vNPU row
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian package chromium is required"
    png = tmp_path / "report.png"
    shot = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1100,2600",
            f"--screenshot={png}",
            out.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.returncode == 0, shot.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000  # a page with plots, not a blank one
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", out.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0 and "14 jobs waited" in dom.stdout
    assert dom.stdout.index('id="hours-answer"') < dom.stdout.index("14 jobs waited")


@pytest.mark.slow
def test_report_fails_clearly_without_data_or_prometheus(prometheus: str, tmp_path: Path) -> None:
    spec = load_spec()
    empty = Window(end=END - 30 * 86400, seconds=RANGE, step=STEP)  # a week before the history
    with pytest.raises(ReportError, match=r"no xpuwatch series .*is this Prometheus scraping the exporter"):
        collect(Prometheus(prometheus), spec, empty)
    short = Window(end=END - 30 * 86400, seconds=1800, step=60)  # half an hour: not "in the 0 h before"
    with pytest.raises(ReportError, match=r"in the 30 min before"):
        collect(Prometheus(prometheus), spec, short)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "xpuwatch",
            "report",
            "--prometheus",
            f"http://127.0.0.1:{free_port()}",
            "-o",
            str(tmp_path / "r.html"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and "cannot reach Prometheus at http://127.0.0.1:" in run.stderr
    assert not (tmp_path / "r.html").exists()


def test_refused_query_names_the_error(tmp_path: Path) -> None:
    """A Prometheus that answers 400 with its JSON error: the error text reaches the user."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.dumps(
                {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}
            ).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = HTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(PromError, match=r"refused a query \(400\): parse error at char 3"):
            Prometheus(f"http://127.0.0.1:{srv.server_port}").query("up", 0)
    finally:
        srv.shutdown()


def test_durations() -> None:
    assert [duration(x) for x in ("7d", "36h", "1h30m", "90s", "2w")] == [604800, 129600, 5400, 90, 1209600]
    with pytest.raises(Exception, match="not a duration"):
        duration("7 days")


@pytest.mark.parametrize("url", ["notaurl", "localhost:9090", "ftp://prometheus:9090", "http://"])
def test_a_url_that_is_no_prometheus_url_is_one_clear_error(url: str) -> None:
    with pytest.raises(PromError, match="is not a Prometheus URL like http://prometheus:9090"):
        Prometheus(url)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_an_answer_over_the_size_limit_fails_at_the_limit_with_bounded_memory() -> None:
    """A Prometheus streaming a vector of ever more series (a 3M-series answer: 4.4 GB of RSS before, and
    the report read it all): the read stops at ``max_answer_bytes``, memory grows by about that much."""
    cap = 8 * 2**20
    standin = StandIn("huge", limit=256 * 2**20)
    with serve(standin) as url:
        before = _rss()
        with pytest.raises(PromError, match=r"an answer over 8 MiB \(--max-answer-mib\)"):
            Prometheus(url, timeout=60, max_answer_bytes=cap).query("accelerator_utilization_ratio", 0)
        grew = _rss() - before
    assert standin.sent < 64 * 2**20  # stopped reading, not drained to the end (256 MiB)
    assert grew < 4 * cap, f"RSS grew by {grew / 2**20:.0f} MiB"


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    standin = StandIn("declared")
    with serve(standin) as url, pytest.raises(PromError, match=r"an answer over 64 MiB"):
        Prometheus(url, timeout=60).query("up", 0)
    assert standin.sent == len(HEAD)  # refused on the header: no more was sent, none waited for


@pytest.mark.slow
def test_the_timeout_covers_an_answer_that_trickles_in() -> None:
    """One byte every 0.1 s: no single read ever waits 2 s, yet the answer never completes. Before, urllib's
    per-read timeout let this run until the server stopped (here 30 s); now the query fails at 2 s."""
    standin = StandIn("slow", limit=300, pause=0.1)
    with serve(standin) as url:
        t0 = time.monotonic()
        with pytest.raises(
            PromError, match=r"no complete answer within 2 s, decoding included \(--timeout\)"
        ):
            Prometheus(url, timeout=2).query("up", 0)
        took = time.monotonic() - t0
        sent = standin.sent
    # not before the timeout (a lower bound holds on any machine), and not at the end of the 30 s answer
    assert took >= 1.9 and sent < 300, (took, sent)


@pytest.mark.slow
def test_report_cli_fails_with_one_line_on_a_huge_answer(tmp_path: Path) -> None:
    standin = StandIn("huge", limit=64 * 2**20)
    with serve(standin) as url:
        cmd = [sys.executable, "-m", "xpuwatch", "report", "--prometheus", url, "--max-answer-mib", "1"]
        run = subprocess.run(
            [*cmd, "--timeout", "20", "-o", str(tmp_path / "r.html")],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 1, run.stderr
    assert run.stderr.splitlines() == [
        f"xpuwatch report: Prometheus at {url}: an answer over 1 MiB (--max-answer-mib); narrow the "
        "selection or raise the limit"
    ]
    assert standin.sent < 64 * 2**20 and not (tmp_path / "r.html").exists()  # stopped reading at 1 MiB
    bad = subprocess.run(
        [sys.executable, "-m", "xpuwatch", "report", "--prometheus", url, "--max-answer-mib", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--max-answer-mib: '0' is not a number > 0" in bad.stderr


@pytest.mark.slow
def test_energy_is_charged_when_the_step_is_shorter_than_the_sample_spacing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A 1-minute step over 2-minute samples: rate(energy[60s]) held one sample (or none) at each step, and
    NVIDIA/AMD energy came out far below the model's (0 kWh on Prometheus 3's left-open windows with
    1-minute scrapes at a 1-day report's default step). The window is now at least 5 minutes."""
    spacing, devices, hours = 120, 8, 6
    end = int(time.time()) // 300 * 300
    start = end - hours * 3600 + spacing
    with served(tmp_path_factory.mktemp("sparse"), history.openmetrics(devices, start, end, spacing)) as url:
        w = Window(end=end - 600, seconds=hours * 3600 - 1800, step=60)  # inside the history on both sides
        b = figures(collect(Prometheus(url), load_spec(), w), load_spec(), w)
    fleet = history.fleet(devices)
    got = sum(u.energy_kwh - u.energy_kwh_from_power for u in b.usage)
    want = (
        sum(
            history.power_watts(d, t) * 60
            for d in fleet
            if d.holder is not None and d.vendor in history.ENERGY_COUNTER_VENDORS
            for t in range(int(w.start) + 60, int(w.end) + 1, 60)
        )
        / 3.6e6
    )
    assert want > 0
    assert got == pytest.approx(want, rel=0.05)
