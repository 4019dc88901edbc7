"""Capture bundles for bug reports: run every detected CLI backend once, record its tools, optionally redact.

``capture()`` drives backends through a ``RecordingRunner`` and returns the recorded results and the
bundle's ``meta``; ``Redactor`` masks identifiers (GPU/MIG/NPU UUIDs, serial numbers, host names, IPv4
addresses) consistently, so that the same original always becomes the same mask and a redacted bundle
still replays (``xpuwatch serve --replay``). Library backends (NVML) read no tool and record nothing.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from xpuwatch.vendors.base import DeviceSample
from xpuwatch.vendors.command import CommandResult, CommandRunner, RecordingRunner
from xpuwatch.vendors.registry import BackendContext, BackendSpec

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_ANY_UUID = re.compile(rf"\b(?:(GPU|MIG|NPU)-)?({_UUID})\b")
_IPV4 = re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b")
_SERIAL_FIELDS = re.compile(
    r"(<serial>|Serial Number\s*[:=]\s*\"?|\"(?:serial|Serial Number|asic_serial|product_serial)\"\s*:\s*\")"
    r"([^<\"\s][^<\"\n]*?)(?=</serial>|\"|\s*$)",
    re.MULTILINE,
)
_KEEP_IPS = {"0.0.0.0", "127.0.0.1", "255.255.255.255"}
# A dotted quad right after a version label is a version (xpu-smi "Driver Version: 5.0.21.21"), not an address.
_VERSION_BEFORE = re.compile(r"(?:[Vv]ersion|[Vv]er\.?|\bv)\s*[:=]?\s*$")
# Serial fields that hold no identifier: masking them would invent a serial on replay (rocm-smi "N/A").
_NOT_A_SERIAL = re.compile(r"\[?(?:N/A|Not Supported|Unknown|None)\]?", re.IGNORECASE)


class Redactor:
    """Consistent masking: each distinct original value maps to one numbered placeholder.

    UUIDs keep their prefix and shape (``GPU-00000000-0000-0000-0000-000000000001``), serials become
    ``SERIAL0001``, host names ``host-1``, IPv4 addresses ``192.0.2.N`` (RFC 5737 documentation range).
    """

    def __init__(self, hostnames: Iterable[str] = (), serials: Iterable[str] = ()) -> None:
        self._map: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}
        self._hostnames = sorted({h for h in hostnames if h and len(h) >= 2}, key=len, reverse=True)
        self._serials = sorted({s for s in serials if s and len(s) >= 4}, key=len, reverse=True)

    def _mask(self, kind: str, original: str, make: Callable[[int], str]) -> str:
        key = (kind, original)
        hit = self._map.get(key)
        if hit is None:
            n = self._counts[kind] = self._counts.get(kind, 0) + 1
            hit = self._map[key] = make(n)
        return hit

    def _uuid(self, original: str) -> str:
        return self._mask("uuid", original.lower(), lambda n: f"00000000-0000-0000-0000-{n:012d}")

    def text(self, s: str) -> str:
        """Mask every identifier in one text."""
        s = _ANY_UUID.sub(lambda m: (f"{m.group(1)}-" if m.group(1) else "") + self._uuid(m.group(2)), s)
        if self._serials:
            s = re.sub(
                # Whole tokens only: a zero placeholder serial must not eat into a longer id ("0x0000...").
                rf"(?<![\w-])(?:{'|'.join(map(re.escape, self._serials))})(?![\w-])",
                lambda m: self._mask("serial", m.group(0), lambda n: f"SERIAL{n:04d}"),
                s,
            )
        s = _SERIAL_FIELDS.sub(
            lambda m: (
                m.group(0)
                if re.fullmatch(r"SERIAL\d{4,}", m.group(2)) or _NOT_A_SERIAL.fullmatch(m.group(2))
                else m.group(1) + self._mask("serial", m.group(2), lambda n: f"SERIAL{n:04d}")
            ),
            s,
        )
        if self._hostnames:
            s = re.sub(
                rf"(?<![\w.-])(?:{'|'.join(map(re.escape, self._hostnames))})(?![\w-])",
                lambda m: self._mask("host", m.group(0), lambda n: f"host-{n}"),
                s,
            )
        return _IPV4.sub(
            lambda m: (
                m.group(0)
                if m.group(0) in _KEEP_IPS or _VERSION_BEFORE.search(s, max(0, m.start() - 32), m.start())
                else self._mask("ip", m.group(0), lambda n: f"192.0.2.{n % 254 + 1}")
            ),
            s,
        )

    def result(self, r: CommandResult) -> CommandResult:
        return replace(
            r,
            argv=tuple(self.text(a) for a in r.argv),
            stdout=self.text(r.stdout),
            stderr=self.text(r.stderr),
        )

    def value(self, v: Any) -> Any:
        """Mask strings inside JSON-like meta values."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {self.text(str(k)): self.value(x) for k, x in v.items()}
        return v


@dataclass(frozen=True)
class Capture:
    """What one capture run produced: recorded tool calls and the bundle's meta."""

    results: tuple[CommandResult, ...]
    meta: dict[str, Any]
    samples: tuple[DeviceSample, ...]


def capture(
    specs: Sequence[BackendSpec],
    skipped: Sequence[tuple[str, str]],
    runner: CommandRunner,
    node: str,
    clock: Callable[[], float] = time.time,
) -> Capture:
    """Run each backend once (open, sample, close) through a RecordingRunner. Never raises on a backend's
    failure: it is noted in ``meta["errors"]``."""
    recorder = RecordingRunner(runner)
    ctx = BackendContext(node=node, runner=recorder, clock=clock)
    errors: dict[str, str] = {}
    versions: dict[str, list[str]] = {}
    samples: list[DeviceSample] = []
    started = clock()
    for spec in specs:
        try:
            backend = spec.create(ctx)
            backend.open()
            try:
                got = list(backend.sample())
            finally:
                backend.close()
        except Exception as exc:  # a broken backend is exactly what a bug report needs to show
            errors[spec.name] = f"{type(exc).__name__}: {exc}"
            continue
        samples.extend(got)
        versions[spec.name] = sorted({s.device.driver_version for s in got if s.device.driver_version})
    tools = {r.argv[0]: recorder.which(r.argv[0]) or r.argv[0] for r in recorder.results}
    meta: dict[str, Any] = {
        "backends": [s.name for s in specs if s.name not in errors],
        "attempted": [s.name for s in specs],
        "skipped": {name: why for name, why in skipped},
        "errors": errors,
        "node": node,
        "started": started,
        "finished": clock(),
        "tool_versions": versions,
        "tools": tools,
        "redacted": False,
    }
    return Capture(tuple(recorder.results), meta, tuple(samples))


def redact(cap: Capture, node: str) -> Capture:
    """The same capture with identifiers masked consistently across commands and meta."""
    hosts = {node, socket.gethostname(), socket.getfqdn()}
    serials = {s.device.serial for s in cap.samples if s.device.serial}
    r = Redactor(hostnames=hosts, serials=serials)
    results = tuple(r.result(x) for x in cap.results)
    meta = {**r.value({k: v for k, v in cap.meta.items() if k != "redacted"}), "redacted": True}
    return Capture(results, meta, ())
