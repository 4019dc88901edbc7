"""The plain ``nvidia-smi`` table (the command with no options) -> one DeviceSample per GPU, its MIG devices as
slices: a format of ``xpuwatch inspect``, the output users paste most.

Vendor layer: a pure parser over ``vendors.smi_table`` (cells, units, per-cell isolation), registered by
``vendors.nvidia_smi``. It is NOT the nvidia-smi backend's fallback: the table prints no GPU UUID (the uuid
here is the PCI bus id), cuts long names, and has no clocks, throttle reasons, remapped rows or energy, so a
backend falling back from ``-q -x`` to it would rename every series it exports (the uuid label) and lose
half the readings; a host whose ``-q -x`` fails is better reported as failing (``xpuwatch_backend_up 0``).

Layout, in the eras of the captures under ``tests/fixtures/nvidia/`` (drivers 346 to 616)::

    | NVIDIA-SMI 550.54.15     Driver Version: 550.54.15     CUDA Version: 12.4     |   <- banner
    | NVIDIA-SMI 610.43.02     KMD Version: 610.43.02     CUDA UMD Version: 13.3    |      (610+)
    | NVIDIA-SMI 390.25        Driver Version: 390.25                               |      (before 410)
    |-------------------------------+----------------------+----------------------+   <- "+---" from 580
    | GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |   <- GPU section
    | Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
    |                               |                      |               MIG M. |   <- 450+
    |===============================+======================+======================|
    |   0  GeForce GTX 108...  Off  | 00000000:04:00.0 Off |                  N/A |   <- 2 or 3 lines per GPU
    | 53%   75C    P2   223W / 250W |  10807MiB / 11178MiB |     98%      Default |
    +-------------------------------+----------------------+----------------------+
    | MIG devices:                  (450+, only with MIG enabled)
    | GPU  GI  CI  MIG |         Memory-Usage |        Vol|         Shared        |  ("Shared Memory-Usage" 580+)
    |      ID  ID  Dev |           BAR1-Usage | SM     Unc| CE  ENC  DEC  OFA  JPG|
    |  1    3   0   0  |  14366MiB / 19968MiB | 28      0 |  2   0    1    0    0 |
    | Processes:                    ("Compute processes:" on 3xx)
    |  GPU   GI   CI        PID   Type   Process name                  GPU Memory |
    |    0   N/A  N/A      1032      C   python                            745MiB |

Columns are found by the header's cell boundaries (the ``|``) and, inside a cell, by the header's names
(separated by two or more spaces), never by character offsets, which move in every era (the 530/550
widening, the 580 PID column, Windows' ``Driver-Model`` / ``TCC/WDDM`` for ``Persistence-M``): value line i of
a GPU is read under header line i, cell j under header cell j, its tokens (``223W / 250W`` is one) paired
with the cell's names; the name cell is split as index, the name as printed (``GeForce GTX 108...`` is kept
cut), and the persistence/driver-model word. In the MIG section the names stack over the header lines
(``GI`` over ``ID``): its identity and SM cells are read on a device's first line, its memory cell line by
line (``Memory-Usage`` first, ``BAR1-Usage`` second).

Readings: Temp -> ``temperatures_celsius.core``; Pwr:Usage/Cap -> power and its limit; Memory-Usage ->
memory used/total (MiB); GPU-Util -> utilization; Volatile Uncorr. ECC -> ``ecc_errors.uncorrected`` (a
count; ``On``/``Off`` there is the ECC mode, which MIG GPUs print); Fan, Perf, Persistence-M and MIG M. ->
the ``vendors.nvidia_fields`` gauges. ``N/A`` is no reading (vGPU guests print it for temperature and power,
MIG GPUs for utilization, a pod given one MIG slice for the GPU's memory); ``ERR!`` and anything else that is
not a number in its unit cost that reading (``DeviceSample.unread``), never the GPU. MIG devices become
``Slice(kind="mig", slice_id="<GI>/<CI>")`` of the GPU in their GPU column, with the memory of their GPU
instance (compute instances of one GPU instance share it and print it alike: ``Shared Memory-Usage``) and a
profile derived from SMs and memory (``vendors.nvidia_fields.mig_profile_name``; ``1c.2g.10gb`` for two
compute instances sharing a ``2g`` instance). The processes section gives ``DeviceSample.processes`` (PIDs as
printed: a table printed inside a container shows the container's PIDs; ``N/A`` memory, as Windows and WSL
print, is a process without a memory reading); without that section the processes are unknown (None).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from xpuwatch.vendors import smi_table as t
from xpuwatch.vendors.base import Device, DeviceSample, ParseError, ProcessMemory, Slice
from xpuwatch.vendors.nvidia_fields import (
    FAN_SPEED,
    MIG_MODE,
    PERFORMANCE_STATE,
    PERSISTENCE_MODE,
    VENDOR,
    mig_profile_name,
    performance_state,
)
from xpuwatch.vendors.registry import OutputFormat

MIB = t.MIB
MAX_LINES = 50_000  # 64 GPUs with their MIG devices and processes print well under 2,000 lines

_BANNER = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD) Version:\s*(?P<driver>[^\s|]+)"
    r"(?:\s+CUDA(?: UMD)? Version:\s*(?P<cuda>[^\s|]+))?"
)
_NAMES = re.compile(r"\S+(?: \S+)*")  # header names: words one space apart, names two or more apart
_TOKEN = re.compile(r"\S+\s*/\s*\S+|\S+")  # "223W / 250W" and "N/A /  N/A" stay one token
_PERSISTENCE = ("Persistence-M", "Driver-Model", "TCC/WDDM")
_ON_OFF = {"on": 1.0, "off": 0.0}
_MIG_MODE = {"enabled": 1.0, "disabled": 0.0}
_SECTION_TITLES = ("MIG devices:", "Processes:", "Compute processes:")
# Header names of the GPU section that give a reading, and those that give none (listed by --explain).
_READ = frozenset(
    {"gpu", "name", "bus-id", "fan", "temp", "perf", "pwr:usage/cap", "memory-usage", "gpu-util"}
    | {"volatile uncorr. ecc", "mig m.", "persistence-m"}
)
# A last column whose value is words (compute mode "E. Process"): extra tokens of its cell belong to it.
_WORDS_LAST = frozenset({"Compute M."})
_UNUSED = {
    "disp.a": "display active (On/Off): no reading of the shared schema",
    "compute m.": "compute mode (Default, E. Process, Prohibited): no reading of the shared schema",
    "driver-model": "Windows driver model (WDDM/TCC): no reading of the shared schema",
    "tcc/wddm": "Windows driver model (WDDM/TCC): no reading of the shared schema",
}


@dataclass(frozen=True)
class Section:
    """One boxed section: ``title`` ("GPU", "MIG devices", "Processes"), its header lines split into ``|``
    cells, and its value blocks (lines between rules), each line split into cells; ``closed`` when a rule
    ended it (a paste cut inside a section leaves it open)."""

    title: str
    header: tuple[tuple[str, ...], ...]
    blocks: tuple[tuple[tuple[str, ...], ...], ...]
    closed: bool


@dataclass(frozen=True)
class Layout:
    """What the plain table holds: the banner's versions and its sections (GPU always first)."""

    smi_version: str
    driver_version: str | None
    cuda_version: str | None
    sections: tuple[Section, ...]

    def section(self, title: str) -> Section | None:
        return next((s for s in self.sections if s.title == title), None)


