"""Vendor CLI text tables -> cells and base-unit numbers: the text layer under the cnmon, xpu-smi, mx-smi,
mthreads-gmi, ixsmi and efsmi parsers.

The Chinese vendors' default tool outputs are boxed tables in the nvidia-smi style: a title, a header of
column names, a rule, then one block of N lines per device, each block closed by a rule line. Cells are
separated by ``|``. This module splits such a table into per-device blocks of cells and turns cell tokens
("32C", "106 W", "0 MiB/ 23374 MiB", "0.0%", "N/A") into floats in base units. Every function raises only
``vendors.base.ParseError``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence

from vendors.base import Device, DeviceSample, ParseError

MIB = 1024.0**2  # bytes in a mebibyte

# Tokens vendor tools print where a reading is unavailable; they become None, never 0.
NOT_AVAILABLE = frozenset({"N/A", "NA", "N\\A", "-", "--", "NOT SUPPORTED", "UNKNOWN"})

# Unit tables for ``quantity``: unit suffix as printed -> factor to the base unit.
PERCENT_AS_RATIO: Mapping[str, float] = {"%": 0.01}
CELSIUS: Mapping[str, float] = {"C": 1.0}
WATTS: Mapping[str, float] = {"W": 1.0}
MIB_AS_BYTES: Mapping[str, float] = {"MiB": MIB}
MHZ_AS_HERTZ: Mapping[str, float] = {"MHz": 1e6}
COUNT: Mapping[str, float] = {"": 1.0}

_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
# "106 W/ 250 W", "88W / 400W", "N/A / N/A": the Pwr:Usage/Cap cell of the nvidia-smi-like layouts, as a
# regex fragment with groups ``power`` and ``cap`` (a lazy ".+?/" would split inside "N/A").
POWER_PAIR = r"(?P<power>N/A|[0-9.]+\s*W)\s*/\s*(?P<cap>N/A|[0-9.]+\s*W)"
_QUANTITY = re.compile(rf"({_NUMBER})\s*([A-Za-z%]*)")
_BUS_ID = re.compile(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
_USED_TOTAL = re.compile(rf"(N/A|{_NUMBER}\s*[A-Za-z]*)\s*/\s*(N/A|{_NUMBER}\s*[A-Za-z]*)")
_RULE_CHARS = frozenset("+-=|")
_PROCESS_TITLE = re.compile(r"process(es)?\b", re.IGNORECASE)

Cells = tuple[str, ...]
Block = tuple[Cells, ...]


def is_rule(line: str) -> bool:
    """True for a table rule line such as ``+----+----+``, ``|====|`` or ``-----``."""
    s = line.strip()
    return len(s) >= 3 and set(s) <= _RULE_CHARS and ("-" in s or "=" in s)


def cells(line: str) -> Cells:
    """The ``|``-separated cells of a table line, stripped, without the empty outer border cells."""
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return tuple(c.strip() for c in s.split("|"))


def device_blocks(text: str, header: str, rows: int) -> list[Block]:
    """Split a boxed device table into one block of ``rows`` lines (as cells) per device.

    The table starts at the first rule after the first line containing ``header`` (a column title unique
    to the format) and ends at the first line without a ``|`` (a blank line before the process table, or
    the end of the text) or at a ``Processes:`` title glued to it. A block that is not closed by a rule is
    a cut-off output: it is dropped, so that device reads as missing rather than with half its values.
    Raises ParseError when the header is absent (usage text, another tool, garbage), when a closed block
    has the wrong number of lines, or when no complete device block remains.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if header in line), None)
    if start is None:
        raise ParseError(f"no device table: column header {header!r} not found")
    i = start + 1
    while i < len(lines) and not is_rule(lines[i]):
        i += 1
    if i >= len(lines):
        raise ParseError("device table header is not followed by a rule (output cut short)")
    blocks: list[Block] = []
    current: list[Cells] = []
    for line in lines[i + 1 :]:
        if is_rule(line):
            if current:
                if len(current) != rows:
                    raise ParseError(f"device block has {len(current)} lines, expected {rows}")
                blocks.append(tuple(current))
                current = []
            continue
        if "|" not in line or _PROCESS_TITLE.match(cells(line)[0]):
            break
        current.append(cells(line))
    if not blocks:
        raise ParseError("device table holds no complete device block")
    return blocks


def cell(block: Block, row: int, col: int) -> str:
    """One cell of a block; ParseError when the line has fewer cells (a garbled or cut line)."""
    try:
        return block[row][col]
    except IndexError:
        raise ParseError(f"device block line {row + 1} has no cell {col + 1}") from None


