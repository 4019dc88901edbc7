"""Every panel query of every generated dashboard returns data from a real Prometheus.

One Debian Prometheus (loopback, tmp TSDB, 1 s scrape and evaluation) for the whole module scrapes the sim
exporter (`python -m xpuwatch serve --simulate --sim-config FILE`) running the default fleet plus a
fault timeline, the relay/remediation stand-in (tests/dashboards/pipeline_standin.py) and a kube-state-metrics
stand-in (tests/ksm_standin.py), with the committed
alerts/generated/rules.yml loaded (recording and alerting rules, unchanged). Variables are resolved the way
Grafana does: each `label_values(selector, label)` runs against the Prometheus API with the variables before
it substituted; multi-value variables take all values as a regex alternation; the device dashboard's uuid is
the MIG-mode A100 (the card with slices, profiling ratios, NVLink and row remapping).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import ksm_standin
from tests.dashboards import pipeline_standin
from tests.ports import free_port as _free_port
from xpuwatch.dashboards.generator import DEFAULT_OUT
from xpuwatch.dashboards.sources import RECORDS
from xpuwatch.exporter import catalog as c
from xpuwatch.vendors.sim import default_scenario_text

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
RULES = ROOT / "alerts" / "generated" / "rules.yml"
CLUSTER = "sim-cluster"
FAULT_AT = (
    12  # seconds after Prometheus's first scrape (timeline_start: first_scrape): it saw the counters at 0
)
FAULTS = [
    # hardware: uncorrectable ECC (+ XID 48, pending row remap, memory health failed) on the training A100
    {"at": FAULT_AT, "device": "nvidia/1", "fault": "ecc_uncorrectable"},
    # performance: an application-class XID in alice's notebook
    {"at": FAULT_AT, "device": "nvidia/2", "fault": "xid:13"},
    # an idle Ascend falls off the bus
    {"at": FAULT_AT, "device": "huawei/3-0", "fault": "lost"},
    # the vGPU-shared RTX 4090 overheats and throttles
    {"at": FAULT_AT, "device": "nvidia/3", "fault": "overheat"},
]
# Grafana's built-in interval variables, as Grafana would set them for a 1 h range at 1 s scrapes.
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h", "__range_s": "3600"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not shutil.which("prometheus"), reason="prometheus not installed"),
]


@dataclass(frozen=True)
class Target:
    dashboard: str
    panel: str
    ref: str
    expr: str
    instant: bool


def _dashboards() -> list[dict[str, Any]]:
    return [json.loads(p.read_text("utf-8")) for p in sorted(DEFAULT_OUT.glob("*.json"))]


def _targets() -> list[Target]:
    return [
        Target(d["uid"], p["title"], t["refId"], t["expr"], t["instant"])
        for d in _dashboards()
        for p in d["panels"]
        for t in p.get("targets", [])
    ]


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = r.read().decode()
    except urllib.error.HTTPError as exc:  # a bad query: Prometheus says why in the body
        raise AssertionError(f"{exc.code} from {urllib.parse.unquote(url)}: {exc.read().decode()}") from None
    return json.loads(body) if body.startswith("{") else body


def _wait(url: str, proc: subprocess.Popen[bytes], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            _get(url)
            return
        except (OSError, AssertionError):  # not listening yet / 503 while starting
            time.sleep(0.2)
    raise RuntimeError(f"{what} not ready at {url}")


class Prom:
    """The Prometheus HTTP API (v1) of the test server."""

    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, expr: str) -> dict[str, Any]:
        return _get(f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))  # type: ignore[no-any-return]

    def query_range(self, expr: str, seconds: int, step: float = 1) -> dict[str, Any]:
        """``expr`` over the last ``seconds`` at ``step`` seconds, as a time-series panel asks for it."""
        end = time.time()
        params = {"query": expr, "start": end - seconds, "end": end, "step": step}
        return _get(f"{self.base}/api/v1/query_range?" + urllib.parse.urlencode(params))  # type: ignore[no-any-return]

    def series(self, match: str) -> list[dict[str, str]]:
        out = _get(f"{self.base}/api/v1/series?" + urllib.parse.urlencode({"match[]": match}))
        return out["data"]  # type: ignore[no-any-return]


def _scenario() -> dict[str, Any]:
    doc = yaml.safe_load(default_scenario_text())
    doc["timeline"] = [*doc["timeline"], *FAULTS]
    doc["timeline_start"] = "first_scrape"
    return doc  # type: ignore[no-any-return]


def _ready(prom: Prom) -> bool:
    """Faults scraped, both alert categories firing, and the 1 h P95 recorded."""
    firing = prom.query('count by (category) (ALERTS{alertstate="firing"})')["data"]["result"]
    categories = {r["metric"].get("category") for r in firing}
    lost = prom.query(f"{c.UP} == 0")["data"]["result"]
    p95 = prom.query(RECORDS.utilization_p95)["data"]["result"]
    return {"hardware", "performance"} <= categories and bool(lost) and bool(p95)


@contextlib.contextmanager
def stack(
    tmp: Path, scenario: dict[str, Any], scrape_interval: str = "1s", evaluation_interval: str = "1s"
) -> Iterator[Prom]:
    """Prometheus (rules.yml loaded) scraping the sim exporter on ``scenario`` and the pipeline stand-in."""
    sim = tmp / "sim.yaml"
    sim.write_text(yaml.safe_dump(scenario))
    exporter_port, prom_port = _free_port(), _free_port()
    with pipeline_standin.serve() as standin_port, ksm_standin.serve() as ksm_target:
        (tmp / "prometheus.yml").write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": scrape_interval,
                        "evaluation_interval": evaluation_interval,
                    },
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {
                            "job_name": "xpuwatch",
                            "static_configs": [
                                {"targets": [f"127.0.0.1:{exporter_port}"], "labels": {"cluster": CLUSTER}}
                            ],
                        },
                        {
                            "job_name": "xpuwatch-pipeline",
                            "static_configs": [
                                {"targets": [f"127.0.0.1:{standin_port}"], "labels": {"cluster": CLUSTER}}
                            ],
                        },
                        {
                            "job_name": "kube-state-metrics",
                            "static_configs": [{"targets": [ksm_target], "labels": {"cluster": CLUSTER}}],
                        },
                    ],
                }
            )
        )
        procs: list[subprocess.Popen[bytes]] = []
        try:
            server = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(server)
            _wait(f"http://127.0.0.1:{prom_port}/-/ready", server, "prometheus")
            exporter = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "xpuwatch",
                    "serve",
                    "--simulate",
                    f"--sim-config={sim}",
                    f"--web.listen-address=127.0.0.1:{exporter_port}",
                ],
                env=ENV,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(exporter)
            # /readyz, not /metrics: the first scrape starts the timeline, and it must be Prometheus's.
            _wait(f"http://127.0.0.1:{exporter_port}/readyz", exporter, "exporter")
            yield Prom(f"http://127.0.0.1:{prom_port}")
        finally:
            for p in reversed(procs):
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    with stack(tmp_path_factory.mktemp("dash-prom"), _scenario()) as api:
        deadline = time.monotonic() + 90
        while not _ready(api):
            if time.monotonic() > deadline:
                raise RuntimeError("no firing hardware+performance alerts / lost device / P95 within 90 s")
            time.sleep(1)
        # Three more scrapes of every target, so every rate/increase window holds two samples (counted, not
        # slept for: a loaded machine scrapes late).
        wanted = _fewest_scrapes(api) + 3
        while _fewest_scrapes(api) < wanted:
            if time.monotonic() > deadline + 60:
                raise RuntimeError(f"fewer than {wanted} scrapes of some target")
            time.sleep(0.2)
        yield api


def _fewest_scrapes(prom: Prom) -> int:
    """How many times the least-scraped target has been scraped (its ``up`` samples)."""
    result = prom.query("min(count_over_time(up[1h]))")["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


_LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.*),\s*(?P<label>\w+)\)$", re.S)
_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def substitute(expr: str, values: dict[str, str]) -> str:
    """``expr`` with Grafana variables replaced; KeyError names a variable with no value."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return values[name]

    return _VAR.sub(one, expr)


