"""Ascend npu-smi reading: the `npu-smi info -t usages|common|health` key/value reports -> CardReport, HealthReport."""

from __future__ import annotations

import re

from xpuwatch.vendors.ascend.records import (
    _HEX_CODE,
    _NA,
    MAX_FAULT_CODES,
    CardReport,
    HealthReport,
    _int,
    _lines,
    _reject_usage_text,
)
from xpuwatch.vendors.base import ParseError

# --------------------------------------------------------------------------------------------------------
# npu-smi info -t usages | common | health  ("Key  : value" blocks)


def _paragraphs(text: str, what: str) -> list[list[tuple[str, str]]]:
    """Blank-line separated blocks of (key, value). A line ``: more`` continues the previous key (Error
    Information); a non-blank line without a colon is garbage."""
    _reject_usage_text(text)
    paras: list[list[tuple[str, str]]] = [[]]
    last: list[tuple[str, str]] | None = None
    for n, line in enumerate(_lines(text), 1):
        if not line:
            if paras[-1]:
                paras.append([])
            continue
        if ":" not in line:
            raise ParseError(f"{what}: line {n}: not 'key : value': {line[:60]!r}")
        key, value = (s.strip() for s in line.split(":", 1))
        if not key:
            if last is None or not last:
                raise ParseError(f"{what}: line {n}: continuation without a key")
            k, v = last[-1]
            last[-1] = (k, f"{v} {value}".strip())
            continue
        paras[-1].append((key, value))
        last = paras[-1]
    return [p for p in paras if p]


def parse_card_report(text: str, what: str = "npu-smi info -t usages|common") -> CardReport:
    """Parse ``npu-smi info -t usages -i N`` or ``-t common -i N``: one block per chip (``Chip ID`` after
    its block in usages, before it in common), an optional ``Chip Name : mcu`` block (310P/910B card
    power), and the ``NPU ID`` / ``Chip Count`` header. Raises ParseError on usage text, garbage, a key
    repeated inside one block, or no chip block at all."""
    npu_id: int | None = None
    count: int | None = None
    chips: dict[int, dict[str, str]] = {}
    mcu: dict[str, str] = {}
    loose: list[dict[str, str]] = []
    for para in _paragraphs(text, what):
        block: dict[str, str] = {}
        for k, v in para:
            if k in block:
                raise ParseError(f"{what}: {k!r} twice in one block")
            block[k] = v
        if "NPU ID" in block:
            npu_id = _int(block.pop("NPU ID"), "NPU ID")
        if "Chip Count" in block:
            count = _int(block.pop("Chip Count"), "Chip Count")
        if block.get("Chip Name", "").lower() == "mcu":
            mcu = block
        elif "Chip ID" in block:
            cid = _int(block.pop("Chip ID"), "Chip ID")
            if cid in chips:
                raise ParseError(f"{what}: chip {cid} twice")
            chips[cid] = block
        elif block:
            loose.append(block)
    if loose and not chips and count == 1 and len(loose) == 1:
        chips[0] = loose[0]  # a one-chip card printed without its Chip ID line
    elif loose:
        raise ParseError(f"{what}: a block without 'Chip ID'")
    if not chips:
        raise ParseError(f"{what}: no chip block")
    if count is not None and len(chips) > count:
        raise ParseError(f"{what}: {len(chips)} chip blocks but Chip Count {count}")
    return CardReport(npu_id=npu_id, chip_count=count, chips=chips, mcu=mcu)


def parse_health(text: str) -> HealthReport:
    """Parse ``npu-smi info -t health -i N -c C``: Health Status, Error Code (``NA`` or hex codes separated
    by spaces, kept as printed, at most MAX_FAULT_CODES), Error Information (continuation lines joined)."""
    what = "npu-smi info -t health"
    kv: dict[str, str] = {}
    for para in _paragraphs(text, what):
        for k, v in para:
            if k in kv:
                raise ParseError(f"{what}: {k!r} twice")
            kv[k] = v
    status = kv.get("Health Status")
    if status is None:
        raise ParseError(f"{what}: no 'Health Status'")
    if not re.match(r"^[A-Za-z][A-Za-z ]{0,30}$", status):
        raise ParseError(f"{what}: bad Health Status {status[:40]!r}")
    raw = kv.get("Error Code", "NA").strip()
    codes: tuple[str, ...] = ()
    if raw.lower() not in _NA:
        toks = [t for t in raw.replace(",", " ").split() if t.strip(".")]  # "..." when the list goes on
        for t in toks:
            if not _HEX_CODE.match(t):
                raise ParseError(f"{what}: bad Error Code {t[:20]!r}")
        codes = tuple(dict.fromkeys(toks))[:MAX_FAULT_CODES]
    info = kv.get("Error Information", "NA")
    return HealthReport(
        status=status,
        codes=codes,
        information="" if info.strip().lower() in _NA else info,
        npu_id=_int(kv["NPU ID"], "NPU ID") if "NPU ID" in kv else None,
        chip_id=_int(kv["Chip ID"], "Chip ID") if "Chip ID" in kv else None,
    )
