"""Benchmark: query time of a full dashboard refresh and rule-evaluation time on a large simulated fleet.

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/dashboard_queries.py [DEVICES [SCRAPE
[EVALUATION [WARMUP_S [RUNS]]]]]`` (defaults 256 devices, 5 s scrapes, 15 s rule evaluation, 75 s warm-up, 5 runs;
devices a multiple of 4, spread over four models on one node; 2048 is the target size of issue 16 and
needs a scrape interval longer than one scrape of the Python sim exporter takes). Starts Debian's
Prometheus with alerts/generated/rules.yml, the sim exporter and the pipeline stand-in (the same stack as
tests/dashboards/test_prometheus.py), waits the warm-up, then runs each panel query RUNS times (default 5) as Grafana
would at its default time range, the last 6 hours: range queries at a 20 s step for time series (6 h over the
~1,080 points Grafana asks of a half-width panel), instant queries otherwise, ``$__range`` 21600s and
``$__rate_interval`` max(step + scrape, 4 x scrape) as Grafana computes it. The stack's history is only the
warm-up long, so a 6 h range costs what a fresh server's does: the step count (1,081 points a series), not
6 h of samples. It prints the sum of the median times per dashboard
refresh, the slowest queries with the series each returns, and each rule group's evaluation time
(Prometheus' own ``prometheus_rule_group_last_duration_seconds``, read from its /metrics every 5 s of the
warm-up: the last, the most and the mean seen) as a share of the interval, with the sum of its rules'
expressions run alone as instant queries (the PromQL cost, steadier on a busy machine than evaluation times,
which add alert state and appends), and the slowest rules with their query time and active alerts. Nothing
is asserted.
"""

from __future__ import annotations

import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.dashboards.test_prometheus import Prom, _dashboards, _get, _targets, resolve, stack, substitute

MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090", "AMD Instinct MI250X", "Ascend910B")
PROFILES = ("training", "inference", "idle_notebook", "memory_bound", "compute_bound", "starved", "idle")
SCRAPE, EVALUATION, WARMUP_S, RUNS = "5s", "15s", 75, 5
SLOW_RULES = 15  # rules listed, slowest first
RANGE_S = 6 * 3600  # Grafana's default time range: now-6h
STEP_S = 20  # Grafana's $__interval for 6 h on a half-width panel (~1,080 points), rounded as Grafana rounds


def grafana_builtins(scrape_s: float) -> dict[str, str]:
    """Grafana's built-in variables for a ``RANGE_S`` range at ``STEP_S`` on a data source scraped every
    ``scrape_s`` seconds (``$__rate_interval`` = max($__interval + scrape interval, 4 x scrape interval))."""
    rate = max(STEP_S + scrape_s, 4 * scrape_s)
    return {
        "__interval": f"{STEP_S}s",
        "__rate_interval": f"{rate:g}s",
        "__range": f"{RANGE_S}s",
        "__range_s": str(RANGE_S),
    }


def scenario(per_model: int, poll_interval: float = 5) -> dict[str, object]:
    """``per_model`` devices of each model, profiles in rotation, every NVIDIA device held by a job; the sim
    polls every ``poll_interval`` seconds (as often as it is scraped: more would only burn shared CPU)."""
    devices: list[dict[str, object]] = [{"model": m, "count": per_model} for m in MODELS]
    devices[0]["mig"] = ["3g.40gb", "2g.20gb", "1g.10gb"]
    devices[1]["vgpu"] = 2
    timeline: list[dict[str, object]] = []
    for i in range(per_model):
        for vendor in ("amd", "huawei"):
            # Ascend chips are indexed "<NPU>-<chip>" as npu-smi prints them (vendors/sim.py).
            index = f"{i}-0" if vendor == "huawei" else str(i)
            timeline.append({"at": 0, "device": f"{vendor}/{index}", "profile": PROFILES[i % 7]})
    for i in range(2 * per_model):
        pod = {"namespace": f"team-{i % 8}", "pod": f"job-{i}", "workload_kind": "job"}
        timeline.append({"at": 0, "device": f"nvidia/{i}", "profile": PROFILES[i % 7], "pod": pod})
    return {"seed": 1, "poll_interval": poll_interval, "devices": devices, "timeline": timeline}


