"""Golden file: the whole /metrics of the real server on the default simulated fleet, fixed seed and clock.

Regenerate with `pytest tests/exporter/test_golden.py --update-golden` and review the diff.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.exporter.conftest import GOLDEN_CLOCK, Exporter, stable_exposition, wait_ready

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "metrics.txt"


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.mark.slow
def test_golden_metrics_of_sim_fleet(start_exporter: Callable[..., Exporter], update_golden: bool) -> None:
    exp = start_exporter("--simulate", "--seed", "42", "--sim-clock", GOLDEN_CLOCK)
    wait_ready(exp)
    body = stable_exposition(_scrape(exp.url))
    if update_golden:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(body)
    assert body == GOLDEN.read_text(), "golden differs: rerun with --update-golden and review the diff"


@pytest.mark.slow
def test_golden_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required"
    res = subprocess.run(
        [promtool, "check", "metrics"], input=GOLDEN.read_text(), capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout == res.stderr == ""  # no lint findings either
