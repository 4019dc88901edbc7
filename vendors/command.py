"""Running vendor command-line tools: with a deadline, recorded for capture bundles, or replayed from one.

Every CLI backend receives a ``CommandRunner`` in its constructor and never calls ``subprocess`` itself, so
that the same backend code runs live, records a capture bundle, or replays one offline.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from xpuwatch.vendors.base import BackendError
from xpuwatch.vendors.untrusted import RefusedFile, read_capped, write_output

BUNDLE_FORMAT_VERSION = 1
DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024
"""Bytes a tool may print (stdout + stderr) per call before the call fails with ``output_too_large``: 16 MiB,
~30x the largest real capture we hold (nvidia-smi -q -x on 8 GPUs is ~0.5 MiB), far below the DaemonSet's
256 Mi memory limit. Per backend: ``backends.<name>.max_output_bytes``."""
MAX_BUNDLE_BYTES = 256 * 1024 * 1024
"""Largest capture bundle or inspect input read (a bundle of a 16-GPU node is a few MiB)."""
_READ_CHUNK = 65536


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
    unless ``check=False`` is passed to ``run``. Output is read as it comes, at most ``max_output_bytes``
    (stdout + stderr): beyond that the group is killed and the call raises ``reason="output_too_large"``,
    having held at most that much. ``max_timeout`` caps every call's deadline (the poller's timeout for the
    backend: a tool is never left running after the poll that started it gave up). Running tools are
    registered in ``tools`` (by default the process-wide ``TOOLS``), whose ``close()`` at shutdown refuses
    new ones (``BackendError(reason="shutdown")``) and kills the running ones' process groups. Any
    exception while a tool runs (a KeyboardInterrupt included) kills its group before it propagates.
    """

    def __init__(
        self,
        env: dict[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_timeout: float | None = None,
        tools: RunningTools | None = None,
    ) -> None:
        self._env = env
        self._clock = clock
        self.max_output_bytes = max_output_bytes
        self.max_timeout = max_timeout
        self.tools = TOOLS if tools is None else tools

    def limited(self, max_output_bytes: int | None, max_timeout: float | None) -> SubprocessRunner:
        """A runner like this one with a backend's own output cap and deadline cap (None: keep this one's)."""
        return SubprocessRunner(
            self._env,
            self._clock,
            self.max_output_bytes if max_output_bytes is None else max_output_bytes,
            self.max_timeout if max_timeout is None else max_timeout,
            self.tools,
        )

    def which(self, tool: str) -> str | None:
        return shutil.which(tool, path=(self._env or os.environ).get("PATH"))

    def run(self, argv: Sequence[str], timeout: float, check: bool = True) -> CommandResult:
        if not argv:
            raise BackendError("no command to run (empty argv)", reason="exec_failed")
        if self.max_timeout is not None:
            timeout = min(timeout, self.max_timeout)
        started = self._clock()
        t0 = time.monotonic()
        if self.tools.closed:  # shutting down: start nothing that could outlive the exporter
            raise BackendError(f"{argv[0]}: not started, the exporter is shutting down", reason="shutdown")
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
        if not self.tools.add(proc):  # closed while it was being started: close() will not see it
            _kill_group(proc)
            raise BackendError(f"{argv[0]}: killed, the exporter is shutting down", reason="shutdown")
        try:
            out, err = _read_bounded(proc, t0 + timeout, self.max_output_bytes)
        except _TooLarge as exc:
            _kill_group(proc)
            raise BackendError(
                f"{argv[0]}: printed more than {self.max_output_bytes} bytes (max_output_bytes), killed",
                reason="output_too_large",
            ) from exc
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            raise BackendError(f"{argv[0]}: no answer within {timeout:g}s, killed", reason="timeout") from exc
        except BaseException:  # KeyboardInterrupt, SystemExit, a bug: the tool never outlives its caller
            _kill_group(proc)
            raise
        finally:
            self.tools.discard(proc)
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


class _TooLarge(Exception):
    pass


class RunningTools:
    """The vendor tool processes running now (thread-safe), so that shutdown leaves none behind.

    ``close(wait)`` is the shutdown step: from then on ``add`` refuses every new process (the runner kills
    one that was starting and raises ``BackendError(reason="shutdown")``), the running ones' process groups
    get SIGKILL, and it waits up to ``wait`` seconds for their callers to reap them; it reports the pids
    still not reaped then (a tool in uninterruptible sleep, D state, dies only when its kernel call returns).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def add(self, proc: subprocess.Popen[bytes]) -> bool:
        """Track ``proc``; False (not tracked) once closed."""
        with self._lock:
            if self._closed:
                return False
            self._procs.add(proc)
            return True

    def discard(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._procs.discard(proc)
            self._cv.notify_all()

    def pids(self) -> list[int]:
        """The pids of the tools tracked now (each its process group's leader), sorted."""
        with self._lock:
            return sorted(p.pid for p in self._procs)

    def kill(self) -> int:
        """SIGKILL the process group of every tool running now; returns how many."""
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        return len(procs)

    def close(self, wait: float = 2.0) -> tuple[int, list[int]]:
        """Refuse new tools, kill the running ones' groups, wait up to ``wait`` s for them to be reaped.
        Returns (how many were killed, the pids of those still running after the wait)."""
        with self._lock:
            self._closed = True
        killed = self.kill()
        deadline = time.monotonic() + wait
        with self._lock:
            while self._procs and (left := deadline - time.monotonic()) > 0:
                self._cv.wait(left)
            return killed, sorted(p.pid for p in self._procs)


TOOLS = RunningTools()
"""Every SubprocessRunner's tools unless given its own registry: what ``xpuwatch serve`` closes on exit."""


def kill_running_tools() -> int:
    """Kill the process group of every tool still running in ``TOOLS``; returns how many."""
    return TOOLS.kill()


def _read_bounded(proc: subprocess.Popen[bytes], deadline: float, cap: int) -> tuple[bytes, bytes]:
    """Read stdout and stderr until both close, the monotonic ``deadline`` passes (TimeoutExpired) or more
    than ``cap`` bytes arrived (_TooLarge); then wait for the exit status within what is left."""
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    total = 0
    with selectors.DefaultSelector() as sel:
        for f in (proc.stdout, proc.stderr):
            sel.register(f, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, 0)
            for key, _ in sel.select(left):
                data = os.read(key.fd, _READ_CHUNK)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                total += len(data)
                if total > cap:
                    chunks.clear()  # let go of what was read before killing
                    raise _TooLarge
                chunks[key.fd].append(data)
    for f in (proc.stdout, proc.stderr):
        f.close()
    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    return b"".join(chunks[out_fd]), b"".join(chunks[err_fd])


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
    # A zombie we cannot reap is left to init; a reaper never raises and never reads more output.
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            with contextlib.suppress(Exception):
                f.close()
    with contextlib.suppress(Exception):
        proc.wait(timeout=60)


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
    write_output(path, json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def read_bundle(path: Path) -> tuple[dict[str, object], list[CommandResult]]:
    """Read a capture bundle written by ``write_bundle``. Raises ValueError naming what is wrong: not a
    regular file (a FIFO or device is refused without opening it, so nothing blocks), over
    ``MAX_BUNDLE_BYTES``, not JSON, or a command without argv."""
    try:
        doc = json.loads(read_regular_file(path, MAX_BUNDLE_BYTES).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable capture bundle: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("xpuwatch_capture") != BUNDLE_FORMAT_VERSION:
        raise ValueError(f"{path}: not an xpuwatch capture bundle (version {BUNDLE_FORMAT_VERSION})")
    results = []
    commands = doc.get("commands", [])
    if not isinstance(commands, list):
        raise ValueError(f"{path}: commands must be a list")
    for i, c in enumerate(commands):
        if not isinstance(c, dict) or not isinstance(c.get("argv"), list) or not c["argv"]:
            raise ValueError(f"{path}: commands[{i}].argv must be a non-empty list (the tool and its flags)")
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


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (a path the user gave: symlinks are followed).
    Raises OSError with a clear message for a FIFO, device, socket or directory (opened non-blocking and
    checked with fstat, so a FIFO never blocks) and for a file over the limit (refused by its size, and the
    read is bounded, so /dev/zero-like sources never exhaust memory). See ``vendors.untrusted``."""
    try:
        return read_capped(path, max_bytes, follow_symlinks=True)
    except RefusedFile as exc:
        if exc.kind is None:
            raise
        raise OSError(f"{path}: is {exc.kind}; give a regular file") from None
