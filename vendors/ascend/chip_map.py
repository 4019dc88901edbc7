"""Ascend npu-smi reading: `npu-smi info -m` (the chip map) -> ChipMapEntry rows."""

from __future__ import annotations

import re

from xpuwatch.vendors.ascend.records import ChipMapEntry, _int, _lines, _reject_usage_text
from xpuwatch.vendors.base import ParseError

# --------------------------------------------------------------------------------------------------------
# npu-smi info -m


def parse_chip_map(text: str) -> tuple[ChipMapEntry, ...]:
    """Parse ``npu-smi info -m`` (NPU ID, Chip ID, Chip Logic ID, Chip Name; columns found by header name,
    so extra columns such as Chip Phy-ID are tolerated). ``Mcu`` pseudo-chips are dropped."""
    _reject_usage_text(text)
    lines = [ln for ln in _lines(text) if ln]
    head_at = next((i for i, ln in enumerate(lines) if ln.startswith("NPU ID") and "Chip ID" in ln), None)
    if head_at is None:
        raise ParseError("npu-smi info -m: header 'NPU ID  Chip ID ...' not found")
    names = re.split(r"\s{2,}|\t+", lines[head_at])
    for required in ("NPU ID", "Chip ID", "Chip Name"):
        if required not in names:
            raise ParseError(f"npu-smi info -m: column {required!r} missing")
    out: list[ChipMapEntry] = []
    seen: set[tuple[int, int]] = set()
    for n, line in enumerate(lines[head_at + 1 :], head_at + 2):
        vals = re.split(r"\s{2,}|\t+", line, maxsplit=len(names) - 1)
        if len(vals) != len(names):
            raise ParseError(f"npu-smi info -m: row {n}: {len(vals)} values under {len(names)} columns")
        row = dict(zip(names, vals, strict=True))
        npu = _int(row["NPU ID"], "NPU ID")
        chip = _int(row["Chip ID"], "Chip ID")
        name = row["Chip Name"].strip()
        if (npu, chip) in seen:
            raise ParseError(f"npu-smi info -m: chip {npu}-{chip} listed twice")
        seen.add((npu, chip))
        if name.lower() == "mcu":
            continue
        logic = row.get("Chip Logic ID", "-").strip()
        out.append(
            ChipMapEntry(npu, chip, None if logic in ("-", "NA") else _int(logic, "Chip Logic ID"), name)
        )
    return tuple(out)
