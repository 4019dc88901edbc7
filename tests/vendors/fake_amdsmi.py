"""Stand-in for the ``amdsmi`` Python package (AMD's py-interface, the amdsmi library boundary) used by the
AMD backend tests and the per-container memory test: ``make_amdsmi`` builds a module with the package's
function names, enums, exceptions and return shapes (see its docstring for the documents it follows)."""

from __future__ import annotations

import types
from enum import IntEnum
from typing import Any


class AmdSmiRetCode(IntEnum):
    """Subset of ``AmdSmiRetCode`` (ROCm/amdsmi py-interface/amdsmi_exception.py; values from amdsmi.h)."""

    SUCCESS = 0
    ERR_INVAL = 1
    ERR_NOT_SUPPORTED = 2
    ERR_NO_PERM = 10
    ERR_NOT_FOUND = 31
    RETRY = 50


class AmdSmiException(Exception):
    """Base exception of the amdsmi package."""


class AmdSmiLibraryException(AmdSmiException):
    """Like amdsmi's: carries ``err_code`` (``AmdSmiRetCode``) and ``err_info``."""

    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = abs(err_code)
        self.err_info = AmdSmiRetCode(self.err_code).name

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AmdSmiRetCode.RETRY)


class ProcHandle:
    """A ROCm 6.0 ``amdsmi_process_handle_t``: opaque, resolved by ``amdsmi_get_gpu_process_info``."""

    def __init__(self, info: dict[str, Any] | AmdSmiRetCode) -> None:
        self.info = info


def make_amdsmi(gpus: list[dict[str, Any]], init_error: int | None = None) -> types.ModuleType:
    """A stand-in for the ``amdsmi`` Python package (ROCm/amdsmi ``py-interface/amdsmi_interface.py``,
    documented in its ``README.md`` and rocm.docs.amd.com/projects/amdsmi "Python API reference").

    Same function names, arguments, enum classes (and their values) and return shapes as the real package,
    checked against ``amdsmi_interface.py``/``amdsmi_wrapper.py`` of the amdsmi 7.0.2 wheel on PyPI:
    ``amdsmi_get_gpu_activity`` -> {gfx_activity, umc_activity, mm_activity} (%),
    ``amdsmi_get_gpu_vram_usage`` -> {vram_total, vram_used} (MB), ``amdsmi_get_temp_metric(h, type,
    metric)`` -> int °C, ``amdsmi_get_power_info`` -> {socket_power, current_socket_power,
    average_socket_power (W or "N/A"), gfx_voltage.., power_limit}, ``amdsmi_get_power_cap_info`` ->
    {power_cap (µW), ...}, ``amdsmi_get_energy_count`` -> {energy_accumulator, counter_resolution (µJ),
    timestamp}, ``amdsmi_get_gpu_total_ecc_count`` -> {correctable_count, uncorrectable_count,
    deferred_count}, ``amdsmi_get_pcie_info`` -> {pcie_static, pcie_metric{pcie_replay_count, ...}},
    ``amdsmi_get_clock_info(h, AmdSmiClkType.GFX|MEM)`` -> {clk, min_clk, max_clk (MHz), clk_locked,
    clk_deep_sleep} (``GFX`` is an alias of ``SYS`` in the real enum),
    ``amdsmi_get_gpu_process_list(h)`` -> [{name, pid, mem, engine_usage{gfx, enc}, memory_usage{gtt_mem,
    cpu_mem, vram_mem}}] (bytes; the ROCm 6.1+ form), or, in ROCm 6.0's form, process handles that
    ``amdsmi_get_gpu_process_info(h, process)`` turns into that dict (a ``ProcHandle`` here).
    Errors are ``AmdSmiLibraryException(err_code)``; unsupported readings are "N/A" or
    ``ERR_NOT_SUPPORTED``. Each ``gpus`` dict gives one handle's answers; a key holding an ``AmdSmiRetCode``
    makes that call raise it (so does a missing key: ``ERR_NOT_SUPPORTED``); ``"gone": True`` makes every call raise ``ERR_NOT_FOUND``.
    """
    m = types.ModuleType("amdsmi")
    m.AmdSmiException = AmdSmiException  # type: ignore[attr-defined]
    m.AmdSmiLibraryException = AmdSmiLibraryException  # type: ignore[attr-defined]
    m.AmdSmiRetryException = AmdSmiRetryException  # type: ignore[attr-defined]
    m.AmdSmiRetCode = AmdSmiRetCode  # type: ignore[attr-defined]
    m.AmdSmiInitFlags = IntEnum("AmdSmiInitFlags", {"INIT_ALL_PROCESSORS": 0xFFFFFFFF, "INIT_AMD_GPUS": 2})  # type: ignore[attr-defined]
    m.AmdSmiTemperatureType = IntEnum("AmdSmiTemperatureType", {"EDGE": 0, "HOTSPOT": 1, "VRAM": 2})  # type: ignore[attr-defined]
    m.AmdSmiTemperatureMetric = IntEnum("AmdSmiTemperatureMetric", {"CURRENT": 0, "CRITICAL": 1})  # type: ignore[attr-defined]
    m.AmdSmiClkType = IntEnum("AmdSmiClkType", {"SYS": 0, "GFX": 0, "DF": 1, "DCEF": 2, "SOC": 3, "MEM": 4})  # type: ignore[attr-defined]
    state: dict[str, Any] = {"init": None, "shut_down": 0}
    handles = [object() for _ in gpus]

    def answer(key: str, h: object, *sub: Any) -> Any:
        gpu = gpus[handles.index(h)]
        if gpu.get("gone"):
            raise AmdSmiLibraryException(AmdSmiRetCode.ERR_NOT_FOUND)
        value = gpu.get(key, AmdSmiRetCode.ERR_NOT_SUPPORTED)
        for k in sub:
            value = value.get(k, AmdSmiRetCode.ERR_NOT_SUPPORTED) if isinstance(value, dict) else value
        if isinstance(value, AmdSmiRetCode):
            raise AmdSmiLibraryException(int(value))
        return value

    def amdsmi_init(flag: int = 0xFFFFFFFF) -> None:
        if init_error is not None:
            raise AmdSmiLibraryException(init_error)
        state["init"] = flag

    def amdsmi_shut_down() -> None:
        state["shut_down"] += 1

    def amdsmi_get_temp_metric(h: object, sensor: IntEnum, metric: IntEnum) -> int:
        assert metric == m.AmdSmiTemperatureMetric.CURRENT  # type: ignore[attr-defined]
        return answer("temp", h, sensor.name)  # type: ignore[no-any-return]

    m.amdsmi_init = amdsmi_init  # type: ignore[attr-defined]
    m.amdsmi_shut_down = amdsmi_shut_down  # type: ignore[attr-defined]
    m.amdsmi_get_processor_handles = lambda: list(handles)  # type: ignore[attr-defined]
    m.amdsmi_get_temp_metric = amdsmi_get_temp_metric  # type: ignore[attr-defined]
    m.amdsmi_get_clock_info = lambda h, clk_type: answer("clock", h, clk_type.name)  # type: ignore[attr-defined]
    for fn, key in (
        ("amdsmi_get_gpu_asic_info", "asic"),
        ("amdsmi_get_gpu_board_info", "board"),
        ("amdsmi_get_gpu_driver_info", "driver"),
        ("amdsmi_get_gpu_device_bdf", "bdf"),
        ("amdsmi_get_gpu_activity", "activity"),
        ("amdsmi_get_gpu_vram_usage", "vram"),
        ("amdsmi_get_power_info", "power"),
        ("amdsmi_get_power_cap_info", "cap"),
        ("amdsmi_get_energy_count", "energy"),
        ("amdsmi_get_gpu_total_ecc_count", "ecc"),
        ("amdsmi_get_pcie_info", "pcie"),
        ("amdsmi_get_gpu_process_list", "process"),
        # ROCm 6.1+: the card's modes as strings ("CPX", "NPS1"); 6.2+: {kfd_id, node_id, current_partition_id}
        ("amdsmi_get_gpu_compute_partition", "compute_partition"),
        ("amdsmi_get_gpu_memory_partition", "memory_partition"),
        ("amdsmi_get_gpu_kfd_info", "kfd"),
    ):
        setattr(m, fn, lambda h, _k=key: answer(_k, h))

    def amdsmi_get_gpu_process_info(h: object, process: ProcHandle) -> dict[str, Any]:
        if not isinstance(process, ProcHandle):  # the real one raises AmdSmiParameterException
            raise AmdSmiException(f"{process!r} is not an amdsmi_process_handle_t")
        if isinstance(process.info, AmdSmiRetCode):
            raise AmdSmiLibraryException(int(process.info))
        return process.info

    m.amdsmi_get_gpu_process_info = amdsmi_get_gpu_process_info  # type: ignore[attr-defined]
    m.state = state  # type: ignore[attr-defined]
    return m


