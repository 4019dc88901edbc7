"""AMD backend: real fixtures in, exact values out; amdsmi stand-in; fake amd-smi on PATH; fuzzing."""

from __future__ import annotations

import contextlib
import json
import re
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.vendors import capture_expectations
from tests.vendors.fake_amdsmi import AmdSmiRetCode, ProcHandle, make_amdsmi, mi300x_gcd
from xpuwatch.vendors import amd
from xpuwatch.vendors.base import BackendError, DeviceSample, ParseError, ProcessMemory
from xpuwatch.vendors.command import CommandResult, ReplayRunner, SubprocessRunner
from xpuwatch.vendors.registry import BackendContext, all_formats

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "amd"
MIB = 1024 * 1024


def fixture(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------------
# Complete fixtures: exact values


def test_amd_smi_metric_power_rocm61_gives_socket_power_only() -> None:
    (s,) = amd.parse_amd_smi_metric(fixture("amd-smi_metric_-p_json_rocm6.1.json"))
    assert s.up is True and s.error is None
    assert s.device.vendor == "amd"
    assert s.device.index == "0"
    assert s.device.model == "unknown"
    assert s.device.uuid == "amd-index-0"
    assert s.power_watts == 10.0
    # Only `-p` was asked: nothing else may appear, and nothing may be a fake 0.
    assert s.utilization_ratio is None
    assert s.memory_used_bytes is None and s.memory_total_bytes is None
    assert s.temperatures_celsius == {}
    assert s.power_limit_watts is None and s.energy_joules is None
    assert s.ecc_errors == {} and s.pcie_replay_errors is None
    assert s.vendor_metrics == {}


def test_amd_smi_monitor_rocm62_exact_values() -> None:
    (s,) = amd.parse_amd_smi_monitor(fixture("amd-smi_monitor_-q_rocm6.2.txt"))
    assert s.device.index == "0"
    assert s.utilization_ratio == 0.99
    assert s.memory_bandwidth_utilization_ratio == 0.31
    assert s.memory_used_bytes == 1235 * MIB
    assert s.memory_total_bytes == 16335 * MIB
    assert s.temperatures_celsius == {"hotspot": 103.0, "memory": 84.0}
    assert s.power_watts == 199.0
    assert s.power_limit_watts is None
    assert s.ecc_errors == {"corrected": 0, "uncorrected": 0}
    assert s.pcie_replay_errors == 0
    assert s.clocks_hertz == {"graphics": 1920e6, "memory": 1000e6}
    assert s.error is None


def test_rocm_smi_json_rx7800xt_exact_values() -> None:
    (s,) = amd.parse_rocm_smi_json(fixture("rocm-smi_json_rx7800xt_rocm6.2.4.json"))
    assert s.device.model == "Navi 32 [Radeon RX 7700 XT / 7800 XT]"
    assert s.device.index == "0"
    # Unique ID is the zero placeholder and Serial Number is N/A: the index-based id is used.
    assert s.device.uuid == "amd-index-0"
    assert s.device.serial is None
    assert s.utilization_ratio == 1.0
    assert s.memory_used_bytes == 11615076352
    assert s.memory_total_bytes == 17163091968
    assert s.temperatures_celsius == {"core": 45.0, "hotspot": 51.0, "memory": 54.0}
    assert s.power_watts == 53.0
    assert s.power_limit_watts is None  # --showmaxpower was not in the captured command
    assert s.ecc_errors == {}  # rocm-smi JSON has no ECC
    assert s.memory_bandwidth_utilization_ratio is None
    assert s.error is None


@pytest.mark.parametrize(
    "name",
    [
        "amd-smi_metric_-u_json_radeon-pro-w7700_excerpt.txt",
        "amd-smi_metric_-w_1_json_watch_excerpt.txt",
        "amd-smi_static_text_mi350x_excerpt.txt",
        "device-metrics-exporter_scrape_mi300x-vf_issue171_excerpt.prom",
    ],
)
def test_excerpts_are_rejected_with_parse_error(name: str) -> None:
    """Truncated captures are not valid JSON (or not JSON at all): every AMD parser says ParseError."""
    raw = fixture(name)
    for parse in (
        amd.parse_amd_smi_metric,
        amd.parse_amd_smi_static,
        amd.parse_rocm_smi_json,
        amd.parse_amd_smi_monitor,
    ):
        with pytest.raises(ParseError):
            parse(raw)


def test_sniffers_claim_exactly_their_format() -> None:
    fmts = {
        n: f for n, f in all_formats().items() if n in ("amd-smi-json", "amd-smi-monitor", "rocm-smi-json")
    }
    assert set(fmts) == {"amd-smi-json", "amd-smi-monitor", "rocm-smi-json"}
    expect = {
        "amd-smi_metric_-p_json_rocm6.1.json": {"amd-smi-json"},
        "amd-smi_monitor_-q_rocm6.2.txt": {"amd-smi-monitor"},
        "rocm-smi_json_rx7800xt_rocm6.2.4.json": {"rocm-smi-json"},
        "device-metrics-exporter_scrape_mi300x-vf_issue171_excerpt.prom": set(),
        "amd-smi_static_text_mi350x_excerpt.txt": set(),
    }
    for name, formats in expect.items():
        raw = fixture(name)
        assert {n for n, f in fmts.items() if f.sniff(raw)} == formats, name
    hygon = (FIX.parent / "hygon" / "rocm-smi_json_hygon_dcu_dtk24.04.3.json").read_text()
    assert not any(f.sniff(hygon) for f in fmts.values())
    with pytest.raises(ParseError, match="Hygon"):
        amd.parse_rocm_smi_json(hygon)


# ---------------------------------------------------------------------------------------------------
# Constructed documents (shapes of ROCm/amdsmi amdsmi_cli/amdsmi_commands.py, values invented)


def _metric_entry(gpu: int, *, power: object, ecc: tuple[int, int, int] = (0, 0, 0)) -> dict[str, Any]:
    return {
        "gpu": gpu,
        "usage": {
            "gfx_activity": {"value": 87, "unit": "%"},
            "umc_activity": {"value": 41, "unit": "%"},
            "mm_activity": "N/A",
            "vcn_activity": [{"value": 0, "unit": "%"}, "N/A"],
        },
        "power": {"socket_power": power, "gfx_voltage": "N/A", "power_management": "ENABLED"},
        "temperature": {
            "edge": {"value": 48, "unit": "C"},
            "hotspot": {"value": 61, "unit": "C"},
            "mem": {"value": 70, "unit": "C"},
        },
        "mem_usage": {
            "total_vram": {"value": 65520, "unit": "MB"},
            "used_vram": {"value": 12288, "unit": "MB"},
            "free_vram": {"value": 53232, "unit": "MB"},
        },
        "energy": {"total_energy_consumption": {"value": 1234567.5, "unit": "J"}},
        "ecc": {
            "total_correctable_count": ecc[0],
            "total_uncorrectable_count": ecc[1],
            "total_deferred_count": ecc[2],
        },
        "pcie": {"width": 16, "speed": {"value": 16, "unit": "GT/s"}, "replay_count": 7},
        "clock": {
            "gfx_0": {"clk": {"value": 1700, "unit": "MHz"}, "min_clk": {"value": 500, "unit": "MHz"}},
            "gfx_1": {"clk": "N/A"},
            "mem_0": {"clk": {"value": 1600, "unit": "MHz"}, "deep_sleep": "DISABLED"},
        },
    }


def _static_entry(gpu: int, serial: str, bdf: str) -> dict[str, Any]:
    return {
        "gpu": gpu,
        "asic": {"market_name": "MI250X/MI250", "asic_serial": serial},
        "bus": {"bdf": bdf},
        "board": {"product_name": "AMD Instinct MI250X", "product_serial": "N/A"},
        "driver": {"name": "amdgpu", "version": "6.7.0"},
        "limit": {
            "max_power": {"value": 560, "unit": "W"},
            "socket_power": {"value": 500, "unit": "W"},
        },
    }


MI250X_METRIC = [
    _metric_entry(0, power={"value": 377, "unit": "W"}, ecc=(3, 1, 2)),
    # The secondary GCD of an MI250X reports no socket power (the primary reports the package).
    _metric_entry(1, power="N/A"),
]
MI250X_STATIC = [
    _static_entry(0, "0x8C4D5E6F70819203", "0000:C1:00.0"),
    _static_entry(1, "0x8c4d5e6f70819204", "0000:C6:00.0"),
]


@pytest.mark.parametrize("shape", ["list", "gpu_data"])
def test_mi250x_two_gcds_are_two_devices_in_both_json_shapes(shape: str) -> None:
    def dump(doc: list[dict[str, Any]]) -> str:
        return json.dumps(doc if shape == "list" else {"gpu_data": doc})

    static = amd.parse_amd_smi_static(dump(MI250X_STATIC))
    s0, s1 = amd.parse_amd_smi_metric(dump(MI250X_METRIC), static)
    assert [s0.device.index, s1.device.index] == ["0", "1"]
    assert s0.device.model == s1.device.model == "AMD Instinct MI250X"
    assert s0.device.uuid == "0x8c4d5e6f70819203"
    assert s1.device.uuid == "0x8c4d5e6f70819204"
    assert s0.device.pci_bus_id == "0000:C1:00.0"
    assert s0.device.driver_version == "6.7.0"
    assert s0.utilization_ratio == 0.87
    assert s0.memory_bandwidth_utilization_ratio == 0.41
    assert s0.memory_total_bytes == 65520 * MIB
    assert s0.memory_used_bytes == 12288 * MIB
    assert s0.temperatures_celsius == {"core": 48.0, "hotspot": 61.0, "memory": 70.0}
    assert s0.power_watts == 377.0
    assert s0.power_limit_watts == 500.0
    assert s0.energy_joules == 1234567.5
    assert s0.ecc_errors == {"corrected": 3, "uncorrected": 1}
    assert s0.vendor_metrics == {amd.ECC_DEFERRED.name: 2.0}
    assert s0.pcie_replay_errors == 7
    assert s0.clocks_hertz == {"graphics": 1700e6, "memory": 1600e6}
    assert s1.power_watts is None
    assert s1.power_limit_watts == 500.0


def test_units_are_read_not_assumed() -> None:
    entry = _metric_entry(0, power={"value": 250000, "unit": "mW"})
    entry["mem_usage"] = {
        "total_vram": {"value": 68702699520, "unit": "B"},
        "used_vram": {"value": 2, "unit": "GiB"},
    }
    entry["energy"] = {"total_energy_consumption": {"value": 5_000_000, "unit": "uJ"}}
    entry["temperature"] = {"edge": {"value": 45500, "unit": "mC"}, "hotspot": "N/A", "mem": "N/A"}
    (s,) = amd.parse_amd_smi_metric(json.dumps([entry]))
    assert s.power_watts == 250.0
    assert s.memory_total_bytes == 68702699520
    assert s.memory_used_bytes == 2 * 1024**3
    assert s.energy_joules == 5.0
    assert s.temperatures_celsius == {"core": 45.5}


def test_unknown_unit_and_out_of_range_are_dropped_with_a_note() -> None:
    entry = _metric_entry(0, power={"value": 3, "unit": "horsepower"})
    entry["usage"]["gfx_activity"] = {"value": 65535, "unit": "%"}
    (s,) = amd.parse_amd_smi_metric(json.dumps([entry]))
    assert s.power_watts is None
    assert s.utilization_ratio is None
    assert s.up is True
    assert s.error is not None and "horsepower" in s.error and "out of range" in s.error


def test_whole_sections_na_give_no_readings_not_zeros() -> None:
    """The watch-mode capture's visible part: "usage": "N/A", every power field "N/A", plus a banner line."""
    doc = [
        {
            "timestamp": 1769014607,
            "gpu": 0,
            "usage": "N/A",
            "power": {"socket_power": "N/A", "gfx_voltage": "N/A", "throttle_status": "N/A"},
            "temperature": "N/A",
            "mem_usage": "N/A",
            "ecc": "N/A",
            "pcie": "N/A",
        }
    ]
    raw = "'CTRL' + 'C' to stop watching output:\n" + json.dumps(doc)
    (s,) = amd.parse_amd_smi_metric(raw)
    assert s.up is True
    assert s.utilization_ratio is None and s.power_watts is None
    assert s.temperatures_celsius == {} and s.ecc_errors == {}
    assert s.memory_used_bytes is None and s.pcie_replay_errors is None


def test_watch_mode_repeated_indexes_keep_the_last_entry() -> None:
    a = _metric_entry(0, power={"value": 100, "unit": "W"})
    b = _metric_entry(0, power={"value": 120, "unit": "W"})
    (s,) = amd.parse_amd_smi_metric(json.dumps([a, b]))
    assert s.power_watts == 120.0


def test_rocm_smi_mi250x_secondary_die_and_full_key_set() -> None:
    """rocm-smi -a keys (RSMI python_smi_tools/rocm_smi.py); the MI250X secondary die prints
    "N/A (Secondary die)" for power."""
    doc = {
        "card0": {
            "Unique ID": "0x8c4d5e6f70819203",
            "PCI Bus": "0000:C1:00.0",
            "Card Series": "AMD INSTINCT MI250X",
            "GPU use (%)": "55",
            "GPU Memory Read/Write Activity (%)": "12",
            "VRAM Total Memory (B)": "68702699520",
            "VRAM Total Used Memory (B)": "10737418240",
            "Temperature (Sensor edge) (C)": "40.0",
            "Temperature (Sensor junction) (C)": "47.0",
            "Temperature (Sensor memory) (C)": "52.0",
            "Current Socket Graphics Package Power (W)": "311.0",
            "Max Graphics Package Power (W)": "560.0",
            "Accumulated Energy (uJ)": "123456789.5",
            "PCIe Replay Count": "4",
        },
        "card1": {
            "Unique ID": "0x8c4d5e6f70819204",
            "PCI Bus": "0000:C6:00.0",
            "Card Series": "AMD INSTINCT MI250X",
            "GPU use (%)": "0",
            "Temperature (Sensor edge) (C)": "N/A",
            "Temperature (Sensor junction) (C)": "44.0",
            "Temperature (Sensor HBM 0) (C)": "50.0",
            "Temperature (Sensor HBM 1) (C)": "53.0",
            "Average Graphics Package Power (W)": "N/A (Secondary die)",
            "Max Graphics Package Power (W)": "N/A (Secondary die)",
        },
        "system": {"Driver version": "6.7.0"},
    }
    s0, s1 = amd.parse_rocm_smi_json(json.dumps(doc))
    assert (s0.device.uuid, s1.device.uuid) == ("0x8c4d5e6f70819203", "0x8c4d5e6f70819204")
    assert s0.device.driver_version == "6.7.0"
    assert s0.utilization_ratio == 0.55
    assert s0.memory_bandwidth_utilization_ratio == 0.12
    assert s0.memory_total_bytes == 68702699520
    assert s0.memory_used_bytes == 10737418240
    assert s0.temperatures_celsius == {"core": 40.0, "hotspot": 47.0, "memory": 52.0}
    assert s0.power_watts == 311.0 and s0.power_limit_watts == 560.0
    assert s0.energy_joules == pytest.approx(123.4567895)
    assert s0.pcie_replay_errors == 4
    assert s1.utilization_ratio == 0.0  # a measured zero stays a zero
    assert s1.temperatures_celsius == {"hotspot": 44.0, "memory": 53.0}
    assert s1.power_watts is None and s1.power_limit_watts is None


def test_device_uuid_fallbacks() -> None:
    assert amd.device_uuid("amd", "0", "0x18C4D4F2E1A2B3C4") == "0x18c4d4f2e1a2b3c4"
    assert amd.device_uuid("amd", "0", "0x0000000000000000", "SN123") == "SN123"
    assert amd.device_uuid("amd", "0", "N/A", "N/A", "0000:03:00.0") == "pci-0000:03:00.0"
    assert amd.device_uuid("amd", "2", None, None, None) == "amd-index-2"


# ---------------------------------------------------------------------------------------------------
# amdsmi through a stand-in module


def test_amdsmi_library_exact_values_and_unsupported_edge() -> None:
    lib = make_amdsmi([mi300x_gcd("0x5E3A0F12B7C84D21", "0000:0c:00.0")])
    backend = amd.AmdBackend(BackendContext(), amdsmi_module=lib)
    backend.open()
    assert backend.active_source == "amdsmi"
    assert lib.state["init"] == 2  # INIT_AMD_GPUS
    (s,) = backend.sample()
    assert s.up is True
    assert s.device.model == "AMD Instinct MI300X OAM"
    assert s.device.uuid == "0x5e3a0f12b7c84d21"
    assert s.device.pci_bus_id == "0000:0c:00.0"
    assert s.device.driver_version == "6.10.5"
    assert s.device.serial == "692231000131"
    assert s.utilization_ratio == 0.93
    assert s.memory_bandwidth_utilization_ratio == 0.38
    assert s.memory_total_bytes == 196592 * MIB
    assert s.memory_used_bytes == 150000 * MIB
    assert s.temperatures_celsius == {"hotspot": 71.0, "memory": 58.0}
    assert s.power_watts == 602.0
    assert s.power_limit_watts == 750.0
    assert s.energy_joules == pytest.approx(81_000_000_000 * 15.259e-6)
    assert s.ecc_errors == {"corrected": 12, "uncorrected": 0}
    assert s.vendor_metrics == {amd.ECC_DEFERRED.name: 0.0}
    assert s.pcie_replay_errors == 0
    assert s.clocks_hertz == {"graphics": 2100e6, "memory": 1300e6}
    assert s.error is None  # EDGE is NOT_SUPPORTED on MI300: no reading, and no failure either
    backend.close()
    assert lib.state["shut_down"] == 1


def test_amdsmi_secondary_gcd_na_power_and_lost_gpu() -> None:
    primary = mi300x_gcd("0x01", "0000:c1:00.0")
    secondary = mi300x_gcd("0x02", "0000:c6:00.0")
    secondary["power"] = {"socket_power": "N/A", "current_socket_power": "N/A", "average_socket_power": "N/A"}
    secondary["cap"] = AmdSmiRetCode.ERR_NOT_SUPPORTED
    secondary["energy"] = {"energy_accumulator": "N/A", "counter_resolution": 15.3}
    secondary["ecc"] = AmdSmiRetCode.RETRY
    gpus = [primary, secondary]
    backend = amd.AmdBackend(BackendContext(), amdsmi_module=make_amdsmi(gpus))
    backend.open()
    s0, s1 = backend.sample()
    assert (s0.device.uuid, s1.device.uuid) == ("0x0000000000000001", "0x0000000000000002")
    assert s0.power_watts == 602.0
    assert s1.power_watts is None and s1.power_limit_watts is None and s1.energy_joules is None
    assert s1.utilization_ratio == 0.93
    assert s1.ecc_errors == {} and s1.error == "failed: amdsmi_get_gpu_total_ecc_count: 50"
    # The secondary falls off the bus: every call fails, the device stays known and goes down.
    secondary["gone"] = True
    s0, s1 = backend.sample()
    assert s0.up is True
    assert s1.up is False and s1.device.uuid == "0x0000000000000002"
    assert s1.error is not None and "every amdsmi call failed" in s1.error
    assert s1.utilization_ratio is None


def test_amdsmi_init_failure_pinned_raises_and_auto_falls_back_to_cli(tmp_path: Path) -> None:
    lib = make_amdsmi([], init_error=AmdSmiRetCode.ERR_NOT_FOUND)
    pinned = amd.AmdBackend(BackendContext(options={"source": "amdsmi"}), amdsmi_module=lib)
    with pytest.raises(BackendError) as err:
        pinned.open()
    assert err.value.reason == "init"
    fake_tool(tmp_path, "amd-smi", "echo '[]'")
    runner = SubprocessRunner(env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    auto = amd.AmdBackend(BackendContext(runner=runner), amdsmi_module=lib)
    auto.open()
    assert auto.active_source == "amd-smi"


# ---------------------------------------------------------------------------------------------------
# A fake amd-smi on PATH drives the real SubprocessRunner


def fake_tool(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _cli_backend(tmp_path: Path, body: str, timeout: float = 10.0, source: str = "amd-smi") -> amd.AmdBackend:
    fake_tool(tmp_path, source, body)
    runner = SubprocessRunner(env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    ctx = BackendContext(runner=runner, options={"source": source, "timeout_seconds": timeout})
    return amd.AmdBackend(ctx)


@pytest.mark.slow
def test_fake_amd_smi_prints_metric_and_static(tmp_path: Path) -> None:
    (tmp_path / "metric.json").write_text(json.dumps({"gpu_data": MI250X_METRIC}))
    (tmp_path / "static.json").write_text(json.dumps({"gpu_data": MI250X_STATIC}))
    body = f'case "$1" in metric) cat {tmp_path}/metric.json;; static) cat {tmp_path}/static.json;; *) exit 2;; esac'
    backend = _cli_backend(tmp_path, body)
    backend.open()
    s0, s1 = backend.sample()
    assert s0.device.uuid == "0x8c4d5e6f70819203" and s0.power_limit_watts == 500.0
    assert s0.power_watts == 377.0 and s1.power_watts is None
    assert s0.ecc_errors == {"corrected": 3, "uncorrected": 1}


@pytest.mark.slow
def test_fake_rocm_smi_prints_fixture(tmp_path: Path) -> None:
    (tmp_path / "out.json").write_text(fixture("rocm-smi_json_rx7800xt_rocm6.2.4.json"))
    backend = _cli_backend(tmp_path, f"cat {tmp_path}/out.json", source="rocm-smi")
    (s,) = backend.sample()
    assert s.power_watts == 53.0 and s.memory_total_bytes == 17163091968


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status  # killed, waiting to be reaped by whoever adopted it


@pytest.mark.slow
def test_fake_amd_smi_hang_times_out_and_its_process_group_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    backend = _cli_backend(
        tmp_path, f"sleep 300 &\necho $! > {pidfile}\nwait", timeout=2
    )  # long enough for the shell to write its child's pid on a loaded machine
    with pytest.raises(BackendError) as err:
        backend.sample()
    assert err.value.reason == "timeout"
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 30  # the kill is asynchronous to us; bounded wait, not a timing assertion
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child)


@pytest.mark.slow
def test_fake_amd_smi_exit_1_is_exit_status(tmp_path: Path) -> None:
    backend = _cli_backend(tmp_path, 'echo "AMDSMI_STATUS_INIT_ERROR" >&2; exit 1')
    with pytest.raises(BackendError) as err:
        backend.sample()
    assert err.value.reason == "exit_status"
    assert "AMDSMI_STATUS_INIT_ERROR" in str(err.value)


@pytest.mark.slow
def test_fake_amd_smi_garbage_is_parse_error(tmp_path: Path) -> None:
    backend = _cli_backend(tmp_path, 'case "$1" in static) exit 1;; *) printf "\\x00\\xff{[garbage";; esac')
    with pytest.raises(ParseError) as err:
        backend.sample()
    assert err.value.reason == "parse"


def test_gpu_missing_from_later_output_is_reported_lost() -> None:
    two = json.dumps([_metric_entry(0, power=100), _metric_entry(1, power=100)])
    one = json.dumps([_metric_entry(0, power=100)])

    class Sequenced(ReplayRunner):
        def __init__(self, outputs: Sequence[str]) -> None:
            super().__init__([])
            self.outputs = list(outputs)

        def which(self, tool: str) -> str | None:
            return tool

        def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
            if argv[1] == "static":
                raise BackendError("static unsupported", reason="exit_status")
            return CommandResult(tuple(argv), self.outputs.pop(0), "", 0, 0.0, 0.0)

    backend = amd.AmdBackend(BackendContext(runner=Sequenced([two, one]), options={"source": "amd-smi"}))
    assert [s.up for s in backend.sample()] == [True, True]
    s0, s1 = backend.sample()
    assert s0.up is True
    assert s1.up is False and s1.device.index == "1" and s1.error == "missing from amd-smi output"


# ---------------------------------------------------------------------------------------------------
# Fuzzing: mutated and truncated outputs raise nothing but ParseError

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["N/A", "N/A (Secondary die)", "12 W", "1e309", "-5", "0x0"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _only_parse_errors(parse: Callable[[str], Sequence[DeviceSample]], raw: str) -> None:
    try:
        out = parse(raw)
    except ParseError:
        return
    for s in out:
        assert isinstance(s, DeviceSample)


def _mutate(raw: str, data: st.DataObject) -> str:
    kind = data.draw(st.sampled_from(["truncate", "replace", "insert", "delete"]))
    if not raw:
        return raw
    i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    if kind == "truncate":
        return raw[:i]
    if kind == "delete":
        j = data.draw(st.integers(min_value=i, max_value=len(raw)))
        return raw[:i] + raw[j:]
    piece = data.draw(st.text(alphabet=st.sampled_from(list('{}[]",:0123456789.-NA/ \nWGPU%')), max_size=6))
    return raw[:i] + piece + raw[i + (1 if kind == "replace" else 0) :]


FUZZ_TARGETS: list[tuple[str, Callable[[str], Sequence[DeviceSample]]]] = [
    ("amd-smi_metric_-p_json_rocm6.1.json", amd.parse_amd_smi_metric),
    ("amd-smi_monitor_-q_rocm6.2.txt", amd.parse_amd_smi_monitor),
    ("rocm-smi_json_rx7800xt_rocm6.2.4.json", amd.parse_rocm_smi_json),
    ("amd-smi_metric_-u_json_radeon-pro-w7700_excerpt.txt", amd.parse_amd_smi_metric),
    ("amd-smi_static_json_8x-mi300x_rocm7.2.1_ppt0-limit.json", amd.parse_amd_smi_static_samples),
    ("rocm-smi_-a_json_mi210_rocm5_driver5.18.13.json", amd.parse_rocm_smi_json),
]


@pytest.mark.parametrize(("name", "parse"), FUZZ_TARGETS, ids=[n for n, _ in FUZZ_TARGETS])
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_text_mutations(
    name: str, parse: Callable[[str], Sequence[DeviceSample]], data: st.DataObject
) -> None:
    raw = fixture(name)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        raw = _mutate(raw, data)
    _only_parse_errors(parse, raw)


def _replace_somewhere(doc: Any, value: Any, data: st.DataObject) -> Any:
    if isinstance(doc, dict) and doc:
        key = data.draw(st.sampled_from(sorted(doc, key=str)))
        deeper = data.draw(st.booleans())
        return {**doc, key: _replace_somewhere(doc[key], value, data) if deeper else value}
    if isinstance(doc, list) and doc:
        i = data.draw(st.integers(min_value=0, max_value=len(doc) - 1))
        return [*doc[:i], _replace_somewhere(doc[i], value, data), *doc[i + 1 :]]
    return value


STRUCTURED = [
    (json.dumps(MI250X_METRIC), amd.parse_amd_smi_metric),
    (json.dumps({"gpu_data": MI250X_STATIC}), amd.parse_amd_smi_static),
    (fixture("rocm-smi_json_rx7800xt_rocm6.2.4.json"), amd.parse_rocm_smi_json),
    (fixture("amd-smi_static_json_8x-mi300x_rocm7.2.1_ppt0-limit.json"), amd.parse_amd_smi_static_samples),
]


@pytest.mark.parametrize(("raw", "parse"), STRUCTURED, ids=["metric", "static", "rocm-smi", "static-rocm7"])
@settings(max_examples=200, deadline=None)
@given(data=st.data(), value=json_values)
def test_fuzz_json_values_anywhere(
    raw: str, parse: Callable[[str], Any], data: st.DataObject, value: Any
) -> None:
    doc = _replace_somewhere(json.loads(raw), value, data)
    try:
        text = json.dumps(doc)
    except (ValueError, OverflowError):
        return
    with contextlib.suppress(ParseError):
        parse(text)


def test_options_reject_unknown_source() -> None:
    with pytest.raises(BackendError) as err:
        amd.AmdBackend(BackendContext(options={"source": "nvml"}))
    assert err.value.reason == "init"


def test_detect_without_any_tool(tmp_path: Path) -> None:
    ctx = BackendContext(runner=SubprocessRunner(env={"PATH": str(tmp_path)}))
    d = amd.detect(ctx)
    assert d.found is False
    fake_tool(tmp_path, "amd-smi", "exit 0")
    d = amd.detect(ctx)
    assert d.found is True and "amd-smi" in d.why


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    value=json_values | st.sampled_from(list(AmdSmiRetCode)),
)
def test_fuzz_amdsmi_answers(data: st.DataObject, value: Any) -> None:
    """Whatever one amdsmi call returns (any JSON-like shape, "N/A", an error code), sampling gives a
    DeviceSample and never raises."""
    gpu = mi300x_gcd("0x01", "0000:0c:00.0")
    key = data.draw(st.sampled_from(sorted(gpu)))
    gpu[key] = _replace_somewhere(gpu[key], value, data) if data.draw(st.booleans()) else value
    backend = amd.AmdBackend(BackendContext(), amdsmi_module=make_amdsmi([gpu]))
    backend.open()
    (s,) = backend.sample()
    assert isinstance(s, DeviceSample)
    for v in (s.utilization_ratio, s.memory_bandwidth_utilization_ratio):
        assert v is None or 0.0 <= v <= 1.0


def test_amdsmi_unexpected_fault_fails_the_poll_as_library_error() -> None:
    lib = make_amdsmi([mi300x_gcd("0x01", "0000:0c:00.0")])
    backend = amd.AmdBackend(BackendContext(), amdsmi_module=lib)
    backend.open()

    def broken(h: object) -> Any:
        raise OSError("ctypes: bad handle")

    lib.amdsmi_get_gpu_activity = broken  # type: ignore[attr-defined]
    with pytest.raises(BackendError) as err:
        backend.sample()
    assert err.value.reason == "library"


def test_capture_and_replay_use_the_cli_not_the_library(tmp_path: Path) -> None:
    """With a RecordingRunner (capture) or ReplayRunner (replay), auto mode skips amdsmi: the bundle holds
    amd-smi output, and a replay never reads this host's GPUs."""
    lib = make_amdsmi([mi300x_gcd("0x01", "0000:0c:00.0")])
    metric = json.dumps(MI250X_METRIC)
    replay = ReplayRunner(
        [CommandResult(("/opt/rocm/bin/amd-smi", "metric", "--json"), metric, "", 0, 0.0, 0.0)]
    )
    backend = amd.AmdBackend(BackendContext(runner=replay), amdsmi_module=lib)
    backend.open()
    assert backend.active_source == "amd-smi"
    s0, s1 = backend.sample()  # static was not recorded: identity falls back, readings are there
    assert (s0.device.uuid, s0.power_watts, s1.power_watts) == ("amd-index-0", 377.0, None)
    assert lib.state["init"] is None


@settings(max_examples=200, deadline=None)
@given(
    raw=st.text(max_size=300) | st.sampled_from([fixture(n) for n, _ in FUZZ_TARGETS]).map(lambda t: t[:150])
)
def test_sniffers_never_raise(raw: str) -> None:
    for name in (
        "amd-smi-json",
        "amd-smi-process-json",
        "amd-smi-monitor",
        "rocm-smi-json",
        "hy-smi-json",
        "hy-smi-table",
    ):
        assert all_formats()[name].sniff(raw) in (True, False)


def test_counts_are_plain_non_negative_integers() -> None:
    assert [amd.count(v) for v in (0, "7", {"value": 3}, 2.0)] == [0, 7, 3, 2]
    assert [amd.count(v) for v in ("0x1F", "N/A", -1, 2.5, True, "12 W", float("nan"))] == [None] * 7


# ---------------------------------------------------------------------------------------------------
# Every complete capture against its hand-written expectations (interim, until tests/vendors/test_corpus.py)


def test_every_complete_amd_capture_has_expectations() -> None:
    on_disk = {
        p.name for p in FIX.iterdir() if p.suffix not in (".source", ".yaml") and "_excerpt" not in p.name
    }
    assert on_disk == {p.name for p in capture_expectations.captures(FIX)}


# ---------------------------------------------------------------------------------------------------
# amd-smi static: both shapes, the ROCm 7 ppt0 cap, memory size; merged into metric samples

STATIC_FIXTURE = "amd-smi_static_json_8x-mi300x_rocm7.2.1_ppt0-limit.json"


def test_static_rocm7_fixture_gives_model_memory_and_ppt0_cap() -> None:
    static = amd.parse_amd_smi_static(fixture(STATIC_FIXTURE))
    assert sorted(static, key=int) == [str(i) for i in range(8)]
    i7 = static["7"]
    # board.product_name wins over the generic asic.market_name ("AMD Instinct MI300X").
    assert i7.model == "AMD Instinct MI300X OAM"
    assert i7.memory_total_bytes == 196592 * MIB  # vram.size 196592 MB, AMD's MB = MiB
    assert i7.power_limit_watts == 750.0  # limit.ppt0.socket_power_limit
    assert (i7.pci_bus_id, i7.driver_version, i7.unique_id) == (
        "0000:dd:00.0",
        "6.16.13",
        "0x0000000000000007",
    )


def test_metric_merged_with_static_gets_model_memory_total_and_cap() -> None:
    """A live CLI node: `amd-smi metric` (here ROCm 6's list shape) merged by gpu index with `static`."""
    static = amd.parse_amd_smi_static(fixture(STATIC_FIXTURE))
    (s,) = amd.parse_amd_smi_metric(fixture("amd-smi_metric_-p_json_rocm6.1.json"), static)
    assert s.device.model == "AMD Instinct MI300X OAM" and s.device.uuid == "pci-0000:1b:00.0"
    assert s.power_watts == 10.0 and s.power_limit_watts == 750.0
    assert s.memory_total_bytes == 196592 * MIB and s.memory_used_bytes is None
    assert not s.unread


@pytest.mark.parametrize("shape", ["list", "gpu_data"])
def test_static_rocm6_socket_power_and_max_power_is_not_the_cap(shape: str) -> None:
    entry = {
        "gpu": 0,
        "asic": {"market_name": "AMD Radeon Graphics", "asic_serial": "0x00000000000000a1"},
        "board": {"product_name": "AMD Radeon PRO W7700"},
        # ROCm 6.1: max_power is the highest cap that may be set, socket_power the cap in force.
        "limit": {"max_power": {"value": 190, "unit": "W"}, "socket_power": {"value": 150, "unit": "W"}},
        "vram": {"type": "GDDR6", "size": {"value": 16368, "unit": "MB"}},
    }
    doc = [entry] if shape == "list" else {"gpu_data": [entry]}
    ident = amd.parse_amd_smi_static(json.dumps(doc))["0"]
    assert ident.model == "AMD Radeon PRO W7700" and ident.power_limit_watts == 150.0
    assert ident.memory_total_bytes == 16368 * MIB
    only_max = {**entry, "limit": {"max_power": {"value": 190, "unit": "W"}, "socket_power": "N/A"}}
    assert amd.parse_amd_smi_static(json.dumps([only_max]))["0"].power_limit_watts is None


def test_static_garbled_cap_drops_the_cap_only() -> None:
    doc = json.loads(fixture(STATIC_FIXTURE))
    doc["gpu_data"][2]["limit"]["ppt0"]["socket_power_limit"] = {"value": "xxxxx", "unit": "W"}
    doc["gpu_data"][3]["vram"]["size"] = {"value": 196592, "unit": "furlongs"}
    samples = amd.parse_amd_smi_static_samples(json.dumps(doc))
    s2, s3 = samples[2], samples[3]
    assert s2.up and s2.power_limit_watts is None and s2.memory_total_bytes == 196592 * MIB
    assert set(s2.unread) == {"power_limit_watts"}
    assert s3.up and s3.memory_total_bytes is None and s3.power_limit_watts == 750.0
    assert set(s3.unread) == {"memory_total_bytes"}
    assert all(not s.unread for i, s in enumerate(samples) if i not in (2, 3))


def test_static_and_metric_sniffers_tell_the_two_apart() -> None:
    fmts = all_formats()
    static, metric = fixture(STATIC_FIXTURE), fixture("amd-smi_metric_-p_json_rocm6.1.json")
    assert {n for n, f in fmts.items() if f.sniff(static)} == {"amd-smi-static-json"}
    assert {n for n, f in fmts.items() if f.sniff(metric)} == {"amd-smi-json"}
    process = fixture("amd-smi_process_json_rocm6.2_changelog.json")
    assert {n for n, f in fmts.items() if f.sniff(process)} == {"amd-smi-process-json"}
    by_pid = json.dumps([{"pid": 7, "gpus": [{"gpu_index": 0, "memory_usage": {"vram_mem": 1}}]}])
    assert {n for n, f in fmts.items() if f.sniff(by_pid)} == {"amd-smi-process-json"}


@pytest.mark.slow
def test_fake_amd_smi_static_fixture_and_metric_merge_on_a_live_node(tmp_path: Path) -> None:
    """The CLI path as on a ROCm 7 node: `amd-smi static --json` prints the real 8x MI300X capture,
    `amd-smi metric --json` a gpu_data document; each device gets model, memory total and power cap."""
    metric = {
        "gpu_data": [{"gpu": i, "power": {"socket_power": {"value": 120 + i, "unit": "W"}}} for i in range(8)]
    }
    (tmp_path / "metric.json").write_text(json.dumps(metric))
    body = (
        f'case "$1" in metric) cat {tmp_path}/metric.json;; '
        f"static) cat {FIX / STATIC_FIXTURE};; *) exit 2;; esac"
    )
    backend = _cli_backend(tmp_path, body)
    out = backend.sample()
    assert [s.device.index for s in out] == [str(i) for i in range(8)]
    assert all(s.device.model == "AMD Instinct MI300X OAM" for s in out)
    assert all(s.memory_total_bytes == 196592 * MIB and s.power_limit_watts == 750.0 for s in out)
    assert [s.power_watts for s in out] == [120.0 + i for i in range(8)]


# ---------------------------------------------------------------------------------------------------
# One spoiled value costs that value only


def _leaves(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every number-like leaf (a number, or a {"value", "unit"} pair's value)."""
    if isinstance(doc, dict):
        if "value" in doc and not isinstance(doc["value"], dict | list):
            return [(*path, "value")]
        return [p for k, v in doc.items() for p in _leaves(v, (*path, k))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _leaves(v, (*path, i))]
    if (isinstance(doc, int | float) and not isinstance(doc, bool)) or (
        isinstance(doc, str) and doc[:1].isdigit()
    ):
        return [path]
    return []


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    doc = json.loads(json.dumps(doc))
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


@pytest.mark.parametrize("spoil", ["xxxxx", "N/A", "-", "12 furlongs"])
def test_each_spoiled_metric_value_costs_that_reading_only(spoil: str) -> None:
    doc = [entry for entry in MI250X_METRIC if entry["gpu"] == 0]
    (base,) = amd.parse_amd_smi_metric(json.dumps(doc))
    paths = [p for p in _leaves(doc) if p[1] != "gpu"]
    assert len(paths) > 10
    for path in paths:
        (got,) = amd.parse_amd_smi_metric(json.dumps(_set(doc, path, spoil)))
        capture_expectations.assert_one_reading_lost(base, got, garbled=spoil not in ("N/A", "-"))


@pytest.mark.parametrize("spoil", ["xxxxx", "N/A", "-"])
def test_each_spoiled_rocm_smi_value_costs_that_reading_only(spoil: str) -> None:
    doc = json.loads(fixture("rocm-smi_-a_json_mi210_rocm5_driver5.18.13.json"))
    (base,) = amd.parse_rocm_smi_json(json.dumps(doc))
    for key in doc["card0"]:
        (got,) = amd.parse_rocm_smi_json(json.dumps(_set(doc, ("card0", key), spoil)))
        if key in ("Unique ID", "Serial Number", "PCI Bus", "Card series"):
            continue  # identity, not a reading
        capture_expectations.assert_one_reading_lost(base, got, garbled=spoil == "xxxxx")


@pytest.mark.parametrize("column", range(1, 17))
@pytest.mark.parametrize("spoil", ["xxxxx MB", "N/A", "-"])
def test_each_spoiled_monitor_cell_costs_that_reading_only(column: int, spoil: str) -> None:
    text = fixture("amd-smi_monitor_-q_rocm6.2.txt")
    (base,) = amd.parse_amd_smi_monitor(text)
    lines = text.splitlines()
    cells = re.split(r"(\s{2,})", lines[2].strip())  # cells and the gaps between them
    cells[2 * column] = spoil
    (got,) = amd.parse_amd_smi_monitor("\n".join([*lines[:2], "  " + "".join(cells), *lines[3:]]))
    capture_expectations.assert_one_reading_lost(base, got, garbled=spoil == "xxxxx MB")


# ---------------------------------------------------------------------------------------------------
# Per-process VRAM: amd-smi process --json and amdsmi_get_gpu_process_list


def test_amd_smi_process_changelog_capture_lists_both_processes_memory_unknown() -> None:
    """AMD's own ROCm 6.2 example: two processes on GPU 0, only ``mem_usage`` (gtt+cpu+vram, not VRAM)."""
    got = amd.parse_amd_smi_process(fixture("amd-smi_process_json_rocm6.2_changelog.json"))
    assert got == {
        "0": amd.GpuProcesses((ProcessMemory(420157, None), ProcessMemory(420315, None)), {}),
    }


def test_amd_smi_process_alone_for_inspect() -> None:
    (s,) = amd.parse_amd_smi_process_samples(fixture("amd-smi_process_json_rocm6.2_changelog.json"))
    assert (s.up, s.device.index, s.device.uuid) == (True, "0", "amd-index-0")
    assert s.processes == (ProcessMemory(420157, None), ProcessMemory(420315, None))
    assert s.memory_used_bytes is None and s.power_watts is None
    for empty in ("[]", '{"gpu_data": []}', '[{"no": "gpu"}]'):
        with pytest.raises(ParseError):
            amd.parse_amd_smi_process_samples(empty)


def _proc_info(pid: int, vram: object, name: str = "python3") -> dict[str, Any]:
    """One ``process_info`` as amdsmi_cli/amdsmi_commands.py ``process`` builds it (values invented)."""
    return {
        "process_info": {
            "name": name,
            "pid": pid,
            "memory_usage": {
                "gtt_mem": {"value": 2097152, "unit": "B"},
                "cpu_mem": {"value": 0, "unit": "B"},
                "vram_mem": vram,
            },
            "mem_usage": {"value": 999, "unit": "B"},
            "usage": {"gfx": {"value": 0, "unit": "ns"}, "enc": {"value": 0, "unit": "ns"}},
            "cu_occupancy": "N/A",
        }
    }


def test_amd_smi_process_shapes_units_and_markers() -> None:
    doc = [
        {
            "gpu": 0,
            "process_list": [
                _proc_info(4242, {"value": 10737418240, "unit": "B"}),
                _proc_info(5150, {"value": 512, "unit": "MiB"}),
                _proc_info(6000, 1048576),  # a bare number is bytes
                _proc_info(7000, "N/A"),  # listed, VRAM not known
            ],
        },
        {"gpu": 1, "process_list": [{"process_info": "No running processes detected"}]},
        {"gpu": 2, "process_list": "N/A"},
        {
            "gpu": 3,
            "process_list": [_proc_info(8000, {"value": "xxxx", "unit": "B"}), _proc_info(8001, 4096)],
        },
    ]
    got = amd.parse_amd_smi_process(json.dumps(doc))
    assert got["0"].processes == (
        ProcessMemory(4242, 10 * 1024**3),
        ProcessMemory(5150, 512 * MIB),
        ProcessMemory(6000, 1048576),
        ProcessMemory(7000, None),
    )
    assert got["0"].unread == {}
    assert got["1"] == amd.GpuProcesses((), {})
    assert got["2"].processes is None
    # a garbled value costs that process's memory (unread), never the other processes
    assert got["3"].processes == (ProcessMemory(8000, None), ProcessMemory(8001, 4096))
    assert "xxxx" in got["3"].unread["processes"]


def test_amd_smi_process_sort_by_pid_form() -> None:
    """``--sort-by-pid`` (ROCm/rocm-systems PR 6396's example values): one entry per process, ``gpus``."""
    doc = [
        {
            "pid": 2168274,
            "name": "/usr/bin/python3.12",
            "gpus": [
                {"gpu_index": 0, "memory_usage": {"vram_mem": {"value": 48000, "unit": "B"}}},
                {"gpu_index": 1, "memory_usage": {"vram_mem": {"value": 65588000, "unit": "B"}}},
            ],
        }
    ]
    got = amd.parse_amd_smi_process(json.dumps(doc))
    assert got["0"].processes == (ProcessMemory(2168274, 48000),)
    assert got["1"].processes == (ProcessMemory(2168274, 65588000),)


@given(
    data=st.one_of(
        st.text(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(
                    st.sampled_from(
                        [
                            "gpu",
                            "process_list",
                            "process_info",
                            "pid",
                            "memory_usage",
                            "vram_mem",
                            "value",
                            "unit",
                            "gpus",
                            "gpu_index",
                            "gpu_data",
                        ]
                    ),
                    inner,
                    max_size=4,
                )
            ),
            max_leaves=20,
        ).map(json.dumps),
    )
)
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_amd_smi_process_garbage_never_raises_but_parse_error(data: str) -> None:
    try:
        got = amd.parse_amd_smi_process(data)
    except ParseError:
        return
    for g in got.values():
        assert g.processes is None or all(p.pid > 0 for p in g.processes)
        for p in g.processes or ():
            assert p.memory_used_bytes is None or p.memory_used_bytes >= 0


def _lib_proc(pid: int, vram: object) -> dict[str, Any]:
    return {
        "name": "N/A",  # a non-root reader sees no names
        "pid": pid,
        "mem": 3 * 2**20,
        "engine_usage": {"gfx": 0, "enc": 0},
        "memory_usage": {"gtt_mem": 2**20, "cpu_mem": 0, "vram_mem": vram},
    }


def test_amdsmi_process_list_dicts_handles_and_no_perm() -> None:
    gpu0 = mi300x_gcd("0x01", "0000:c1:00.0")
    gpu0["process"] = [_lib_proc(101, 10 * 2**30), _lib_proc(202, 30 * 2**30), _lib_proc(303, "N/A")]
    gpu1 = mi300x_gcd("0x02", "0000:c6:00.0")  # ROCm 6.0: handles, one of them gone meanwhile
    gpu1["process"] = [ProcHandle(_lib_proc(404, 2**30)), ProcHandle(AmdSmiRetCode.ERR_NOT_FOUND)]
    gpu2 = mi300x_gcd("0x03", "0000:c9:00.0")
    gpu2["process"] = AmdSmiRetCode.ERR_NO_PERM
    gpu3 = mi300x_gcd("0x04", "0000:cc:00.0")
    gpu3["process"] = []
    backend = amd.AmdBackend(BackendContext(), amdsmi_module=make_amdsmi([gpu0, gpu1, gpu2, gpu3]))
    backend.open()
    s0, s1, s2, s3 = backend.sample()
    assert s0.processes == (
        ProcessMemory(101, 10 * 2**30),
        ProcessMemory(202, 30 * 2**30),
        ProcessMemory(303, None),
    )
    assert s0.unread == {} and s0.error is None
    assert s1.processes == (ProcessMemory(404, 2**30),)
    assert s1.unread == {"processes": "amdsmi_get_gpu_process_info: 31"}
    # no permission: processes unknown, the device up with every other reading
    assert s2.up is True and s2.processes is None and s2.utilization_ratio == 0.93
    assert s2.unread == {"processes": "amdsmi_get_gpu_process_list: 10"}
    assert s3.processes == () and s3.unread == {}


def test_amdsmi_without_process_list_gives_none_and_no_error() -> None:
    (s,) = amd.AmdBackend(
        BackendContext(), amdsmi_module=make_amdsmi([mi300x_gcd("0x01", "0000:c1:00.0")])
    ).sample()
    assert s.processes is None and s.unread == {} and s.error is None  # NOT_SUPPORTED: no series


@pytest.mark.slow
def test_fake_amd_smi_process_option(tmp_path: Path) -> None:
    (tmp_path / "metric.json").write_text(json.dumps({"gpu_data": MI250X_METRIC}))
    (tmp_path / "static.json").write_text(json.dumps({"gpu_data": MI250X_STATIC}))
    (tmp_path / "process.json").write_text(fixture("amd-smi_process_json_rocm6.2_changelog.json"))
    body = (
        f'echo "$1" >> {tmp_path}/calls; case "$1" in metric) cat {tmp_path}/metric.json;; '
        f"static) cat {tmp_path}/static.json;; process) cat {tmp_path}/process.json;; *) exit 2;; esac"
    )
    fake_tool(tmp_path, "amd-smi", body)
    runner = SubprocessRunner(env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    off = amd.AmdBackend(BackendContext(runner=runner, options={"source": "amd-smi"}))
    s0, _ = off.sample()
    assert s0.processes is None
    assert "process" not in (tmp_path / "calls").read_text()
    on = amd.AmdBackend(BackendContext(runner=runner, options={"source": "amd-smi", "processes": True}))
    s0, s1 = on.sample()
    assert s0.processes == (ProcessMemory(420157, None), ProcessMemory(420315, None))
    assert s1.processes is None  # GPU 1 is not in that output
    (tmp_path / "process.json").write_text("garbage")
    s0, s1 = on.sample()
    assert s0.up and s0.processes is None and "processes" in s0.unread
