"""Vendor CLI text tables -> cells and base-unit numbers: the text layer under the cnmon, xpu-smi, mx-smi,
mthreads-gmi, ixsmi and efsmi parsers.

The Chinese vendors' default tool outputs are boxed tables in the nvidia-smi style: a title, a header of
column names, a rule, then one block of N lines per device, each block closed by a rule line. Cells are
separated by ``|``. This module reads such a table by header NAME (``table_rows``: one Row per device,
column name -> text) and turns cell tokens ("32C", "34℃", "106 W/ 250 W", "0 MiB/ 23374 MiB", "0.0%",
"N/A") into floats in base units with per-cell isolation (``CellReader``: an unreadable cell costs one
reading, recorded in ``DeviceSample.unread``). Every function raises only ``vendors.base.ParseError``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from xpuwatch.vendors.base import Device, DeviceSample, ParseError

MIB = 1024.0**2  # bytes in a mebibyte

# Tokens vendor tools print where a reading is unavailable; they become None, never 0.
NOT_AVAILABLE = frozenset({"N/A", "NA", "N\\A", "-", "--", "NOT SUPPORTED", "UNKNOWN"})

# Unit tables for ``quantity``: unit suffix as printed -> factor to the base unit.
PERCENT_AS_RATIO: Mapping[str, float] = {"%": 0.01}
# Celsius as the tools print it: "32C", "39 C", "34℃" (efsmi 1.6+), "34°C".
CELSIUS: Mapping[str, float] = {"C": 1.0, "℃": 1.0, "°C": 1.0}
WATTS: Mapping[str, float] = {"W": 1.0}
MIB_AS_BYTES: Mapping[str, float] = {"MiB": MIB}
# Memory as the tools print it, the one table of memory unit spellings every reader uses (the test
# tests/vendors/test_units.py lists them): "MiB" as labelled, "GiB" x 1024, "KiB" / 1024; "MB" is read as MiB
# because every tool here that prints "MB" means binary sizes (xpu_smi 4.x: an R300 with 32 GiB prints
# "32768 MB"; hl-smi -L prints "98304 MB" where its table prints 98304MiB); "Mib" (hl-smi 1.4: a 32 GiB
# HL-205 prints "32768Mib") is MiB too, not mebibits.
MEMORY_AS_BYTES: Mapping[str, float] = {"MiB": MIB, "Mib": MIB, "MB": MIB, "GiB": 1024 * MIB, "KiB": 1024.0}
MHZ_AS_HERTZ: Mapping[str, float] = {"MHz": 1e6}
COUNT: Mapping[str, float] = {"": 1.0}

_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_QUANTITY = re.compile(rf"({_NUMBER})\s*([A-Za-z%℃°]*)")
_BUS_ID = re.compile(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
_MASKED = re.compile(r"[xX*]{2,}")
_RULE_CHARS = frozenset("+-=|")
_PROCESS_TITLE = re.compile(r"process(es)?\b", re.IGNORECASE)

Cells = tuple[str, ...]


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


def is_index(token: str) -> bool:
    """A device index as tools print it: ASCII digits only (``str.isdigit`` also accepts "²" and "٣")."""
    return re.fullmatch(r"[0-9]{1,6}", token) is not None


def is_masked(token: str) -> bool:
    """A value the publisher or tool masked: only x's or asterisks ("xxx", "xxxxx")."""
    return _MASKED_TOKEN.fullmatch(token.strip()) is not None


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


# --- header-driven boxed tables ---------------------------------------------------------------------------
#
# The nvidia-smi-style tables print several columns in one ``|`` cell, over 2-3 header lines, e.g. cnmon::
#
#     | Fan   Temp      Pwr:Usage/Cap |         Memory-Usage | SR-IOV   Compute-Mode |
#     |  0%   32C        106 W/ 250 W |     0 MiB/ 23374 MiB | N/A           Default |
#
# Versions move, add and rename those sub-columns, so a column is found by its header name, never by its
# position in a split line: each header name (words separated by single spaces; names are separated by two
# or more) has a character span in its line; each value token of the same line and ``|`` cell goes to the
# header name its span overlaps most (else the nearest one). Tokens are unit-aware, so "106 W/ 250 W",
# "0 / 63 MB", "N/A / N/A" and "39 C" each stay one token. Several tokens under one name are joined by a
# space ("Iluvatar BI-V150", "105W 300W").

