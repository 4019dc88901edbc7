"""Demo benchmark: how long a new user waits, running `xpuwatch demo` with the packaged scenario.

Runs the real command (Debian's prometheus and prometheus-alertmanager on PATH) ``--runs`` times and prints,
per run and as medians: stack startup, start to the first hardware alert (Prometheus' ``activeAt``), start
to the first hardware message (WeCom stand-in), alert to message, and the shutdown time. The first hardware
fault of the packaged scenario is injected 20 s after the exporter starts.

    PYTHONPATH=$PWD python benchmarks/demo_first_message.py [--runs 3] [--duration 40]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAMP = r"^\d\d:\d\d:\d\d +\+([\d.]+)s  "


def one_run(duration: float) -> dict[str, float]:
    started = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "xpuwatch", "demo", "--duration", f"{duration:g}"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    out = res.stdout
    if res.returncode != 0:
        raise SystemExit(f"demo exited with {res.returncode}:\n{out}\n{res.stderr}")

    def seconds(pattern: str) -> float:
        m = re.search(pattern, out, re.MULTILINE)
        if not m:
            raise SystemExit(f"no match for {pattern!r} in:\n{out}")
        return float(m.group(1))

    ready = seconds(STAMP + r"demo +stack ready")
    alert = seconds(r"first hardware alert active at \+([\d.]+) s")
    message = seconds(r"first hardware message at \+([\d.]+) s")
    stopping = seconds(STAMP + r"demo +stopping")
    removed = seconds(STAMP + r"demo +removed working directory")
    return {
        "startup_s": ready,
        "start_to_first_hw_alert_s": alert,
        "start_to_first_hw_message_s": message,
        "alert_to_message_s": message - alert,
        "shutdown_s": removed - stopping,
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=40.0, help="seconds after the stack is ready")
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        r = one_run(args.duration)
        runs.append(r)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()), flush=True)
    print("median: " + ", ".join(f"{k} {statistics.median(r[k] for r in runs):.1f}" for k in runs[0]))
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