def _cells(line: str) -> tuple[str, ...]:
    """A table line's ``|`` cells without the outer border, each kept unstripped (token positions don't
    matter here, but an empty cell must stay a cell)."""
    s = line.strip()
    s = s[1:] if s.startswith("|") else s
    s = s[:-1] if s.endswith("|") else s
    return tuple(s.split("|"))


def _is_equals_rule(line: str) -> bool:
    s = line.strip()
    return t.is_rule(s) and "=" in s


def _title(line: str) -> str | None:
    first = line.strip().lstrip("|").strip()
    return next((title.rstrip(":") for title in _SECTION_TITLES if first.startswith(title)), None)


def read_layout(text: str) -> Layout:
    """The banner and sections of a plain ``nvidia-smi`` output (text before the banner, such as the date
    line or a shell prompt, is skipped; a second banner ends it). Raises ParseError when there is no
    banner or no GPU section header closed by its ``===`` rule."""
    if "\x00" in text:
        raise ParseError("nvidia-smi table: output contains NUL bytes")
    lines = text.splitlines()[:MAX_LINES]
    at = next((i for i, ln in enumerate(lines) if _BANNER.search(ln) and "|" in ln), None)
    if at is None:
        raise ParseError("nvidia-smi table: no 'NVIDIA-SMI ... Driver Version:' banner")
    m = _BANNER.search(lines[at])
    assert m is not None
    sections: list[Section] = []
    i = at + 1
    gpu_header = next((j for j in range(i, min(i + 6, len(lines))) if "Bus-Id" in lines[j]), None)
    if gpu_header is None:
        raise ParseError("nvidia-smi table: no GPU header ('GPU  Name ... Bus-Id') after the banner")
    section, i = _section("GPU", lines, gpu_header, title_line=None)
    sections.append(section)
    while i < len(lines):
        line = lines[i]
        if _BANNER.search(line):
            break  # a second nvidia-smi run pasted after the first
        title = _title(line) if line.strip().startswith("|") else None
        if title is None:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and t.is_rule(lines[j]) and not _is_equals_rule(lines[j]):
            j += 1
        section, i = _section(title, lines, j, title_line=i)
        sections.append(section)
    return Layout(m.group("smi"), m.group("driver"), m.group("cuda"), tuple(sections))