_UNIT = r"(?:MiB|Mib|MB|GiB|KiB|W|C|°C|℃|%|MHz)"
_QTY = rf"(?:N/A|{_NUMBER}\s?{_UNIT}?|[xX*]{{2,}}\s?{_UNIT}?)"
_TOKEN = re.compile(rf"{_QTY}\s*/\s*{_QTY}(?![\w/])|{_NUMBER}\s{_UNIT}(?![\w/])|\S+")
_HEADER_NAME = re.compile(r"\S+(?: \S+)*")
_PAIR = re.compile(r"(N/A|[^/]+?)\s*/\s*(N/A|[^/]+?)")
_MAX_HEADER_LINES = 4


@dataclass(frozen=True)
class Row:
    """One device of a header-driven table: column name (lower-case, as printed) -> the text under it
    ("" when the device printed nothing there). ``line`` is the device's first line, for messages."""

    values: Mapping[str, str]
    line: str

    def get(self, *names: str) -> str | None:
        """The text of the first of ``names`` (aliases across versions) that the header has, else None."""
        for name in names:
            got = self.values.get(name.lower())
            if got is not None:
                return got
        return None

    def has(self, *names: str) -> bool:
        return any(name.lower() in self.values for name in names)


def _pieces(line: str, pattern: re.Pattern[str]) -> list[tuple[int, int, int, str]]:
    """(cell index, start, end, text) of each ``pattern`` match in ``line``; the cell index counts the
    ``|`` before the match, so header and value lines of one table row agree on it."""
    out: list[tuple[int, int, int, str]] = []
    pos = 0
    for cell, part in enumerate(line.split("|")):
        for m in pattern.finditer(part):
            out.append((cell, pos + m.start(), pos + m.end(), m.group(0)))
        pos += len(part) + 1
    return out


def _column_of(
    token: tuple[int, int, int, str],
    phrase: tuple[int, int],
    names: Sequence[tuple[int, int, int, str]],
) -> str | None:
    """The header name (of the token's own cell) a value token belongs to: the one its span overlaps most;
    a token under no name goes with its phrase (the run of tokens one space apart it is part of, as in
    "MetaX C500" under a right-aligned "Name"), else to the nearest name."""
    _, start, end, _ = token

    def best(a: int, b: int) -> tuple[str | None, tuple[int, int]]:
        choice: str | None = None
        top = (-1, 0)
        for _, n_start, n_end, name in names:
            overlap = min(b, n_end) - max(a, n_start)
            score = (overlap, 0) if overlap > 0 else (0, -max(n_start - b, a - n_end))
            if choice is None or score > top:
                choice, top = name, score
        return choice, top

    choice, score = best(start, end)
    if score[0] > 0:
        return choice
    by_phrase, phrase_score = best(*phrase)
    return by_phrase if phrase_score[0] > 0 else choice


def _phrases(tokens: Sequence[tuple[int, int, int, str]]) -> list[tuple[int, int]]:
    """For each token, the span of its phrase: neighbours in the same cell separated by one space."""
    spans: list[tuple[int, int]] = []
    group: list[int] = []
    for i, tok in enumerate(tokens):
        if group and (tokens[group[-1]][0] != tok[0] or tok[1] - tokens[group[-1]][2] > 1):
            spans.extend([(tokens[group[0]][1], tokens[group[-1]][2])] * len(group))
            group = []
        group.append(i)
    if group:
        spans.extend([(tokens[group[0]][1], tokens[group[-1]][2])] * len(group))
    return spans


def table_rows(text: str, anchor: str) -> list[Row]:
    """A boxed device table read by header names: one Row per device block.

    The header is the run of ``|`` lines around the first line containing ``anchor`` (a column name that
    only this tool prints), bounded by rule lines; every device block below it has as many lines as the
    header, line i under header line i. Blocks end at a line without ``|`` or a ``Processes:`` title (a rule closes each; a block
    cut off before its rule is dropped, unless the text ends there with the block's every line, newline
    included: a paste of the rows a user meant). Raises ParseError when the anchor is absent, the header is not
    bounded by rules, a closed block has the wrong number of lines, or no complete block remains.
    """
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if anchor in line), None)
    if at is None:
        raise ParseError(f"no device table: column header {anchor!r} not found")
    first = at
    while first > 0 and "|" in lines[first - 1] and not is_rule(lines[first - 1]):
        first -= 1
    last = at
    while last + 1 < len(lines) and "|" in lines[last + 1] and not is_rule(lines[last + 1]):
        last += 1
    if first == 0 or last + 1 >= len(lines) or not is_rule(lines[first - 1]) or not is_rule(lines[last + 1]):
        raise ParseError("device table header is not enclosed by rules (output cut short?)")
    header = lines[first : last + 1]
    if len(header) > _MAX_HEADER_LINES:
        raise ParseError(f"device table header has {len(header)} lines")
    layout = _layout(tuple(header))
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in lines[last + 2 :]:
        if is_rule(line):
            if current:
                if len(current) != len(header):
                    raise ParseError(f"device block has {len(current)} lines, expected {len(header)}")
                blocks.append(current)
                current = []
            continue
        if "|" not in line or _PROCESS_TITLE.match(cells(line)[0]):
            break
        current.append(line)
    else:
        # The text ends inside a block: a paste that stops after a device's last line, before its rule
        # (users copy the rows they mean). Kept when it has every line and the last one ends with its newline.
        if len(current) == len(header) and text.endswith("\n"):
            blocks.append(current)
    if not blocks:
        raise ParseError("device table holds no complete device block")
    rows: list[Row] = []
    for block in blocks:
        values: dict[str, list[str]] = {key: [] for key in layout.keys}
        for i, line in enumerate(block):
            tokens = _pieces(line, _TOKEN)
            for token, phrase in zip(tokens, _phrases(tokens), strict=True):
                column = layout.column(i, token, phrase)
                if column is not None:
                    values[column].append(token[3])
        rows.append(Row({k: " ".join(v) for k, v in values.items()}, block[0]))
    return rows


