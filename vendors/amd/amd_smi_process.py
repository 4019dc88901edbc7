"""AMD per-process device memory (``amd-smi process --json`` and amdsmi's process list) into ProcessMemory.

Vendor layer: pure parsers; the backend and the amdsmi library edge call them.

Sources (ROCm/amdsmi): the library's ``amdsmi_get_gpu_process_list(handle)`` returns, since ROCm 6.1, a
list of dicts ``{name, pid, mem, engine_usage{gfx, enc}, memory_usage{gtt_mem, cpu_mem, vram_mem}}`` (7.x
adds ``cu_occupancy``, ``evicted_time``, ``sdma_usage``), every memory in bytes as plain ints; ROCm 6.0
returned process handles to pass to ``amdsmi_get_gpu_process_info(handle, process)``, which returns the
same dict. ``vram_mem`` is the VRAM the process holds on THIS device (``src/amd_smi/fdinfo.cc`` sums the
``drm-memory-vram`` lines of the process's fdinfo whose ``drm-pdev`` is this GPU's BDF); ``mem`` is
``gtt_mem + cpu_mem + vram_mem`` (system memory included), so it is never used as device memory.

The CLI (``amdsmi_cli/amdsmi_commands.py`` ``process``) prints, per GPU, ``{"gpu": N, "process_list":
[{"process_info": {...}}]}`` where ``process_info`` holds the library dict with ``mem`` renamed
``mem_usage`` and ``engine_usage`` renamed ``usage``, each number as ``{"value": x, "unit": "B"}``, or the
string ``"No running processes detected"`` on an idle GPU. With ``--general`` (and in the ROCm 6.2
changelog's example) ``memory_usage`` is absent: the process is listed with its memory unknown (None).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from xpuwatch.vendors.amd.readings import UNKNOWN_MODEL, VENDOR, Notes, amount, count, device_uuid, load_json
from xpuwatch.vendors.base import Device, DeviceSample, ParseError, ProcessMemory

# The reading name processes problems are reported under in DeviceSample.unread.
READING = "processes"


@dataclass(frozen=True)
class GpuProcesses:
    """One GPU's process list: ``processes`` None when the tool could not list them; ``unread`` as in
    ``DeviceSample.unread`` (``{"processes": reason}`` when an entry could not be read)."""

    processes: tuple[ProcessMemory, ...] | None
    unread: Mapping[str, str] = field(default_factory=dict)


def process_memory(entries: Iterable[object], notes: Notes) -> tuple[ProcessMemory, ...]:
    """Library dicts or CLI ``process_info`` mappings -> one ProcessMemory per pid (sorted by pid).

    Memory is ``memory_usage.vram_mem`` (bytes; a bare number is bytes, ``{"value", "unit"}`` any byte
    unit); "N/A" or absent is None. A pid that appears twice keeps the larger value (never the sum). An
    entry without a readable pid, or a garbled memory value, is recorded in ``notes.unread["processes"]``;
    the other processes are kept. Marker strings (``"No running processes detected"``, ``"N/A"``) are
    skipped.
    """
    used: dict[int, float | None] = {}
    for entry in entries:
        if isinstance(entry, Mapping) and "process_info" in entry:
            entry = entry["process_info"]
        if isinstance(entry, str):
            continue  # "No running processes detected" / "N/A"
        if not isinstance(entry, Mapping):
            notes.drop(READING, f"process entry {repr(entry)[:40]} is not a mapping")
            continue
        pid = count(entry.get("pid"))
        if pid is None or pid == 0:
            notes.drop(READING, f"pid {repr(entry.get('pid'))[:30]} is not a process id")
            continue
        usage = entry.get("memory_usage")
        raw = usage.get("vram_mem") if isinstance(usage, Mapping) else None
        mem = amount(raw, "bytes", "B", notes, "vram_mem", READING)
        prev = used.get(pid)
        used[pid] = mem if prev is None else max(prev, mem if mem is not None else prev)
    return tuple(ProcessMemory(p, m) for p, m in sorted(used.items()))


def _gpu_entries(doc: object) -> list[object]:
    if isinstance(doc, Mapping):
        doc = doc.get("gpu_data", [doc])
    if not isinstance(doc, list):
        raise ParseError("amd-smi process: expected a JSON list of GPUs")
    return doc


def parse_amd_smi_process(raw: str) -> dict[str, GpuProcesses]:
    """``amd-smi process --json`` -> GPU index (as ``amd-smi metric`` gives it) -> its processes.

    Shapes read: the list ``[{"gpu": N, "process_list": [...]}]`` (ROCm 6.2+), the same under
    ``{"gpu_data": [...]}``, and the per-process form of ``--sort-by-pid`` (``[{"pid", "gpus":
    [{"gpu_index", "memory_usage", ...}]}]``). A GPU whose ``process_list`` is not a list ("N/A") has
    ``processes`` None. Raises ParseError when the output is no JSON list of GPUs; never anything else.
    """
    entries = _gpu_entries(load_json(raw, "amd-smi process"))
    lists: dict[str, list[object]] = {}
    missing: set[str] = set()
    for gpu in entries:
        if not isinstance(gpu, Mapping):
            continue
        if isinstance(gpu.get("gpus"), list) and "pid" in gpu:  # --sort-by-pid: one entry per process
            for per in gpu["gpus"]:
                if isinstance(per, Mapping) and (idx := count(per.get("gpu_index"))) is not None:
                    lists.setdefault(str(idx), []).append({**per, "pid": gpu.get("pid")})
            continue
        idx = count(gpu.get("gpu"))
        if idx is None:
            continue
        procs = gpu.get("process_list")
        if isinstance(procs, list):
            lists.setdefault(str(idx), []).extend(procs)
        else:
            missing.add(str(idx))
    out: dict[str, GpuProcesses] = {}
    for key in sorted(set(lists) | missing, key=lambda i: (len(i), i)):
        if key not in lists:
            out[key] = GpuProcesses(None)
            continue
        notes = Notes()
        out[key] = GpuProcesses(process_memory(lists[key], notes), dict(notes.unread))
    return out


def parse_amd_smi_process_samples(raw: str) -> list[DeviceSample]:
    """``amd-smi process --json`` alone (``xpuwatch inspect``): one sample per GPU holding only its processes
    (identity unknown: index-based ids, as for a metric file without static). Raises ParseError when the
    output lists no GPU."""
    by_gpu = parse_amd_smi_process(raw)
    if not by_gpu:
        raise ParseError("amd-smi process: no GPU in the output")
    return [
        DeviceSample(
            device=Device(
                vendor=VENDOR,
                model=UNKNOWN_MODEL,
                index=idx,
                uuid=device_uuid(VENDOR, idx, None, None, None),
            ),
            processes=g.processes,
            unread=g.unread,
        )
        for idx, g in by_gpu.items()
    ]


_GPU_PROCESSES = re.compile(r'"gpu"\s*:\s*\d[^{}]*"process_list"\s*:|"gpu_index"\s*:\s*\d')


def sniff_amd_smi_process_json(raw: str) -> bool:
    """``amd-smi process --json``: an integer ``"gpu"`` followed by its ``"process_list"``, or the
    ``--sort-by-pid`` form's ``"gpu_index"`` entries."""
    head = raw.lstrip()[:4000]
    return head[:1] in ("[", "{") and _GPU_PROCESSES.search(head) is not None
