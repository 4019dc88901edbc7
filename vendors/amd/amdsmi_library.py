"""The ``amdsmi`` Python package (ROCm py-interface) into DeviceSamples, one library call per reading.

Vendor layer: the library edge of the AMD backend; the module is injected (tests pass a stand-in).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from xpuwatch.vendors.amd.amd_smi_json import first
from xpuwatch.vendors.amd.amd_smi_process import READING, process_memory
from xpuwatch.vendors.amd.partitions import partition_of, tie
from xpuwatch.vendors.amd.readings import (
    ECC_DEFERRED,
    UNKNOWN_MODEL,
    VENDOR,
    Notes,
    amount,
    count,
    device_uuid,
    finite,
    nonneg,
    quantity,
    ratio,
    scaled,
    text,
    with_notes,
)
from xpuwatch.vendors.base import BackendError, Device, DeviceSample, Partition, ProcessMemory

log = logging.getLogger(__name__)


class AmdSmiLibrary:
    """Reads GPUs through the ``amdsmi`` Python package (or any module with its API, for tests).

    Calls (ROCm/amdsmi ``py-interface/amdsmi_interface.py``, names and dict keys checked against the
    amdsmi 7.0.2 wheel; units per ``src/amd_smi/amd_smi.cc``):
    ``amdsmi_get_gpu_activity`` (gfx/umc %), ``amdsmi_get_gpu_vram_usage`` (MB = MiB),
    ``amdsmi_get_temp_metric(h, AmdSmiTemperatureType.EDGE|HOTSPOT|VRAM, AmdSmiTemperatureMetric.CURRENT)``
    (°C), ``amdsmi_get_power_info`` (``socket_power``/``current_socket_power``/``average_socket_power`` W),
    ``amdsmi_get_power_cap_info`` (``power_cap`` µW), ``amdsmi_get_energy_count`` (``energy_accumulator``,
    older ``power``, times ``counter_resolution`` µJ), ``amdsmi_get_gpu_total_ecc_count``,
    ``amdsmi_get_pcie_info`` (``pcie_metric.pcie_replay_count``), ``amdsmi_get_clock_info(h,
    AmdSmiClkType.GFX|MEM)`` (``clk`` MHz). Identity: ``amdsmi_get_gpu_asic_info``,
    ``amdsmi_get_gpu_board_info``, ``amdsmi_get_gpu_device_bdf``, ``amdsmi_get_gpu_driver_info``.
    Processes: ``amdsmi_get_gpu_process_list`` (dicts since ROCm 6.1; handles for
    ``amdsmi_get_gpu_process_info`` in 6.0), read by ``vendors.amd.amd_smi_process``.
    Unsupported readings come back as "N/A" or raise ``AmdSmiLibraryException(ERR_NOT_SUPPORTED)``: None.
    """

    def __init__(self, module: Any) -> None:
        self.lib = module
        self._exc: tuple[type[BaseException], ...] = (
            getattr(module, "AmdSmiException", RuntimeError),
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
        )
        self._handles: list[tuple[str, Any, Device]] = []

    def open(self) -> None:
        """``amdsmi_init(INIT_AMD_GPUS)`` and enumerate handles. Raises BackendError(reason="init")."""
        try:
            flags = getattr(self.lib, "AmdSmiInitFlags", None)
            if flags is not None and hasattr(flags, "INIT_AMD_GPUS"):
                self.lib.amdsmi_init(flags.INIT_AMD_GPUS)
            else:
                self.lib.amdsmi_init()
            handles = list(self.lib.amdsmi_get_processor_handles())
        except self._exc as exc:
            raise BackendError(f"amdsmi init failed: {exc}", reason="init") from exc
        self._handles = [(str(i), h, self._identify(str(i), h)) for i, h in enumerate(handles)]

    def close(self) -> None:
        try:
            self.lib.amdsmi_shut_down()
        except Exception as exc:  # close never raises
            log.debug("amdsmi_shut_down: %s", exc)

    def _call(self, errors: list[str], fn: str, *args: Any) -> Any:
        try:
            return getattr(self.lib, fn)(*args)
        except self._exc as exc:
            code = getattr(exc, "err_code", None)
            errors.append(f"{fn}: {code if code is not None else type(exc).__name__}")
            return None

    def _identify(self, idx: str, h: Any) -> Device:
        errors: list[str] = []
        asic = self._call(errors, "amdsmi_get_gpu_asic_info", h) or {}
        board = self._call(errors, "amdsmi_get_gpu_board_info", h) or {}
        drv = self._call(errors, "amdsmi_get_gpu_driver_info", h) or {}
        bdf = text(self._call(errors, "amdsmi_get_gpu_device_bdf", h))
        serial = text(board.get("product_serial")) if isinstance(board, Mapping) else None
        asic = asic if isinstance(asic, Mapping) else {}
        board = board if isinstance(board, Mapping) else {}
        uuid = device_uuid(VENDOR, idx, asic.get("asic_serial"), serial, bdf)
        return Device(
            vendor=VENDOR,
            model=text(board.get("product_name")) or text(asic.get("market_name")) or UNKNOWN_MODEL,
            index=idx,
            uuid=uuid,
            pci_bus_id=bdf,
            driver_version=text(drv.get("driver_version")) if isinstance(drv, Mapping) else None,
            serial=serial,
            partition=self._partition(h, bdf, uuid),
        )

    def _partition(self, h: Any, bdf: str | None, uuid: str) -> Partition | None:
        """The card's compute/memory partition mode (amdsmi_get_gpu_compute_partition/memory_partition, ROCm
        6.1+) and this GPU's partition id (amdsmi_get_gpu_kfd_info ``current_partition_id``, ROCm 6.2+; else
        the PCI function). A library without these calls, or a card without partitions, gives None."""
        errors: list[str] = []
        section: dict[str, object] = {}
        for key, fn in (
            ("compute_partition", "amdsmi_get_gpu_compute_partition"),
            ("memory_partition", "amdsmi_get_gpu_memory_partition"),
        ):
            if hasattr(self.lib, fn):
                section[key] = self._call(errors, fn, h)
        kfd = (
            self._call(errors, "amdsmi_get_gpu_kfd_info", h)
            if hasattr(self.lib, "amdsmi_get_gpu_kfd_info")
            else None
        )
        pid = kfd.get("current_partition_id") if isinstance(kfd, Mapping) else None
        if pid is None and bdf and "." in bdf:
            pid = bdf.rsplit(".", 1)[1]
        section["partition_id"] = pid
        return partition_of(section, uuid)

    def sample(self) -> list[DeviceSample]:
        return tie([self._sample_one(h, dev) for _, h, dev in self._handles])

    def _processes(self, h: Any, notes: Notes) -> tuple[ProcessMemory, ...] | None:
        """``amdsmi_get_gpu_process_list(h)``: VRAM per process on this GPU (see ``amd_smi_process``).

        None (no series) when the call is missing or NOT_SUPPORTED; None and ``unread["processes"]`` when
        it fails otherwise (NO_PERM for a user outside the render group, RETRY): never the device down.
        Not counted among the readings that make a device lost. Entries that are process handles (ROCm
        6.0) are resolved with ``amdsmi_get_gpu_process_info(h, process)``; a failed one is unread.
        """
        fn = getattr(self.lib, "amdsmi_get_gpu_process_list", None)
        if fn is None:
            return None
        unsupported = int(getattr(getattr(self.lib, "AmdSmiRetCode", None), "ERR_NOT_SUPPORTED", 2))
        try:
            listed = fn(h)
        except self._exc as exc:
            code = getattr(exc, "err_code", None)
            if code is not None and abs(int(code)) == unsupported:
                return None
            notes.drop(
                READING, f"amdsmi_get_gpu_process_list: {code if code is not None else type(exc).__name__}"
            )
            return None
        if not isinstance(listed, list | tuple):
            notes.drop(READING, f"amdsmi_get_gpu_process_list returned {type(listed).__name__}")
            return None
        entries: list[object] = []
        for item in listed:
            if isinstance(item, Mapping):
                entries.append(item)
                continue
            try:  # ROCm 6.0: a process handle
                entries.append(self.lib.amdsmi_get_gpu_process_info(h, item))
            except self._exc as exc:
                code = getattr(exc, "err_code", None)
                notes.drop(
                    READING,
                    f"amdsmi_get_gpu_process_info: {code if code is not None else type(exc).__name__}",
                )
        return process_memory(entries, notes)

    def _sample_one(self, h: Any, dev: Device) -> DeviceSample:
        lib, notes = self.lib, Notes()
        errors: list[str] = []
        calls = 0

        def get(fn: str, *args: Any) -> Any:
            nonlocal calls
            calls += 1
            return self._call(errors, fn, h, *args)

        def field_of(obj: Any, key: str) -> object:
            return obj.get(key) if isinstance(obj, Mapping) else None

        activity = get("amdsmi_get_gpu_activity")
        vram = get("amdsmi_get_gpu_vram_usage")
        temps: dict[str, float] = {}
        ttype = getattr(lib, "AmdSmiTemperatureType", None)
        tmetric = getattr(lib, "AmdSmiTemperatureMetric", None)
        if ttype is not None and tmetric is not None:
            for sensor, name in (("core", "EDGE"), ("hotspot", "HOTSPOT"), ("memory", "VRAM")):
                if hasattr(ttype, name):
                    t = scaled(
                        get("amdsmi_get_temp_metric", getattr(ttype, name), tmetric.CURRENT),
                        "celsius",
                        "C",
                        notes,
                        name,
                        f"temperatures_celsius.{sensor}",
                    )
                    if t is not None:
                        temps[sensor] = t
        clocks: dict[str, float] = {}
        ctype = getattr(lib, "AmdSmiClkType", None)
        for domain, name in (("graphics", "GFX"), ("memory", "MEM")):
            if ctype is not None and hasattr(ctype, name):
                info = get("amdsmi_get_clock_info", getattr(ctype, name))
                raw = first(info, "clk", "cur_clk") if isinstance(info, Mapping) else None
                hz = amount(raw, "hertz", "MHz", notes, f"clock {name}", f"clocks_hertz.{domain}")
                if hz is not None:
                    clocks[domain] = hz
        power = get("amdsmi_get_power_info")
        cap = get("amdsmi_get_power_cap_info")
        energy = get("amdsmi_get_energy_count")
        ecc = get("amdsmi_get_gpu_total_ecc_count")
        pcie = get("amdsmi_get_pcie_info")
        if len(errors) == calls:
            return DeviceSample.lost(dev, f"every amdsmi call failed: {errors[0]}"[:200])
        joules = None
        if isinstance(energy, Mapping):
            acc = quantity(first(energy, "energy_accumulator", "power"))
            res = quantity(energy.get("counter_resolution"))
            if acc is not None and res is not None:
                joules = nonneg(finite(acc[0] * res[0] / 1e6), notes, "energy")
        ecc_counts = {
            kind: n
            for kind, key in (("corrected", "correctable_count"), ("uncorrected", "uncorrectable_count"))
            if (n := count(field_of(ecc, key), notes, f"ecc_errors.{kind}")) is not None
        }
        deferred = count(field_of(ecc, "deferred_count"))
        power_raw = (
            first(power, "socket_power", "current_socket_power", "average_socket_power")
            if isinstance(power, Mapping)
            else None
        )
        sample = DeviceSample(
            device=dev,
            utilization_ratio=ratio(
                field_of(activity, "gfx_activity"), notes, "gfx_activity", "utilization_ratio"
            ),
            memory_bandwidth_utilization_ratio=ratio(
                field_of(activity, "umc_activity"),
                notes,
                "umc_activity",
                "memory_bandwidth_utilization_ratio",
            ),
            memory_used_bytes=amount(
                field_of(vram, "vram_used"), "bytes", "MB", notes, "vram_used", "memory_used_bytes"
            ),
            memory_total_bytes=amount(
                field_of(vram, "vram_total"), "bytes", "MB", notes, "vram_total", "memory_total_bytes"
            ),
            temperatures_celsius=temps,
            clocks_hertz=clocks,
            power_watts=amount(power_raw, "power", "W", notes, "socket_power", "power_watts"),
            power_limit_watts=amount(
                field_of(cap, "power_cap"), "power", "uW", notes, "power_cap", "power_limit_watts"
            ),
            energy_joules=joules,
            ecc_errors=ecc_counts,
            pcie_replay_errors=count(
                field_of(field_of(pcie, "pcie_metric"), "pcie_replay_count"), notes, "pcie_replay_errors"
            ),
            vendor_metrics={ECC_DEFERRED.name: float(deferred)} if deferred is not None else {},
            processes=self._processes(h, notes),
        )
        # NOT_SUPPORTED is the vendor saying "cannot tell" (no series), not a failure worth a note.
        unsupported = f": {int(getattr(getattr(lib, 'AmdSmiRetCode', None), 'ERR_NOT_SUPPORTED', 2))}"
        failed = [e for e in errors if not e.endswith(unsupported)]
        if failed:
            notes.add("failed: " + ", ".join(failed)[:160])
        return with_notes(sample, notes)