# Header layouts cached by header text: a tool prints the same header every poll, so its name spans and the
# column each value span falls under are computed once. Bounded: _LAYOUTS headers, _SPANS_PER_LAYOUT value
# spans each (past that a span is assigned afresh every time), headers over _CACHED_HEADER_CHARS uncached.
# Every entry is a pure function of its key, so threads polling at once can at worst compute one twice.
_LAYOUTS = 64
_SPANS_PER_LAYOUT = 4096
_CACHED_HEADER_CHARS = 4096


@dataclass(frozen=True)
class _Layout:
    """A table header read once: per header line, cell index -> its (cell, start, end, name) name spans;
    ``keys`` the lower-case column names in header order; ``spans`` memoizes ``column``."""

    names: tuple[Mapping[int, tuple[tuple[int, int, int, str], ...]], ...]
    keys: tuple[str, ...]
    spans: dict[tuple[int, int, int, int, int, int], str | None]

    def column(self, line: int, token: tuple[int, int, int, str], phrase: tuple[int, int]) -> str | None:
        """The lower-case column name of a value token (``_column_of``) on header line ``line``."""
        key = (line, token[0], token[1], token[2], phrase[0], phrase[1])
        try:
            return self.spans[key]
        except KeyError:
            pass
        name = _column_of(token, phrase, self.names[line].get(token[0], ()))
        column = None if name is None else name.lower()
        if len(self.spans) < _SPANS_PER_LAYOUT:
            self.spans[key] = column
        return column


def _read_layout(header: tuple[str, ...]) -> _Layout:
    names: list[dict[int, tuple[tuple[int, int, int, str], ...]]] = []
    for line in header:
        by_cell: dict[int, list[tuple[int, int, int, str]]] = {}
        for piece in _pieces(line, _HEADER_NAME):
            by_cell.setdefault(piece[0], []).append(piece)
        names.append({cell: tuple(pieces) for cell, pieces in by_cell.items()})
    keys = tuple(
        dict.fromkeys(n[3].lower() for by_cell in names for pieces in by_cell.values() for n in pieces)
    )
    return _Layout(tuple(names), keys, {})


_cached_layout = functools.lru_cache(maxsize=_LAYOUTS)(_read_layout)


def _layout(header: tuple[str, ...]) -> _Layout:
    """The header's layout, from the cache unless the header is over _CACHED_HEADER_CHARS."""
    if sum(len(line) for line in header) > _CACHED_HEADER_CHARS:
        return _read_layout(header)
    return _cached_layout(header)


