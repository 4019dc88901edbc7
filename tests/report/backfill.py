"""A real Prometheus serving backfilled history: OpenMetrics lines -> Debian's `promtool tsdb
create-blocks-from openmetrics` -> TSDB blocks -> Debian's `prometheus` on a free loopback port."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from tests.ports import free_port


@contextlib.contextmanager
def served(tmp: Path, lines: Iterable[str]) -> Iterator[str]:
    """Backfill ``lines`` (OpenMetrics, timestamps in seconds, ``# EOF`` last) and yield the base URL of a
    Prometheus serving them; stopped on exit."""
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert binary and promtool, "Debian packages prometheus (promtool) are required"
    om = tmp / "history.om"
    with om.open("w") as f:
        for line in lines:
            f.write(line + "\n")
    data = tmp / "data"
    made = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr
    (tmp / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=60d",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail("prometheus did not become ready")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