def _section(title: str, lines: list[str], start: int, title_line: int | None) -> tuple[Section, int]:
    """The section whose header starts at ``start``: header lines up to the ``===`` rule, then blocks
    separated by rules, up to a line that is neither a rule nor a ``|`` line. (section, next line)."""
    header: list[tuple[str, ...]] = []
    if title_line is not None:
        # "| Processes:                    GPU Memory |" (before 450): the title line carries header names
        blanked = _cells(lines[title_line].replace(f"{title}:", " " * (len(title) + 1), 1))
        if "".join(blanked).strip():
            header.append(blanked)
    i = start
    while i < len(lines) and not _is_equals_rule(lines[i]):
        if not lines[i].strip().startswith("|") or len(header) > 4:
            raise ParseError(f"nvidia-smi table: {title} header not closed by a '===' rule")
        header.append(_cells(lines[i]))
        i += 1
    if i >= len(lines):
        raise ParseError(f"nvidia-smi table: {title} header not closed by a '===' rule")
    i += 1
    blocks: list[tuple[tuple[str, ...], ...]] = []
    current: list[tuple[str, ...]] = []
    closed = False
    while i < len(lines):
        s = lines[i].strip()
        if t.is_rule(s):
            if current:
                blocks.append(tuple(current))
                current = []
            closed = s.startswith("+")
            i += 1
            if closed and (i >= len(lines) or not lines[i].strip().startswith(("|", "+"))):
                break
            continue
        if not s.startswith("|") or _title(s) is not None:
            break
        closed = False
        current.append(_cells(s))
        i += 1
    if current:
        blocks.append(tuple(current))
        closed = False
    return Section(title, tuple(header), tuple(blocks), closed), i


def _names(cell: str) -> list[str]:
    return _NAMES.findall(cell)


