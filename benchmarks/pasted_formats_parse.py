"""Benchmark: parse cost per device of the formats users paste (issue 35): the plain ``nvidia-smi`` table,
``hl-smi -L``, ``xpu-smi -q`` and efsmi's monitor view, on every real capture of them in tests/fixtures/.

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/pasted_formats_parse.py [repeats]``. Prints
per capture the time per parse (best of 5 rounds) and per device, and the parse as a multiple of a split floor (the text
split into lines and ``|`` cells, nothing read) timed in the same run, then per format the median per
device; nothing is asserted (tests never time things). These are ``inspect`` formats, read once per pasted
file, not per poll: the figures say what a 64-device paste costs, not a scrape budget.
"""

from __future__ import annotations

import statistics
import sys
import timeit
from pathlib import Path

import yaml

from xpuwatch.vendors.registry import all_formats

FIX = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
FORMATS = ("nvidia-smi-table", "hl-smi-listing", "xpu-smi-query", "efsmi-monitor")


def split_floor(text: str) -> list[list[str]]:
    """The least any reader does: every line split into its ``|`` cells."""
    return [line.split("|") for line in text.splitlines()]


def main(repeats: int) -> None:
    per_device: dict[str, list[float]] = {f: [] for f in FORMATS}
    print(f"{'capture':78} {'devices':>7} {'ms/parse':>9} {'us/device':>10} {'x floor':>8}")
    for expected in sorted(FIX.glob("*/*.expected.yaml")):
        fmt_name = yaml.safe_load(expected.read_text()).get("format")
        if fmt_name not in FORMATS:
            continue
        fmt = all_formats()[fmt_name]
        capture = expected.with_name(expected.name.removesuffix(".expected.yaml"))
        text = capture.read_text(encoding="utf-8")
        devices = len(fmt.parse(text))
        # best of 5 rounds: on a shared, loaded machine the minimum is the figure least inflated by others
        seconds = min(timeit.repeat(lambda fmt=fmt, text=text: fmt.parse(text), number=repeats, repeat=5))
        seconds /= repeats
        floor = min(timeit.repeat(lambda text=text: split_floor(text), number=repeats, repeat=5)) / repeats
        per_device[fmt_name].append(seconds * 1e6 / devices)
        name = f"{capture.parent.name}/{capture.name}"
        print(
            f"{name[:78]:78} {devices:7d} {seconds * 1e3:9.3f} {seconds * 1e6 / devices:10.0f}"
            f" {seconds / floor:8.1f}"
        )
    print()
    for fmt_name, values in per_device.items():
        print(
            f"{fmt_name:18} {len(values):3d} capture(s)  median {statistics.median(values):7.0f} us/device"
            f"  max {max(values):7.0f} us/device"
        )
    print(f"python {sys.version.split()[0]}, best of 5 rounds of {repeats} parses per capture")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
