"""Backend ``amd``: picks the amdsmi library, else ``amd-smi``, else ``rocm-smi``; its one registration.

Vendor layer: the I/O edge (tool runs, library open/close) over the pure parsers of this package.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from xpuwatch.vendors.amd.amd_smi_json import (
    Identity,
    parse_amd_smi_metric,
    parse_amd_smi_static,
    parse_amd_smi_static_samples,
    sniff_amd_smi_json,
    sniff_amd_smi_static_json,
)
from xpuwatch.vendors.amd.amd_smi_monitor import parse_amd_smi_monitor, sniff_amd_smi_monitor
from xpuwatch.vendors.amd.amd_smi_process import (
    READING,
    GpuProcesses,
    parse_amd_smi_process,
    parse_amd_smi_process_samples,
    sniff_amd_smi_process_json,
)
from xpuwatch.vendors.amd.amd_smi_table import explain_amd_smi_table, parse_amd_smi_table, sniff_amd_smi_table
from xpuwatch.vendors.amd.amdsmi_library import AmdSmiLibrary
from xpuwatch.vendors.amd.readings import ECC_DEFERRED, VENDOR
from xpuwatch.vendors.amd.rocm_smi_json import parse_rocm_smi_json, sniff_rocm_smi_json
from xpuwatch.vendors.amd.rocm_smi_table import (
    explain_rocm_smi_table,
    parse_rocm_smi_table,
    sniff_rocm_smi_table,
)
from xpuwatch.vendors.base import BackendError, Device, DeviceSample, ParseError
from xpuwatch.vendors.command import CommandRunner, SubprocessRunner
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat, register

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 10.0
# amd-smi static is slow (VBIOS, RAS reads) and nearly constant: refreshed every this many polls.
STATIC_REFRESH_POLLS = 60


AMD_SMI_METRIC = ("metric", "--json")
AMD_SMI_STATIC = ("static", "--json")
AMD_SMI_PROCESS = ("process", "--json")
# The flags gpustack runs against rocm-smi 6.2.4 and DTK 24.04.3 (source of both JSON fixtures) ...
ROCM_SMI_BASE_ARGS = (
    "-i",
    "--showmeminfo",
    "vram",
    "--showpower",
    "--showserial",
    "--showuse",
    "--showtemp",
    "--showproductname",
    "--showuniqueid",
)
# ... plus power cap, bus id, memory busy %: tried first, dropped for good if the tool refuses them.
ROCM_SMI_EXTRA_ARGS = ("--showmaxpower", "--showbus", "--showmemuse")
ROCM_SMI_ARGS = (*ROCM_SMI_BASE_ARGS, *ROCM_SMI_EXTRA_ARGS, "--json")
ROCM_SMI_MINIMAL_ARGS = (*ROCM_SMI_BASE_ARGS, "--json")


class FlagFallback:
    """Runs a rocm-smi-family tool with the full flag set; if it exits non-zero, retries with the minimal
    set and keeps that one (an older build that rejects a flag would otherwise fail every poll). A replayed
    bundle that holds only the minimal call (``not_recorded``: captured with the minimal flags) falls back
    the same way."""

    def __init__(self, full: Sequence[str], minimal: Sequence[str]) -> None:
        self.candidates = [tuple(full)] if tuple(full) == tuple(minimal) else [tuple(full), tuple(minimal)]

    def run(self, runner: CommandRunner, tool: str, timeout: float) -> str:
        while True:
            try:
                return runner.run([tool, *self.candidates[0]], timeout).stdout
            except BackendError as exc:
                if exc.reason not in ("exit_status", "not_recorded") or len(self.candidates) == 1:
                    raise
                log.warning("%s refused %s (%s): retrying with fewer flags", tool, self.candidates[0], exc)
                self.candidates.pop(0)


SOURCES = ("auto", "amdsmi", "amd-smi", "rocm-smi")
KFD_PATH = "/dev/kfd"  # created by the amdgpu (ROCm) kernel driver


def _import_amdsmi() -> Any:
    # The package loads libamd_smi.so with ctypes at import: a missing or broken library is an OSError.
    try:
        return importlib.import_module("amdsmi")
    except OSError as exc:
        raise ImportError(f"amdsmi: cannot load libamd_smi: {exc}") from exc


class LostTracker:
    """Keeps every device seen so far: one that vanishes from a tool's output is reported lost, not dropped."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.known: dict[str, Device] = {}

    def merge(self, samples: Sequence[DeviceSample]) -> list[DeviceSample]:
        seen = {s.device.index for s in samples}
        for s in samples:
            self.known[s.device.index] = s.device
        lost = [
            DeviceSample.lost(dev, f"missing from {self.tool} output")
            for idx, dev in self.known.items()
            if idx not in seen
        ]
        return sorted([*samples, *lost], key=lambda s: (len(s.device.index), s.device.index))


