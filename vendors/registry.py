"""Backend registry: each vendor module registers itself once; detection and `inspect` read this table.

A new vendor is one new module in ``vendors/`` calling ``register(BackendSpec(...))`` at import time;
``all_specs()`` imports every module of the package, so there is no central vendor switch.
"""

from __future__ import annotations

import importlib
import logging
import math
import pkgutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xpuwatch.vendors.base import Backend, Device, DeviceSample, VendorMetric
from xpuwatch.vendors.command import CommandRunner, SubprocessRunner

log = logging.getLogger(__name__)

# Modules of this package that are infrastructure, not backends.
_NOT_BACKENDS = {"base", "registry", "command", "smi_table", "smi_tool", "smi_query"}


@dataclass(frozen=True)
class BackendContext:
    """What a backend is built from. ``options`` is the backend's own section of the config file."""

    node: str = "localhost"
    runner: CommandRunner = field(default_factory=SubprocessRunner)
    options: Mapping[str, Any] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    seed: int = 0


@dataclass(frozen=True)
class Detection:
    """Whether a backend's library or tool is present here, and why (logged at start)."""

    found: bool
    why: str


@dataclass(frozen=True)
class OutputFormat:
    """A vendor tool output that ``xpuwatch inspect`` can turn into samples.

    ``parse`` raises only ``vendors.base.ParseError``; ``sniff`` says whether a text looks like this format
    (used when ``--format`` is not given) and never raises. ``explain`` (optional) lists the columns/keys
    the text holds that ``parse`` does not read, one ``"<column>: <why>"`` line each, for
    ``xpuwatch inspect --explain``; ``sections`` (optional, below) what it did read, section by section.
    ``named_by_command`` (optional), for outputs that name no device
    (``npu-smi info -t health -i 3 -c 0`` prints only the health lines): given the command line a pasted
    transcript shows above the output, the ``Device`` its arguments select, or None when they select none.
    """

    name: str  # e.g. "nvidia-smi-xml", "npu-smi-info"
    parse: Callable[[str], Sequence[DeviceSample]]
    sniff: Callable[[str], bool]
    explain: Callable[[str], Sequence[str]] | None = None
    named_by_command: Callable[[str], Device | None] | None = None
    sections: Callable[[str], Sequence[str]] | None = None
    """(optional) The sections of the output the parser found and read, one ``"<section>: <what>"`` line
    each (``"MIG devices section: 4 MIG device(s) read as slices"``), for ``xpuwatch inspect --explain``."""


@dataclass(frozen=True)
class BackendSpec:
    """One backend's registration.

    ``priority``: lower is detected first. ``supersedes``: backends not auto-enabled when this one is
    detected (Hygon's DTK ships a ``rocm-smi`` too, so ``hygon`` supersedes ``amd``; ``nvml`` supersedes
    ``nvidia-smi``). ``auto``: False for backends only enabled by name (``sim``, ``replay``).
    """

    name: str
    vendor: str
    create: Callable[[BackendContext], Backend]
    detect: Callable[[BackendContext], Detection]
    formats: tuple[OutputFormat, ...] = ()
    metrics: tuple[VendorMetric, ...] = ()
    priority: int = 100
    supersedes: tuple[str, ...] = ()
    auto: bool = True
    default_interval_seconds: float = 5.0
    supplement: bool = False
    """Its samples overlay another backend's samples of the same device (``vendors.base.overlay``): it
    adds or improves readings (DCGM profiling over NVML) and never decides ``up`` or identity."""
    reads_library: bool = False
    """It reads a vendor library (NVML, DCGM), not tool output: a capture bundle cannot replay it, and
    ``serve --replay`` must never load the live library for it."""
    options: Mapping[str, str] = field(default_factory=dict)
    """Every option key the backend reads from its config section -> kind (one of ``OPTION_KINDS``);
    ``check_options`` rejects any other key (a typo such as ``timout``) and a value of the wrong kind."""


OPTION_KINDS = ("seconds", "number", "int", "bool", "string", "strings", "any")
MAX_OPTION_SECONDS = 3600.0
"""Largest ``seconds`` option (tool timeouts, backoffs, update intervals): past it a poll never ends."""
MAX_OPTION_INT = 2**31 - 1
"""Largest ``int`` option: vendor libraries take C ints (NVML's event-wait milliseconds)."""