def query_time(prom: Prom, expr: str, repeats: int = 3) -> float:
    """Median seconds of ``expr`` as one instant query: what a rule's expression costs without the alert
    state, template expansion and sample appends the rule evaluation adds."""
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        prom.query(expr)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def own(base: str, name: str) -> dict[str, float]:
    """``name``'s samples on a server's own /metrics, by label set (the test Prometheus does not scrape
    itself, so its self-metrics are read here)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {m[0]: float(m[1]) for m in re.findall(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, re.M)}


def resolved(prom: Prom, timeout_s: float = 60) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Each dashboard with its template variables' values, waiting up to ``timeout_s`` for the first
    scrapes and rule evaluations to give every variable a value (a short warm-up ends before them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return [(d, resolve(d, prom)) for d in _dashboards()]
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def main(args: list[str]) -> None:
    devices = int(args[0]) if args else 256
    scrape = args[1] if len(args) > 1 else SCRAPE
    evaluation = args[2] if len(args) > 2 else EVALUATION
    warmup = int(args[3]) if len(args) > 3 else WARMUP_S
    repeats = int(args[4]) if len(args) > 4 else RUNS
    groups: dict[str, float] = {}  # the most seen
    last: dict[str, float] = {}  # the last seen (steady state)
    seen: dict[str, list[float]] = {}  # every sample, for the mean
    with (
        tempfile.TemporaryDirectory() as tmp,
        stack(Path(tmp), scenario(devices // 4, float(scrape.removesuffix("s"))), scrape, evaluation) as prom,
    ):
        for _ in range(max(1, warmup // 5)):
            time.sleep(min(5, warmup))
            for labels, seconds in own(prom.base, "prometheus_rule_group_last_duration_seconds").items():
                group = re.sub(r'.*rule_group="[^"]*;([^"]*)".*', r"\1", labels)
                groups[group] = max(groups.get(group, 0.0), seconds)
                last[group] = seconds
                seen.setdefault(group, []).append(seconds)
        rules = _get(f"{prom.base}/api/v1/rules")["data"]["groups"]
        # Every rule's expression alone, as an instant query: the PromQL cost of the group, steadier on a
        # busy machine than the evaluation times (which also hold alert state and appends).
        bare = {
            (g["name"], r["name"], i): query_time(prom, r["query"])
            for g in rules
            for i, r in enumerate(g["rules"])
        }
        alone = {g["name"]: sum(v for k, v in bare.items() if k[0] == g["name"]) for g in rules}
        slowest = sorted(
            ((g["name"], i, r) for g in rules for i, r in enumerate(g["rules"])),
            key=lambda x: -x[2]["evaluationTime"],
        )
        slow_rules = [
            (r["evaluationTime"], r["name"], len(r.get("alerts", ())), bare[(name, r["name"], i)])
            for name, i, r in slowest[:SLOW_RULES]
        ]
        builtins = grafana_builtins(float(scrape.removesuffix("s")))
        variables = {d["uid"]: {**values, **builtins} for d, values in resolved(prom)}
        head = own(prom.base, "prometheus_tsdb_head_series")[""]
        timings = []
        for t in _targets():
            expr = substitute(t.expr, variables[t.dashboard])
            runs = []
            series = 0
            for _ in range(repeats):
                start = time.perf_counter()
                out = prom.query_range(expr, RANGE_S, STEP_S) if not t.instant else prom.query(expr)
                runs.append(time.perf_counter() - start)
                series = len(out["data"]["result"])
            timings.append((statistics.median(runs), t, series))
    total = sum(m for m, _, _ in timings)
    print(
        f"{devices} devices, {head:.0f} head series, {len(timings)} queries, scrape {scrape},"
        f" range {RANGE_S // 3600} h at a {STEP_S} s step"
    )
    print(f"full refresh of every dashboard: {total * 1000:.0f} ms of query time (sum of medians)")
    for uid in sorted({t.dashboard for _, t, _ in timings}):
        ms = sum(m for m, t, _ in timings if t.dashboard == uid) * 1000
        print(f"  {uid}: {ms:.0f} ms")
    print("slowest:")
    for median, t, series in sorted(timings, key=lambda x: x[0], reverse=True)[:8]:
        print(f"  {median * 1000:7.1f} ms  {series:5d} series  {t.dashboard}: {t.panel} [{t.ref}]")
    interval = float(evaluation.removesuffix("s"))
    print(
        f"rule groups (evaluation time at the end of the warm-up / the most seen / the mean of the samples every"
        f" 5 s in its second half, interval {evaluation}; its rules' expressions alone as instant queries):"
    )
    for group, seconds in sorted(groups.items()):
        mean = statistics.mean(seen[group][len(seen[group]) // 2 :])  # the second half: past start-up
        print(
            f"  {group}: {last[group] * 1000:.0f} ms = {last[group] / interval:.1%} of the interval"
            f" (most {seconds * 1000:.0f} ms = {seconds / interval:.1%}; mean {mean * 1000:.0f} ms ="
            f" {mean / interval:.1%}); expressions alone {alone.get(group, 0.0) * 1000:.0f} ms"
        )
    print("slowest rules (last evaluation; the expression alone as an instant query; active alerts):")
    for seconds, name, active, bare in slow_rules:
        print(f"  {seconds * 1000:7.1f} ms  (query {bare * 1000:6.1f} ms, {active:5d} alerts)  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