def is_index(token: str) -> bool:
    """A device index as tools print it: ASCII digits only (``str.isdigit`` also accepts "²" and "٣")."""
    return re.fullmatch(r"[0-9]{1,6}", token) is not None


def is_not_available(token: str) -> bool:
    return token.strip().upper() in NOT_AVAILABLE


def quantity(token: str, units: Mapping[str, float], what: str) -> float | None:
    """``"106 W"`` -> 106.0 (times the unit's factor); an unavailable marker -> None.

    ``units`` maps each accepted unit suffix (as printed, case-sensitive) to its factor to the base unit.
    Raises ParseError for anything else, naming ``what`` was being read.
    """
    t = token.strip()
    if t.upper() in NOT_AVAILABLE:
        return None
    m = _QUANTITY.fullmatch(t)
    if m is None or m.group(2) not in units:
        raise ParseError(f"{what}: {token!r} is not a number with unit {'/'.join(sorted(units)) or '(none)'}")
    value = float(m.group(1)) * units[m.group(2)]
    if not math.isfinite(value):
        raise ParseError(f"{what}: {token!r} is out of range")
    return value


def used_total(token: str, units: Mapping[str, float], what: str) -> tuple[float | None, float | None]:
    """``"0 MiB/ 23374 MiB"``, ``"858/65536 MiB"`` or ``"N/A / N/A"`` -> (used, total) in base units.

    A bare number on the left takes the unit printed on the right (mx-smi prints the unit once).
    """
    m = _USED_TOTAL.fullmatch(token.strip())
    if m is None:
        raise ParseError(f"{what}: {token!r} is not 'used/total'")
    left, right = m.group(1).strip(), m.group(2).strip()
    unit = _QUANTITY.fullmatch(right)
    if unit is not None and re.fullmatch(_NUMBER, left):
        left += unit.group(2)
    return quantity(left, units, f"{what} used"), quantity(right, units, f"{what} total")


def pci_bus_id(token: str) -> str:
    """A PCI address as printed (``00000000:03:00.0``, ``0000:3D:00.0``, ``00:01:00.0``) in the Linux
    sysfs form ``dddd:bb:dd.f``, lower-case. Raises ParseError when it is not a PCI address."""
    m = _BUS_ID.fullmatch(token.strip())
    if m is None:
        raise ParseError(f"bus id: {token!r} is not a PCI address")
    domain, bus, dev, fn = m.groups()
    return f"{int(domain or '0', 16):04x}:{bus}:{dev}.{fn}".lower()


def header_value(text: str, pattern: str) -> str | None:
    """The first group of ``pattern`` searched in ``text`` (a version in a title line), or None."""
    m = re.search(pattern, text)
    return m.group(1) if m else None


def samples_from_blocks(
    blocks: Sequence[Block],
    identify: Callable[[Block], Device],
    read: Callable[[Device, Block], DeviceSample],
) -> list[DeviceSample]:
    """One sample per device block. ``identify`` reads the identity (a failure there rejects the whole
    output: a device we cannot name cannot be reported); ``read`` the readings, where a garbled value makes
    only that device lost (``up=False``, ``error="parse: ..."``) and the others are served. Two blocks with
    the same uuid reject the output."""
    out: list[DeviceSample] = []
    seen: set[str] = set()
    for block in blocks:
        device = identify(block)
        if device.uuid in seen:
            raise ParseError(f"two devices with uuid {device.uuid!r}")
        seen.add(device.uuid)
        try:
            out.append(read(device, block))
        except ParseError as exc:
            out.append(DeviceSample.lost(device, f"parse: {exc}"))
    return out


def index_name_device(vendor: str, driver: str | None, columns: str) -> Callable[[Block], Device]:
    """The ``identify`` of tables whose first cell is ``<index> <model name...>`` and second the PCI bus id
    (MetaX mx-smi, Moore Threads mthreads-gmi, Iluvatar ixsmi). The bus id is the uuid: none of these tables
    prints a UUID. ``columns`` names the first cell in the error message (e.g. "GPU Name")."""

    def identify(block: Block) -> Device:
        head = cell(block, 0, 0).split()
        if len(head) < 2 or not is_index(head[0]):
            raise ParseError(f"GPU line {cell(block, 0, 0)!r} is not '{columns}'")
        bus = pci_bus_id(cell(block, 0, 1))
        return Device(
            vendor=vendor,
            model=" ".join(head[1:]),
            index=head[0],
            uuid=bus,
            pci_bus_id=bus,
            driver_version=driver,
        )

    return identify