def grafana_regex_escape(value: str) -> str:
    """A multi-value variable value as Grafana's Prometheus data source escapes it (prometheusSpecialRegexEscape:
    regex metacharacters get a backslash, doubled for the PromQL string literal)."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def resolve(dashboard: dict[str, Any], prom: Prom) -> dict[str, str]:
    """Every template variable's value as Grafana would interpolate it into PromQL."""
    values = dict(BUILTINS)
    for var in dashboard["templating"]["list"]:
        if var["type"] == "datasource":
            continue
        m = _LABEL_VALUES.match(var["query"]["query"])
        assert m, f"{var['name']}: not a label_values query"
        selector = substitute(m["selector"], values)
        found = sorted({s[m["label"]] for s in prom.series(selector) if m["label"] in s})
        assert found, f"variable {var['name']}: label_values({selector}, {m['label']}) is empty"
        if var["multi"]:
            values[var["name"]] = "(" + "|".join(grafana_regex_escape(v) for v in found) + ")"
        else:
            mig = {s["uuid"] for s in prom.series(f'{c.SLICE_INFO}{{slice_kind="mig"}}')}
            chosen = sorted(mig & set(found))
            assert chosen, f"variable {var['name']}: no MIG card among {found}"
            values[var["name"]] = chosen[0]
    return values


