"""Hygon DCUs into DeviceSamples: ``hy-smi``, else the DTK's ``rocm-smi``, as JSON (or the default table).

Vendor layer. Hygon's DTK ships a fork of AMD's rocm-smi, both as ``hy-smi`` and under the name
``rocm-smi``. Its JSON keeps rocm-smi's layout (``card0..N`` objects, every value a string) with "DCU"
keys and MiB memory: ``DCU use (%)``, ``DCU memory use (%)``, ``vram Total Memory (MiB)``,
``vram Total Used Memory (MiB)``, ``Temperature (Sensor edge|junction|mem) (C)``,
``Average Graphics Package Power (W)``, ``Max Graphics Package Power (W)`` (shared/reference/vendors.md
3.2; fixture ``hygon/rocm-smi_json_hygon_dcu_dtk24.04.3.json``). The key/unit reading is the AMD
module's rocm-smi reader (``vendors.amd.rocm_smi_sample``): units come from each key's ``(...)`` suffix.

The default table (``DCU Temp AvgPwr Fan Perf PwrCap VRAM% DCU%``, fixture
``hygon/rocm-smi_table_dcu_dtk23.10.1.txt``) gives temperature (edge), power, cap and DCU% only.

Device uuid: ``Unique ID`` when non-zero (``0x%016x``), else ``Serial Number``, else ``pci-<PCI Bus>``,
else ``hygon-index-<n>`` (the table form has no id at all: index-based, stable while enumeration is).

Detection runs before AMD's (priority 40 < 50) and supersedes it: ``hy-smi`` on PATH, or a ``rocm-smi``
whose ``--showproductname --json`` output carries DCU markers ("DCU" keys, vendor "Chengdu Haiguang").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vendors.amd import (
    ROCM_SMI_ARGS,
    ROCM_SMI_MINIMAL_ARGS,
    UNKNOWN_MODEL,
    FlagFallback,
    LostTracker,
    Notes,
    hygon_card,
    hygon_markers,
    load_json,
    nonneg,
    ratio,
    rocm_smi_cards,
    rocm_smi_driver,
    rocm_smi_sample,
    scaled,
    with_notes,
)
from vendors.base import BackendError, Device, DeviceSample, ParseError
from vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register

log = logging.getLogger(__name__)

VENDOR = "hygon"
DEFAULT_TIMEOUT_SECONDS = 10.0
# The same flags as AMD's rocm-smi (the DTK tools are its fork); the minimal set is what gpustack ran on
# DTK 24.04.3 to produce the JSON fixture.
SMI_ARGS = ROCM_SMI_ARGS
SMI_MINIMAL_ARGS = ROCM_SMI_MINIMAL_ARGS
DETECT_ARGS = ("--showproductname", "--json")
DETECT_TIMEOUT_SECONDS = 5.0


def parse_hygon_json(raw: str, require_markers: bool = True) -> list[DeviceSample]:
    """``hy-smi --json`` / DTK ``rocm-smi --json`` -> one DeviceSample per DCU. Raises ParseError.

    As an ``inspect`` format, output without any Hygon marker is refused (it is AMD's rocm-smi: use
    ``rocm-smi-json``); the backend, which knows it ran a Hygon tool, passes ``require_markers=False``.
    """
    doc = load_json(raw, "hy-smi")
    cards = rocm_smi_cards(doc, "hy-smi")
    if require_markers and not any(hygon_card(card) for _, card in cards):
        raise ParseError("hy-smi: no DCU keys or Hygon vendor string: this is AMD rocm-smi output")
    driver = rocm_smi_driver(doc) if isinstance(doc, Mapping) else None
    return [rocm_smi_sample(VENDOR, idx, card, driver) for idx, card in cards]


def sniff_hygon_json(raw: str) -> bool:
    head = raw[:20000]
    return re.search(r'"card\d+"\s*:', head) is not None and hygon_markers(head)


_TABLE_HEADER = re.compile(r"^\s*DCU\s+Temp\b")


def parse_hygon_table(raw: str) -> list[DeviceSample]:
    """The default ``hy-smi``/DTK ``rocm-smi`` table -> DeviceSamples. Raises ParseError.

    Columns by header name, rows until the next ``====`` rule: ``Temp`` ("30.0c") -> core: rocm-smi's
    concise view prints the first sensor that answers in the order edge, junction, memory
    (``rocm_smi.py`` ``getTemperatureLabel``), and DCUs have an edge sensor (JSON fixture), ``AvgPwr`` ("38.0W"), ``PwrCap`` ("280.0W"), ``DCU%``
    -> utilization. ``VRAM%`` (allocated share) has no bytes to go with it and is not exported.
    """
    lines = raw.splitlines()
    hdr_at = next((i for i, line in enumerate(lines) if _TABLE_HEADER.match(line)), None)
    if hdr_at is None:
        raise ParseError("hy-smi table: no 'DCU Temp ...' header")
    header = lines[hdr_at].split()
    out: list[DeviceSample] = []
    for line in lines[hdr_at + 1 :]:
        if not line.strip() or line.lstrip().startswith("="):
            break
        cells = line.split()
        if len(cells) != len(header):
            raise ParseError(f"hy-smi table: row has {len(cells)} cells for {len(header)} columns")
        row = dict(zip(header, cells, strict=True))
        idx = row["DCU"]
        if not idx.isdigit():
            raise ParseError(f"hy-smi table: DCU index {idx[:20]!r} is not a number")
        idx = str(int(idx))
        notes = Notes()
        temp = scaled(row.get("Temp"), "celsius", "C", notes, "Temp")
        sample = DeviceSample(
            device=Device(vendor=VENDOR, model=UNKNOWN_MODEL, index=idx, uuid=f"{VENDOR}-index-{idx}"),
            utilization_ratio=ratio(row.get("DCU%"), notes, "DCU%"),
            temperatures_celsius={"core": temp} if temp is not None else {},
            power_watts=nonneg(scaled(row.get("AvgPwr"), "power", "W", notes, "AvgPwr"), notes, "AvgPwr"),
            power_limit_watts=nonneg(
                scaled(row.get("PwrCap"), "power", "W", notes, "PwrCap"), notes, "PwrCap"
            ),
        )
        out.append(with_notes(sample, notes))
    if not out:
        raise ParseError("hy-smi table: header without DCU rows")
    return out


def sniff_hygon_table(raw: str) -> bool:
    return any(_TABLE_HEADER.match(line) and "DCU%" in line for line in raw.splitlines()[:20])


def parse_hygon_output(raw: str, require_markers: bool = True) -> list[DeviceSample]:
    """JSON when the tool printed JSON, else the table (older hy-smi builds ignore ``--json``)."""
    if raw.lstrip()[:1] in ("{", "["):
        return parse_hygon_json(raw, require_markers)
    return parse_hygon_table(raw)


class HygonBackend:
    """Backend ``hygon``: runs ``hy-smi`` (else DTK ``rocm-smi``) with ``SMI_ARGS`` each poll
    (``SMI_MINIMAL_ARGS`` from the first refusal on).

    ``options``: ``tool`` (a path or name; default hy-smi, then rocm-smi), ``args`` (list, replaces
    ``SMI_ARGS``), ``timeout_seconds`` (10). A DCU that disappears from the output is reported lost.
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
        return self._tracker.merge(
            parse_hygon_output(
                self._flags.run(self.ctx.runner, self._tool, self.timeout), require_markers=False
            )
        )

    def close(self) -> None:
        self._tool = None


def ctx_tool(ctx: BackendContext) -> tuple[str, ...]:
    tool = ctx.options.get("tool")
    return (str(tool),) if tool else ("hy-smi", "rocm-smi")


def detect(ctx: BackendContext) -> Detection:
    """``hy-smi`` on PATH, or a ``rocm-smi`` that prints DCU markers. Never raises."""
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
        priority=40,
        supersedes=("amd",),
        options={"timeout_seconds": "seconds", "args": "any", "tool": "string"},
    )
)

__all__ = [
    "FORMATS",
    "SPEC",
    "HygonBackend",
    "detect",
    "parse_hygon_json",
    "parse_hygon_output",
    "parse_hygon_table",
]
