"""Benchmark: parse time of the AMD and Hygon tool outputs (fixtures and a 16-GPU amd-smi document).

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/amd_hygon_parse.py``. Prints the mean
time per parse; nothing is asserted (tests never time things).
"""

from __future__ import annotations

import json
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path

from vendors import amd, hygon
from vendors.base import DeviceSample

FIX = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def _sixteen_gpus() -> str:
    entry = {
        "usage": {"gfx_activity": {"value": 87, "unit": "%"}, "umc_activity": {"value": 41, "unit": "%"}},
        "power": {"socket_power": {"value": 602, "unit": "W"}},
        "temperature": {
            "edge": "N/A",
            "hotspot": {"value": 61, "unit": "C"},
            "mem": {"value": 70, "unit": "C"},
        },
        "mem_usage": {
            "total_vram": {"value": 196592, "unit": "MB"},
            "used_vram": {"value": 150000, "unit": "MB"},
        },
        "energy": {"total_energy_consumption": {"value": 1234567.5, "unit": "J"}},
        "ecc": {"total_correctable_count": 1, "total_uncorrectable_count": 0, "total_deferred_count": 0},
        "pcie": {"replay_count": 0},
        "clock": {
            "gfx_0": {"clk": {"value": 2100, "unit": "MHz"}},
            "mem_0": {"clk": {"value": 1300, "unit": "MHz"}},
        },
    }
    return json.dumps({"gpu_data": [{"gpu": i, **entry} for i in range(16)]})


CASES: list[tuple[str, Callable[[str], Sequence[DeviceSample]], str]] = [
    ("amd-smi metric, 16 GPUs (gpu_data)", amd.parse_amd_smi_metric, _sixteen_gpus()),
    (
        "amd-smi monitor fixture",
        amd.parse_amd_smi_monitor,
        (FIX / "amd" / "amd-smi_monitor_-q_rocm6.2.txt").read_text(),
    ),
    (
        "rocm-smi JSON fixture",
        amd.parse_rocm_smi_json,
        (FIX / "amd" / "rocm-smi_json_rx7800xt_rocm6.2.4.json").read_text(),
    ),
    (
        "hy-smi JSON fixture",
        hygon.parse_hygon_json,
        (FIX / "hygon" / "rocm-smi_json_hygon_dcu_dtk24.04.3.json").read_text(),
    ),
    (
        "hy-smi table fixture",
        hygon.parse_hygon_table,
        (FIX / "hygon" / "rocm-smi_table_dcu_dtk23.10.1.txt").read_text(),
    ),
    (
        "hy-smi HCU table, 8 HCUs",
        hygon.parse_hygon_table,
        (FIX / "hygon" / "hy-smi_8hcu_800W_mixed-vram_100pct.txt").read_text(),
    ),
    (
        "hy-smi HCU table, 8 HCUs, 1 masked cell",
        hygon.parse_hygon_table,
        (FIX / "hygon" / "hy-smi_8hcu_800W_mixed-vram_100pct.txt")
        .read_text()
        .replace("134.0W", "xxxxx MiB", 1),
    ),
    (
        "hyhal hy-smi JSON (2 missing commas/card)",
        hygon.parse_hygon_json,
        (FIX / "hygon" / "hy-smi_json_BW_2hcu_dtk-hyhal_missing-commas.json").read_text(),
    ),
    (
        "amd-smi static, 8x MI300X (ROCm 7)",
        amd.parse_amd_smi_static_samples,
        (FIX / "amd" / "amd-smi_static_json_8x-mi300x_rocm7.2.1_ppt0-limit.json").read_text(),
    ),
]


def main() -> None:
    for name, parse, raw in CASES:
        n = 500
        seconds = timeit.timeit(lambda parse=parse, raw=raw: parse(raw), number=n) / n
        print(f"{name:40s} {seconds * 1e6:9.1f} µs/parse  ({len(parse(raw))} devices)")


if __name__ == "__main__":
    main()
