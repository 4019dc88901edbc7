"""Benchmark: npu-smi forks and wall time per poll of the Ascend CLI path, with a slow fake npu-smi.

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/ascend_cli_poll.py [--delay 1] [--polls 3]``.
A fake ``npu-smi`` (a shell script standing for Huawei's tool: it answers ``info`` with an N-card 910A table
built from ``tests/fixtures/ascend/npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt`` and the per-card
``-t usages``/``-t common`` from the 910B captures, renumbered; anything else with the "Invalid card id."
usage text) sleeps ``--delay`` seconds per call and logs each call, so the figures are the backend's own
cost. For 8 and 16 cards (all chips OK, as on a healthy host) it prints, per poll, the number of npu-smi
calls, the wall time, and how many chips were up and how many readings unread. To measure an older tree,
run it with that tree's ``PYTHONPATH`` (the script uses only ``vendors.ascend.create`` and ``sample``).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import tempfile
import time
from pathlib import Path

from xpuwatch.vendors import ascend
from xpuwatch.vendors.command import SubprocessRunner
from xpuwatch.vendors.registry import BackendContext

FIX = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "ascend"


def _fixture(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def _table(cards: int) -> str:
    lines = _fixture("npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt").splitlines(keepends=True)
    out = lines[:6]
    for n in range(cards):
        out.append(lines[6].replace("| 0     xxx", f"| {n:<2}    xxx", 1))
        out.append(lines[7].replace("0000:C1:00.0", f"0000:{n + 1:02X}:00.0"))
        out.append(lines[8])
    return "".join(out)


def _renumber(text: str, npu: int) -> str:
    return "".join(
        f"NPU ID                         : {npu}\n" if ln.strip().startswith("NPU ID") else ln
        for ln in text.splitlines(keepends=True)
    )


def fake_tool(root: Path, cards: int, delay: float) -> Path:
    """Write answers and the fake npu-smi under ``root``; returns its bin dir. Calls are logged to root/calls."""
    ans = root / "answers"
    ans.mkdir(parents=True)
    (ans / "info").write_text(_table(cards), encoding="utf-8")
    for n in range(cards):
        for kind, fx in (
            ("usages", "npu-smi_info_-t_usages_-i_0_910B.txt"),
            ("common", "npu-smi_info_-t_common_-i_0_910B.txt"),
        ):
            (ans / f"info_-t_{kind}_-i_{n}").write_text(_renumber(_fixture(fx), n), encoding="utf-8")
        (ans / f"info_-t_info-vnpu_-i_{n}_-c_0").write_text(
            _fixture("npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_none.txt"), encoding="utf-8"
        )
    bindir = root / "bin"
    bindir.mkdir()
    tool = bindir / "npu-smi"
    tool.write_text(
        "#!/bin/sh\n"
        "# Fake npu-smi (stands for Huawei's npu-smi; outputs from tests/fixtures/ascend): slow on purpose.\n"
        f'echo "$*" >> "{root}/calls"\n'
        f"sleep {delay}\n"
        'key=$(echo "$*" | tr " " "_")\n'
        f'if [ -f "{ans}/$key" ]; then cat "{ans}/$key"; exit 0; fi\n'
        'echo "Invalid card id."; echo "Error parameter of -i"; exit 0\n',
        encoding="utf-8",
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return bindir


def measure(cards: int, delay: float, polls: int) -> list[tuple[int, float, int, int]]:
    """Per poll: (npu-smi calls, wall seconds, chips up, unread readings)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bindir = fake_tool(root, cards, delay)
        runner = SubprocessRunner(
            env={**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
        )
        backend = ascend.create(BackendContext(runner=runner, options={"source": "cli"}))
        backend.open()
        calls = root / "calls"
        out = []
        for _ in range(polls):
            before = len(calls.read_text().splitlines()) if calls.exists() else 0
            t0 = time.monotonic()
            samples = backend.sample()
            wall = time.monotonic() - t0
            after = len(calls.read_text().splitlines())
            out.append(
                (after - before, wall, sum(s.up for s in samples), sum(len(s.unread) for s in samples))
            )
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay", type=float, default=1.0, help="seconds each fake npu-smi call takes")
    ap.add_argument("--polls", type=int, default=3)
    ap.add_argument("--cards", type=int, nargs="*", default=[8, 16])
    args = ap.parse_args()
    for cards in args.cards:
        for i, (forks, wall, up, unread) in enumerate(measure(cards, args.delay, args.polls)):
            print(f"cards={cards} poll={i} forks={forks} wall={wall:.1f}s up={up}/{cards} unread={unread}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
