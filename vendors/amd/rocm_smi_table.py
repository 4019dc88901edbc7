"""Plain ``rocm-smi`` (the "Concise Info" table) into DeviceSamples, for ``xpuwatch inspect``; the live
backend keeps ``rocm-smi --json``.

Vendor layer: a pure parser, cells read by header name.

Layouts read (each from a real capture, see the fixtures' ``.source`` notes):

* ROCm 3-5, one header line: ``GPU  Temp  AvgPwr  SCLK  MCLK  Fan  Perf  PwrCap  VRAM%  GPU%``, values
  ``24.0c``/``3.0W`` (ROCm/ROC-smi#86); ROCm 5 writes ``Temp (DieEdge)``.
* ROCm 6.1+ and 7, two header lines, the second naming the sensor and the sub-fields:
  ``Device  Node  IDs  Temp  Power  Partitions  ...`` over ``(DID, GUID)  (Edge)  (Avg)  (Mem, Compute,
  ID)``, values ``45.0°C``, cells holding commas and spaces (``0x7551,   8001``, ``NPS1, SPX, 0``)
  (ROCm/ROCm#5706, ROCm/legacy-rocm-build#4750).
* ROCm 6.0, whose rows take two lines (``[Model : Revision]`` over ``Name (20 chars)``): a line whose
  first column is blank continues the device above it.

A header name is separated from the next by two or more spaces; rocm-smi left-aligns every cell under its
header (``rocm_smi.py`` pads each column to the widest of header and values), so each token of a data line
belongs to the column it starts in, and the tokens of one column are joined by single spaces.

Readings: Temp -> the sensor the second header line names (Edge/DieEdge -> ``core``, Junction ->
``hotspot``, Memory -> ``memory``; without a name, ``core``: the concise view prints the first sensor that
answers in the order edge, junction, memory); AvgPwr/Power -> power; PwrCap -> its limit; SCLK/MCLK ->
clocks; VRAM% -> ``memory_used_ratio`` (the table prints no bytes); GPU% -> utilization. Fan and Perf have
no field. No uuid is printed: devices are ``amd-index-<n>``.

Partitions: ``Partitions (Mem, Compute, ID)`` -> the card's memory and compute mode and the partition id.
rocm-smi lists a card's partitions one after the other from ID 0; each row with ID > 0 belongs to the
card of the last ID-0 row above it (``parent_uuid``) and takes its modes when it prints N/A (rocm-smi
6.4 prints N/A on partitions other than 0: ROCm/legacy-rocm-build#4759).
"""

from __future__ import annotations

import re
from dataclasses import replace

from xpuwatch.vendors.amd.readings import VENDOR, Notes, amount, device_uuid, ratio, scaled, with_notes
from xpuwatch.vendors.base import Device, DeviceSample, ParseError, Partition

_TOKEN = re.compile(r"\S+")
_INDEX = ("GPU", "DEVICE")
_SENSORS = {"edge": "core", "dieedge": "core", "junction": "hotspot", "memory": "memory", "mem": "memory"}
_MODE = re.compile(r"[A-Z]PX|NPS[0-9]", re.IGNORECASE)
MAX_COLUMNS = 40


def _is_rule(line: str) -> bool:
    s = line.strip()
    return len(s) >= 3 and set(s) <= {"="}


def _header_at(lines: list[str]) -> int | None:
    for i, line in enumerate(lines):
        words = line.split()
        if (
            words[:1]
            and words[0].upper() in _INDEX
            and any(w.startswith("Temp") for w in words)
            and {"GPU%", "VRAM%", "AvgPwr", "Power", "PwrCap"} & set(words)
        ):
            return i
    return None


