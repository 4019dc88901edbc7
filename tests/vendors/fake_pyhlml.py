"""Stand-in for the `pyhlml` module (Intel Gaudi HLML boundary) used by the Intel backend tests.

Follows habana-pyhlml 1.24.2 (``pyhlml/main.py``, ``pyhlml_types_generated.py``, ``hlml_error.py``): the
same function names and positional arguments, return shapes (``c_hlml_utilization`` with ``aip`` /
``memory``, ``c_hlml_memory`` with ``free`` / ``total`` / ``used``, ``c_hlml_pci_info`` with ``bus_id`` as
bytes; names, UUIDs, serials and versions as bytes), units (power and limits in mW, energy in mJ, memory in
bytes, utilization in %, temperatures in C) and errors (``HLMLError(code)`` carrying ``.value``, codes of
``HLML_RETURN``: 3 not supported, 15 AIP is lost). Build one with ``make(aips)``; ``errors`` of an AIP maps a
function name to the code that call raises for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

HLML_ERROR_NOT_SUPPORTED = 3
HLML_ERROR_DRIVER_NOT_LOADED = 9
HLML_ERROR_AIP_IS_LOST = 15
HLML_ERROR_UNKNOWN = 49


class HLMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"HLML Error with code {self.value}"


@dataclass
class FakeAip:
    name: str = "HL-325L"
    uuid: str = "01P0-HL3090A0-18-TN0000-00-00-01"
    bus_id: str = "0000:E9:00.0"
    serial: str = "AN00000001"
    aip_util: int = 37
    memory_used: int = 672 * 2**20
    memory_total: int = 131072 * 2**20
    temp_aip: int = 36
    temp_hbm: int | None = 41  # None: HBM sensor not supported
    power_mw: int = 228_000
    limit_mw: int | None = 900_000  # None: only the default limit answers
    default_limit_mw: int = 850_000
    energy_mj: int = 123_456_789
    ecc: tuple[int, int] = (2, 0)
    replay: int = 0
    errors: dict[str, int] = field(default_factory=dict)


def make(aips: list[FakeAip], driver: str = "1.20.1-366eb9c", init_error: int | None = None) -> ModuleType:
    """A module object shaped like ``pyhlml`` over these AIPs."""
    mod = ModuleType("pyhlml")
    state = {"init": 0}

    def per_aip(fn_name: str, get: Any) -> Any:
        def fn(handle: int, *args: Any) -> Any:
            aip = aips[handle]
            if fn_name in aip.errors:
                raise HLMLError(aip.errors[fn_name])
            return get(aip, *args)

        fn.__name__ = fn_name
        return fn

    def hlmlInit() -> None:
        if init_error is not None:
            raise HLMLError(init_error)
        state["init"] += 1

    def hlmlShutdown() -> None:
        state["init"] = 0

    def hlmlDeviceGetCount() -> int:
        return len(aips)

    def hlmlDeviceGetHandleByIndex(index: int) -> int:
        if "hlmlDeviceGetHandleByIndex" in aips[index].errors:
            raise HLMLError(aips[index].errors["hlmlDeviceGetHandleByIndex"])
        return index

    def temperature(aip: FakeAip, sensor: int) -> int:
        if sensor == 0:
            return aip.temp_aip
        if sensor == 3 and aip.temp_hbm is not None:
            return aip.temp_hbm
        raise HLMLError(HLML_ERROR_NOT_SUPPORTED)

    def limit(aip: FakeAip) -> int:
        if aip.limit_mw is None:
            raise HLMLError(HLML_ERROR_NOT_SUPPORTED)
        return aip.limit_mw

    funcs: dict[str, Any] = {
        "hlmlInit": hlmlInit,
        "hlmlShutdown": hlmlShutdown,
        "hlmlDeviceGetCount": hlmlDeviceGetCount,
        "hlmlDeviceGetHandleByIndex": hlmlDeviceGetHandleByIndex,
        "hlmlGetDriverVersion": lambda: driver.encode(),
        "hlmlDeviceGetName": per_aip("hlmlDeviceGetName", lambda a: a.name.encode()),
        "hlmlDeviceGetUUID": per_aip("hlmlDeviceGetUUID", lambda a: a.uuid.encode()),
        "hlmlDeviceGetSerial": per_aip("hlmlDeviceGetSerial", lambda a: a.serial.encode()),
        "hlmlDeviceGetPCIInfo": per_aip(
            "hlmlDeviceGetPCIInfo", lambda a: SimpleNamespace(bus_id=a.bus_id.encode(), domain=0, bus=0)
        ),
        "hlmlDeviceGetUtilizationRates": per_aip(
            "hlmlDeviceGetUtilizationRates", lambda a: SimpleNamespace(aip=a.aip_util, memory=0)
        ),
        "hlmlDeviceGetMemoryInfo": per_aip(
            "hlmlDeviceGetMemoryInfo",
            lambda a: SimpleNamespace(
                used=a.memory_used, total=a.memory_total, free=a.memory_total - a.memory_used
            ),
        ),
        "hlmlDeviceGetTemperature": per_aip("hlmlDeviceGetTemperature", temperature),
        "hlmlDeviceGetPowerUsage": per_aip("hlmlDeviceGetPowerUsage", lambda a: a.power_mw),
        "hlmlDeviceGetPowerManagementLimit": per_aip("hlmlDeviceGetPowerManagementLimit", limit),
        "hlmlDeviceGetPowerManagementDefaultLimit": per_aip(
            "hlmlDeviceGetPowerManagementDefaultLimit", lambda a: a.default_limit_mw
        ),
        "hlmlDeviceGetTotalEnergyConsumption": per_aip(
            "hlmlDeviceGetTotalEnergyConsumption", lambda a: a.energy_mj
        ),
        "hlmlDeviceGetTotalECCErrors": per_aip(
            "hlmlDeviceGetTotalECCErrors", lambda a, kind, counter: a.ecc[kind]
        ),
        "hlmlDeviceGetPCIEReplayCounter": per_aip("hlmlDeviceGetPCIEReplayCounter", lambda a: a.replay),
        "HLMLError": HLMLError,
    }
    for name, fn in funcs.items():
        setattr(mod, name, fn)
    mod.state = state  # type: ignore[attr-defined]
    return mod