def check_options(spec: BackendSpec, options: Mapping[str, Any], where: str) -> None:
    """Raise ValueError naming the key (``backends.nvidia-smi.binary: must be a string``) for an option the
    backend does not declare or a value not of its declared kind."""
    for key, value in options.items():
        kind = spec.options.get(str(key))
        if kind is None:
            known = ", ".join(sorted(spec.options)) or "none besides interval, timeout, stale_after"
            raise ValueError(f"{where}.{key}: unknown option of backend {spec.name} (known: {known})")
        if value is None or kind == "any":
            continue
        if kind == "seconds":
            ok = _number(value) and 0 < value <= MAX_OPTION_SECONDS
            why = f"must be a number of seconds > 0 and <= {MAX_OPTION_SECONDS:g}"
        elif kind == "number":
            ok, why = _number(value), "must be a finite number"
        elif kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_OPTION_INT
            why = f"must be a whole number >= 0 and <= {MAX_OPTION_INT}"
        elif kind == "bool":
            ok, why = isinstance(value, bool), "must be true or false"
        elif kind == "string":
            ok, why = isinstance(value, str) and bool(value), "must be a non-empty string"
        else:  # strings
            ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
            why = "must be a list of strings"
        if not ok:
            raise ValueError(f"{where}.{key}: {why}, got {value!r}")


def _number(value: Any) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)  # an int past float64 (a 400-digit YAML int) overflows here
    except OverflowError:
        return False


_SPECS: dict[str, BackendSpec] = {}
_loaded = False


def register(spec: BackendSpec) -> BackendSpec:
    """Add a backend to the table. Registering the same name twice is a programming error."""
    if spec.name in _SPECS and _SPECS[spec.name] is not spec:
        raise ValueError(f"backend {spec.name!r} registered twice")
    _SPECS[spec.name] = spec
    return spec


def all_specs() -> dict[str, BackendSpec]:
    """Every registered backend, importing all vendor modules on first call (sorted by priority, name)."""
    global _loaded
    if not _loaded:
        from xpuwatch import vendors

        for mod in pkgutil.iter_modules(vendors.__path__):
            if mod.name in _NOT_BACKENDS or mod.name.startswith("_"):
                continue
            try:
                importlib.import_module(f"{vendors.__name__}.{mod.name}")
            except ImportError as exc:  # one broken vendor module never hides the others
                log.warning("vendor module %s could not be imported: %s", mod.name, exc)
        _loaded = True
    return dict(sorted(_SPECS.items(), key=lambda kv: (kv[1].priority, kv[0])))


def all_formats() -> dict[str, OutputFormat]:
    """Every output format any backend can parse, by name."""
    out: dict[str, OutputFormat] = {}
    for spec in all_specs().values():
        for fmt in spec.formats:
            out[fmt.name] = fmt
    return out


def all_vendor_metrics() -> tuple[VendorMetric, ...]:
    """Every vendor-only metric declared by a backend, sorted by name."""
    seen: dict[str, VendorMetric] = {}
    for spec in all_specs().values():
        for m in spec.metrics:
            seen[m.name] = m
    return tuple(sorted(seen.values(), key=lambda m: m.name))


def detect(ctx: BackendContext) -> tuple[list[str], list[tuple[str, str]]]:
    """Which auto-detectable backends are present: (enabled names, [(skipped name, why)])."""
    enabled: list[str] = []
    skipped: list[tuple[str, str]] = []
    superseded: dict[str, str] = {}
    for name, spec in all_specs().items():
        if not spec.auto:
            continue
        if name in superseded:
            skipped.append((name, f"superseded by {superseded[name]}"))
            continue
        try:
            d = spec.detect(ctx)
        except Exception as exc:  # detection must never stop the exporter
            d = Detection(False, f"detection failed: {exc}")
        if d.found:
            enabled.append(name)
            for other in spec.supersedes:
                superseded.setdefault(other, name)
        else:
            skipped.append((name, d.why))
    return enabled, skipped
