"""The report's queries run a few at a time (alerts.promapi.Prometheus.gather, report.baseline.collect): at a
fleet's size each query costs seconds on the server, and one at a time leaves its other cores idle.

Against the hold stand-in (tests/report/prom_standin.py: real HTTP, each answer held ``pause`` seconds)
for the bound and the errors, and against a real Prometheus serving the backfilled week of test_report.py
for the figures: the same at 1 and at 4 queries in flight."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from tests.report.prom_standin import StandIn, serve
from tests.report.test_report import END, RANGE, STEP, prometheus  # noqa: F401 (the module fixture)
from xpuwatch.alerts.promapi import PromError, Prometheus, Request, _clip
from xpuwatch.alerts.spec import load_spec
from xpuwatch.report.baseline import Window, collect, default_step, figures, queries, range_queries


def test_gather_keeps_at_most_concurrency_queries_in_flight_and_keys_every_answer() -> None:
    standin = StandIn("hold", pause=0.3)
    reqs = [Request(f"k{i}", "x" * (i + 1), 1700000000.0) for i in range(11)]
    reqs.append(Request("curve", "range", 1700000000.0, 1699990000.0, 60))
    seen: list[str] = []
    with serve(standin) as url:
        got = Prometheus(url).gather(reqs, 4, lambda r: seen.append(r.key))
    assert standin.most_in_flight == 4  # concurrent (each answer held 0.3 s), never more than 4
    assert sorted(seen) == sorted(r.key for r in reqs)
    assert {k: s[0].values for k, s in got.items() if k != "curve"} == {
        f"k{i}": ((1700000000.0, float(i + 1)),) for i in range(11)
    }
    assert got["curve"][0].values == ((1700000000.0, 5.0),)


def test_gather_fails_with_the_refused_querys_error_and_stops() -> None:
    standin = StandIn("hold", pause=0.2)
    reqs = [Request("bad", "refuse", 0.0), *(Request(f"k{i}", "up", 0.0) for i in range(20))]
    refused = pytest.raises(PromError, match=r"refused a query \(400\): parse error at char 1")
    with serve(standin) as url, refused:
        Prometheus(url).gather(reqs, 2)
    # the others were cancelled: the refused query and the few in flight beside it reached the server
    assert standin.queries[0] == "refuse" and len(standin.queries) < len(reqs), standin.queries
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        Prometheus("http://127.0.0.1:1").gather(reqs, 0)


def test_collect_asks_the_device_count_alone_first_then_the_rest_a_few_at_a_time() -> None:
    spec = load_spec()
    w = Window(end=1700000000, seconds=86400, step=300)
    standin = StandIn("hold", pause=0.05)
    seen: list[str] = []
    with serve(standin) as url:
        got = collect(Prometheus(url), spec, w, seen.append)
    devices = next(q.expr for q in queries(spec, w) if q.key == "devices")
    assert standin.queries[0] == devices and standin.most_in_flight == 4
    assert len(seen) == len(got) == len(queries(spec, w)) + len(range_queries(spec))


def _leaves(x: object) -> list[object]:
    """Every value in ``x`` (dataclasses, tuples, mappings) in order, numbers as floats."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return [v for f in dataclasses.fields(x) for v in _leaves(getattr(x, f.name))]
    if isinstance(x, dict):
        return [v for k in sorted(x, key=repr) for v in (repr(k), *_leaves(x[k]))]
    if isinstance(x, tuple | list):
        return [v for item in x for v in _leaves(item)]
    return [float(x) if isinstance(x, int | float) and not isinstance(x, bool) else x]


@pytest.mark.slow
def test_figures_are_the_same_one_at_a_time_and_four_at_a_time(prometheus: str) -> None:  # noqa: F811
    spec = load_spec()
    w = Window(end=END, seconds=RANGE, step=STEP)
    one = figures(collect(Prometheus(prometheus), spec, w, concurrency=1), spec, w)
    four = figures(collect(Prometheus(prometheus), spec, w, concurrency=4), spec, w)
    # Prometheus sums series in no fixed order: equal to the last bits, and NaN (no reading) where NaN
    assert [x for x in _leaves(four) if not isinstance(x, float)] == [
        x for x in _leaves(one) if not isinstance(x, float)
    ]
    floats = [x for x in _leaves(one) if isinstance(x, float)]
    assert [x for x in _leaves(four) if isinstance(x, float)] == pytest.approx(floats, rel=1e-12, nan_ok=True)
    assert four.fleet.devices == 16 and four.usage and four.hoarders


def test_report_cli_concurrency_option(tmp_path: Path) -> None:
    standin = StandIn("hold", pause=0.05)
    with serve(standin) as url:
        cmd = [sys.executable, "-m", "xpuwatch", "report", "--prometheus", url, "--range", "1d"]
        run = subprocess.run(
            [*cmd, "--concurrency", "2", "-o", str(tmp_path / "r.html")],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert run.returncode == 0, run.stderr
    assert standin.most_in_flight == 2 and (tmp_path / "r.html").exists()
    bad = subprocess.run([*cmd, "--concurrency", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--concurrency: '0' is not a whole number >= 1" in bad.stderr


def test_the_default_step_is_a_minute_at_least_and_about_2016_steps_a_window() -> None:
    # a day at one step a minute, whatever the scrape interval (a 15 s step cost the store 16x in the nested
    # P95 of the queue figure, issue 36); a week at 5 minutes; 30 days at 21 minutes
    assert [default_step(s) for s in (3600, 86400, 7 * 86400, 30 * 86400)] == [60, 60, 300, 1260]
    w = Window.ending(1700000123.5, 86400)
    assert (w.end, w.step, w.start) == (1700000100.0, 60, 1700000100.0 - 86400)
    assert Window.ending(1700000123, 86400, 15).end == 1700000115


def test_a_refusal_keeps_the_stores_reason_after_a_long_query() -> None:
    # VictoriaMetrics writes the whole query first and the reason (with the flag to change) last
    detail = 'error when executing query="' + "x" * 5000 + '": timeout exceeded; see -search.maxQueryDuration'
    clipped = _clip(detail)
    assert clipped.startswith('error when executing query="xxx') and " ... " in clipped
    assert clipped.endswith("timeout exceeded; see -search.maxQueryDuration") and len(clipped) == 505
    assert _clip("parse error at char 1") == "parse error at char 1"
