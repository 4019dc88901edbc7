"""Benchmark: cost of the Ascend backend's pure parsing per poll (npu-smi text -> DeviceSample), no tool calls.

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/ascend_parse.py``. Prints microseconds per
call for the main table of an 8-chip 910A host (with its 32-row process table), a 310P card, and one card's
``-t usages`` / ``-t common`` / ``-t health`` reports, plus a whole simulated 8-card poll through the backend
with an in-memory runner (so the figure excludes npu-smi's own run time, which dominates on real hosts).
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

from xpuwatch.vendors import ascend
from xpuwatch.vendors.command import CommandResult

FIX = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "ascend"


def fixture(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


class MemoryRunner:
    """Answers npu-smi argv from a dict (no processes)."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def which(self, tool: str) -> str | None:
        return tool

    def run(self, argv: list[str], timeout: float) -> CommandResult:
        return CommandResult(tuple(argv), self.answers[" ".join(argv[1:])], "", 0, 0.0, 0.0)


def per_call_us(fn: object, number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6  # type: ignore[arg-type]


def main() -> None:
    table = fixture("npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt")
    duo = fixture("npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt")
    usages = fixture("npu-smi_info_-t_usages_-i_0_910B.txt")
    common = fixture("npu-smi_info_-t_common_-i_0_910B.txt")
    health = "Health Status : Alarm\nError Code : A4025021 8C03A000 8C084E00\nError Information : x\n"
    answers = {"info": table.replace("Warning", "OK     ")}
    for n in range(8):
        answers[f"info -t usages -i {n}"] = usages.replace(
            "NPU ID                         : 0", f"NPU ID : {n}"
        )
        answers[f"info -t common -i {n}"] = common.replace(
            "NPU ID                         : 0", f"NPU ID : {n}"
        )
    backend = ascend.AscendBackend(MemoryRunner(answers), ascend.AscendOptions())
    backend.open()
    rows = [
        ("npu-smi info, 8 x 910A + 32 processes -> samples", lambda: ascend.samples_from_info(table), 2000),
        ("npu-smi info, 310P Duo -> samples", lambda: ascend.samples_from_info(duo), 5000),
        ("-t usages (one card)", lambda: ascend.parse_card_report(usages), 20000),
        ("-t common (one card)", lambda: ascend.parse_card_report(common), 20000),
        ("-t health", lambda: ascend.parse_health(health), 20000),
        ("backend.sample(), 8 cards, 17 answers in memory", backend.sample, 500),
    ]
    print(f"python {sys.version.split()[0]}")
    for label, fn, number in rows:
        print(f"{label:55s} {per_call_us(fn, number):9.1f} us/call")


if __name__ == "__main__":
    main()
