"""The default ``amd-smi`` dashboard (no sub-command: a boxed GPU table and a Processes table) into
DeviceSamples, for ``xpuwatch inspect``; the live backend keeps its JSON/library path.

Vendor layer: a pure parser over ``vendors.smi_table`` (cells read by header name).

Layout (AMD-SMI 26.x, ROCm 7; ``amdsmi_cli`` prints it when run without a sub-command): two header lines
per ``|`` cell, ``BDF  GPU-Name | Mem-Uti  Temp  UEC  Power-Usage`` over ``GPU  HIP-ID  OAM-ID
Partition-Mode | GFX-Uti  Fan  Mem-Usage``; one two-line block per GPU. Real captures:
ROCm/ROCm#5706 (2 x Radeon AI PRO R9700: GPU-Name cut from the LEFT as ``...Radeon AI PRO R9700``, Fan
``38.82`` without ``%`` beside ``40.0 %``) and ROCm/amdsmi#132 (MI300X in DPX: ``DPX/NPS1`` on partition 0,
``N/A`` power and mode on partition 1, partition 1 at function ``.1`` of the same BDF).

Readings: Power-Usage ``used/cap W`` -> power and its limit; Mem-Usage ``used/total MB`` (MB = MiB, as in
every amd-smi output); Temp -> the ``hotspot`` sensor: the dashboard does not name it, AMD's CLI guide does
("GPU table (first row per GPU): ... memory utilization, hotspot temperature, uncorrectable ECC error
count ...", amdsmi docs how-to/amdsmi-cli-tool.md, "Example output from amd-smi (default)", amd-smi
26.2.1), and its example prints the same 47/46/43/44 °C there as ``amd-smi monitor``'s GPU_T; GFX-Uti -> utilization; Mem-Uti (UMC activity) -> memory bandwidth
utilization; UEC (uncorrectable error count) -> ``ecc_errors.uncorrected``. Fan and HIP-ID/OAM-ID have no
field in the schema. The process table's VRAM_MEM is each process's memory on that GPU.

Partitions: ``Partition-Mode`` ``<compute>/<memory>`` (``DPX/NPS1``) is printed on a card's partition 0
only; its other partitions print ``N/A`` and sit at further PCI functions of the same ``bus:device``
(ROCm/rocm-systems#5805: on MI300 the partition id is the BDF function). Rows are grouped by
``domain:bus:device``; a group with a printed mode or several rows is one card, each row's ``partition``
naming the card (``parent_uuid`` = the uuid of its function-0 row) and its id (the function).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from xpuwatch.vendors.amd.readings import VENDOR, Notes, amount, count, device_uuid, ratio, scaled, with_notes
from xpuwatch.vendors.base import Device, DeviceSample, ParseError, Partition, ProcessMemory
from xpuwatch.vendors.smi_table import Row, is_index, pci_bus_id, table_rows

ANCHOR = "Partition-Mode"
_PAIR = re.compile(r"\s*(N/A|[0-9.]+)\s*/\s*(N/A|[0-9.]+)\s*([A-Za-z]*)\s*")
_MODE = re.compile(r"([A-Z]PX)\s*/\s*(NPS[0-9])", re.IGNORECASE)
_SIZE = r"(?:N/A|[0-9.]+\s*[KMGT]?B)"
_PROCESS = re.compile(
    rf"^\|?\s*([0-9]{{1,6}})\s+([0-9]{{1,10}})\s+(.*?)\s+({_SIZE})\s+({_SIZE})\s+({_SIZE})\s+(.*?)\s*\|?\s*$"
)
_USED_FIELDS = {
    "W": ("power_watts", "power_limit_watts", "power"),
    "MB": ("memory_used_bytes", "memory_total_bytes", "bytes"),
}


def parse_amd_smi_table(raw: str) -> list[DeviceSample]:
    """Default ``amd-smi`` text -> one DeviceSample per GPU row (partitions included). Raises ParseError
    (no GPU table, a header not closed by rules, or no row with a readable GPU index and BDF)."""
    rows = table_rows(raw, ANCHOR)
    procs = _processes(raw)
    found: list[tuple[str, str, Row]] = []
    first_error: str | None = None
    for row in rows:
        idx, bdf = (row.get("GPU") or "").strip(), row.get("BDF") or ""
        try:
            if not is_index(idx):
                raise ParseError(f"GPU index {idx[:20]!r} is not a number")
            found.append((str(int(idx)), pci_bus_id(bdf), row))
        except ParseError as exc:
            first_error = first_error or str(exc)
    if not found:
        raise ParseError(f"amd-smi table: no readable GPU row ({first_error or 'empty table'})")
    if len({bdf for _, bdf, _ in found}) != len(found):
        raise ParseError("amd-smi table: two GPU rows with the same BDF")
    parts = _partitions(found)
    return [_sample(idx, bdf, row, parts.get(bdf), procs.get(idx)) for idx, bdf, row in found]


def _partitions(found: Sequence[tuple[str, str, Row]]) -> dict[str, Partition]:
    """BDF -> Partition for the rows of partitioned (or mode-printing) cards."""
    cards: dict[str, list[tuple[str, str]]] = {}
    for _, bdf, row in found:
        mode = row.get("Partition-Mode") or ""
        cards.setdefault(bdf.rsplit(".", 1)[0], []).append((bdf, mode))
    out: dict[str, Partition] = {}
    for members in cards.values():
        modes = [m for _, mode in members if (m := _MODE.fullmatch(mode.strip()))]
        if len(members) < 2 and not modes:
            continue
        members.sort()
        parent = f"pci-{members[0][0]}"
        compute, memory = (modes[0].group(1).upper(), modes[0].group(2).upper()) if modes else (None, None)
        for bdf, _ in members:
            out[bdf] = Partition(parent, bdf.rsplit(".", 1)[1], compute, memory)
    return out


def _sample(
    idx: str, bdf: str, row: Row, part: Partition | None, procs: tuple[ProcessMemory, ...] | None
) -> DeviceSample:
    notes = Notes()
    name = (row.get("GPU-Name") or "").strip()
    if name.startswith("..."):  # amd-smi cuts long names from the left; the tail is still the model
        name = name[3:].strip()
    device = Device(
        vendor=VENDOR,
        model=name or "unknown",
        index=idx,
        uuid=device_uuid(VENDOR, idx, None, None, bdf),
        pci_bus_id=bdf,
        partition=part,
    )
    pairs: dict[str, float | None] = {}
    for column, unit in (("Power-Usage", "W"), ("Mem-Usage", "MB")):
        used_f, cap_f, kind = _USED_FIELDS[unit]
        cell = (row.get(column) or "").strip()
        if not cell or cell.upper() == "N/A":
            continue
        m = _PAIR.fullmatch(cell)
        if m is None or (m.group(3) or unit) != unit:
            notes.drop(used_f, f"{column}: {cell[:40]!r} is not 'used/cap {unit}'")
            continue
        pairs[used_f] = amount(m.group(1), kind, unit, notes, column, used_f)
        pairs[cap_f] = amount(m.group(2), kind, unit, notes, column, cap_f)
    temp = scaled(row.get("Temp"), "celsius", "C", notes, "Temp", "temperatures_celsius.hotspot")
    uec = count(row.get("UEC"), notes, "ecc_errors.uncorrected")
    sample = DeviceSample(
        device=device,
        utilization_ratio=ratio(row.get("GFX-Uti"), notes, "GFX-Uti", "utilization_ratio"),
        memory_bandwidth_utilization_ratio=ratio(
            row.get("Mem-Uti"), notes, "Mem-Uti", "memory_bandwidth_utilization_ratio"
        ),
        temperatures_celsius={} if temp is None else {"hotspot": temp},
        ecc_errors={} if uec is None else {"uncorrected": uec},
        processes=procs,
        power_watts=pairs.get("power_watts"),
        power_limit_watts=pairs.get("power_limit_watts"),
        memory_used_bytes=pairs.get("memory_used_bytes"),
        memory_total_bytes=pairs.get("memory_total_bytes"),
    )
    return with_notes(sample, notes)


def _processes(raw: str) -> dict[str, tuple[ProcessMemory, ...]]:
    """GPU index -> its processes from the ``Processes:`` table (VRAM_MEM as memory); {} without one.
    A line that is not a process row is skipped (titles, rules, "No running processes found")."""
    lines = raw.splitlines()
    at = next((i for i, line in enumerate(lines) if line.strip("| ").startswith("Processes:")), None)
    if at is None:
        return {}
    out: dict[str, dict[int, float | None]] = {}
    for line in lines[at + 1 :]:
        m = _PROCESS.match(line)
        if m is None:
            continue
        notes = Notes()
        mem = amount(m.group(5), "bytes", "B", notes, "VRAM_MEM", "processes")
        pid = int(m.group(2))
        got = out.setdefault(str(int(m.group(1))), {})
        prev = got.get(pid)
        got[pid] = mem if prev is None else max(prev, mem if mem is not None else prev)
    return {gpu: tuple(ProcessMemory(p, b) for p, b in sorted(pids.items())) for gpu, pids in out.items()}


def sniff_amd_smi_table(raw: str) -> bool:
    head = raw[:4000]
    return "AMD-SMI" in head and ANCHOR in head and "GPU-Name" in head


def explain_amd_smi_table(raw: str) -> list[str]:
    return [
        "Fan: no fan field in the schema",
        "HIP-ID, OAM-ID: enumeration ids, not readings",
        "Processes GTT_MEM, MEM_USAGE, CU %: system memory and compute share are not device memory",
    ]
