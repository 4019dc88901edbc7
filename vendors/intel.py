"""Intel Gaudi backend (vendor 11, label ``intel``): HLML through ``pyhlml`` when it loads, else ``hl-smi``.

Library first: Intel's HLML binding (PyPI ``habana-pyhlml``, module ``pyhlml``; optional extra
``xpuwatch[intel]``) reads every AIP in-process, with units documented by the binding: utilization in %,
memory in bytes, power and limits in mW, energy in mJ, temperatures in C. Per device and poll:
``hlmlDeviceGetName``, ``GetUUID``, ``GetPCIInfo().bus_id``, ``GetSerial``, ``GetUtilizationRates().aip``,
``GetMemoryInfo()``, ``GetTemperature(AIP=0 / HBM=3)``, ``GetPowerUsage``,
``GetPowerManagementLimit`` (else ``...DefaultLimit``), ``GetTotalEnergyConsumption``,
``GetTotalECCErrors(corrected=0 / uncorrected=1, volatile=0)``, ``GetPCIEReplayCounter``; driver from
``hlmlGetDriverVersion``. A call answering ``HLML_ERROR_NOT_SUPPORTED`` (3) gives no reading; any other
error costs that reading only (``DeviceSample.unread``), except ``HLML_ERROR_AIP_IS_LOST`` (15): the AIP is
reported lost.

Without the library (or with ``source: cli``) it runs ``hl-smi -Q <CSV_FIELDS> -f csv,noheader`` (the
machine-readable query), or the default table with ``mode: table``; parsers in ``vendors/intel_hlsmi.py``,
which also reads ``hl-smi -L`` (the per-AIP listing) for ``xpuwatch inspect``.
Options: ``source`` (``auto`` default, ``hlml``, ``cli``), ``mode`` (``csv`` default, ``table``), ``path``,
``timeout_seconds``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from xpuwatch.vendors import smi_tool
from xpuwatch.vendors.base import Backend, BackendError, Device, DeviceSample
from xpuwatch.vendors.intel_hlsmi import (
    CSV_FIELDS,
    VENDOR,
    explain_csv,
    explain_listing,
    explain_table,
    listing_sections,
    parse_csv,
    parse_listing,
    parse_table,
    sniff_csv,
    sniff_listing,
    sniff_table,
)
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register
from xpuwatch.vendors.smi_tool import ToolBackend, detect_tool

log = logging.getLogger(__name__)

TOOLS = ("hl-smi",)
CSV_ARGS = ("-Q", ",".join(CSV_FIELDS), "-f", "csv,noheader")
SOURCES = ("auto", "hlml", "cli")
# HLML return codes (pyhlml_types_generated.HLML_RETURN) and enum values the reads use.
NOT_SUPPORTED = 3
AIP_IS_LOST = 15
TEMP_AIP, TEMP_HBM = 0, 3
ECC_CORRECTED, ECC_UNCORRECTED, ECC_VOLATILE = 0, 1, 0


def _text(v: Any) -> str:
    return v.decode(errors="replace").strip("\x00 ") if isinstance(v, bytes) else str(v).strip()


class _Lost(Exception):
    pass


class HlmlReader:
    """One poll of every AIP through a ``pyhlml``-shaped module (``hlml``), initialised by the caller."""

    def __init__(self, hlml: Any) -> None:
        self._hlml = hlml

    def _call(self, unread: dict[str, str], reading: str, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._hlml, fn)(*args)
        except Exception as exc:
            code = getattr(exc, "value", None)
            if code == AIP_IS_LOST:
                raise _Lost(f"{fn}: AIP is lost") from exc
            if code != NOT_SUPPORTED:
                unread[reading] = f"{fn} failed: {exc}"[:120]
            return None

    def sample(self) -> list[DeviceSample]:
        """Raises BackendError(reason="library") when the device list cannot be read."""
        h = self._hlml
        try:
            count = int(h.hlmlDeviceGetCount())
        except Exception as exc:
            raise BackendError(f"hlmlDeviceGetCount failed: {exc}", reason="library") from exc
        driver = None
        with contextlib.suppress(Exception):
            driver = _text(h.hlmlGetDriverVersion()) or None
        return [self._device(i, driver) for i in range(count)]

    def _device(self, i: int, driver: str | None) -> DeviceSample:
        unread: dict[str, str] = {}
        fallback = Device(VENDOR, "Gaudi", str(i), f"hl-aip{i}", driver_version=driver)
        try:
            handle = self._call(unread, "device", "hlmlDeviceGetHandleByIndex", i)
            if handle is None:
                return DeviceSample.lost(fallback, unread.get("device", "no handle"))
            name = self._call(unread, "model", "hlmlDeviceGetName", handle)
            uuid = self._call(unread, "uuid", "hlmlDeviceGetUUID", handle)
            pci = self._call(unread, "pci_bus_id", "hlmlDeviceGetPCIInfo", handle)
            serial = self._call(unread, "serial", "hlmlDeviceGetSerial", handle)
            bus = _text(pci.bus_id).lower() if pci is not None else None
            device = Device(
                VENDOR,
                _text(name) if name is not None else "Gaudi",
                str(i),
                _text(uuid) if uuid else (f"hl-{bus}" if bus else f"hl-aip{i}"),
                pci_bus_id=bus or None,
                driver_version=driver,
                serial=_text(serial) if serial else None,
            )
            util = self._call(unread, "utilization_ratio", "hlmlDeviceGetUtilizationRates", handle)
            mem = self._call(unread, "memory_used_bytes", "hlmlDeviceGetMemoryInfo", handle)
            temps = {
                sensor: float(t)
                for sensor, code in (("core", TEMP_AIP), ("memory", TEMP_HBM))
                if (
                    t := self._call(
                        unread, f"temperatures_celsius.{sensor}", "hlmlDeviceGetTemperature", handle, code
                    )
                )
                is not None
            }
            power = self._call(unread, "power_watts", "hlmlDeviceGetPowerUsage", handle)
            limit = self._call(unread, "power_limit_watts", "hlmlDeviceGetPowerManagementLimit", handle)
            if limit is None:
                limit = self._call(
                    unread, "power_limit_watts", "hlmlDeviceGetPowerManagementDefaultLimit", handle
                )
            if limit is not None:
                unread.pop("power_limit_watts", None)
            energy = self._call(unread, "energy_joules", "hlmlDeviceGetTotalEnergyConsumption", handle)
            ecc = {
                kind: int(n)
                for kind, code in (("corrected", ECC_CORRECTED), ("uncorrected", ECC_UNCORRECTED))
                if (
                    n := self._call(
                        unread,
                        f"ecc_errors.{kind}",
                        "hlmlDeviceGetTotalECCErrors",
                        handle,
                        code,
                        ECC_VOLATILE,
                    )
                )
                is not None
            }
            replay = self._call(unread, "pcie_replay_errors", "hlmlDeviceGetPCIEReplayCounter", handle)
        except _Lost as exc:
            return DeviceSample.lost(fallback, str(exc))
        return DeviceSample(
            device=device,
            utilization_ratio=None if util is None else float(util.aip) / 100.0,
            memory_used_bytes=None if mem is None else float(mem.used),
            memory_total_bytes=None if mem is None else float(mem.total),
            temperatures_celsius=temps,
            power_watts=None if power is None else float(power) / 1000.0,
            power_limit_watts=None if limit is None else float(limit) / 1000.0,
            energy_joules=None if energy is None else float(energy) / 1000.0,
            ecc_errors=ecc,
            pcie_replay_errors=None if replay is None else int(replay),
            unread=unread,
        )


def _import_hlml() -> Any:
    """The ``pyhlml`` module; raises BackendError(reason="library") when it does not import."""
    try:
        return importlib.import_module("pyhlml")
    except Exception as exc:  # ImportError, or a binding that fails while loading libhlml
        raise BackendError(f"pyhlml (habana-pyhlml) not importable: {exc}", reason="library") from exc


class IntelBackend:
    """Gaudi AIPs through HLML, else ``hl-smi`` (see the module docstring). ``module``: a ``pyhlml``-shaped
    module to use instead of importing one (tests pass a stand-in)."""

    name = "intel"

    def __init__(self, ctx: BackendContext, module: Any = None) -> None:
        self._ctx = ctx
        self._module = module
        self._source = str(ctx.options.get("source", "auto")).strip().lower()
        if self._source not in SOURCES:
            raise BackendError(f"intel options: source must be one of {', '.join(SOURCES)}", reason="config")
        mode = str(ctx.options.get("mode", "csv")).strip().lower()
        if mode not in ("csv", "table"):
            raise BackendError("intel options: mode must be csv or table", reason="config")
        parse: Callable[[str], Sequence[DeviceSample]] = (
            parse_table if mode == "table" else (lambda text: parse_csv(text, CSV_FIELDS))
        )
        self._tool = ToolBackend("intel", ctx, TOOLS, () if mode == "table" else CSV_ARGS, parse)
        self._hlml: Any = None
        self.source_in_use: str | None = None

    def open(self) -> None:
        if self._source in ("auto", "hlml"):
            try:
                hlml = self._module if self._module is not None else _import_hlml()
                hlml.hlmlInit()
            except Exception as exc:
                if self._source == "hlml":
                    raise BackendError(f"HLML unavailable: {exc}", reason="library") from exc
                log.info("intel: HLML unavailable (%s); using hl-smi", exc)
            else:
                self._hlml = hlml
                self.source_in_use = "hlml"
                return
        self._tool.open()
        self.source_in_use = "hl-smi"

    def sample(self) -> Sequence[DeviceSample]:
        if self.source_in_use is None:
            self.open()
        if self._hlml is not None:
            return HlmlReader(self._hlml).sample()
        return self._tool.sample()

    def close(self) -> None:
        if self._hlml is not None:
            with contextlib.suppress(Exception):
                self._hlml.hlmlShutdown()
        self._hlml = None
        self._tool.close()
        self.source_in_use = None


def create(ctx: BackendContext) -> Backend:
    return IntelBackend(ctx)


def detect(ctx: BackendContext, module: Any = None) -> Detection:
    """Found when HLML initialises and lists at least one AIP (unless ``source: cli``), else when
    ``hl-smi`` is on PATH (unless ``source: hlml``)."""
    source = str(ctx.options.get("source", "auto")).strip().lower()
    why = ""
    if source != "cli":
        try:
            hlml = module if module is not None else _import_hlml()
            hlml.hlmlInit()
            try:
                n = int(hlml.hlmlDeviceGetCount())
            finally:
                with contextlib.suppress(Exception):
                    hlml.hlmlShutdown()
            if n > 0:
                return Detection(True, f"HLML sees {n} AIP(s)")
            why = "HLML sees no AIP"
        except Exception as exc:
            why = f"HLML unavailable: {exc}"
        if source == "hlml":
            return Detection(False, why)
    found = detect_tool(ctx, TOOLS)
    return found if found.found or not why else Detection(False, f"{why}; {found.why}")


SPEC = register(
    BackendSpec(
        name="intel",
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=(
            OutputFormat("hl-smi-table", parse_table, sniff_table, explain_table),
            OutputFormat("hl-smi-csv", parse_csv, sniff_csv, explain_csv),
            OutputFormat(
                "hl-smi-listing",
                parse_listing,
                sniff_listing,
                explain=explain_listing,
                sections=listing_sections,
            ),
        ),
        priority=82,
        options={**smi_tool.OPTIONS, "source": "string", "mode": "string"},
    )
)
