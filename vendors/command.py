"""Running vendor command-line tools: with a deadline, recorded for capture bundles, or replayed from one.

Every CLI backend receives a ``CommandRunner`` in its constructor and never calls ``subprocess`` itself, so
that the same backend code runs live, records a capture bundle, or replays one offline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from vendors.base import BackendError

BUNDLE_FORMAT_VERSION = 1


@dataclass(frozen=True)
class CommandResult:
    """What one tool invocation printed. ``returncode`` is the process exit status."""

    argv: tuple[str, ...]
    stdout: str
    stderr: str
    returncode: int
    timestamp: float  # Unix time the call started
    duration_seconds: float


class CommandRunner(Protocol):
    """Runs a vendor tool. Raises BackendError(reason=timeout|exec_failed|exit_status|not_found)."""

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult: ...

    def which(self, tool: str) -> str | None: ...


class SubprocessRunner:
    """Runs tools as child processes in their own process group; on timeout the whole group is killed.

    A tool that exits non-zero raises ``BackendError(reason="exit_status")`` carrying its first stderr line,
    unless ``check=False`` is passed to ``run``.
    """

    def __init__(self, env: dict[str, str] | None = None, clock: Callable[[], float] = time.time) -> None:
        self._env = env
        self._clock = clock

    def which(self, tool: str) -> str | None:
        return shutil.which(tool, path=(self._env or os.environ).get("PATH"))

    def run(self, argv: Sequence[str], timeout: float, check: bool = True) -> CommandResult:
        started = self._clock()
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(
                list(argv),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env=self._env,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise BackendError(f"{argv[0]}: not found", reason="not_found") from exc
        except OSError as exc:
            raise BackendError(f"{argv[0]}: cannot execute: {exc}", reason="exec_failed") from exc
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            raise BackendError(f"{argv[0]}: no answer within {timeout:g}s, killed", reason="timeout") from exc
        result = CommandResult(
            argv=tuple(argv),
            stdout=out.decode("utf-8", errors="replace"),
            stderr=err.decode("utf-8", errors="replace"),
            returncode=proc.returncode,
            timestamp=started,
            duration_seconds=time.monotonic() - t0,
        )
        if check:
            check_exit(result)
        return result


def check_exit(result: CommandResult) -> None:
    """Raise ``BackendError(reason="exit_status")`` with the tool's first output line if it exited non-zero."""
    if result.returncode != 0:
        first = (result.stderr.strip() or result.stdout.strip()).splitlines()[:1]
        raise BackendError(
            f"{result.argv[0]} exited {result.returncode}: {first[0] if first else ''}".strip(),
            reason="exit_status",
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    # Reap in the background: a tool stuck in D state may never die, and we must not block on it.
    threading.Thread(target=_reap, args=(proc,), daemon=True).start()


def _reap(proc: subprocess.Popen[bytes]) -> None:
    # A zombie we cannot reap is left to init; a reaper never raises.
    with contextlib.suppress(Exception):
        proc.communicate(timeout=60)


class RecordingRunner:
    """Wraps a runner and keeps every result, including non-zero exits, for ``xpuwatch capture``."""

    def __init__(self, inner: CommandRunner) -> None:
        self.inner = inner
        self.results: list[CommandResult] = []
        self._lock = threading.Lock()

    def which(self, tool: str) -> str | None:
        return self.inner.which(tool)

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        # A call that exits non-zero is recorded too (a replay answers it with the same exit_status error),
        # so a bundle shows the tool refusing a flag or printing "Invalid card id.", not just the successes.
        if isinstance(self.inner, SubprocessRunner):
            result = self.inner.run(argv, timeout, check=False)
        else:
            result = self.inner.run(argv, timeout)
        with self._lock:
            self.results.append(result)
        check_exit(result)
        return result


class ReplayRunner:
    """Answers tool calls from a capture bundle: the last recorded result whose argv matches.

    Matching ignores the directory of argv[0] (``/usr/local/bin/npu-smi`` == ``npu-smi``). A call that was
    never recorded raises ``BackendError(reason="not_recorded")``.
    """

    def __init__(self, results: Sequence[CommandResult]) -> None:
        self._by_argv: dict[tuple[str, ...], CommandResult] = {}
        for r in results:
            self._by_argv[_key(r.argv)] = r

    def which(self, tool: str) -> str | None:
        return tool if any(k[0] == os.path.basename(tool) for k in self._by_argv) else None

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        hit = self._by_argv.get(_key(argv))
        if hit is None:
            raise BackendError(f"{' '.join(argv)}: not in the capture bundle", reason="not_recorded")
        if hit.returncode != 0:
            raise BackendError(f"{argv[0]} exited {hit.returncode} (recorded)", reason="exit_status")
        return hit


def _key(argv: Sequence[str]) -> tuple[str, ...]:
    return (os.path.basename(argv[0]), *argv[1:])


def write_bundle(path: Path, results: Sequence[CommandResult], meta: dict[str, object]) -> None:
    """Write a capture bundle: JSON ``{"xpuwatch_capture": 1, "meta": {...}, "commands": [...]}``."""
    doc = {
        "xpuwatch_capture": BUNDLE_FORMAT_VERSION,
        "meta": meta,
        "commands": [{**asdict(r), "argv": list(r.argv)} for r in results],
    }
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def read_bundle(path: Path) -> tuple[dict[str, object], list[CommandResult]]:
    """Read a capture bundle written by ``write_bundle``. Raises ValueError naming what is wrong."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable capture bundle: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("xpuwatch_capture") != BUNDLE_FORMAT_VERSION:
        raise ValueError(f"{path}: not an xpuwatch capture bundle (version {BUNDLE_FORMAT_VERSION})")
    results = []
    for i, c in enumerate(doc.get("commands", [])):
        try:
            results.append(
                CommandResult(
                    argv=tuple(str(a) for a in c["argv"]),
                    stdout=str(c["stdout"]),
                    stderr=str(c.get("stderr", "")),
                    returncode=int(c.get("returncode", 0)),
                    timestamp=float(c.get("timestamp", 0.0)),
                    duration_seconds=float(c.get("duration_seconds", 0.0)),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: commands[{i}] is malformed: {exc}") from exc
    meta = doc.get("meta", {})
    return (meta if isinstance(meta, dict) else {}), results
