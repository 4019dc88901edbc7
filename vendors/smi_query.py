"""Indented ``key : value`` query outputs (``efsmi -q``, ``mx-smi --show-memory ...``) -> one Row per device.

Vendor layer, shared by the modules whose tool prints a device's readings as sections of ``key : value``
lines under a device header line, indentation giving the section::

    DEV ID 0                                  <- device header (a pattern per tool)
        Device Mem Info                       <- section: a line without a value
            Total Size              : 42976 MiB
        Temperature Info
            GCU Temp                : 58 ℃

Each value is keyed by its section path and by its bare key, lower-case (``device mem info/total size`` and
``total size``; of two equal bare keys the first is kept), in a ``smi_table.Row`` so that the per-cell reader
``smi_table.CellReader`` (units, ``N/A``, masked values, ``unread``) reads it as it reads a table cell.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xpuwatch.vendors.base import Device, ParseError
from xpuwatch.vendors.smi_table import Row

_KEY_VALUE = re.compile(r"^(?P<indent>\s*)(?P<key>[^:\s][^:]*?)\s*:(?:\s+(?P<value>.*?))?\s*$")
MAX_LINES = 200_000  # a query of 64 devices prints ~6,000 lines; past this it is not one tool output


@dataclass(frozen=True)
class Record:
    """One device: the header match's groups and its values as a Row."""

    header: tuple[str, ...]
    row: Row


def records(text: str, header: re.Pattern[str], what: str) -> list[Record]:
    """Every device section of ``text`` (``header`` matches a device's first line, at any indentation; its
    groups are kept). Lines before the first header (banners) and lines of no ``key : value`` or section
    shape are ignored. Raises ParseError when no header is found, naming ``what``."""
    out: list[Record] = []
    values: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (indent, section name)
    current: tuple[str, ...] | None = None
    line0 = ""

    def close() -> None:
        if current is not None:
            out.append(Record(current, Row(dict(values), line0)))

    for line in text.splitlines()[:MAX_LINES]:
        m = header.match(line.strip())
        if m is not None:
            close()
            current, line0, values, stack = tuple(g or "" for g in m.groups()), line.strip(), {}, []
            continue
        if current is None or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        kv = _KEY_VALUE.match(line)
        key = (kv.group("key") if kv else line.strip()).lower()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if kv is None or kv.group("value") is None:  # a section title ("Device Mem Info", "Link Info :")
            stack.append((indent, key))
            continue
        value = kv.group("value")
        values.setdefault("/".join([*(s for _, s in stack), key]), value)
        values.setdefault(key, value)
    close()
    if not out:
        raise ParseError(f"{what}: no device section")
    return out


def unused(text: str, header: re.Pattern[str], read: Sequence[str], what: str) -> list[str]:
    """The section/key paths of ``text`` that are not in ``read``, once each, as ``"<path>: no schema
    reading"`` lines (an ``OutputFormat.explain`` hook). Raises ParseError as ``records`` does."""
    seen: dict[str, None] = {}
    for rec in records(text, header, what):
        for key in rec.row.values:
            if "/" in key and key not in read:
                seen.setdefault(f"{key}: no schema reading", None)
    return list(seen)


def sections_read(text: str, header: re.Pattern[str], read: Sequence[str], what: str) -> list[str]:
    """Per device section of ``text``, one ``"<device line>: read <sections>; not read <sections>"`` line
    naming its top-level sections by whether a key of ``read`` lies in them (an ``OutputFormat.sections``
    hook). Raises ParseError as ``records`` does."""
    wanted = {key.split("/", 1)[0] for key in read if "/" in key}
    out: list[str] = []
    for rec in records(text, header, what):
        tops = dict.fromkeys(key.split("/", 1)[0] for key in rec.row.values if "/" in key)
        used = [s for s in tops if s in wanted]
        skipped = [s for s in tops if s not in wanted]
        plain = [k for k in rec.row.values if "/" not in k and k in read]
        line = f"{rec.row.line}: read {', '.join([*plain, *used]) or 'nothing'}"
        out.append(line + (f"; not read {', '.join(skipped)}" if skipped else ""))
    return out


def identified(
    text: str, header: re.Pattern[str], what: str, identify: Callable[[Record], Device]
) -> list[tuple[Record, Device]]:
    """Every device section of ``text`` with its identity, as ``smi_table.samples_from_rows`` does for
    table rows: a section whose ``identify`` raises ParseError (PCI id garbled or masked) is left out, a
    device that cannot be named cannot be reported; ParseError when none is left (naming the first
    failure) or when two sections name one uuid."""
    out: list[tuple[Record, Device]] = []
    seen: set[str] = set()
    first_error: ParseError | None = None
    for rec in records(text, header, what):
        try:
            device = identify(rec)
        except ParseError as exc:
            first_error = first_error or exc
            continue
        if device.uuid in seen:
            raise ParseError(f"{what}: two devices with uuid {device.uuid!r}")
        seen.add(device.uuid)
        out.append((rec, device))
    if not out:
        raise first_error or ParseError(f"{what}: no device section")
    return out