class CellReader:
    """Reads the cells of one Row into base units with per-cell isolation: a cell the vendor marks
    unavailable (``N/A``, ``-``) is None; one that cannot be read (masked ``xxxxx MiB``, garbage) is None
    AND recorded in ``unread`` (reading name -> reason), so it costs that one reading, never the device."""

    def __init__(self, row: Row) -> None:
        self.row = row
        self.unread: dict[str, str] = {}

    def text(self, *names: str) -> str | None:
        """The cell text, or None when the column is absent, blank or marked unavailable."""
        got = self.row.get(*names)
        if got is None or not got.strip() or is_not_available(got):
            return None
        return got.strip()

    def value(
        self, field: str, token: str, units: Mapping[str, float], default_unit: str = ""
    ) -> float | None:
        """One token (a part of a cell) -> a quantity, or None with ``field`` recorded in ``unread``."""
        t = token.strip()
        if _NA_WITH_UNIT.fullmatch(t):
            return None
        if default_unit and re.fullmatch(_NUMBER, t):
            t += default_unit
        try:
            return quantity(t, units, field)
        except ParseError as exc:
            self.unread[field] = "masked" if _MASKED_TOKEN.match(t) else str(exc)
            return None

    def number(
        self, field: str, names: Sequence[str], units: Mapping[str, float], default_unit: str = ""
    ) -> float | None:
        """One quantity, e.g. field ``utilization_ratio`` from column ``Util`` in PERCENT_AS_RATIO.
        ``default_unit`` is the unit of a bare number where the vendor prints none (efsmi 1.7 TEMP)."""
        token = self.text(*names)
        return None if token is None else self.value(field, token, units, default_unit)

    def pair(
        self,
        fields: tuple[str, str],
        names: Sequence[str],
        units: Mapping[str, float],
        default_unit: str = "",
    ) -> tuple[float | None, float | None]:
        """A ``left / right`` cell ("106 W/ 250 W", "858/65536 MiB", "N/A / N/A"; also "105W 300W" and a
        lone "44W") -> two quantities, each read on its own. A bare left number takes the right's unit."""
        token = self.text(*names)
        if token is None:
            return None, None
        m = _PAIR.fullmatch(token)
        if m is not None:
            left, right = m.group(1).strip(), m.group(2).strip()
        else:
            parts = _PAIR_PART.findall(token)
            if not 1 <= len(parts) <= 2 or "".join(parts).replace(" ", "") != token.replace(" ", ""):
                self.unread[fields[0]] = f"{names[0]}: {token!r} is not 'value / value'"
                return None, None
            left, right = parts[0].strip(), parts[1].strip() if len(parts) == 2 else ""
        unit = re.search(r"[A-Za-z%℃°]+$", right)
        if unit is not None and re.fullmatch(_NUMBER, left):
            left += unit.group(0)
        a = None if is_not_available(left) else self.value(fields[0], left, units, default_unit)
        b = (
            None
            if not right or is_not_available(right)
            else self.value(fields[1], right, units, default_unit)
        )
        return a, b


_MASKED_TOKEN = re.compile(r"[xX*]{2,}")
# An unavailable marker with the unit still printed after it ("- C", "N/A W", "-MiB").
_PAIR_PART = re.compile(r"(?:N/A|-+|[0-9.]+|[xX*]+)\s*[A-Za-z%℃°]*")
_NA_WITH_UNIT = re.compile(r"(?:N/A|NA|-+)\s*[A-Za-z%℃°]*")


def samples_from_rows(
    rows: Sequence[Row],
    identify: Callable[[Row], Device],
    read: Callable[[Device, Row], DeviceSample],
) -> list[DeviceSample]:
    """One sample per Row. A row whose identity cannot be read (index, name or bus id garbled or masked) is
    left out: a device that cannot be named cannot be reported, and one such row must not cost the others
    (the backend reports a device it saw before and misses now as lost). ParseError when no row can be
    identified, naming the first failure, or when two rows carry the same uuid. ``read`` records
    unreadable cells in ``DeviceSample.unread`` and should not raise; if it does, the device stays up with
    that reason as its only unread entry."""
    out: list[DeviceSample] = []
    seen: set[str] = set()
    first_error: ParseError | None = None
    for row in rows:
        try:
            device = identify(row)
        except ParseError as exc:
            first_error = first_error or exc
            continue
        if device.uuid in seen:
            raise ParseError(f"two devices with uuid {device.uuid!r}")
        seen.add(device.uuid)
        try:
            out.append(read(device, row))
        except ParseError as exc:
            out.append(DeviceSample(device=device, unread={"row": str(exc)}))
    if not out:
        raise first_error or ParseError("device table holds no device")
    return out


def temperatures(core: float | None) -> dict[str, float]:
    return {} if core is None else {"core": core}


def index_name_bus(vendor: str, driver: str | None, row: Row, index: str, bus: str) -> Device:
    """The identity of tables whose device rows print an index, a model ``Name`` and a PCI bus id (MetaX
    mx-smi/ht-smi, Moore Threads mthreads-gmi, Iluvatar ixsmi; ``index`` and ``bus`` are the columns' header
    names, matched without case). The bus id is the uuid: none of these tables prints a UUID. Raises
    ParseError when the index is not a number, the name is empty or the bus id is not a PCI address."""
    number, name = row.get(index) or "", row.get("Name") or ""
    if not is_index(number) or not name:
        raise ParseError(f"GPU line {row.line!r} is not '{index} Name'")
    pci = pci_bus_id(row.get(bus) or "")
    return Device(vendor=vendor, model=name, index=number, uuid=pci, pci_bus_id=pci, driver_version=driver)
