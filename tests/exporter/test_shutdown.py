"""`xpuwatch serve` leaves no vendor tool behind on SIGTERM or SIGINT, even while one hangs.

The exporter runs each tool in its own session (so a terminal's Ctrl-C never reaches it) and must therefore
kill it itself. A backend that runs the tool again after one call fails (npu-smi: per-card queries) must not
start a new one during shutdown: on the code before this test, 10 of 10 trials left a `sleep 60 <marker>`
with PPID 1 behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.exporter import faketools
from tests.exporter.conftest import ROOT, Exporter, cli_env

TRIALS = 10


def _wait(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


@pytest.mark.slow
def test_no_vendor_tool_survives_sigterm_or_sigint_while_one_hangs(
    tmp_path: Path, start_exporter: Callable[..., Exporter]
) -> None:
    mb = faketools.mixed_bundle()
    info = next(c for c in mb.CALLS if c.argv == ("npu-smi", "info"))
    # The poller's deadline is long; npu-smi's own per-call deadline is 8 s (AscendOptions): the per-card
    # query is still hanging when the signal comes, a second or two after it started.
    config = tmp_path / "xpuwatch.yaml"
    config.write_text("backends:\n  ascend: {interval: 1, timeout: 60}\n")
    env = cli_env(PATH=str(tmp_path / "bin"))  # only the fake npu-smi (it calls cat/sleep by absolute path)
    left: dict[str, int] = {}
    for trial in range(TRIALS):
        sig = signal.SIGTERM if trial % 2 == 0 else signal.SIGINT
        marker = f"0.{os.getpid()}{trial:02d}{int(time.time())}"
        faketools.stalling(tmp_path / "bin", "npu-smi", {("info",): mb.FIXTURES / info.fixture}, marker)
        exp = start_exporter("--config", str(config), "--backend", "ascend", "--node-name", "n1", env=env)
        # `npu-smi info` answered; the detail queries (`-t usages -i 6`, ...) hang, several at once since
        # issue 22 (they run concurrently)
        assert _wait(lambda m=marker: faketools.alive(m) >= 1, 30), "".join(exp.log)
        t0 = time.monotonic()
        exp.proc.send_signal(sig)
        try:
            code = exp.proc.wait(15)
        except subprocess.TimeoutExpired:
            pytest.fail(f"trial {trial}: {sig.name} did not stop the exporter within 15 s")
        took = time.monotonic() - t0
        assert code == 0, "".join(exp.log)
        assert took < 5, f"shutdown took {took:.1f}s"
        # SIGKILLed processes vanish at once; give a left-behind one no excuse of being slow to start
        _wait(lambda m=marker: faketools.alive(m) == 0, 1)
        if faketools.alive(marker):
            left[f"{trial} {sig.name}"] = faketools.alive(marker)
        assert "Traceback" not in "".join(exp.log)
    assert left == {}, f"vendor tools left running after the exporter exited, per trial: {left}"


@pytest.mark.slow
def test_sigterm_during_backend_detection_kills_the_detecting_tool(tmp_path: Path) -> None:
    """Before the event loop runs, SIGTERM's default would end the exporter at once and leave the tool that
    detection is running (rocm-smi, asked whether its GPUs are Hygon DCUs) behind in its own session."""
    marker = f"0.{os.getpid()}99{int(time.time())}"
    faketools.hanging(tmp_path / "bin", "rocm-smi", marker)
    proc = subprocess.Popen(
        [sys.executable, "-m", "xpuwatch", "serve", "--web.listen-address", "127.0.0.1:0"],
        cwd=ROOT,
        env=cli_env(PATH=str(tmp_path / "bin")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait(lambda: faketools.alive(marker) == 1, 30)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait(lambda: faketools.alive(marker) == 0, 1), "the detecting rocm-smi survived"
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
