"""Benchmark: parse time of the boxed-table vendors (cnmon, efsmi, xpu-smi, mx-smi/ht-smi, ixsmi, mthreads-gmi)
on every real capture, read by header name (vendors/smi_table.py).

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/table_parse.py [repeats]``. Prints the
mean time per parse and per device for each capture, and the parse as a multiple of a split floor (the text
split into lines and ``|`` cells, nothing read) timed in the same run; nothing is asserted (tests never time
things).
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

import yaml

from xpuwatch.vendors.registry import all_formats

FIX = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
VENDORS = ("cambricon", "enflame", "kunlunxin", "metax", "iluvatar", "mthreads")


def split_floor(text: str) -> list[list[str]]:
    """The least any table reader does: every line split into its ``|`` cells."""
    return [line.split("|") for line in text.splitlines()]


def main(repeats: int) -> None:
    print(f"{'capture':72} {'devices':>7} {'ms/parse':>9} {'us/device':>10} {'x floor':>8}")
    for vendor in VENDORS:
        for expected in sorted((FIX / vendor).glob("*.expected.yaml")):
            capture = expected.with_name(expected.name.removesuffix(".expected.yaml"))
            fmt = all_formats()[yaml.safe_load(expected.read_text())["format"]]
            text = capture.read_text(encoding="utf-8")
            devices = len(fmt.parse(text))
            seconds = timeit.timeit(lambda fmt=fmt, text=text: fmt.parse(text), number=repeats) / repeats
            floor = timeit.timeit(lambda text=text: split_floor(text), number=repeats) / repeats
            name = f"{vendor}/{capture.name}"
            print(
                f"{name[:72]:72} {devices:7d} {seconds * 1e3:9.2f} {seconds * 1e6 / devices:10.0f}"
                f" {seconds / floor:8.1f}"
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
