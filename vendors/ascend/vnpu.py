"""Ascend npu-smi reading: `npu-smi info -t info-vnpu -i N -c C` (a chip's vNPUs) -> VnpuReport, and vNPU Slices.

Layout (Huawei MindCluster docs, ``docs/zh/scheduling/usage/virtual_instance.md``, "查询vNPU信息"; real output in
``tests/fixtures/ascend/npu-smi_info_-t_info-vnpu_*``): a resource box whose header names the resources
(``AICORE Memory AICPU VPC VENC VDEC JPEGD JPEGE PNGD``, Memory in GB) and whose value row prints each as
``Free/Total`` (``NA/NA`` where the query is not supported), then ``Total number of vnpu: N``, then one row per
vNPU: ``Vnpu ID | Vgroup ID | Container ID | Status | Template Name``.

Template names carry the vNPU's size: ``vir<AI cores>`` then optional ``_<AI CPUs>c``, ``_<memory>g`` and
suffixes (``vir10_3c_16g``, ``vir05_1c_8g``, ``vir04_3c_ndvpp``; the 910's ``vir02``/``vir04``/``vir08``/``vir16``
name only AI cores): the vNPU's AI-core share is ``cores / AICORE Total``; its memory is the ``_<n>g`` part (GB,
taken as GiB like npu-smi's MB are MiB), None when the name has none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xpuwatch.vendors.ascend.records import _int, _lines, _reject_usage_text
from xpuwatch.vendors.base import ParseError, Slice

GIB = 1 << 30
_TEMPLATE = re.compile(
    r"^vir(?P<cores>\d{1,3})(?:_(?P<cpus>\d{1,2})c)?(?:_(?P<mem>\d{1,4})g)?(?:_[a-z0-9]+)*$", re.I
)
_TOTAL = re.compile(r"Total number of vnpu\s*:\s*(\d{1,4})", re.I)
_FREE_TOTAL = re.compile(r"^(?P<free>\d{1,9}|NA)/(?P<total>\d{1,9}|NA)$", re.I)


@dataclass(frozen=True)
class Vnpu:
    """One row of the vNPU list. ``status``: 0 idle, 1 mounted in a container (as printed)."""

    vnpu_id: int
    vgroup_id: int | None
    container_id: str | None
    status: int | None
    template: str


@dataclass(frozen=True)
class VnpuReport:
    """A chip's vNPU report: resource (lower-case header name) -> (free, total), None where NA; the vNPUs."""

    resources: dict[str, tuple[int | None, int | None]]
    vnpus: tuple[Vnpu, ...]


def parse_vnpu_info(text: str) -> VnpuReport:
    """Parse ``npu-smi info -t info-vnpu -i N -c C``. Raises ParseError on usage text, a missing resource row
    or vNPU count, a malformed row, or fewer/more rows than ``Total number of vnpu`` (a truncated output)."""
    what = "npu-smi info -t info-vnpu"
    _reject_usage_text(text)
    lines = [ln.strip("|").strip() for ln in _lines(text)]
    head = next((i for i, ln in enumerate(lines) if ln.upper().startswith("AICORE") and "Memory" in ln), None)
    if head is None:
        raise ParseError(f"{what}: resource header 'AICORE Memory ...' not found")
    names = [n.lower() for n in lines[head].split()]
    sep = next((i for i in range(head + 1, len(lines)) if lines[i].startswith("===")), None)
    if sep is None or sep + 1 >= len(lines):
        raise ParseError(f"{what}: resource values not found")
    values = lines[sep + 1].split()
    if len(values) != len(names):
        raise ParseError(f"{what}: {len(values)} resource values under {len(names)} names")
    resources: dict[str, tuple[int | None, int | None]] = {}
    for name, cell in zip(names, values, strict=True):
        m = _FREE_TOTAL.match(cell)
        if not m:
            raise ParseError(f"{what}: {name} {cell[:20]!r} is not Free/Total")
        resources[name] = tuple(  # type: ignore[assignment]
            None if v.upper() == "NA" else int(v) for v in (m.group("free"), m.group("total"))
        )
    total_at = next((i for i, ln in enumerate(lines) if _TOTAL.search(ln)), None)
    if total_at is None:
        raise ParseError(f"{what}: 'Total number of vnpu' not found")
    count = int(_TOTAL.search(lines[total_at]).group(1))  # type: ignore[union-attr]
    rows: list[Vnpu] = []
    for n, ln in enumerate(lines[total_at + 1 :], total_at + 2):
        if not ln or ln.startswith(("+", "-", "=")) or ln.lower().startswith("vnpu id"):
            continue
        cells = [c.strip() for c in ln.split("|")]
        if len(cells) != 5:
            raise ParseError(f"{what}: line {n}: {len(cells)} cells, want 5")
        vid, group, container, status, template = cells
        if not _TEMPLATE.match(template):
            raise ParseError(f"{what}: line {n}: template {template[:30]!r} is not vir<cores>...")
        rows.append(
            Vnpu(
                vnpu_id=_int(vid, "Vnpu ID"),
                vgroup_id=None if group.upper() in ("NA", "-", "") else _int(group, "Vgroup ID"),
                container_id=None if container.upper() in ("NA", "-", "") else container[:64],
                status=None if status.upper() in ("NA", "-", "") else _int(status, "Status"),
                template=template,
            )
        )
    if len(rows) != count:
        raise ParseError(f"{what}: {len(rows)} vNPU rows but 'Total number of vnpu: {count}'")
    if len({r.vnpu_id for r in rows}) != len(rows):
        raise ParseError(f"{what}: a Vnpu ID listed twice")
    return VnpuReport(resources=resources, vnpus=tuple(rows))


def template_size(template: str) -> tuple[int | None, float | None]:
    """(AI cores, memory bytes or None) of a template name (``vir10_3c_16g`` -> (10, 16 GiB))."""
    m = _TEMPLATE.match(template)
    if not m:
        return None, None
    mem = m.group("mem")
    return int(m.group("cores")), (int(mem) * GIB if mem else None)


def vnpu_slices(report: VnpuReport, parent_uuid: str) -> tuple[Slice, ...]:
    """Each vNPU as a Slice(kind="vnpu"): slice_id = Vnpu ID (the number in the device plugin's
    ``Ascend910-<cores>c-<vnpu id>-<phy id>``), profile = template name, memory_total_bytes = the template's
    memory, compute_limit_ratio = template AI cores / the chip's AICORE Total (None when not printed)."""
    total = report.resources.get("aicore", (None, None))[1]
    out = []
    for v in report.vnpus:
        cores, mem = template_size(v.template)
        out.append(
            Slice(
                parent_uuid=parent_uuid,
                slice_id=str(v.vnpu_id),
                profile=v.template,
                kind="vnpu",
                memory_total_bytes=mem,
                compute_limit_ratio=(min(1.0, cores / total) if cores is not None and total else None),
            )
        )
    return tuple(out)
