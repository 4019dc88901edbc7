"""Exporter test fixtures: start the real `xpuwatch serve` as a subprocess on a free loopback port."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_CLOCK = "1700000000"


def stable_exposition(body: str) -> str:
    """``body`` without the families that differ between runs of the same code (process_*, python_*,
    xpuwatch_build_info: exporter.build.VOLATILE_PREFIXES), which golden files leave out."""
    from xpuwatch.exporter.build import VOLATILE_PREFIXES

    def volatile(line: str) -> bool:
        name = line.split(" ", 3)[2] if line.startswith("# ") else line
        return name.startswith(VOLATILE_PREFIXES)

    return "".join(line for line in body.splitlines(keepends=True) if not volatile(line))


@dataclass
class Exporter:
    """A running `xpuwatch serve` process: ``url`` is its base URL (scheme://127.0.0.1:port)."""

    proc: subprocess.Popen[str]
    url: str
    log: list[str] = field(default_factory=list)


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPUWATCH_") and k != "NODE_NAME"}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xpuwatch", *args],
        cwd=ROOT,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def start_exporter() -> Iterator[Callable[..., Exporter]]:
    """Factory: start_exporter(*serve_args) -> Exporter, waiting until it listens (stops it afterwards)."""
    running: list[Exporter] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Exporter:
        proc = subprocess.Popen(
            [sys.executable, "-m", "xpuwatch", "serve", "--web.listen-address", "127.0.0.1:0", *args],
            cwd=ROOT,
            env=env or cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        exp = Exporter(proc, "")
        running.append(exp)
        found = threading.Event()

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                exp.log.append(line)
                m = re.search(r"listening on (https?://[^/\s]+)", line)
                if m and not found.is_set():
                    exp.url = m.group(1)
                    found.set()
            found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 60
        while not found.wait(0.05):
            if time.monotonic() > deadline:
                break
        if not exp.url:
            proc.kill()
            raise AssertionError("exporter did not start:\n" + "".join(exp.log))
        return exp

    yield start
    for exp in running:
        exp.proc.terminate()
        try:
            exp.proc.wait(10)
        except subprocess.TimeoutExpired:
            exp.proc.kill()
            exp.proc.wait()


def wait_ready(exp: Exporter, timeout: float = 120) -> None:
    """Poll the exporter's /readyz until 200. Fails at once if the process ends, else after ``timeout``
    seconds: a bound for a loaded machine, not a figure under test (alone it is ready within 2 s). The
    failure says the last answer and ends with the exporter's log."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline and exp.proc.poll() is None:
        try:
            with urllib.request.urlopen(exp.url + "/readyz", timeout=10) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            last = f"{exc.code} {exc.read().decode(errors='replace').strip()}"
        except Exception as exc:
            last = str(exc)
        time.sleep(0.05)
    state = "running" if exp.proc.poll() is None else f"exited {exp.proc.returncode}"
    raise AssertionError(f"{exp.url} not ready ({state}): {last}\nexporter log:\n" + "".join(exp.log[-80:]))
