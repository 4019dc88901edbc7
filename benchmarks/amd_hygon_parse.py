"""Benchmark: parse time of the AMD and Hygon tool outputs (fixtures and a 16-GPU amd-smi document).

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/amd_hygon_parse.py``. Prints the mean
time per parse; nothing is asserted (tests never time things).
"""

from __future__ import annotations

import json
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path

from xpuwatch.vendors import amd, hygon
from xpuwatch.vendors.base import DeviceSample

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


def _amd_smi_table_cpx(cards: int = 8, parts: int = 8) -> str:
    """The default amd-smi table (layout of the ROCm/amdsmi#132 capture) for ``cards`` MI300X in CPX."""
    head = (FIX / "amd" / "amd-smi_default_mi300x_dpx_rocm7.0.2_amdsmi-issue132_excerpt.txt").read_text()
    lines = head.splitlines()[:7]
    rule = "|-------------------------------------+----------------------------------------|"
    for c in range(cards):
        for p in range(parts):
            i = c * parts + p
            power = "142/750 W" if p == 0 else "N/A"
            mode = "CPX/NPS1" if p == 0 else "N/A"
            lines.append(
                f"| 0000:{5 + c:02x}:00.{p}    AMD Instinct MI300X | 0 %      40 °C   0 {power:>19} |"
            )
            lines.append(f"| {i:3d} {i:7d}       7 {mode:>15} | 0 %        N/A {'283/24574 MB':>23} |")
            lines.append(rule)
    return "\n".join(lines) + "\n"


def _rocm_smi_table_cpx(rows: int = 64) -> str:
    """Plain rocm-smi (layout of the ROCm/legacy-rocm-build#4750 capture), ``rows`` CPX partitions."""
    head = (
        FIX / "amd" / "rocm-smi_concise_mi300x_spx_rocm6.4.1_legacy-rocm-build-4750_excerpt.txt"
    ).read_text()
    lines = head.splitlines()
    row = lines[5]
    body = [f"{i:<8d}{row[8:]}".replace("NPS1, SPX, 0 ", f"NPS1, CPX, {i % 8} ") for i in range(rows)]
    return "\n".join([*lines[:5], *body, lines[4]]) + "\n"


CASES: list[tuple[str, Callable[[str], Sequence[DeviceSample]], str]] = [
    (
        "amd-smi default table, 2 GPUs + procs",
        amd.parse_amd_smi_table,
        (
            FIX / "amd" / "amd-smi_default_R9700x2_26.2.1_rocm7.2.0_fan-pct-missing_procs-table.txt"
        ).read_text(),
    ),
    ("amd-smi default table, 64 CPX partitions", amd.parse_amd_smi_table, _amd_smi_table_cpx()),
    (
        "rocm-smi concise, 1 GPU (ROCm 7)",
        amd.parse_rocm_smi_table,
        (
            FIX / "amd" / "rocm-smi_concise_R9700_kernel6.18_partitions-cols_degC_pwrcap210-manual.txt"
        ).read_text(),
    ),
    ("rocm-smi concise, 64 CPX partitions", amd.parse_rocm_smi_table, _rocm_smi_table_cpx()),
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
        devices = len(parse(raw))
        print(
            f"{name:42s} {seconds * 1e6:9.1f} µs/parse  ({devices} devices, "
            f"{seconds * 1e6 / devices:7.1f} µs/device)"
        )


if __name__ == "__main__":
    main()
