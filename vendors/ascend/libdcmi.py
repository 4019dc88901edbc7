"""libdcmi.so (Huawei DCMI) read through ctypes: the per-chip readings the Ascend backend's `dcmi` source uses.

Prototypes and struct layouts follow ``dcmi_interface_api.h`` of Ascend/mind-cluster
(component/ascend-common/devmanager/dcmi, the header npu-exporter builds against); the utilization input
types (2 AI Core, 3 AI CPU, 4 control CPU, 5 DDR bandwidth) and the
library locations follow gpustack-runtime's ``pydcmi``. Units as DCMI returns them: power in 0.1 W,
temperature in degrees C, memory in MB (MiB, as npu-smi), rates in percent, frequencies in MHz.

A DCMI call runs inside the exporter process and cannot be killed if the driver hangs, which is why the
backend uses this only when configured (``source: dcmi`` or ``auto``); the CLI path is the default.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xpuwatch.vendors.base import BackendError

LIBRARY_PATHS: tuple[str, ...] = (
    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
    "/usr/local/Ascend/driver/lib64/libdcmi.so",
    "/usr/local/dcmi/libdcmi.so",
)
MAX_CARDS = 64
MAX_ERROR_CODES = 128
UTIL_AICORE, UTIL_AICPU, UTIL_CTRLCPU = 2, 3, 4
UTIL_DDR_BANDWIDTH = 5  # HBM bandwidth comes from dcmi_get_device_hbm_info
FREQ_AICORE_CURRENT, FREQ_AICORE_MAX = 7, 9
HEALTH_ABSENT = 0xFFFFFFFF


class PcieInfoAll(ctypes.Structure):
    _fields_ = (
        ("venderid", ctypes.c_uint),
        ("subvenderid", ctypes.c_uint),
        ("deviceid", ctypes.c_uint),
        ("subdeviceid", ctypes.c_uint),
        ("domain", ctypes.c_int),
        ("bdf_busid", ctypes.c_uint),
        ("bdf_deviceid", ctypes.c_uint),
        ("bdf_funcid", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 32),
    )


class ChipInfo(ctypes.Structure):
    _fields_ = (
        ("chip_type", ctypes.c_ubyte * 32),
        ("chip_name", ctypes.c_ubyte * 32),
        ("chip_ver", ctypes.c_ubyte * 32),
        ("aicore_cnt", ctypes.c_uint),
    )


class HbmInfo(ctypes.Structure):
    _fields_ = (
        ("memory_size", ctypes.c_ulonglong),  # MB
        ("freq", ctypes.c_uint),
        ("memory_usage", ctypes.c_ulonglong),  # MB
        ("temp", ctypes.c_int),
        ("bandwith_util_rate", ctypes.c_uint),  # %
    )


class MemoryInfoV3(ctypes.Structure):
    _fields_ = (
        ("memory_size", ctypes.c_ulonglong),  # MB
        ("memory_available", ctypes.c_ulonglong),  # MB: free + hugepages_free * hugepagesize
        ("freq", ctypes.c_uint),
        ("hugepagesize", ctypes.c_ulong),
        ("hugepages_total", ctypes.c_ulong),
        ("hugepages_free", ctypes.c_ulong),
        ("utiliza", ctypes.c_uint),
        ("reserve", ctypes.c_ubyte * 60),
    )


@dataclass(frozen=True)
class ChipReading:
    """One chip as DCMI reports it, in DCMI's units (see the module docstring). ``None``: the call failed
    or the chip has no such reading; ``failed`` names the calls that returned an error (``name=ret``)."""

    card: int
    device: int
    bus_id: str | None = None
    chip_name: str | None = None
    health: int | None = None  # 0 OK, 1 minor, 2 major, 3 critical
    error_codes: tuple[int, ...] = ()
    aicore_percent: int | None = None
    aicpu_percent: int | None = None
    ctrlcpu_percent: int | None = None
    temperature_celsius: int | None = None
    power_deciwatts: int | None = None
    hbm_total_mib: int | None = None
    hbm_used_mib: int | None = None
    hbm_bandwidth_percent: int | None = None
    hbm_temperature_celsius: int | None = None
    ddr_total_mib: int | None = None
    ddr_available_mib: int | None = None
    ddr_bandwidth_percent: int | None = None
    aicore_freq_mhz: int | None = None
    aicore_max_freq_mhz: int | None = None
    failed: tuple[str, ...] = ()


def find_library(explicit: str | None = None) -> str | None:
    """The libdcmi.so to load: ``explicit`` if given, else the driver's install paths, else the loader's
    search (``LD_LIBRARY_PATH``/ldconfig via ctypes.util)."""
    if explicit:
        return explicit if os.path.exists(explicit) else None
    for p in LIBRARY_PATHS:
        if os.path.exists(p):
            return p
    return ctypes.util.find_library("dcmi")


def _text(raw: ctypes.Array[ctypes.c_ubyte]) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", errors="replace").strip()


class Dcmi:
    """A loaded libdcmi.so. Raises BackendError(reason="library") when it cannot be loaded or initialised."""

    def __init__(self, path: str) -> None:
        try:
            self._lib = ctypes.CDLL(path)
        except OSError as exc:
            raise BackendError(f"libdcmi: cannot load {path}: {exc}", reason="library") from exc
        self.path = path
        ret = self._call("dcmi_init")
        if ret != 0:
            raise BackendError(f"libdcmi: dcmi_init returned {ret}", reason="init")

    def _call(self, name: str, *args: object) -> int:
        fn: Callable[..., int] | None = getattr(self._lib, name, None)
        if fn is None:
            return -99999  # not exported by this driver generation
        return int(fn(*args))

    def chips(self) -> list[tuple[int, int]]:
        """(card, device) of every NPU chip (MCU/CPU units excluded: they are not counted by
        dcmi_get_device_num_in_card)."""
        num = ctypes.c_int(0)
        cards = (ctypes.c_int * MAX_CARDS)()
        ret = self._call("dcmi_get_card_list", ctypes.byref(num), cards, ctypes.c_int(MAX_CARDS))
        if ret != 0:
            raise BackendError(f"libdcmi: dcmi_get_card_list returned {ret}", reason="library")
        out: list[tuple[int, int]] = []
        for card in list(cards)[: max(0, min(num.value, MAX_CARDS))]:
            n = ctypes.c_int(0)
            if self._call("dcmi_get_device_num_in_card", ctypes.c_int(card), ctypes.byref(n)) != 0:
                raise BackendError(f"libdcmi: dcmi_get_device_num_in_card({card}) failed", reason="library")
            out.extend((card, d) for d in range(max(0, min(n.value, 16))))
        return out

    def read(self, card: int, device: int) -> ChipReading:
        """Every reading of one chip; a failing call leaves its fields None and is named in ``failed``."""
        failed: list[str] = []
        c, d = ctypes.c_int(card), ctypes.c_int(device)

        def get(name: str, *args: object) -> bool:
            ret = self._call(name, c, d, *args)
            if ret != 0:
                failed.append(f"{name}={ret}")
            return ret == 0

        def scalar(name: str, ctype: type[ctypes.c_int] | type[ctypes.c_uint], *pre: object) -> int | None:
            v = ctype(0)
            return int(v.value) if get(name, *pre, ctypes.byref(v)) else None

        pcie = PcieInfoAll()
        bus = None
        if get("dcmi_get_device_pcie_info_v2", ctypes.byref(pcie)):
            bus = (
                f"{pcie.domain & 0xFFFF:04x}:{pcie.bdf_busid:02x}:{pcie.bdf_deviceid:02x}.{pcie.bdf_funcid:x}"
            )
        chip = ChipInfo()
        name = _text(chip.chip_name) if get("dcmi_get_device_chip_info", ctypes.byref(chip)) else None
        health = scalar("dcmi_get_device_health", ctypes.c_uint)
        count = ctypes.c_int(0)
        codes = (ctypes.c_uint * MAX_ERROR_CODES)()
        error_codes: tuple[int, ...] = ()
        if get("dcmi_get_device_errorcode_v2", ctypes.byref(count), codes, ctypes.c_uint(MAX_ERROR_CODES)):
            error_codes = tuple(int(x) for x in list(codes)[: max(0, min(count.value, MAX_ERROR_CODES))])

        def util(kind: int) -> int | None:
            return scalar("dcmi_get_device_utilization_rate", ctypes.c_uint, ctypes.c_int(kind))

        def freq(kind: int) -> int | None:
            return scalar("dcmi_get_device_frequency", ctypes.c_uint, ctypes.c_int(kind))

        hbm = HbmInfo()
        has_hbm = get("dcmi_get_device_hbm_info", ctypes.byref(hbm)) and hbm.memory_size > 0
        mem = MemoryInfoV3()
        has_ddr = get("dcmi_get_device_memory_info_v3", ctypes.byref(mem)) and mem.memory_size > 0
        return ChipReading(
            card=card,
            device=device,
            bus_id=bus,
            chip_name=name,
            health=None if health is None or health == HEALTH_ABSENT else health,
            error_codes=error_codes,
            aicore_percent=util(UTIL_AICORE),
            aicpu_percent=util(UTIL_AICPU),
            ctrlcpu_percent=util(UTIL_CTRLCPU),
            temperature_celsius=scalar("dcmi_get_device_temperature", ctypes.c_int),
            power_deciwatts=scalar("dcmi_get_device_power_info", ctypes.c_int),
            hbm_total_mib=int(hbm.memory_size) if has_hbm else None,
            hbm_used_mib=int(hbm.memory_usage) if has_hbm else None,
            hbm_bandwidth_percent=int(hbm.bandwith_util_rate) if has_hbm else None,
            hbm_temperature_celsius=int(hbm.temp) if has_hbm else None,
            ddr_total_mib=int(mem.memory_size) if has_ddr else None,
            ddr_available_mib=int(mem.memory_available) if has_ddr else None,
            ddr_bandwidth_percent=util(UTIL_DDR_BANDWIDTH),
            aicore_freq_mhz=freq(FREQ_AICORE_CURRENT),
            aicore_max_freq_mhz=freq(FREQ_AICORE_MAX),
            failed=tuple(failed),
        )


def read_all(dcmi: Dcmi, chips: Sequence[tuple[int, int]]) -> list[ChipReading]:
    """Read every chip in order."""
    return [dcmi.read(card, dev) for card, dev in chips]