def _gpu_row(
    header: tuple[tuple[str, ...], ...], block: tuple[tuple[str, ...], ...]
) -> tuple[t.Row, dict[str, str]]:
    """One GPU's block as a Row (header name, lower-case -> token) plus the names whose cell could not be
    paired with its values (name -> why). Line i is read under header line i, cell j under header cell j."""
    values: dict[str, str] = {}
    bad: dict[str, str] = {}
    for i, line in enumerate(block):
        if i >= len(header):
            break
        head = header[i]
        for j, head_cell in enumerate(head):
            names = _names(head_cell)
            if not names:
                continue
            if len(line) != len(head):
                for n in names:
                    bad[n.lower()] = f"line {i + 1} has {len(line)} cells, the header {len(head)}"
                continue
            cell = line[j].strip()
            if names[0] == "GPU" and "Name" in names:
                tokens = cell.split()
                if not tokens:
                    continue
                values["gpu"] = tokens[0]
                persistence = next((p for p in names if p in _PERSISTENCE), None)
                if persistence is not None and len(tokens) >= 3:
                    values[persistence.lower()] = tokens[-1]
                    cell = cell.rsplit(None, 1)[0]
                values["name"] = cell[len(tokens[0]) :].strip()
                continue
            tokens = _TOKEN.findall(cell)
            if not tokens:
                continue
            if len(names) == 1:
                values[names[0].lower()] = cell
            else:
                if len(tokens) > len(names) and names[-1] in _WORDS_LAST:
                    tokens = [*tokens[: len(names) - 1], " ".join(tokens[len(names) - 1 :])]
                if len(tokens) != len(names):
                    for n in names:
                        bad[n.lower()] = f"{len(tokens)} values {cell[:40]!r} under {len(names)} columns"
                    continue
                values.update((n.lower(), tok) for n, tok in zip(names, tokens, strict=True))
    first = "|".join(block[0]) if block else ""
    return t.Row(values, first), bad


# Reading names of the GPU section's header names (for unread entries when a cell cannot be paired).
_READINGS: dict[str, tuple[str, ...]] = {
    "fan": (f"vendor_metrics.{FAN_SPEED}",),
    "temp": ("temperatures_celsius.core",),
    "perf": (f"vendor_metrics.{PERFORMANCE_STATE}",),
    "pwr:usage/cap": ("power_watts", "power_limit_watts"),
    "memory-usage": ("memory_used_bytes", "memory_total_bytes"),
    "gpu-util": ("utilization_ratio",),
    "volatile uncorr. ecc": ("ecc_errors.uncorrected",),
    "mig m.": (f"vendor_metrics.{MIG_MODE}",),
    "persistence-m": (f"vendor_metrics.{PERSISTENCE_MODE}",),
}


def _word(c: t.CellReader, field: str, names: Sequence[str], table: dict[str, float]) -> float | None:
    """A word column (On/Off, Enabled/Disabled; a trailing ``*`` marks a pending change, the word is the
    current state) -> its value; N/A -> None; any other word -> None and ``unread``."""
    text = c.text(*names)
    if text is None:
        return None
    got = table.get(text.rstrip("*").lower())
    if got is None:
        c.unread[field] = f"{names[0]}: {text[:20]!r} is not one of {'/'.join(table)}"
    return got


