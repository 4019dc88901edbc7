"""Hygon DCUs/HCUs into DeviceSamples: ``hy-smi`` (else the DTK's ``rocm-smi``), JSON first, else its table.

Vendor layer. Hygon's DTK/hyhal ships a fork of AMD's rocm-smi, both as ``hy-smi`` and under the name
``rocm-smi``. Three outputs are read:

- JSON (``--json``): rocm-smi's layout (``card0..N`` objects, every value a string) with "DCU" keys on
  DTK 23/24 (``DCU use (%)``) and "HCU" keys on hyhal (``HCU use (%)``, ``HCU memory use (%)``), MiB
  memory (``vram Total [Used] Memory (MiB)``), ``Temperature (Sensor edge|junction|mem|core) (C)``,
  ``Average Graphics Package Power (W)``, ``Max Graphics Package Power (W)`` (shared/reference/vendors.md
  3.2; fixtures ``hygon/rocm-smi_json_hygon_dcu_dtk24.04.3.json``, ``hygon/hy-smi_json_BW_2hcu_*``).
  Real hyhal output is NOT valid JSON: it drops the comma after some power values
  (``"91.0""Average GFX Core Power (W)": ...``) and repeats an empty ``"": ""`` key. ``load_hy_smi_json``
  repairs exactly those defects (a comma inserted where the decoder expects one and a new string
  starts; empty keys dropped) and still rejects anything else with ParseError. Values are read by the
  AMD package's rocm-smi reader (``vendors.amd.rocm_smi_sample``): units from each key's ``(...)``.
- The default table, found by HEADER NAMES with the aliases real versions print: the index column
  ``HCU``/``DCU``, ``Temp``/``TEMP``, ``AvgPwr``, ``PwrCap``, ``VRAM%``, ``HCU%``/``DCU%`` (layouts: DTK
  23.10 ``DCU Temp AvgPwr Fan Perf PwrCap VRAM% DCU%``; DTK 24.04 ``DCU Temp AvgPwr Perf PwrCap VRAM% DCU%
  Mode``; hyhal ``HCU Temp AvgPwr Perf PwrCap VRAM% HCU% [Dec% Enc%] Mode``). Each cell is read on its own,
  its unit from the cell (``43.0C``, ``131.0W``, ``98%``): an unreadable cell drops that reading only.
- ``--showmeminfo vram`` text (``HCU[0]          : vram Total Memory (MiB): 65520``; ``DCU[n]``/``GPU[n]``
  on older builds): the table prints memory only as ``VRAM%``, so the backend makes this one extra call
  per poll to get bytes. Where no bytes can be had, ``VRAM%`` is exported as ``memory_used_ratio``.

Device uuid: ``Unique ID`` when non-zero (``0x%016x``), else ``Serial Number``, else ``pci-<PCI Bus>``,
else ``hygon-index-<n>`` (the table form has no id at all: index-based, stable while enumeration is).

Detection runs before AMD's (priority 40 < 50) and supersedes it: ``hy-smi`` on PATH, or a ``rocm-smi``
whose ``--showproductname --json`` output carries DCU/HCU markers ("DCU"/"HCU" keys, vendor "Chengdu
Haiguang").
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from xpuwatch.vendors.amd import (
    ROCM_SMI_ARGS,
    ROCM_SMI_MINIMAL_ARGS,
    UNKNOWN_MODEL,
    FlagFallback,
    LostTracker,
    Notes,
    amount,
    hygon_card,
    hygon_markers,
    ratio,
    rocm_smi_cards,
    rocm_smi_driver,
    rocm_smi_sample,
    scaled,
    with_notes,
)
from xpuwatch.vendors.base import BackendError, Device, DeviceSample, ParseError, VendorMetric
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register

log = logging.getLogger(__name__)

VENDOR = "hygon"
DEFAULT_TIMEOUT_SECONDS = 10.0
# The same flags as AMD's rocm-smi (the DTK tools are its fork); the minimal set is what gpustack ran on
# DTK 24.04.3 to produce the JSON fixture.
SMI_ARGS = ROCM_SMI_ARGS
SMI_MINIMAL_ARGS = ROCM_SMI_MINIMAL_ARGS
MEMINFO_ARGS = ("--showmeminfo", "vram")
DETECT_ARGS = ("--showproductname", "--json")
DETECT_TIMEOUT_SECONDS = 5.0
# Real hyhal output needs a handful of inserted commas per card; more than this is not that defect.
MAX_JSON_REPAIRS = 256

# ---------------------------------------------------------------------------------------------------
# JSON


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # hyhal prints `"": ""` (twice per card): no reading, dropped. A repeated real key keeps the last value.
    return {k: v for k, v in pairs if k.strip()}


def load_hy_smi_json(raw: str) -> object:
    """``hy-smi --json`` text -> the decoded document, repairing hyhal's known defects. Raises ParseError.

    Banner lines before the first ``{``/``[`` line are skipped. A missing comma is inserted only where the
    decoder expects ``,`` and the next character starts a string (``"91.0""Average GFX ...``), at most
    ``MAX_JSON_REPAIRS`` times; every other defect is a ParseError.
    """
    lines = raw.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.lstrip()[:1] in ("[", "{")), None)
    if start is None:
        raise ParseError("hy-smi: no JSON in the output")
    body = "".join(lines[start:])
    for _ in range(MAX_JSON_REPAIRS + 1):
        try:
            return json.loads(body, object_pairs_hook=_pairs)
        except json.JSONDecodeError as exc:
            if exc.msg != "Expecting ',' delimiter" or body[exc.pos : exc.pos + 1] != '"':
                raise ParseError(f"hy-smi: invalid JSON: {str(exc)[:120]}") from exc
            body = body[: exc.pos] + "," + body[exc.pos :]
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"hy-smi: invalid JSON: {str(exc)[:120]}") from exc
    raise ParseError(f"hy-smi: invalid JSON: more than {MAX_JSON_REPAIRS} missing commas")


def parse_hygon_json(raw: str, require_markers: bool = True) -> list[DeviceSample]:
    """``hy-smi --json`` / DTK ``rocm-smi --json`` -> one DeviceSample per DCU/HCU. Raises ParseError.

    As an ``inspect`` format, output without any Hygon marker is refused (it is AMD's rocm-smi: use
    ``rocm-smi-json``); the backend, which knows it ran a Hygon tool, passes ``require_markers=False``.
    """
    doc = load_hy_smi_json(raw)
    cards = rocm_smi_cards(doc, "hy-smi")
    if require_markers and not any(hygon_card(card) for _, card in cards):
        raise ParseError("hy-smi: no DCU/HCU keys or Hygon vendor string: this is AMD rocm-smi output")
    driver = rocm_smi_driver(doc) if isinstance(doc, Mapping) else None
    return [rocm_smi_sample(VENDOR, idx, card, driver) for idx, card in cards]


def sniff_hygon_json(raw: str) -> bool:
    head = raw[:20000]
    return re.search(r'"card\d+"\s*:', head) is not None and hygon_markers(head)


# ---------------------------------------------------------------------------------------------------
# Table

# Reading -> header names real versions print (compared case-insensitively).
_INDEX = ("HCU", "DCU")  # AMD's own rocm-smi table says "Device"/"GPU": never claimed here
_ALIASES: dict[str, tuple[str, ...]] = {
    "temp": ("Temp", "TEMP", "Temperature"),
    "power": ("AvgPwr", "Pwr", "Power"),
    "cap": ("PwrCap", "Cap"),
    "vram": ("VRAM%", "VRAM", "Mem%"),
    "util": ("HCU%", "DCU%", "GPU%", "Util"),
}
_FIELDS = {
    "temp": "temperatures_celsius.core",
    "power": "power_watts",
    "cap": "power_limit_watts",
    "vram": "memory_used_ratio",
    "util": "utilization_ratio",
}
_TOKEN = re.compile(r"\S+")


def _header(line: str) -> dict[str, int] | None:
    """{reading: column number} when ``line`` is a hy-smi table header (index then a temperature column)."""
    names = line.split()
    if not names or names[0].upper() not in _INDEX:
        return None
    upper = [n.upper() for n in names]
    cols = {"index": 0}
    for reading, aliases in _ALIASES.items():
        for alias in aliases:
            if alias.upper() in upper:
                cols[reading] = upper.index(alias.upper())
                break
    return cols if "temp" in cols else None


def _cells(header_line: str, line: str) -> list[str]:
    """One data line as one cell per header column ("" where none). Cells hold no spaces in any real
    layout, so a line with as many tokens as the header is split on whitespace; otherwise (a blank cell, or
    a masked "xxxxx MiB") each token goes to the column it starts in: hy-smi left-aligns a cell under its
    header, so a column runs from its header's first character to the next header's."""
    starts = [m.start() for m in _TOKEN.finditer(header_line)]
    tokens = [(m.start(), m.group()) for m in _TOKEN.finditer(line)]
    if len(tokens) == len(starts):
        return [t[1] for t in tokens]
    cells: list[list[str]] = [[] for _ in starts]
    for start, tok in tokens:
        column = max((i for i, s in enumerate(starts) if s <= start), default=0)
        cells[column].append(tok)
    return [" ".join(c) for c in cells]


def parse_hygon_table(raw: str) -> list[DeviceSample]:
    """The default ``hy-smi``/DTK ``rocm-smi`` table -> DeviceSamples. Raises ParseError.

    Columns by header name (aliases above), rows until the next ``====`` rule or blank line. ``Temp``
    ("43.0C") -> core: rocm-smi's concise view prints the first sensor that answers in the order edge,
    junction, memory (``rocm_smi.py`` ``getTemperatureLabel``); ``AvgPwr``/``PwrCap`` ("131.0W");
    ``HCU%``/``DCU%`` -> utilization; ``VRAM%`` (share of VRAM allocated) -> ``memory_used_ratio`` (bytes
    come from ``--showmeminfo vram``: ``merge_meminfo``). A cell that cannot be read is dropped and named
    in ``unread``; "N/A"/"-" is None. A row whose index is not a number cannot be attributed and is
    skipped; no readable row at all is a ParseError.
    """
    lines = raw.splitlines()
    found = next(((i, cols) for i, line in enumerate(lines) if (cols := _header(line))), None)
    if found is None:
        raise ParseError("hy-smi table: no 'HCU|DCU Temp ...' header")
    hdr_at, cols = found
    names = lines[hdr_at].split()
    out: list[DeviceSample] = []
    for line in lines[hdr_at + 1 :]:
        if not line.strip() or line.lstrip().startswith("="):
            break
        cells = _cells(lines[hdr_at], line)
        idx = cells[0]
        if not idx.isdigit() or len(idx) > 6:
            log.warning("hy-smi table: row without a numeric %s index skipped: %r", names[0], line[:80])
            continue
        idx = str(int(idx))
        notes = Notes()

        def cell(reading: str, cells: list[str] = cells, notes: Notes = notes) -> str | None:
            if reading not in cols:
                return None
            if not cells[cols[reading]]:  # a row cut short, or a blank cell: printed column, no value
                notes.drop(_FIELDS[reading], f"{names[cols[reading]]}: no cell in the row")
            return cells[cols[reading]]

        def col(reading: str) -> str:
            return names[cols[reading]] if reading in cols else reading

        temp = scaled(cell("temp"), "celsius", "C", notes, col("temp"), "temperatures_celsius.core")
        sample = DeviceSample(
            device=Device(vendor=VENDOR, model=UNKNOWN_MODEL, index=idx, uuid=f"{VENDOR}-index-{idx}"),
            utilization_ratio=ratio(cell("util"), notes, col("util"), "utilization_ratio"),
            memory_used_ratio=ratio(cell("vram"), notes, col("vram"), "memory_used_ratio"),
            temperatures_celsius={"core": temp} if temp is not None else {},
            power_watts=amount(cell("power"), "power", "W", notes, col("power"), "power_watts"),
            power_limit_watts=amount(cell("cap"), "power", "W", notes, col("cap"), "power_limit_watts"),
        )
        out.append(with_notes(sample, notes))
    if not out:
        raise ParseError("hy-smi table: header without readable rows")
    return out


def sniff_hygon_table(raw: str) -> bool:
    for line in raw.splitlines()[:20]:
        cols = _header(line)
        if cols and ("util" in cols or "vram" in cols):
            return True
    return False


# ---------------------------------------------------------------------------------------------------
# Key-value text modes (--showmeminfo vram, --showuse, --showpower, --showtemp, --showmemavailable, ...)

# ``HCU[0]          : vram Total Memory (MiB): 65520``: device prefix, key (unit in its last "(...)"), value.
# The key ends at the first ": " (or ":" at the end of the line); values may hold colons ("0000:3b:00.0").
_KEY_VALUE = re.compile(
    r"^\s*(?P<dev>HCU|DCU|GPU|card)\s*\[\s*(?P<idx>\d{1,6})\s*\]\s*:\s*(?P<key>[^\s:][^:]*?)\s*:(?:\s+|$)(?P<value>.*?)\s*$",
    re.IGNORECASE,
)
AVAILABLE_KEY = "available memory size"
MEMORY_AVAILABLE = VendorMetric(
    name="accelerator_hygon_memory_available_bytes",
    type="gauge",
    unit="bytes",
    help="Device memory hy-smi reports as available (its --showmemavailable; the tool does not say whether it "
    "is free or usable capacity, so it is not exported as total or used).",
    source="hy-smi --showmemavailable 'HCU[n] : Available memory size (MiB)'",
)
# Real --showmemavailable output is a few hundred bytes; a text this many lines long is not one tool call.
MAX_TEXT_LINES = 20000


def hy_smi_text_cards(
    raw: str, prefixes: tuple[str, ...] = ("HCU", "DCU", "GPU", "CARD")
) -> dict[str, dict[str, str]]:
    """Key-value text (rocm-smi's non-JSON modes as hy-smi prints them) -> {index: {key: value}}, keys as
    printed (``"vram Total Memory (MiB)"``), in the order met. Lines of other shapes (banners, rules, a
    ``HCU[0] : <message>`` line with no value) are ignored. Never raises."""
    cards: dict[str, dict[str, str]] = {}
    for line in raw.splitlines()[:MAX_TEXT_LINES]:
        m = _KEY_VALUE.match(line)
        if m is None or m.group("dev").upper() not in prefixes or not m.group("value"):
            continue
        cards.setdefault(str(int(m.group("idx"))), {})[m.group("key")] = m.group("value")
    return cards


def _text_sample(idx: str, card: Mapping[str, str]) -> DeviceSample:
    """One device's key-value lines -> DeviceSample, by the rocm-smi key reader (the JSON keys are the same
    strings); ``Available memory size`` -> ``accelerator_hygon_memory_available_bytes``."""
    sample = rocm_smi_sample(VENDOR, idx, card, None)
    avail = next((v for k, v in card.items() if k.lower().startswith(AVAILABLE_KEY)), None)
    if avail is None:
        return sample
    unit = re.search(r"\(([^()]*)\)\s*$", next(k for k in card if k.lower().startswith(AVAILABLE_KEY)))
    notes = Notes()
    got = amount(
        {"value": avail, "unit": unit.group(1) if unit else None},
        "bytes",
        None,
        notes,
        "Available memory size",
        MEMORY_AVAILABLE.name,
    )
    if got is None:
        return replace(sample, unread={**sample.unread, **notes.unread})
    return replace(sample, vendor_metrics={**sample.vendor_metrics, MEMORY_AVAILABLE.name: got})


def parse_hy_smi_text(raw: str, prefixes: tuple[str, ...] = ("HCU", "DCU")) -> list[DeviceSample]:
    """Any of hy-smi's key-value text modes, alone or several in one output (``--showuse --showmeminfo vram``)
    -> one DeviceSample per ``HCU[n]``/``DCU[n]``. Raises ParseError.

    Read by key, as the JSON is (``rocm_smi_sample``: ``HCU use (%)``, ``vram Total [Used] Memory (MiB)``,
    ``Temperature (Sensor edge|junction|mem|core) (C)``, ``Average Graphics Package Power (W)``,
    ``Max Graphics Package Power (W)``, ``Card series``, ``Serial Number``, ``PCI Bus``), plus
    ``Available memory size (MiB)`` (``--showmemavailable``) as a vendor metric. Keys the reader does not
    know are left (``--explain`` lists them). No key-value line at all is a ParseError. The backend, which
    knows it ran a Hygon tool, also reads ``GPU[n]`` lines (``prefixes``).
    """
    cards = hy_smi_text_cards(raw, prefixes)
    if not cards:
        raise ParseError("hy-smi text: no 'HCU[n] : key (unit): value' lines")
    return [_text_sample(idx, card) for idx, card in sorted(cards.items(), key=lambda kv: int(kv[0]))]


_TEXT_KEYS_READ = (
    "hcu use",
    "dcu use",
    "vram total memory",
    "vram total used memory",
    "hcu memory use",
    "dcu memory use",
    "temperature (sensor",
    "average graphics package power",
    "max graphics package power",
    "card series",
    "serial number",
    "pci bus",
    "unique id",
    AVAILABLE_KEY,
)


def explain_hy_smi_text(raw: str) -> list[str]:
    """The keys of the output the reader does not use, once each."""
    seen: dict[str, None] = {}
    for card in hy_smi_text_cards(raw, ("HCU", "DCU")).values():
        for key in card:
            if not key.lower().startswith(_TEXT_KEYS_READ):
                seen.setdefault(f"{key}: no schema reading", None)
    return list(seen)


def sniff_hy_smi_text(raw: str) -> bool:
    """Hygon's ``HCU[n]``/``DCU[n]`` prefix only: AMD's rocm-smi prints ``GPU[n]`` (the backend, which knows
    it ran a Hygon tool, still reads ``GPU[n]`` lines)."""
    return bool(hy_smi_text_cards("\n".join(raw.splitlines()[:40]), ("HCU", "DCU")))


# (memory_used_bytes, memory_total_bytes, unread) per index.
MemInfo = dict[str, tuple[float | None, float | None, dict[str, str]]]


def parse_hy_smi_meminfo(raw: str) -> MemInfo:
    """``hy-smi --showmeminfo vram`` text -> {index: (used bytes, total bytes, unread)}. Raises ParseError.

    Lines ``HCU[0]          : vram Total Memory (MiB): 65520`` and ``... vram Total Used Memory (MiB): 2``
    (``DCU[n]``/``GPU[n]`` on older builds; the unit is the key's ``(MiB)``/``(B)``), read by
    ``hy_smi_text_cards``. No device with a memory line is a ParseError.
    """
    out: MemInfo = {}
    for idx, card in hy_smi_text_cards(raw).items():
        s = rocm_smi_sample(VENDOR, idx, card, None)
        unread = {k: v for k, v in s.unread.items() if k.startswith("memory_")}
        if s.memory_used_bytes is not None or s.memory_total_bytes is not None or unread:
            out[idx] = (s.memory_used_bytes, s.memory_total_bytes, unread)
    if not out:
        raise ParseError("hy-smi --showmeminfo vram: no 'vram Total Memory' lines")
    return out


def merge_meminfo(samples: Sequence[DeviceSample], mem: MemInfo) -> list[DeviceSample]:
    """Bytes from ``--showmeminfo vram`` filled into samples that lack them; once a device has both used
    and total bytes its percent-only ``memory_used_ratio`` is dropped (bytes are the better reading)."""
    out = []
    for s in samples:
        got = mem.get(s.device.index)
        if not s.up or got is None:
            out.append(s)
            continue
        used, total, unread = got
        used = s.memory_used_bytes if s.memory_used_bytes is not None else used
        total = s.memory_total_bytes if s.memory_total_bytes is not None else total
        out.append(
            replace(
                s,
                memory_used_bytes=used,
                memory_total_bytes=total,
                memory_used_ratio=None if used is not None and total is not None else s.memory_used_ratio,
                unread={**s.unread, **unread},
            )
        )
    return out


def parse_hygon_output(raw: str, require_markers: bool = True) -> list[DeviceSample]:
    """JSON when the tool printed JSON; else the key-value text a build that ignores ``--json`` prints for the
    ``--show*`` flags (bytes included: no extra call needed); else the table."""
    if raw.lstrip()[:1] in ("{", "["):
        return parse_hygon_json(raw, require_markers)
    if hy_smi_text_cards(raw, ("HCU", "DCU", "GPU")):
        return parse_hy_smi_text(raw, ("HCU", "DCU", "GPU"))
    return parse_hygon_table(raw)


# ---------------------------------------------------------------------------------------------------
# Backend


class HygonBackend:
    """Backend ``hygon``: runs ``hy-smi`` (else DTK ``rocm-smi``) with ``SMI_ARGS`` each poll
    (``SMI_MINIMAL_ARGS`` from the first refusal on): JSON, or the key-value text of a build that ignores
    ``--json`` (both carry bytes: one call), or the table; only when a device came without memory bytes (the
    table prints only ``VRAM%``) does it also run ``<tool> --showmeminfo vram``, the cheapest mode that gives
    used and total bytes in one call (stopped for good if the tool refuses it: exit status).

    ``options``: ``tool`` (a path or name; default hy-smi, then rocm-smi), ``args`` (list, replaces
    ``SMI_ARGS``), ``timeout_seconds`` (10). A device that disappears from the output is reported lost.
    """

    name = "hygon"

    def __init__(self, ctx: BackendContext) -> None:
        self.ctx = ctx
        self.timeout = float(ctx.options.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS))
        args: Any = ctx.options.get("args")
        full = tuple(str(a) for a in args) if args else SMI_ARGS
        self._flags = FlagFallback(full, full if args else SMI_MINIMAL_ARGS)
        self._tool: str | None = None
        self._tracker = LostTracker("hy-smi")
        self._meminfo = True

    def open(self) -> None:
        wanted = ctx_tool(self.ctx)
        for tool in wanted:
            if path := self.ctx.runner.which(tool):
                self._tool = path
                self._tracker = LostTracker(tool)
                return
        raise BackendError(f"hygon: none of {', '.join(wanted)} on PATH", reason="init")

    def sample(self) -> Sequence[DeviceSample]:
        if self._tool is None:
            self.open()
        assert self._tool is not None
        samples = parse_hygon_output(
            self._flags.run(self.ctx.runner, self._tool, self.timeout), require_markers=False
        )
        if self._meminfo and any(
            s.up and (s.memory_used_bytes is None or s.memory_total_bytes is None) for s in samples
        ):
            samples = self._with_meminfo(samples)
        return self._tracker.merge(samples)

    def _with_meminfo(self, samples: list[DeviceSample]) -> list[DeviceSample]:
        # Bytes are an improvement, never a condition: a failing extra call leaves the VRAM% ratio.
        assert self._tool is not None
        try:
            out = self.ctx.runner.run([self._tool, *MEMINFO_ARGS], self.timeout)
            return merge_meminfo(samples, parse_hy_smi_meminfo(out.stdout))
        except BackendError as exc:
            if exc.reason in ("exit_status", "not_recorded"):
                self._meminfo = False
            log.warning("%s --showmeminfo vram failed (%s): memory stays a percentage", self._tool, exc)
            return samples

    def close(self) -> None:
        self._tool = None


def ctx_tool(ctx: BackendContext) -> tuple[str, ...]:
    tool = ctx.options.get("tool")
    return (str(tool),) if tool else ("hy-smi", "rocm-smi")


def detect(ctx: BackendContext) -> Detection:
    """``hy-smi`` on PATH, or a ``rocm-smi`` that prints DCU/HCU markers. Never raises."""
    if path := ctx.runner.which("hy-smi"):
        return Detection(True, f"hy-smi found at {path}")
    path = ctx.runner.which("rocm-smi")
    if not path:
        return Detection(False, "no hy-smi or rocm-smi on PATH")
    try:
        out = ctx.runner.run([path, *DETECT_ARGS], DETECT_TIMEOUT_SECONDS)
    except BackendError as exc:
        return Detection(False, f"rocm-smi at {path} did not answer ({exc.reason})")
    if hygon_markers(out.stdout):
        return Detection(True, f"rocm-smi at {path} reports Hygon DCUs")
    return Detection(False, f"rocm-smi at {path} reports no Hygon DCU (AMD's)")


FORMATS: tuple[OutputFormat, ...] = (
    OutputFormat("hy-smi-json", parse_hygon_json, sniff_hygon_json),
    OutputFormat("hy-smi-text", parse_hy_smi_text, sniff_hy_smi_text, explain_hy_smi_text),
    OutputFormat("hy-smi-table", parse_hygon_table, sniff_hygon_table),
)


def _create(ctx: BackendContext) -> HygonBackend:
    return HygonBackend(ctx)


SPEC = register(
    BackendSpec(
        name="hygon",
        vendor=VENDOR,
        create=_create,
        detect=detect,
        formats=FORMATS,
        metrics=(MEMORY_AVAILABLE,),
        priority=40,
        supersedes=("amd",),
        options={"timeout_seconds": "seconds", "args": "any", "tool": "string"},
    )
)

__all__ = [
    "FORMATS",
    "MEMINFO_ARGS",
    "SPEC",
    "HygonBackend",
    "detect",
    "load_hy_smi_json",
    "merge_meminfo",
    "parse_hy_smi_meminfo",
    "parse_hy_smi_text",
    "parse_hygon_json",
    "parse_hygon_output",
    "parse_hygon_table",
]