def mi300x_gcd(serial: str, bdf: str) -> dict[str, Any]:
    return {
        "asic": {"market_name": "AMD Instinct MI300X", "asic_serial": serial, "device_id": 0x74A1},
        "board": {"product_name": "AMD Instinct MI300X OAM", "product_serial": "692231000131"},
        "driver": {"driver_name": "amdgpu", "driver_version": "6.10.5"},
        "bdf": bdf,
        "activity": {"gfx_activity": 93, "umc_activity": 38, "mm_activity": "N/A"},
        "vram": {"vram_total": 196592, "vram_used": 150000},
        # MI300 has no edge sensor: the library raises NOT_SUPPORTED for it.
        "temp": {"EDGE": AmdSmiRetCode.ERR_NOT_SUPPORTED, "HOTSPOT": 71, "VRAM": 58},
        "power": {
            "socket_power": 602,
            "current_socket_power": 602,
            "average_socket_power": "N/A",
            "gfx_voltage": "N/A",
            "soc_voltage": "N/A",
            "mem_voltage": "N/A",
            "power_limit": 750000000,
        },
        "cap": {"power_cap": 750_000_000, "default_power_cap": 750_000_000, "dpm_cap": 2100},
        "energy": {"energy_accumulator": 81_000_000_000, "counter_resolution": 15.259, "timestamp": 1},
        "ecc": {"correctable_count": 12, "uncorrectable_count": 0, "deferred_count": 0},
        "pcie": {"pcie_static": {"max_pcie_width": 16}, "pcie_metric": {"pcie_replay_count": 0}},
        "clock": {
            "SYS": {"clk": 2100, "min_clk": 500, "max_clk": 2100, "clk_locked": False, "clk_deep_sleep": 0},
            "MEM": {"clk": 1300, "min_clk": 900, "max_clk": 1300, "clk_locked": "N/A", "clk_deep_sleep": 0},
        },
    }
