"""The simulator through the whole exporter pipeline (in-process, fixed clock): faults reach /metrics."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from xpuwatch.exporter.cli import Clocks, assemble
from xpuwatch.exporter.settings import BackendSettings, Settings
from xpuwatch.vendors.command import SubprocessRunner

CLOCK = Clocks(lambda: 1_700_000_000.0, lambda: 0.0)


def render(tmp_path: Path, scenario: str, timeout: float | None = None) -> tuple[dict, object]:
    cfg = tmp_path / "s.yaml"
    cfg.write_text(scenario)
    settings = Settings(backends={"sim": BackendSettings(timeout=timeout)})
    asm = assemble(settings, ["sim"], CLOCK, SubprocessRunner(), None, {"config": str(cfg)})
    asm.poller.pollers[0].poll_once()
    asm.poller.pollers[0].poll_once()
    text = asm.cache.get("", "").body.decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out, asm


def by_device(series: dict, name: str) -> dict[str, float]:
    return {f"{dict(k)['vendor']}/{dict(k)['device']}": v for k, v in series.get(name, {}).items()}


def test_lost_device_is_up_zero_and_the_others_are_intact(tmp_path: Path) -> None:
    m, _ = render(
        tmp_path,
        """
devices: [{model: "NVIDIA A100-SXM4-80GB", count: 2}, {model: Ascend910B, count: 1}]
timeline:
  - {at: 0, device: "nvidia/1", fault: "xid:79"}
  - {at: 0, device: "nvidia/0", profile: training}
""",
    )
    assert by_device(m, "accelerator_up") == {"nvidia/0": 1.0, "nvidia/1": 0.0, "huawei/0-0": 1.0}
    assert set(by_device(m, "accelerator_utilization_ratio")) == {"nvidia/0", "huawei/0-0"}
    assert set(by_device(m, "accelerator_info")) == {"nvidia/0", "nvidia/1", "huawei/0-0"}
    faults = {(dict(k)["device"], dict(k)["code"]): v for k, v in m["accelerator_fault_events_total"].items()}
    # A lost device exports no readings, but its fault counters survive: the XID 79 that lost it is counted.
    assert faults[("0", "79")] == 0.0 and faults[("1", "79")] == 1.0
    assert m["xpuwatch_backend_up"] == {(("backend", "sim"),): 1.0}


def test_hung_sim_backend_times_out_and_is_down(tmp_path: Path) -> None:
    m, asm = render(
        tmp_path,
        """
devices: [{model: Ascend910B}]
timeline: [{at: 0, device: "0-0", fault: hung_backend}]
""",
        timeout=0.2,
    )
    try:
        assert m["xpuwatch_backend_up"] == {(("backend", "sim"),): 0.0}
        assert m["xpuwatch_backend_errors_total"] == {
            (("backend", "sim"), ("reason", "timeout")): 1.0,
            (("backend", "sim"), ("reason", "unexpected")): 0.0,
            (("backend", "sim"), ("reason", "field")): 0.0,
        }
        assert "accelerator_up" not in m
        assert asm.poller.ready(CLOCK.wall()) == (False, ["sim"])
    finally:
        asm.backends[0].close()  # unblocks the stuck call


def test_ecc_fault_counts_on_the_right_device(tmp_path: Path) -> None:
    m, _ = render(
        tmp_path,
        """
devices: [{model: "NVIDIA A100-SXM4-80GB", count: 2}]
timeline: [{at: 0, device: "1", fault: ecc_uncorrectable}]
""",
    )
    ecc = {(dict(k)["device"], dict(k)["type"]): v for k, v in m["accelerator_ecc_errors_total"].items()}
    assert ecc[("1", "uncorrected")] == 1.0 and ecc[("0", "uncorrected")] == 0.0
    assert by_device(m, "accelerator_memory_remap_pending") == {"nvidia/0": 0.0, "nvidia/1": 1.0}


def test_openmetrics_exposition_of_the_default_fleet_parses(tmp_path: Path) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

    settings = Settings()
    asm = assemble(settings, ["sim"], CLOCK, SubprocessRunner(), None, {})
    asm.poller.pollers[0].poll_once()
    body = asm.cache.get("application/openmetrics-text; version=1.0.0", "").body.decode()
    fams = {f.name: f for f in om_parse(body)}
    assert fams["accelerator"].type == "info" and len(fams["accelerator"].samples) == 18
    assert (
        fams["accelerator_energy_joules"].type == "counter"
        and fams["accelerator_energy_joules"].unit == "joules"
    )
    assert fams["accelerator_utilization_ratio"].unit == "ratio"
    # 13 holders of the GPU/NPU devices and slices, one per domestic card (310P3, K100, MLU, S60, R200, S4000)
    assert len(fams["accelerator_allocated"].samples) == 19


def test_a_held_timeline_starts_at_the_exporters_first_scrape(tmp_path: Path, start_exporter) -> None:  # type: ignore[no-untyped-def]
    """The real exporter calls SimBackend.begin on its first /metrics: served after the fault's time has
    passed since start, the first scrape still shows the counter at 0, and the fault follows as a step."""
    from tests.exporter.conftest import wait_ready

    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        "timeline_start: first_scrape\ndevices: [{model: NVIDIA A100-SXM4-80GB, count: 1}]\n"
        "timeline: [{at: 1, device: '0', fault: ecc_uncorrectable}]\n"
    )
    exp = start_exporter("--simulate", "--sim-config", str(cfg))
    wait_ready(exp)
    time.sleep(2)  # past the fault's time since start: without the hold the first scrape would show it

    def uncorrected() -> float:
        with urllib.request.urlopen(exp.url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        (value,) = (
            s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == "accelerator_ecc_errors_total" and s.labels["type"] == "uncorrected"
        )
        return float(value)

    assert uncorrected() == 0.0
    deadline = time.monotonic() + 60  # a bound for a loaded machine: the fault lands a second in
    while uncorrected() == 0.0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert uncorrected() == 1.0