def _gpu_sample(row: t.Row, bad: dict[str, str], driver: str | None) -> DeviceSample:
    index, name = row.get("gpu") or "", row.get("name") or ""
    if not t.is_index(index) or not name:
        raise ParseError(f"GPU line {row.line[:60]!r} is not 'GPU  Name'")
    bus = t.pci_bus_id(row.get("bus-id") or "")
    device = Device(vendor=VENDOR, model=name, index=index, uuid=bus, pci_bus_id=bus, driver_version=driver)
    c = t.CellReader(row)
    for column, why in bad.items():
        for reading in _READINGS.get(column, ()):
            c.unread[reading] = why
    power, cap = c.pair(("power_watts", "power_limit_watts"), ["Pwr:Usage/Cap"], t.WATTS)
    used, total = c.pair(("memory_used_bytes", "memory_total_bytes"), ["Memory-Usage"], t.MEMORY_AS_BYTES)
    ecc_text = c.text("Volatile Uncorr. ECC")
    ecc: float | None = None
    if ecc_text is not None and ecc_text.lower() not in _ON_OFF:  # On/Off: the ECC mode (MIG GPUs)
        ecc = c.number("ecc_errors.uncorrected", ["Volatile Uncorr. ECC"], t.COUNT)
    vendor: dict[str, float] = {}
    fan = c.number(f"vendor_metrics.{FAN_SPEED}", ["Fan"], t.PERCENT_AS_RATIO)
    if fan is not None:
        vendor[FAN_SPEED] = fan
    perf = c.text("Perf")
    if perf is not None:
        state = performance_state(perf)
        if state is None:
            c.unread[f"vendor_metrics.{PERFORMANCE_STATE}"] = f"Perf: {perf[:20]!r} is not P0..P15"
        else:
            vendor[PERFORMANCE_STATE] = state
    persistence = _word(c, f"vendor_metrics.{PERSISTENCE_MODE}", ["Persistence-M"], _ON_OFF)
    if persistence is not None:
        vendor[PERSISTENCE_MODE] = persistence
    mig = _word(c, f"vendor_metrics.{MIG_MODE}", ["MIG M."], _MIG_MODE)
    if mig is not None:
        vendor[MIG_MODE] = mig
    return DeviceSample(
        device=device,
        utilization_ratio=c.number("utilization_ratio", ["GPU-Util"], t.PERCENT_AS_RATIO),
        memory_used_bytes=used,
        memory_total_bytes=total,
        temperatures_celsius=t.temperatures(c.number("temperatures_celsius.core", ["Temp"], t.CELSIUS)),
        power_watts=power,
        power_limit_watts=cap,
        ecc_errors={} if ecc is None else {"uncorrected": int(ecc)},
        vendor_metrics=vendor,
        unread=c.unread,
    )


@dataclass(frozen=True)
class _Mig:
    gpu: str
    gi: int
    ci: int
    sms: int | None
    used: float | None
    total: float | None
    unread: dict[str, str]


def _column(section: Section, name: str) -> tuple[int, int] | None:
    """(header line, cell) of the first header cell holding the name ``name``."""
    for i, head in enumerate(section.header):
        for j, cell in enumerate(head):
            if name in _names(cell) or any(n.endswith(" " + name) for n in _names(cell)):
                return i, j
    return None


def _mig_devices(section: Section) -> list[_Mig]:
    """The MIG section's devices; a block whose GPU/GI/CI cannot be read is left out."""
    ids, sm, memory = _column(section, "GI"), _column(section, "SM"), _column(section, "Memory-Usage")
    out: list[_Mig] = []
    if ids is None:
        return out
    for block in section.blocks:
        first = block[0]
        if len(first) <= ids[1]:
            continue
        tokens = first[ids[1]].split()
        if len(tokens) < 3 or not all(t.is_index(x) for x in tokens[:3]):
            continue
        unread: dict[str, str] = {}
        sms: int | None = None
        if sm is not None and len(first) > sm[1]:
            sm_tokens = first[sm[1]].split()
            sms = int(sm_tokens[0]) if sm_tokens and t.is_index(sm_tokens[0]) else None
        used = total = None
        if memory is not None and memory[0] < len(block) and len(block[memory[0]]) > memory[1]:
            row = t.Row({"memory-usage": block[memory[0]][memory[1]].strip()}, "|".join(first))
            c = t.CellReader(row)
            used, total = c.pair(
                ("memory_used_bytes", "memory_total_bytes"), ["Memory-Usage"], t.MEMORY_AS_BYTES
            )
            unread = c.unread
        out.append(_Mig(tokens[0], int(tokens[1]), int(tokens[2]), sms, used, total, unread))
    return out