class AmdBackend:
    """Backend ``amd``: amdsmi library where importable, else ``amd-smi``, else ``rocm-smi`` (see module doc).

    ``options``: ``source`` (auto|amdsmi|amd-smi|rocm-smi), ``timeout_seconds`` per tool call (10),
    ``processes`` (false): with the ``amd-smi`` CLI, also run ``amd-smi process --json`` each poll for the
    per-process VRAM (a second CLI start per poll, so opt-in; the amdsmi library always lists processes,
    one cheap call per GPU).
    ``amdsmi_module`` injects a module with the amdsmi API (tests); ``None`` imports ``amdsmi``.
    """

    name = "amd"

    def __init__(self, ctx: BackendContext, amdsmi_module: Any = None) -> None:
        self.ctx = ctx
        self.source = str(ctx.options.get("source", "auto"))
        if self.source not in SOURCES:
            raise BackendError(
                f"amd: unknown source {self.source!r} (one of {', '.join(SOURCES)})", reason="init"
            )
        self.timeout = float(ctx.options.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS))
        self.processes = bool(ctx.options.get("processes", False))
        self._module = amdsmi_module
        self._lib: AmdSmiLibrary | None = None
        self._tool: str | None = None
        self._kind: str | None = None  # the source in use after open()
        self._static: dict[str, Identity] = {}
        self._polls = 0
        self._tracker = LostTracker("amd-smi")
        self._flags = FlagFallback(ROCM_SMI_ARGS, ROCM_SMI_MINIMAL_ARGS)

    @property
    def active_source(self) -> str | None:
        return self._kind

    def open(self) -> None:
        # In auto mode the library is only used live: a capture (RecordingRunner) must record tool output
        # and a replay (ReplayRunner) must not read this host's GPUs.
        live = isinstance(self.ctx.runner, SubprocessRunner)
        if self.source == "amdsmi" or (self.source == "auto" and live):
            try:
                module = self._module if self._module is not None else _import_amdsmi()
                lib = AmdSmiLibrary(module)
                lib.open()
                self._lib, self._kind = lib, "amdsmi"
                return
            except ImportError as exc:
                if self.source == "amdsmi":
                    raise BackendError(f"amdsmi not importable: {exc}", reason="init") from exc
            except BackendError:
                if self.source == "amdsmi":
                    raise
                log.warning("amdsmi unusable, falling back to the amd-smi/rocm-smi CLI", exc_info=True)
        for kind in ("amd-smi", "rocm-smi"):
            if self.source in ("auto", kind) and (path := self.ctx.runner.which(kind)):
                self._tool, self._kind = path, kind
                self._tracker = LostTracker(kind)
                return
        raise BackendError("amd: neither the amdsmi library nor amd-smi/rocm-smi is available", reason="init")

    def sample(self) -> Sequence[DeviceSample]:
        if self._kind is None:
            self.open()
        if self._lib is not None:
            try:
                return self._lib.sample()
            except Exception as exc:  # a library fault outside the per-call errors fails this poll only
                raise BackendError(f"amdsmi: {type(exc).__name__}: {exc}"[:200], reason="library") from exc
        assert self._tool is not None
        if self._kind == "amd-smi":
            # Not retried every poll when it fails: a hanging `static` would cost a timeout each time.
            if self._polls % STATIC_REFRESH_POLLS == 0:
                self._refresh_static()
            self._polls += 1
            out = self.ctx.runner.run([self._tool, *AMD_SMI_METRIC], self.timeout)
            samples = parse_amd_smi_metric(out.stdout, self._static)
            if self.processes:
                samples = with_processes(samples, self._read_processes())
            return self._tracker.merge(samples)
        return self._tracker.merge(
            parse_rocm_smi_json(self._flags.run(self.ctx.runner, self._tool, self.timeout))
        )

    def _read_processes(self) -> Mapping[str, GpuProcesses] | str:
        """``amd-smi process --json`` by GPU index, or the reason it could not be read (that costs the
        processes reading of each GPU, never the poll)."""
        assert self._tool is not None
        try:
            out = self.ctx.runner.run([self._tool, *AMD_SMI_PROCESS], self.timeout)
            return parse_amd_smi_process(out.stdout)
        except (BackendError, ParseError) as exc:
            log.warning("amd-smi process failed: %s", exc)
            return f"amd-smi process: {exc}"[:120]

    def _refresh_static(self) -> None:
        # Identity is best-effort: a failing `static` leaves the last good one (or index-based ids).
        assert self._tool is not None
        try:
            out = self.ctx.runner.run([self._tool, *AMD_SMI_STATIC], self.timeout)
            self._static = parse_amd_smi_static(out.stdout)
        except BackendError as exc:
            log.warning("amd-smi static failed (%s): keeping the previous identity", exc)

    def close(self) -> None:
        if self._lib is not None:
            self._lib.close()
        self._lib, self._kind = None, None


