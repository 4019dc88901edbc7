"""Ascend npu-smi reading: the `npu-smi info` main table (chip row pairs, process table) -> InfoTable."""

from __future__ import annotations

import re

from xpuwatch.vendors.ascend.records import (
    _BUS_ID,
    _NA,
    ChipRow,
    InfoTable,
    Process,
    _int,
    _lines,
    _number,
    _reject_usage_text,
)
from xpuwatch.vendors.base import ParseError

# --------------------------------------------------------------------------------------------------------
# npu-smi info (main table)

_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_NO_PROCS = re.compile(r"^No running processes found in NPU\s+(\d+)$")
_HEADER_KEYS = {
    "power(w)": "power",
    "temp(c)": "temp",
    "hugepages-usage(page)": "hugepages",
    "aicore(%)": "aicore",
    "memory-usage(mb)": "memory",
    "hbm-usage(mb)": "hbm",
}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line[1:-1].split("|")]


def _values(cell: str) -> list[str]:
    # "70.5   42   1232 / 1232" -> ["70.5", "42", "1232 / 1232"]; "19435/ 21527" is one value.
    return re.findall(r"[^\s/]+\s*/\s*[^\s/]+|\S+", cell)


def _header(cell: str) -> list[str]:
    return [_HEADER_KEYS.get(tok.lower(), tok.lower()) for tok in cell.split()]


def _columns(cell: str, header: list[str], where: str) -> dict[str, str]:
    vals = _values(cell)
    if len(vals) != len(header):
        raise ParseError(f"npu-smi info: {where}: {len(vals)} values under {len(header)} columns")
    return dict(zip(header, vals, strict=True))


def _process_columns(header: list[str], n: int) -> tuple[int, int, int, int]:
    """(cell count, pid, name, memory) positions from the process table header; newer drivers add columns
    such as "Process id in container"."""
    low = [h.lower() for h in header]
    try:
        name = low.index("process name")
        mem = next(i for i, h in enumerate(low) if h.startswith("process memory"))
    except (ValueError, StopIteration):
        raise ParseError(f"npu-smi info: line {n}: process table header without name/memory") from None
    return len(header), low.index("process id"), name, mem


def _process(cells: list[str], cols: tuple[int, int, int, int], n: int) -> Process:
    width, pid_at, name_at, mem_at = cols
    extra = len(cells) - width  # a process may put "|" in its own name: those cells belong to the name
    if extra < 0:
        raise ParseError(f"npu-smi info: line {n}: process row with {len(cells)} cells")
    ids = cells[0].split()
    if len(ids) != 2:
        raise ParseError(f"npu-smi info: line {n}: process row without NPU and chip id")

    def at(i: int) -> str:
        return cells[i + extra] if i > name_at else cells[i]

    return Process(
        npu_id=_int(ids[0], "process NPU"),
        chip_id=_int(ids[1], "process chip"),
        pid=_int(at(pid_at), "process id"),
        name="|".join(cells[name_at : name_at + extra + 1]).strip(),
        memory_mib=_number(at(mem_at), "process memory"),
    )


def _soft(cell: str | None, what: str, reading: str, unread: dict[str, str]) -> float | None:
    """A number cell; a garbled or masked one costs this reading only (noted in ``unread``), never the chip."""
    if cell is None:
        return None
    try:
        return _number(cell, what)
    except ParseError as exc:
        unread[reading] = str(exc).removeprefix("npu-smi: ")
        return None


def _soft_pair(
    vals: dict[str, str], key: str, what: str, readings: tuple[str, str], unread: dict[str, str]
) -> tuple[float | None, float | None]:
    """A 'used / total' cell, read like ``_soft``."""
    if key not in vals:
        return None, None
    parts = vals[key].split("/")
    if len(parts) != 2:
        unread[readings[0]] = f"{what}: expected 'used / total', got {vals[key][:40]!r}"
        return None, None
    return _soft(parts[0], what, readings[0], unread), _soft(parts[1], what, readings[1], unread)