def _slices(parent: DeviceSample, migs: Sequence[_Mig]) -> tuple[Slice, ...]:
    mine = [m for m in migs if m.gpu == parent.device.index]
    parent_total_mib = None if parent.memory_total_bytes is None else parent.memory_total_bytes / MIB
    gi_sms: dict[int, int] = {}
    for m in mine:
        gi_sms[m.gi] = gi_sms.get(m.gi, 0) + (m.sms or 0)
    return tuple(
        Slice(
            parent_uuid=parent.device.uuid,
            slice_id=f"{m.gi}/{m.ci}",
            profile=mig_profile_name(
                parent.device.model,
                m.sms,
                None if m.total is None else m.total / MIB,
                parent_total_mib,
                instance_sms=gi_sms.get(m.gi) or None,
            ),
            kind="mig",
            memory_used_bytes=m.used,
            memory_total_bytes=m.total,
        )
        for m in mine
    )


_PROCESS_MEMORY = re.compile(r"(?:N/A|[0-9]+(?:\.[0-9]+)?\s*(?:MiB|GiB|KiB|Mib|MB))")


def _processes(section: Section) -> tuple[dict[str, list[ProcessMemory]], set[str], bool]:
    """({GPU index: its processes}, GPU indexes with a row that could not be read, any unreadable row
    without a readable GPU index). Rows: GPU [GI CI] PID [Type] name memory; "No running processes found"."""
    names = {n for head in section.header for cell in head for n in _names(cell)}
    has_gi = "GI" in names and "CI" in names
    has_type = "Type" in names
    out: dict[str, list[ProcessMemory]] = {}
    bad: set[str] = set()
    lost = False
    for block in section.blocks:
        for line in block:
            text = " ".join(line).strip()
            if not text or text.lower().startswith("no running processes"):
                continue
            tokens = text.split()
            gpu = tokens[0]
            need = 1 + (2 if has_gi else 0) + 1 + (1 if has_type else 0) + 1
            pid_at = 3 if has_gi else 1
            if not t.is_index(gpu):
                lost = True
                continue
            if (
                len(tokens) < need
                or not t.is_index(tokens[pid_at])
                or not _PROCESS_MEMORY.fullmatch(tokens[-1])
            ):
                bad.add(gpu)
                continue
            memory = None
            if tokens[-1] != "N/A":
                try:
                    memory = t.quantity(tokens[-1], t.MEMORY_AS_BYTES, "process memory")
                except ParseError:
                    bad.add(gpu)
                    continue
            out.setdefault(gpu, []).append(ProcessMemory(int(tokens[pid_at]), memory))
    return out, bad, lost


def parse_table(text: str) -> list[DeviceSample]:
    """Plain ``nvidia-smi`` output -> one DeviceSample per GPU (readings and slices in the module docstring).
    Raises ParseError (only) when there is no banner or GPU header, or no GPU block can be identified (index,
    name and PCI bus id); a GPU whose identity is garbled is left out, a garbled reading costs that reading.
    """
    layout = read_layout(text)
    gpu = layout.sections[0]
    expected = len(gpu.header)
    blocks = list(gpu.blocks)
    if blocks and not gpu.closed and len(blocks[-1]) != expected:
        blocks.pop()  # a paste cut inside the last GPU's block
    rows = [_gpu_row(gpu.header, b) for b in blocks if b]
    samples: list[DeviceSample] = []
    seen: set[str] = set()
    first_error: ParseError | None = None
    for row, bad in rows:
        try:
            s = _gpu_sample(row, bad, layout.driver_version)
        except ParseError as exc:
            first_error = first_error or exc
            continue
        if s.device.uuid in seen or s.device.index in seen:
            raise ParseError(f"nvidia-smi table: GPU {s.device.index} ({s.device.uuid}) listed twice")
        seen.update((s.device.uuid, s.device.index))
        samples.append(s)
    if not samples:
        raise first_error or ParseError("nvidia-smi table: the GPU section lists no GPU")
    mig = layout.section("MIG devices")
    migs = _mig_devices(mig) if mig is not None else []
    procs = layout.section("Processes") or layout.section("Compute processes")
    by_gpu: dict[str, list[ProcessMemory]] = {}
    bad_gpus: set[str] = set()
    lost = False
    if procs is not None:
        by_gpu, bad_gpus, lost = _processes(procs)
    out: list[DeviceSample] = []
    for s in samples:
        changes: dict[str, object] = {}
        slices = _slices(s, migs)
        unread = dict(s.unread)
        for m in migs:
            if m.gpu == s.device.index:
                unread.update({f"slices.{m.gi}/{m.ci}.{k}": v for k, v in m.unread.items()})
        if procs is not None and procs.closed and not lost and s.device.index not in bad_gpus:
            changes["processes"] = tuple(by_gpu.get(s.device.index, ()))
        elif procs is not None and (lost or s.device.index in bad_gpus):
            unread["processes"] = "a row of the processes section could not be read"
        out.append(replace(s, slices=slices, unread=unread, **changes))  # type: ignore[arg-type]
    return out


