"""One vendor table tool run per poll: the backend shape shared by the cnmon, xpu-smi, mx-smi, mthreads-gmi,
ixsmi and efsmi modules (locate the tool, run it through the injected runner with a deadline, parse, and
report devices seen before but missing now as lost)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from xpuwatch.vendors.base import BackendError, Device, DeviceSample, ParseError
from xpuwatch.vendors.registry import BackendContext, Detection

DEFAULT_TIMEOUT_SECONDS = 10.0

Parse = Callable[[str], Sequence[DeviceSample]]


OPTIONS = {"path": "string", "timeout_seconds": "seconds"}
"""The config options every ``ToolBackend`` reads (``BackendSpec.options``)."""


def locate(ctx: BackendContext, tools: Sequence[str]) -> str | None:
    """The tool to run: ``options["path"]`` when configured, else the first of ``tools`` on PATH."""
    configured = ctx.options.get("path")
    if configured:
        return str(configured)
    for tool in tools:
        found = ctx.runner.which(tool)
        if found:
            return found
    return None


def detect_tool(ctx: BackendContext, tools: Sequence[str]) -> Detection:
    """Found when one of ``tools`` is on PATH (or ``options["path"]`` is set); says which, or what was missing."""
    path = locate(ctx, tools)
    if path is None:
        return Detection(False, f"{' / '.join(tools)} not on PATH")
    return Detection(True, f"found {path}")


class ToolBackend:
    """Runs ``<tool> <args>`` once per ``sample()`` and parses its stdout.

    Options (the backend's config section): ``path`` (tool location), ``timeout_seconds`` (default 10).
    Errors: ``BackendError`` reason ``not_found`` (no tool), ``timeout``/``exit_status``/``exec_failed``
    (from the runner: a hung tool is killed with its process group), ``parse`` (usage text, truncated or
    garbled output). A device seen at an earlier poll but absent from this output (a table cut after it,
    a card that fell off the bus) is returned as ``DeviceSample.lost``.
    """

    def __init__(
        self, name: str, ctx: BackendContext, tools: Sequence[str], args: Sequence[str], parse: Parse
    ) -> None:
        self.name = name
        self._ctx = ctx
        self._tools = tuple(tools)
        self._args = tuple(args)
        self._parse = parse
        self._timeout = float(ctx.options.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS))
        self._path: str | None = None
        self._known: dict[str, Device] = {}

    def open(self) -> None:
        self._path = locate(self._ctx, self._tools)
        if self._path is None:
            raise BackendError(f"{' / '.join(self._tools)} not on PATH", reason="not_found")

    def sample(self) -> Sequence[DeviceSample]:
        if self._path is None:
            self.open()
        assert self._path is not None
        result = self._ctx.runner.run([self._path, *self._args], self._timeout)
        try:
            samples = list(self._parse(result.stdout))
        except ParseError as exc:
            said = (result.stderr.strip().splitlines() or [""])[0][:200]
            tool = os.path.basename(self._path)
            raise ParseError(f"{tool}: {exc}" + (f" (stderr: {said})" if said else "")) from exc
        seen = {s.device.uuid for s in samples}
        tool = os.path.basename(self._path)
        lost = [
            DeviceSample.lost(device, f"missing from {tool} output")
            for uuid, device in self._known.items()
            if uuid not in seen
        ]
        for s in samples:
            self._known[s.device.uuid] = s.device
        return [*samples, *lost]

    def close(self) -> None:
        self._path = None