@pytest.fixture(scope="module")
def variables(prom: Prom) -> dict[str, dict[str, str]]:
    return {d["uid"]: resolve(d, prom) for d in _dashboards()}


def test_every_dashboard_is_queried() -> None:
    assert {t.dashboard for t in _targets()} == {
        "xpuwatch-fleet",
        "xpuwatch-device",
        "xpuwatch-health",
        "xpuwatch-waste",
        "xpuwatch-operations",
    }


def test_variables_take_the_sim_fleet_values(variables: dict[str, dict[str, str]]) -> None:
    fleet = variables["xpuwatch-fleet"]
    assert fleet["cluster"] == f"({CLUSTER})"
    assert fleet["node"] == "(sim-node-1)"
    assert fleet["vendor"] == "(amd|cambricon|enflame|huawei|hygon|kunlunxin|mthreads|nvidia)"
    assert set(fleet["namespace"].strip("()").split("|")) == {
        "ascend-team",
        "ml-serving",
        "ml-team",
        "research",
        "vision",
    }
    assert variables["xpuwatch-device"]["uuid"].startswith("GPU-")


@pytest.mark.parametrize("target", _targets(), ids=lambda t: f"{t.dashboard}:{t.panel}:{t.ref}")
def test_panel_query_returns_data(target: Target, prom: Prom, variables: dict[str, dict[str, str]]) -> None:
    expr = substitute(target.expr, variables[target.dashboard])
    out = prom.query_range(expr, 10) if not target.instant else prom.query(expr)
    assert out["status"] == "success", out
    assert out["data"]["result"], f"no data for:\n{expr}"


def _result(prom: Prom, variables: dict[str, dict[str, str]], uid: str, title: str, ref: str = "A") -> Any:
    (target,) = [t for t in _targets() if (t.dashboard, t.panel, t.ref) == (uid, title, ref)]
    return prom.query(substitute(target.expr, variables[uid]))["data"]["result"]


def _rows(result: Any, *labels: str) -> list[tuple[str, ...]]:
    return sorted((*(r["metric"].get(k, "") for k in labels), r["value"][1]) for r in result)


def test_fault_scenario_shows_on_the_health_dashboard(
    prom: Prom, variables: dict[str, dict[str, str]]
) -> None:
    def rows(title: str, *labels: str) -> list[tuple[str, ...]]:
        return _rows(_result(prom, variables, "xpuwatch-health", title), *labels)

    assert rows("Lost devices") == [("1",)]
    assert rows("Devices lost", "vendor", "device") == [("huawei", "3-0", "0")]
    assert rows("Devices with uncorrectable ECC in the last 1h") == [("1",)]
    assert rows("Health checks failing", "vendor", "device", "subsystem") == [("nvidia", "1", "memory", "0")]
    # exact event counts (the counter less its value at the range's start), not increase()'s extrapolation
    faults = rows("Driver faults by code", "vendor", "device", "code")
    assert faults == [("nvidia", "1", "48", "1"), ("nvidia", "2", "13", "1")]
    assert rows("Devices throttling for heat or power") == [("1",)]  # the overheating RTX 4090


