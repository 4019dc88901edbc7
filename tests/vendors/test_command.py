"""Running vendor tools with bounds (vendors.command): output capped in bytes, kill deadline capped by the
backend's timeout, running tools' process groups killed on shutdown; bundles and inspect inputs refused
when they are FIFOs, devices, oversize or malformed, never blocking and never reading without limit."""

from __future__ import annotations

import json
import os
import resource
import shutil
import threading
import time
from pathlib import Path

import pytest

from xpuwatch.vendors.base import BackendError
from xpuwatch.vendors.command import (
    MAX_BUNDLE_BYTES,
    TOOLS,
    RunningTools,
    SubprocessRunner,
    kill_running_tools,
    read_bundle,
    read_regular_file,
)

YES = shutil.which("yes")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped by its parent) is dead for our purpose. It can also be reaped between
    # the kill(0) and the read: /proc then answers ENOENT or ESRCH (seen under load).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.skipif(YES is None, reason="coreutils yes is needed")
def test_a_tool_printing_forever_fails_output_too_large_and_memory_returns() -> None:
    runner = SubprocessRunner(max_output_bytes=4 * 1024 * 1024)
    with pytest.raises(BackendError) as err:
        runner.run([str(YES), "x" * 100], timeout=30)
    assert err.value.reason == "output_too_large" and "max_output_bytes" in str(err.value)
    baseline = rss_bytes()
    for _ in range(10):  # 10 polls of a tool that never stops printing
        with pytest.raises(BackendError):
            runner.run([str(YES), "x" * 100], timeout=30)
    # Each failing poll held at most the 4 MiB cap, and let go of it: no growth per poll.
    assert rss_bytes() - baseline < 8 * 1024 * 1024


def test_stderr_counts_towards_the_cap(tmp_path: Path) -> None:
    tool = tmp_path / "noisy"
    tool.write_text("#!/bin/sh\nhead -c 300000 /dev/zero >&2\necho ok\n")
    tool.chmod(0o755)
    with pytest.raises(BackendError, match="more than 100000 bytes") as err:
        SubprocessRunner(max_output_bytes=100_000).run([str(tool)], timeout=30)
    assert err.value.reason == "output_too_large"
    ok = SubprocessRunner().run([str(tool)], timeout=30)
    assert (ok.stdout, len(ok.stderr), ok.returncode) == ("ok\n", 300_000, 0)


def hanging_tool(tmp_path: Path) -> tuple[Path, Path]:
    """A tool that starts a grandchild in its process group, records both pids, then hangs."""
    pids = tmp_path / "pids"
    tool = tmp_path / "hang"
    tool.write_text(f"#!/bin/sh\nsleep 300 &\necho $$ $! > {pids}\nwait\n")
    tool.chmod(0o755)
    return tool, pids


def wait_for_pids(pids: Path) -> list[int]:
    deadline = time.monotonic() + 30  # a safety net, not a speed assertion
    while not (pids.exists() and len(pids.read_text().split()) == 2):
        assert time.monotonic() < deadline, "tool did not start"
        time.sleep(0.02)
    return [int(p) for p in pids.read_text().split()]


def wait_tracked(tools: RunningTools, pid: int) -> None:
    """Until the runner has registered the tool ``pid`` in ``tools``: the tool writes its pids as soon as
    it runs, which can be before ``Popen`` returns to the runner and it calls ``tools.add``."""
    deadline = time.monotonic() + 30  # a safety net, not a speed assertion
    while pid not in tools.pids():
        assert time.monotonic() < deadline, f"tool {pid} never registered"
        time.sleep(0.02)


def wait_dead(pids: list[int]) -> None:
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if alive(p)]}"
        time.sleep(0.02)


def test_kill_deadline_follows_the_backends_timeout(tmp_path: Path) -> None:
    tool, pids = hanging_tool(tmp_path)
    # the poller gives up after 2 s (time enough for the tool to write its pids on a loaded machine)
    runner = SubprocessRunner().limited(None, 2)
    with pytest.raises(BackendError, match=r"no answer within 2s") as err:
        runner.run([str(tool)], timeout=10)  # the backend's own per-call timeout is longer
    assert err.value.reason == "timeout"
    wait_dead(wait_for_pids(pids))  # tool and grandchild killed together


def test_kill_running_tools_kills_their_process_groups(tmp_path: Path) -> None:
    tool, pids = hanging_tool(tmp_path)
    errors: list[BaseException] = []

    def poll() -> None:
        try:
            SubprocessRunner().run([str(tool)], timeout=300)
        except BackendError as exc:
            errors.append(exc)

    t = threading.Thread(target=poll)
    t.start()
    running = wait_for_pids(pids)
    wait_tracked(TOOLS, running[0])
    assert kill_running_tools() == 1
    wait_dead(running)
    t.join(30)
    assert not t.is_alive() and len(errors) == 1 and errors[0].reason == "exit_status"  # type: ignore[attr-defined]
    assert kill_running_tools() == 0


def test_closed_registry_kills_running_tools_and_refuses_new_ones(tmp_path: Path) -> None:
    """Shutdown: a backend that runs its tool again after one call failed (npu-smi's per-card queries)
    gets reason=shutdown instead of a new process that would outlive the exporter."""
    tool, pids = hanging_tool(tmp_path)
    tools = RunningTools()
    runner = SubprocessRunner(tools=tools).limited(None, 300)
    reasons: list[str | None] = []

    def backend_poll() -> None:
        for _ in range(3):  # keeps going after a failure, as ascend does per card
            try:
                runner.run([str(tool)], timeout=300)
            except BackendError as exc:
                reasons.append(exc.reason)

    t = threading.Thread(target=backend_poll)
    t.start()
    running = wait_for_pids(pids)
    wait_tracked(tools, running[0])
    # Returns when the caller has reaped the tool, not at the deadline: with an hour's wait this test would
    # otherwise hang for the hour (no wall-clock assertion: CI's machine is shared and loaded).
    killed, left = tools.close(wait=3600)
    assert (killed, left) == (1, [])
    wait_dead(running)
    t.join(30)
    assert reasons == ["exit_status", "shutdown", "shutdown"]
    assert tools.closed and tools.close(wait=0) == (0, [])


def bundle(tmp_path: Path, commands: object) -> Path:
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"xpuwatch_capture": 1, "meta": {}, "commands": commands}))
    return path


def test_bundle_with_empty_argv_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"commands\[0\].argv must be a non-empty list"):
        read_bundle(bundle(tmp_path, [{"argv": [], "stdout": ""}]))
    with pytest.raises(ValueError, match=r"commands must be a list"):
        read_bundle(bundle(tmp_path, {"argv": ["x"]}))


def test_fifo_device_directory_and_oversize_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody ever writes: opening it for reading would block forever
    with pytest.raises(ValueError, match="is a FIFO"):
        read_bundle(fifo)
    with pytest.raises(ValueError, match="is a device"):
        read_bundle(Path("/dev/zero"))  # reading it would never end
    with pytest.raises(ValueError, match="is a directory"):
        read_bundle(tmp_path)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_BUNDLE_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ValueError, match="over the"):
        read_bundle(big)
    small = tmp_path / "small"
    small.write_bytes(b"12345")
    assert read_regular_file(small, 5) == b"12345"
    with pytest.raises(OSError, match="over the 4-byte limit"):
        read_regular_file(small, 4)
