"""``amd-smi monitor`` (one text line per GPU) into DeviceSamples.

Vendor layer: a pure parser of the AMD SMI CLI's monitor table.
"""

from __future__ import annotations

import re

from xpuwatch.vendors.amd.amd_smi_json import amd_device
from xpuwatch.vendors.amd.readings import VENDOR, Notes, amount, count, ratio, scaled, with_notes
from xpuwatch.vendors.base import DeviceSample, ParseError

_MONITOR_TEMPS = {"GPU_TEMP": "hotspot", "HOTSPOT_TEMP": "hotspot", "MEM_TEMP": "memory", "EDGE_TEMP": "core"}


def parse_amd_smi_monitor(raw: str) -> list[DeviceSample]:
    """``amd-smi monitor`` text table -> DeviceSamples. Raises ParseError.

    Columns by header name: POWER (W), GPU_TEMP/HOTSPOT_TEMP (the hotspot sensor: amd-smi monitor reads
    ``AmdSmiTemperatureType.HOTSPOT``), MEM_TEMP, GFX_UTIL, MEM_UTIL (umc activity), SINGLE_ECC/DOUBLE_ECC
    (corrected/uncorrected), PCIE_REPLAY, VRAM_USED/VRAM_TOTAL (MB = MiB). Cells are separated by two
    or more spaces (a value and its unit by one). The PROCESS INFO table after it is ignored.
    """
    lines = raw.splitlines()
    hdr_at = next(
        (
            i
            for i, line in enumerate(lines)
            if line.split()[:1] == ["GPU"] and ("POWER" in line.split() or "GFX_UTIL" in line.split())
        ),
        None,
    )
    if hdr_at is None:
        raise ParseError("amd-smi monitor: no GPU header line")
    header = lines[hdr_at].split()
    out: list[DeviceSample] = []
    for line in lines[hdr_at + 1 :]:
        if not line.strip():
            break
        row = _row(lines[hdr_at], header, line)
        idx = row["GPU"].strip()
        if not idx.isdigit():
            raise ParseError(f"amd-smi monitor: GPU index {idx[:20]!r} is not a number")
        idx = str(int(idx))
        notes = Notes()
        temps = {
            sensor: t
            for col, sensor in _MONITOR_TEMPS.items()
            if col in row
            and (t := scaled(row[col], "celsius", "C", notes, col, f"temperatures_celsius.{sensor}"))
            is not None
        }
        ecc = {
            kind: n
            for kind, col in (("corrected", "SINGLE_ECC"), ("uncorrected", "DOUBLE_ECC"))
            if (n := count(row.get(col), notes, f"ecc_errors.{kind}")) is not None
        }
        clocks = {
            domain: hz
            for domain, col in (("graphics", "GFX_CLOCK"), ("memory", "MEM_CLOCK"))
            if (hz := amount(row.get(col), "hertz", "MHz", notes, col, f"clocks_hertz.{domain}")) is not None
        }
        sample = DeviceSample(
            device=amd_device(VENDOR, idx, None),
            utilization_ratio=ratio(row.get("GFX_UTIL"), notes, "GFX_UTIL", "utilization_ratio"),
            memory_bandwidth_utilization_ratio=ratio(
                row.get("MEM_UTIL"), notes, "MEM_UTIL", "memory_bandwidth_utilization_ratio"
            ),
            memory_used_bytes=amount(
                row.get("VRAM_USED"), "bytes", "MB", notes, "VRAM_USED", "memory_used_bytes"
            ),
            memory_total_bytes=amount(
                row.get("VRAM_TOTAL"), "bytes", "MB", notes, "VRAM_TOTAL", "memory_total_bytes"
            ),
            temperatures_celsius=temps,
            clocks_hertz=clocks,
            power_watts=amount(row.get("POWER"), "power", "W", notes, "POWER", "power_watts"),
            ecc_errors=ecc,
            pcie_replay_errors=count(row.get("PCIE_REPLAY"), notes, "pcie_replay_errors"),
        )
        out.append(with_notes(sample, notes))
    if not out:
        raise ParseError("amd-smi monitor: header without GPU rows")
    return out


def _row(header_line: str, header: list[str], line: str) -> dict[str, str]:
    """One data line as {column: cell}. Cells are separated by two or more spaces (a value and its unit
    by one); when that does not give one cell per column (a blank or overlong cell), each cell is cut by
    position: amd-smi right-aligns a value under its header, so a column spans from the end of the
    previous header to the end of its own. Raises ParseError when neither works."""
    cells = re.split(r"\s{2,}", line.strip())
    if len(cells) == len(header):
        return dict(zip(header, cells, strict=True))
    ends = [m.end() for m in re.finditer(r"\S+", header_line)]
    if len(ends) != len(header) or len(line.rstrip()) > ends[-1] + 16:
        raise ParseError(f"amd-smi monitor: row has {len(cells)} cells for {len(header)} columns")
    row = {}
    for i, col in enumerate(header):
        start = ends[i - 1] if i else 0
        end = ends[i] if i < len(header) - 1 else len(line)
        row[col] = line[start:end].strip()
    return row


def sniff_amd_smi_monitor(raw: str) -> bool:
    return any(
        line.split()[:1] == ["GPU"] and "POWER" in line.split() and "GFX_UTIL" in line.split()
        for line in raw.splitlines()[:20]
    )