def _columns(line: str) -> list[tuple[int, str]]:
    """(start, name) of each header name: words separated by single spaces form one name."""
    return [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", line) if m.group()]


def _split(starts: list[int], line: str) -> list[str]:
    """One line as one cell per column: each token goes to the last column starting at or before it."""
    cells: list[list[str]] = [[] for _ in starts]
    for m in _TOKEN.finditer(line):
        col = 0
        for i, s in enumerate(starts):
            if s <= m.start():
                col = i
        cells[col].append(m.group())
    return [" ".join(c) for c in cells]


def parse_rocm_smi_table(raw: str) -> list[DeviceSample]:
    """``rocm-smi`` concise text -> one DeviceSample per device row. Raises ParseError (no header, a
    header without rows, too many columns)."""
    lines = raw.splitlines()
    at = _header_at(lines)
    if at is None:
        raise ParseError("rocm-smi table: no 'GPU|Device ... Temp ... GPU%' header")
    cols = _columns(lines[at])
    if len(cols) > MAX_COLUMNS:
        raise ParseError(f"rocm-smi table: header has {len(cols)} columns")
    starts = [s for s, _ in cols]
    names = [n for _, n in cols]
    sub = [""] * len(cols)
    body = at + 1
    if body < len(lines) and lines[body][:1] == " " and not _is_rule(lines[body]) and "(" in lines[body]:
        sub = _split(starts, lines[body])
        body += 1
    rows: list[tuple[list[str], list[str]]] = []  # (cells, continuation cells)
    for line in lines[body:]:
        if _is_rule(line):
            if rows:
                break
            continue
        if not line.strip():
            if rows:
                break
            continue
        cells = _split(starts, line)
        if not cells[0]:
            if rows:
                more = rows[-1][1]
                for i, c in enumerate(cells):
                    more[i] = f"{more[i]} {c}".strip()
            continue
        rows.append((cells, [""] * len(cols)))
    if not rows:
        raise ParseError("rocm-smi table: header without device rows")
    out: list[DeviceSample] = []
    card: DeviceSample | None = None
    for cells, more in rows:
        sample = _sample(names, sub, cells, more)
        if sample is None:
            continue
        part = sample.device.partition
        if part is not None and part.partition_id == "0":
            card = sample
        elif part is not None and card is not None and card.device.partition is not None:
            parent = card.device.partition
            part = replace(
                part,
                parent_uuid=card.device.uuid,
                compute_mode=part.compute_mode or parent.compute_mode,
                memory_mode=part.memory_mode or parent.memory_mode,
            )
            sample = replace(sample, device=replace(sample.device, partition=part))
        out.append(sample)
    if not out:
        raise ParseError("rocm-smi table: no row with a numeric device index")
    return out


def _sample(names: list[str], sub: list[str], cells: list[str], more: list[str]) -> DeviceSample | None:
    idx = cells[0]
    if not re.fullmatch(r"[0-9]{1,6}", idx):
        return None
    idx = str(int(idx))
    notes = Notes()

    def col(*aliases: str) -> tuple[str | None, str | None, str]:
        """(cell, subtitle, column name) of the first alias the header has, by name prefix."""
        for alias in aliases:
            for i, n in enumerate(names):
                if n.upper() == alias.upper() or n.upper().startswith(alias.upper() + " "):
                    return cells[i], sub[i] + " " + n, n
        return None, None, aliases[0]

    temp_cell, temp_sub, temp_name = col("Temp")
    sensor = "core"
    if temp_sub:
        m = re.search(r"\(([A-Za-z]+)\)", temp_sub)
        if m:
            sensor = _SENSORS.get(m.group(1).lower(), m.group(1).lower())
    temp = scaled(temp_cell, "celsius", "C", notes, temp_name, f"temperatures_celsius.{sensor}")
    power_cell, _, power_name = col("AvgPwr", "Power")
    cap_cell, _, _ = col("PwrCap")
    vram_cell, _, _ = col("VRAM%")
    util_cell, _, _ = col("GPU%")
    clocks = {
        domain: hz
        for domain, name in (("graphics", "SCLK"), ("memory", "MCLK"))
        if (hz := amount(col(name)[0], "hertz", "MHz", notes, name, f"clocks_hertz.{domain}")) is not None
    }
    model = "unknown"
    model_i = next((i for i, n in enumerate(names) if n.startswith("[Model")), None)
    if model_i is not None and more[model_i].strip():
        model = more[model_i].strip()
    device = Device(
        vendor=VENDOR,
        model=model,
        index=idx,
        uuid=device_uuid(VENDOR, idx),
        partition=_partition(col("Partitions")[0], device_uuid(VENDOR, idx)),
    )
    sample = DeviceSample(
        device=device,
        utilization_ratio=ratio(util_cell, notes, "GPU%", "utilization_ratio"),
        memory_used_ratio=ratio(vram_cell, notes, "VRAM%", "memory_used_ratio"),
        temperatures_celsius={} if temp is None else {sensor: temp},
        power_watts=amount(power_cell, "power", "W", notes, power_name, "power_watts"),
        power_limit_watts=amount(cap_cell, "power", "W", notes, "PwrCap", "power_limit_watts"),
        clocks_hertz=clocks,
    )
    return with_notes(sample, notes)


def _partition(cell: str | None, uuid: str) -> Partition | None:
    """``NPS1, SPX, 0`` / ``NPS1, SPX`` / ``N/A, N/A, 0`` -> Partition; None when nothing is printed."""
    if cell is None:
        return None
    parts = [p.strip() for p in cell.split(",")]
    modes = [p.upper() for p in parts[:2] if _MODE.fullmatch(p)]
    memory = next((m for m in modes if m.startswith("NPS")), None)
    compute = next((m for m in modes if not m.startswith("NPS")), None)
    pid = parts[2] if len(parts) > 2 and re.fullmatch(r"[0-9]{1,3}", parts[2]) else None
    if compute is None and memory is None:
        if pid is None or pid == "0":
            return None  # a card without partition support (Radeon: "N/A, N/A, 0")
    elif pid is None:
        pid = "0"  # ROCm 6.0 prints no ID column: the modes are the card's
    return Partition(uuid, str(int(pid or "0")), compute, memory)


def sniff_rocm_smi_table(raw: str) -> bool:
    lines = raw.splitlines()[:40]
    return _header_at(lines) is not None and (
        "ROCm System Management Interface" in raw[:2000] or "Concise Info" in raw[:2000]
    )


def explain_rocm_smi_table(raw: str) -> list[str]:
    lines = raw.splitlines()
    at = _header_at(lines)
    if at is None:
        return []
    used = {"GPU", "DEVICE", "TEMP", "AVGPWR", "POWER", "PWRCAP", "VRAM%", "GPU%", "SCLK", "MCLK"}
    used |= {"PARTITIONS"}
    return [
        f"{n}: no field in the schema"
        for _, n in _columns(lines[at])
        if n.upper().split(" ")[0] not in used and not n.startswith("[Model")
    ]