def with_processes(
    samples: Sequence[DeviceSample], procs: Mapping[str, GpuProcesses] | str
) -> list[DeviceSample]:
    """Samples with ``processes`` from ``amd-smi process`` (joined on the GPU index both commands print).
    ``procs`` a string (the command failed): every up sample gets ``unread["processes"]``. A GPU missing
    from the process output keeps ``processes`` None."""
    out: list[DeviceSample] = []
    for s in samples:
        if not s.up:
            out.append(s)
        elif isinstance(procs, str):
            out.append(replace(s, unread={**s.unread, READING: procs}))
        elif (g := procs.get(s.device.index)) is not None:
            out.append(replace(s, processes=g.processes, unread={**s.unread, **g.unread}))
        else:
            out.append(s)
    return out


def detect(ctx: BackendContext) -> Detection:
    """Found when ``amdsmi`` is importable and the amdgpu driver is loaded (``/dev/kfd``; the package is on
    PyPI and may sit on hosts without AMD GPUs), or ``amd-smi``/``rocm-smi`` is on PATH (Hygon's DTK
    ``rocm-smi`` is claimed first by the ``hygon`` backend, which supersedes this one)."""
    kfd = str(ctx.options.get("kfd_path", KFD_PATH))
    if importlib.util.find_spec("amdsmi") is not None and os.path.exists(kfd):
        return Detection(True, f"python package amdsmi is importable and {kfd} exists")
    for tool in ("amd-smi", "rocm-smi"):
        if path := ctx.runner.which(tool):
            return Detection(True, f"{tool} found at {path}")
    return Detection(False, "no amdsmi package, no amd-smi or rocm-smi on PATH")


FORMATS: tuple[OutputFormat, ...] = (
    OutputFormat("amd-smi-json", parse_amd_smi_metric, sniff_amd_smi_json),
    OutputFormat("amd-smi-static-json", parse_amd_smi_static_samples, sniff_amd_smi_static_json),
    OutputFormat("amd-smi-process-json", parse_amd_smi_process_samples, sniff_amd_smi_process_json),
    OutputFormat("amd-smi-monitor", parse_amd_smi_monitor, sniff_amd_smi_monitor),
    OutputFormat("rocm-smi-json", parse_rocm_smi_json, sniff_rocm_smi_json),
    OutputFormat("amd-smi-table", parse_amd_smi_table, sniff_amd_smi_table, explain_amd_smi_table),
    OutputFormat("rocm-smi-table", parse_rocm_smi_table, sniff_rocm_smi_table, explain_rocm_smi_table),
)


def _create(ctx: BackendContext) -> AmdBackend:
    return AmdBackend(ctx)


SPEC = register(
    BackendSpec(
        name="amd",
        vendor=VENDOR,
        create=_create,
        detect=detect,
        formats=FORMATS,
        metrics=(ECC_DEFERRED,),
        priority=50,
        options={
            "source": "string",
            "timeout_seconds": "seconds",
            "kfd_path": "string",
            "processes": "bool",
        },
    )
)