def parse_info_table(text: str) -> InfoTable:
    """Parse ``npu-smi info``: every chip's NPU/chip row pair and the process table.

    Accepts the 20.x (no Hugepages), 21.x (Chip + Device, no HBM), 22-25.x (HBM column on 910; 310P with
    two chips per card and power ``NA``) layouts, TAB-indented dumps included. Raises ParseError on usage
    text, a truncated table (a row pair cut short, a line cut mid-row, no closing border) or garbage.
    """
    _reject_usage_text(text)
    lines = _lines(text)
    version: str | None = None
    head1: list[str] | None = None
    head2: list[str] | None = None
    chips: list[ChipRow] = []
    processes: list[Process] | None = None
    idle: set[int] = set()
    started = False
    in_procs = False
    npu_row: tuple[int, str, str, dict[str, str]] | None = None  # (npu id, name, health, values)
    proc_cols: tuple[int, int, int, int] = (0, 0, 0, 0)
    open_pair = False  # an NPU row waits for its chip row
    last_border = True
    for n, line in enumerate(lines, 1):
        if not line:
            continue
        if line.startswith("+"):
            if not (line.endswith("+") and len(line) >= 2 and set(line) <= set("+-=")):
                raise ParseError(f"npu-smi info: line {n}: broken border: {line[:60]!r}")
            started = True
            if open_pair:
                raise ParseError(f"npu-smi info: line {n}: NPU row without its chip row")
            npu_row = None
            last_border = True
            continue
        if not line.startswith("|"):
            if started and not last_border:
                raise ParseError(f"npu-smi info: line {n}: not a table line: {line[:60]!r}")
            continue  # text outside the table (a warning before it, a note after a border)
        if not (line.endswith("|") and len(line) >= 2):
            raise ParseError(f"npu-smi info: line {n}: row cut short: {line[:60]!r}")
        started = True
        last_border = False
        cells = _cells(line)
        m = _VERSION.search(line)
        if m and head1 is None:
            version = m.group(2)
            continue
        if len(cells) >= 3 and cells[1] == "Health":
            head1 = _header(cells[2])
            continue
        if len(cells) >= 3 and cells[1] == "Bus-Id":
            head2 = _header(cells[2])
            continue
        if len(cells) >= 3 and cells[1].lower() == "process id":
            proc_cols = _process_columns(cells, n)
            in_procs = True
            processes = []
            continue
        if in_procs:
            assert processes is not None
            mp = _NO_PROCS.match(cells[0]) if len(cells) == 1 else None
            if mp:
                idle.add(int(mp.group(1)))
                continue
            processes.append(_process(cells, proc_cols, n))
            continue
        if head1 is None or head2 is None:
            raise ParseError(f"npu-smi info: line {n}: device row before the column headers")
        if len(cells) != 3:
            raise ParseError(f"npu-smi info: line {n}: device row with {len(cells)} cells")
        if not open_pair and npu_row is None:
            m1 = re.match(r"^(\d{1,9})(?:\s+(\S.*))?$", cells[0])
            if not m1 or not cells[1]:
                raise ParseError(f"npu-smi info: line {n}: expected an NPU row, got {line[:60]!r}")
            npu_row = (
                int(m1.group(1)),
                (m1.group(2) or "").strip(),  # a chip in trouble may print no name
                cells[1],
                _columns(cells[2], head1, f"line {n}"),
            )
            open_pair = True
            continue
        # A chip row: "<chip> [<device>] | <bus id> | <aicore> <memory> [<hbm>]"
        assert npu_row is not None
        ids = cells[0].split()
        if not 1 <= len(ids) <= 2 or not (_BUS_ID.match(cells[1]) or cells[1].lower() in _NA):
            raise ParseError(f"npu-smi info: line {n}: expected a chip row, got {line[:60]!r}")
        vals = _columns(cells[2], head2, f"line {n}")
        npu_id, name, health, vals1 = npu_row
        if not health or not re.match(r"^[A-Za-z][A-Za-z ]{0,30}$", health):
            raise ParseError(f"npu-smi info: line {n}: bad Health {health[:40]!r}")
        unread: dict[str, str] = {}
        has_hbm = "hbm" in vals
        hbm = _soft_pair(vals, "hbm", "HBM-Usage", ("memory_used_bytes", "memory_total_bytes"), unread)
        ddr_names = (
            (
                "vendor_metrics.accelerator_huawei_ddr_memory_used_bytes",
                "vendor_metrics.accelerator_huawei_ddr_memory_total_bytes",
            )
            if has_hbm
            else ("memory_used_bytes", "memory_total_bytes")
        )
        ddr = _soft_pair(vals, "memory", "Memory-Usage", ddr_names, unread)
        chips.append(
            ChipRow(
                npu_id=npu_id,
                chip_id=_int(ids[0], "Chip"),
                device_id=_int(ids[1], "Device") if len(ids) == 2 else None,
                name=name,
                health=health,
                power_watts=_soft(vals1.get("power"), "Power(W)", "power_watts", unread),
                temperature_celsius=_soft(vals1.get("temp"), "Temp(C)", "temperatures_celsius.core", unread),
                bus_id=cells[1].lower() if _BUS_ID.match(cells[1]) else None,
                aicore_percent=_soft(vals.get("aicore"), "AICore(%)", "utilization_ratio", unread),
                ddr_used_mib=ddr[0],
                ddr_total_mib=ddr[1],
                hbm_used_mib=hbm[0],
                hbm_total_mib=hbm[1],
                hbm_column=has_hbm,
                unread=unread,
            )
        )
        open_pair = False
    if head1 is None or head2 is None:
        raise ParseError("npu-smi info: no device table (column headers missing)")
    if open_pair:
        raise ParseError("npu-smi info: table truncated (NPU row without its chip row)")
    if not last_border:
        raise ParseError("npu-smi info: table truncated (no closing border)")
    seen: set[str] = set()
    for c in chips:
        if c.index in seen:
            raise ParseError(f"npu-smi info: chip {c.index} listed twice")
        seen.add(c.index)
    return InfoTable(
        version=version,
        chips=tuple(chips),
        processes=None if processes is None else tuple(processes),
        idle_npus=frozenset(idle),
    )