def sniff_table(text: str) -> bool:
    """The plain nvidia-smi table: a ``| NVIDIA-SMI ... Driver/KMD Version:`` banner and the GPU header
    (Kunlunxin's XPU-SMI and Intel's HL-SMI copy the layout under their own names)."""
    head = text[:20000]
    return "Bus-Id" in head and any(_BANNER.search(ln) and "|" in ln for ln in head.splitlines())


def sections(text: str) -> list[str]:
    """The sections the reader found, one line each (``xpuwatch inspect --explain``). Raises ParseError."""
    layout = read_layout(text)
    cuda = f", CUDA version {layout.cuda_version}" if layout.cuda_version else ""
    out = [f"banner: NVIDIA-SMI {layout.smi_version}, driver {layout.driver_version or '?'}{cuda}"]
    for s in layout.sections:
        lines = len(s.header) if s.title == "GPU" else None
        what = {
            "GPU": f"{len(s.blocks)} GPU block(s) of {lines} line(s)",
            "MIG devices": f"{len(_mig_devices(s))} MIG device(s) read as slices of {len(s.blocks)} listed",
            "Processes": f"{sum(len(b) for b in s.blocks)} row(s)",
            "Compute processes": f"{sum(len(b) for b in s.blocks)} row(s)",
        }[s.title]
        out.append(f"{s.title} section: {what}{'' if s.closed else ' (not closed: output cut?)'}")
    return out


def explain_table(text: str) -> list[str]:
    """The columns of each section the reader does not turn into readings, once each."""
    layout = read_layout(text)
    out: list[str] = []
    if layout.cuda_version:
        out.append("banner CUDA Version: the CUDA version the driver supports, no reading")
    gpu = layout.sections[0]
    for head in gpu.header:
        for cell in head:
            for name in _names(cell):
                key = name.lower()
                if key not in _READ:
                    out.append(f"GPU section {name}: {_UNUSED.get(key, 'no reading of the shared schema')}")
    mig = layout.section("MIG devices")
    if mig is not None:
        skipped = [
            n
            for head in mig.header
            for cell in head
            for n in _names(cell)
            if n not in ("GPU", "GI", "CI", "ID", "SM", "Memory-Usage", "Shared Memory-Usage")
        ]
        out.append(
            f"MIG devices section {', '.join(dict.fromkeys(skipped))}: BAR1 usage, MIG device index, "
            "volatile ECC and engine counts per instance have no slice reading (SM count only names the profile)"
        )
    procs = layout.section("Processes") or layout.section("Compute processes")
    if procs is not None:
        out.append(f"{procs.title} section Type, Process name: only PID and GPU memory are read")
    return out


TABLE_FORMAT = OutputFormat(
    name="nvidia-smi-table",
    parse=parse_table,
    sniff=sniff_table,
    explain=explain_table,
    sections=sections,
)