def test_waste_dashboard_names_the_idle_notebook_and_the_starved_card(
    prom: Prom, variables: dict[str, dict[str, str]]
) -> None:
    def rows(title: str, *labels: str) -> list[tuple[str, ...]]:
        return [r[:-1] for r in _rows(_result(prom, variables, "xpuwatch-waste", title), *labels)]

    assert rows("Idle notebooks", "namespace", "pod", "owner") == [("ml-team", "jupyter-alice", "alice")]
    assert rows("Starved cards (power below 30% of the limit)", "namespace", "pod") == [
        ("research", "etl-feeder-0")
    ]
    assert rows("Memory hoarders (1h P95 utilization below 20%)", "namespace", "pod", "owner") == [
        ("ml-team", "jupyter-alice", "alice")
    ]


def test_fleet_allocation_adds_up_per_pool(prom: Prom, variables: dict[str, dict[str, str]]) -> None:
    title = "Allocated vs free cards per pool"
    allocated = _rows(_result(prom, variables, "xpuwatch-fleet", title, "A"), "model")
    free = _rows(_result(prom, variables, "xpuwatch-fleet", title, "B"), "model")
    # the MI300X in DPX is two GPUs of its pool (the device plugin hands out each partition): one trains
    assert allocated == [
        ("AMD Instinct MI250X", "2"),
        ("AMD Instinct MI300X", "1"),
        ("Ascend310P3", "1"),
        ("Ascend910B", "3"),
        ("K100_AI", "1"),
        ("MLU370-X8", "1"),
        ("MTT S4000", "1"),
        ("NVIDIA A100-SXM4-80GB", "2"),
        ("NVIDIA GeForce RTX 4090", "2"),
        ("R200", "1"),
        ("S60", "1"),
    ]
    # the lost Ascend is still a card of its pool (known, not answering) and nobody holds it
    assert free == [
        ("AMD Instinct MI250X", "0"),
        ("AMD Instinct MI300X", "1"),
        ("Ascend310P3", "0"),
        ("Ascend910B", "1"),
        ("K100_AI", "0"),
        ("MLU370-X8", "0"),
        ("MTT S4000", "0"),
        ("NVIDIA A100-SXM4-80GB", "0"),
        ("NVIDIA GeForce RTX 4090", "0"),
        ("R200", "0"),
        ("S60", "0"),
    ]


def test_operations_dashboard_counts_firing_alerts_by_category(
    prom: Prom, variables: dict[str, dict[str, str]]
) -> None:
    table = _rows(
        _result(prom, variables, "xpuwatch-operations", "Firing alerts"),
        "alertname",
        "category",
        "severity",
        "action",
    )
    # AcceleratorLost (for: 1m) joins only if the machine was slow enough for a minute to pass
    lost = [r for r in table if r[0] == "AcceleratorLost"]
    assert [r for r in table if r[0] != "AcceleratorLost"] == [
        ("AcceleratorEccUncorrectable", "hardware", "critical", "drain", "1"),
        ("AcceleratorFaultApplication", "performance", "warning", "none", "1"),
        ("AcceleratorFaultCritical", "hardware", "critical", "drain", "1"),  # XID 48 of the ECC error
    ]
    by_category = _rows(
        _result(prom, variables, "xpuwatch-operations", "Alerts firing by category"), "category"
    )
    assert by_category == [("hardware", str(2 + len(lost))), ("performance", "1")]


def test_memory_of_shared_devices_is_split_not_double_counted(
    prom: Prom, variables: dict[str, dict[str, str]]
) -> None:
    per_owner = _result(prom, variables, "xpuwatch-waste", "Device memory held by namespace and owner")
    held = prom.query(f"sum(max by (node, uuid) ({c.MEMORY_USED}) and on (node, uuid) ({c.ALLOCATED} == 1))")
    (total,) = held["data"]["result"]
    # The panel reads the chargeback record (evaluated up to one interval before this query, the sim's memory
    # moving a little every poll: 0.02 % apart seen); counting the shared vGPU card twice would add a whole
    # card's used memory (several % of the fleet's).
    assert sum(float(r["value"][1]) for r in per_owner) == pytest.approx(float(total["value"][1]), rel=5e-3)
    vision = [r for r in per_owner if r["metric"]["namespace"] == "vision"]
    assert len(vision) == 1  # two pods sharing the vGPU card: one namespace row holding the whole card
