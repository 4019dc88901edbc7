"""Benchmark: cost of the Intel Gaudi backend's pure parsing per poll (hl-smi text -> DeviceSample), no tool
calls, and one HLML poll through the pyhlml stand-in (so the figure excludes libhlml's own time).

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/intel_parse.py``. Prints microseconds per
call for the 8-AIP Gaudi 3 table, the 8-row ``-Q ... -f csv`` query, ``inspect --explain``'s column list
and a backend poll of 8 AIPs over the stand-in module.
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

from tests.vendors import fake_pyhlml
from xpuwatch.vendors import intel
from xpuwatch.vendors.intel_hlsmi import explain_table, parse_csv, parse_table
from xpuwatch.vendors.registry import BackendContext

FIX = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "intel"


def per_call_us(fn: object, number: int) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6  # type: ignore[arg-type]


def main() -> None:
    table = (FIX / "hl-smi_gaudi3-HL-325L_1.21.0-fw59.2.1_drv1.20.1_8aip.txt").read_text()
    csv = (FIX / "hl-smi_Q_csv_nounits_gaudi1-HL-205_1.18.0-fw53.1.1_8aip.csv.txt").read_text()
    backend = intel.IntelBackend(
        BackendContext(), module=fake_pyhlml.make([fake_pyhlml.FakeAip() for _ in range(8)])
    )
    backend.open()
    rows = [
        ("hl-smi table, 8 x Gaudi 3 -> samples", lambda: parse_table(table), 2000),
        ("hl-smi -Q ... -f csv, 8 rows -> samples", lambda: parse_csv(csv), 5000),
        ("explain_table (columns not read)", lambda: explain_table(table), 2000),
        ("backend.sample(), 8 AIPs via the pyhlml stand-in", backend.sample, 2000),
    ]
    print(f"python {sys.version.split()[0]}")
    for label, fn, number in rows:
        print(f"{label:55s} {per_call_us(fn, number):9.1f} us/call")


if __name__ == "__main__":
    main()
