"""Every vendor in one schema: `xpuwatch inspect` (the real CLI) on each vendor's real fixture prints the right
values under the shared metric names, excerpts fail cleanly, and each fixture is claimed by exactly one format.

Expected values are read off the fixture texts by hand (units converted: MiB x 2**20, % / 100, W, Celsius).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter.conftest import ROOT, cli_env
from xpuwatch.exporter import catalog
from xpuwatch.vendors.registry import all_formats

FIXTURES = ROOT / "tests" / "fixtures"
MIB = 2**20

# fixture -> {(metric, device, extra labels): value}; extra labels as a sorted tuple of (name, value).
Expect = dict[tuple[str, str, tuple[tuple[str, str], ...]], float]
UTIL, USED, TOTAL = catalog.UTILIZATION, catalog.MEMORY_USED, catalog.MEMORY_TOTAL
TEMP, POWER, LIMIT = catalog.TEMPERATURE, catalog.POWER, catalog.POWER_LIMIT
CORE, HOT, MEM = (("sensor", "core"),), (("sensor", "hotspot"),), (("sensor", "memory"),)

COMPLETE: dict[str, tuple[str, Expect]] = {
    # AMD rocm-smi JSON (RX 7800 XT): GPU use 100 %, VRAM in bytes, edge/junction/memory sensors, 53.0 W.
    "amd/rocm-smi_json_rx7800xt_rocm6.2.4.json": (
        "amd",
        {
            (UTIL, "0", ()): 1.0,
            (USED, "0", ()): 11615076352,
            (TOTAL, "0", ()): 17163091968,
            (TEMP, "0", CORE): 45.0,
            (TEMP, "0", HOT): 51.0,
            (TEMP, "0", MEM): 54.0,
            (POWER, "0", ()): 53.0,
        },
    ),
    # amd-smi monitor -q: 199 W, 103 C hotspot, 84 C memory, 99 %, 1235 / 16335 MB (AMD's MB = MiB).
    "amd/amd-smi_monitor_-q_rocm6.2.txt": (
        "amd",
        {
            (UTIL, "0", ()): 0.99,
            (USED, "0", ()): 1235 * MIB,
            (TOTAL, "0", ()): 16335 * MIB,
            (TEMP, "0", HOT): 103.0,
            (TEMP, "0", MEM): 84.0,
            (POWER, "0", ()): 199.0,
        },
    ),
    # amd-smi metric -p --json: power only (socket_power 10 W).
    "amd/amd-smi_metric_-p_json_rocm6.1.json": ("amd", {(POWER, "0", ()): 10.0}),
    # amd-smi static --json (ROCm 7 gpu_data): 8x MI300X, vram 196592 MB (= MiB), ppt0 socket cap 750 W.
    "amd/amd-smi_static_json_8x-mi300x_rocm7.2.1_ppt0-limit.json": (
        "amd",
        {(TOTAL, "7", ()): 196592 * MIB, (LIMIT, "7", ()): 750.0, (LIMIT, "0", ()): 750.0},
    ),
    # rocm-smi -a --json (MI210, ROCm 5): edge 33 C, 41.0 W of a 300.0 W cap, GPU use 0 %.
    "amd/rocm-smi_-a_json_mi210_rocm5_driver5.18.13.json": (
        "amd",
        {(TEMP, "0", CORE): 33.0, (POWER, "0", ()): 41.0, (LIMIT, "0", ()): 300.0, (UTIL, "0", ()): 0.0},
    ),
    # default amd-smi table, 2 x R9700: "103/300 W", "29777/32624 MB", 79 degC (hotspot), GFX-Uti 100 %.
    "amd/amd-smi_default_R9700x2_26.2.1_rocm7.2.0_fan-pct-missing_procs-table.txt": (
        "amd",
        {
            (POWER, "0", ()): 103.0,
            (LIMIT, "0", ()): 300.0,
            (USED, "0", ()): 29777 * MIB,
            (TOTAL, "1", ()): 32624 * MIB,
            (TEMP, "0", HOT): 79.0,
            (UTIL, "1", ()): 1.0,
        },
    ),
    # plain rocm-smi on ROCm 7 (R9700): 45.0 degC (Edge -> core), 31.0 W of a 210.0 W cap, GPU% 100.
    "amd/rocm-smi_concise_R9700_kernel6.18_partitions-cols_degC_pwrcap210-manual.txt": (
        "amd",
        {(TEMP, "0", CORE): 45.0, (POWER, "0", ()): 31.0, (LIMIT, "0", ()): 210.0, (UTIL, "0", ()): 1.0},
    ),
    # plain rocm-smi on ROCm 3.3: GPU 1 at 24.0c, 3.0 W of 170.0 W, GPU% 0.
    "amd/rocm-smi_concise_rocm3.3_rx_ROC-smi-issue86.txt": (
        "amd",
        {(TEMP, "1", CORE): 24.0, (POWER, "1", ()): 3.0, (LIMIT, "1", ()): 170.0, (UTIL, "1", ()): 0.0},
    ),
    # hy-smi (hyhal) HCU table: 8 HCUs, 43.0C / 131.0W / 800.0W on HCU 0, VRAM% 100 on HCU 3.
    "hygon/hy-smi_8hcu_800W_mixed-vram_100pct.txt": (
        "hygon",
        {
            (TEMP, "0", CORE): 43.0,
            (POWER, "0", ()): 131.0,
            (LIMIT, "0", ()): 800.0,
            (catalog.MEMORY_USED_RATIO, "3", ()): 1.0,
        },
    ),
    # hy-smi DTK 24.04 DCU header: 4 DCUs, DCU 3 at 138.0W, 49.0C.
    "hygon/hy-smi_K100-AI_dtk24.04.1_4dcu_800W_dcu-header.txt": (
        "hygon",
        {(TEMP, "3", CORE): 49.0, (POWER, "3", ()): 138.0, (LIMIT, "3", ()): 800.0},
    ),
    # hy-smi HCU header without Dec%/Enc%: 2 HCUs, 400.0W cap.
    "hygon/hy-smi_2hcu_400W_hcu-header_no-dec-enc.txt": (
        "hygon",
        {(TEMP, "1", CORE): 62.0, (POWER, "1", ()): 112.0, (LIMIT, "1", ()): 400.0},
    ),
    # hy-smi --json with hyhal's missing commas: card0 91.0 W, vram 64169 / 65520 MiB.
    "hygon/hy-smi_json_BW_2hcu_dtk-hyhal_missing-commas.json": (
        "hygon",
        {(POWER, "0", ()): 91.0, (USED, "0", ()): 64169 * MIB, (TOTAL, "0", ()): 65520 * MIB},
    ),
    # hy-smi --showuse --showmeminfo vram text: used MiB per HCU, no capacity lines.
    "hygon/hy-smi_showuse_showmeminfo_8hcu_used-only.txt": (
        "hygon",
        {(USED, "3", ()): 12058 * MIB, (USED, "7", ()): 5042 * MIB},
    ),
    # hy-smi --showmemavailable: 65438 MiB per HCU, a vendor metric (not a total: its meaning is undocumented).
    "hygon/hy-smi_showmemavailable_K100_AIx8_65438MiB_key-value.txt": (
        "hygon",
        {("accelerator_hygon_memory_available_bytes", "7", ()): 65438 * MIB},
    ),
    # Hygon DTK rocm-smi JSON: DCU use 0 %, vram 2 / 65520 MiB, edge 41 C, 80.0 W.
    "hygon/rocm-smi_json_hygon_dcu_dtk24.04.3.json": (
        "hygon",
        {
            (UTIL, "0", ()): 0.0,
            (USED, "0", ()): 2 * MIB,
            (TOTAL, "0", ()): 65520 * MIB,
            (TEMP, "0", CORE): 41.0,
            (TEMP, "0", MEM): 44.0,
            (POWER, "0", ()): 80.0,
        },
    ),
    # Hygon rocm-smi table: DCU 1 at 30.0c, 41.0W, cap 280.0W, 0 %.
    "hygon/rocm-smi_table_dcu_dtk23.10.1.txt": (
        "hygon",
        {(UTIL, "1", ()): 0.0, (TEMP, "1", CORE): 30.0, (POWER, "1", ()): 41.0, (LIMIT, "1", ()): 280.0},
    ),
    # cnmon: card 1 at 39C, 106 W / 250 W, 0 MiB / 23374 MiB, 0 %.
    "cambricon/cnmon_MLU370-X8_v5.10.13.txt": (
        "cambricon",
        {
            (UTIL, "1", ()): 0.0,
            (USED, "1", ()): 0.0,
            (TOTAL, "1", ()): 23374 * MIB,
            (TEMP, "1", CORE): 39.0,
            (POWER, "1", ()): 106.0,
            (LIMIT, "1", ()): 250.0,
        },
    ),
    # efsmi: DEV 0 S60 at 39 C, 105W / 300W, 49120MiB total, DUsed 0.0 %.
    "enflame/efsmi_S60_1.2.0.301.txt": (
        "enflame",
        {
            (UTIL, "0", ()): 0.0,
            (TOTAL, "0", ()): 49120 * MIB,
            (TEMP, "0", CORE): 39.0,
            (POWER, "0", ()): 105.0,
            (LIMIT, "0", ()): 300.0,
        },
    ),
    # ixsmi: GPU 1 at 34C, 103W / 350W, 64MiB / 32768MiB, 0 %.
    "iluvatar/ixsmi_BI-V150_4.3.0.txt": (
        "iluvatar",
        {
            (UTIL, "1", ()): 0.0,
            (USED, "1", ()): 64 * MIB,
            (TOTAL, "1", ()): 32768 * MIB,
            (TEMP, "1", CORE): 34.0,
            (POWER, "1", ()): 103.0,
            (LIMIT, "1", ()): 350.0,
        },
    ),
    # xpu-smi (P800, driver 5): XPU 1 at 41C, 90W / 400W, 0MiB / 98304MiB, 0 %.
    "kunlunxin/xpu-smi_P800_drv5.0.21.21.txt": (
        "kunlunxin",
        {
            (UTIL, "1", ()): 0.0,
            (USED, "1", ()): 0.0,
            (TOTAL, "1", ()): 98304 * MIB,
            (TEMP, "1", CORE): 41.0,
            (POWER, "1", ()): 90.0,
            (LIMIT, "1", ()): 400.0,
        },
    ),
    # xpu_smi (R300, driver 4): DevID 1, 0 %, 0 / 32768 MB; no temperature or power in this layout.
    "kunlunxin/xpu_smi_R300_rt4.31_drv4.0.txt": (
        "kunlunxin",
        {(UTIL, "1", ()): 0.0, (USED, "1", ()): 0.0, (TOTAL, "1", ()): 32768 * MIB},
    ),
    # mx-smi: GPU 0 at 29C, 53W / 450W, 858/65536 MiB, 0 %.
    "metax/mx-smi_C550_2.2.4.txt": (
        "metax",
        {
            (UTIL, "0", ()): 0.0,
            (USED, "0", ()): 858 * MIB,
            (TOTAL, "0", ()): 65536 * MIB,
            (TEMP, "0", CORE): 29.0,
            (POWER, "0", ()): 53.0,
            (LIMIT, "0", ()): 450.0,
        },
    ),
    # nvidia-smi -q -x (Tesla T4): 0 %, 1032 / 15360 MiB, 40 C, 26.78 W.
    "nvidia/nvidia-smi_q_x_tesla-t4_515.105.01.xml": (
        "nvidia",
        {
            (UTIL, "0", ()): 0.0,
            (USED, "0", ()): 1032 * MIB,
            (TOTAL, "0", ()): 15360 * MIB,
            (TEMP, "0", CORE): 40.0,
            (POWER, "0", ()): 26.78,
        },
    ),
    # nvidia-smi -q -x (A100 in MIG mode): GPU utilization is N/A under MIG (no series), 80 GiB, 27 C, 67.03 W.
    "nvidia/nvidia-smi_q_x_a100-sxm4-80gb-mig_535.54.03.xml": (
        "nvidia",
        {
            (USED, "0", ()): 50 * MIB,
            (TOTAL, "0", ()): 81920 * MIB,
            (TEMP, "0", CORE): 27.0,
            (POWER, "0", ()): 67.03,
        },
    ),
    # nvidia-smi --query-gpu CSV (H100 under load): 100 %, 19818 / 81559 MiB, 59 C, 631.95 W.
    "nvidia/nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01_load.csv.txt": (
        "nvidia",
        {
            (UTIL, "0", ()): 1.0,
            (USED, "0", ()): 19818 * MIB,
            (TOTAL, "0", ()): 81559 * MIB,
            (TEMP, "0", CORE): 59.0,
            (POWER, "0", ()): 631.95,
        },
    ),
    "nvidia/nvidia-smi_query-gpu_h100-mig_590.48.01_load.csv.txt": (
        "nvidia",
        {(TOTAL, "0", ()): 81559 * MIB, (TEMP, "0", CORE): 53.0, (POWER, "0", ()): 433.78},
    ),
    # nvsmi v13 (595.84): no <power_draw>, only average 8.81 W / instant 8.44 W; the average is the reading.
    "nvidia/nvidia-smi_q_x_rtx-4000-sff-ada_595.84_v13_avg-instant-power_4procs.xml": (
        "nvidia",
        {
            (UTIL, "0", ()): 0.0,
            (USED, "0", ()): 3534 * MIB,
            (TOTAL, "0", ()): 20475 * MIB,
            (TEMP, "0", CORE): 38.0,
            (POWER, "0", ()): 8.81,
        },
    ),
}

H = (("subsystem", "chip"),)
COMPLETE |= {
    # npu-smi info, 25.0.rc1.1 layout: one 300I Duo card (NPU 6) with two 310P3 chips, DDR 1175 / 44280 MB,
    # power "NA" (310P reports power per card, in -t common), Health OK.
    "ascend/npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt": (
        "huawei",
        {
            (UTIL, "6-1", ()): 0.0,
            (USED, "6-0", ()): 1175 * MIB,
            (TOTAL, "6-0", ()): 44280 * MIB,
            (USED, "6-1", ()): 8322 * MIB,
            (TEMP, "6-0", CORE): 55.0,
            (TEMP, "6-1", CORE): 52.0,
            (catalog.HEALTH, "6-1", H): 1.0,
        },
    ),
    # npu-smi 23.0.3, 2 x 910B2C: NPU 1 at 93.8 W, 53 C, HBM 3316 / 65536 MB.
    "ascend/npu-smi_info_910B2C_23.0.3_no_procs.txt": (
        "huawei",
        {
            (UTIL, "1-0", ()): 0.0,
            (USED, "1-0", ()): 3316 * MIB,
            (TOTAL, "1-0", ()): 65536 * MIB,
            (TEMP, "1-0", CORE): 53.0,
            (POWER, "1-0", ()): 93.8,
            (catalog.HEALTH, "1-0", H): 1.0,
        },
    ),
    # npu-smi 22.0.3.1, 8 x 910A: NPU 1 at 63.3 W, 38 C, HBM 0 / 32768 MB.
    "ascend/npu-smi_info_910A_22.0.3.1_8npu.txt": (
        "huawei",
        {
            (USED, "1-0", ()): 0.0,
            (TOTAL, "1-0", ()): 32768 * MIB,
            (TEMP, "1-0", CORE): 38.0,
            (POWER, "1-0", ()): 63.3,
        },
    ),
    # npu-smi 24.1.RC2: NPU 3 in Warning (health 0), 206.9 W, 39 C.
    "ascend/npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt": (
        "huawei",
        {
            (TEMP, "3-0", CORE): 39.0,
            (POWER, "3-0", ()): 206.9,
            (TOTAL, "3-0", ()): 32768 * MIB,
            (catalog.HEALTH, "3-0", H): 0.0,
            (catalog.HEALTH, "0-0", H): 1.0,
        },
    ),
    # npu-smi 24.1.rc3.7 on an A3 (two dies per NPU): die 0 of NPU 2 carries the 176.3 W, die 1 none.
    "ascend/npu-smi_info_A3_Ascend910_24.1.rc3.7_2dies_no_procs.txt": (
        "huawei",
        {(POWER, "2-0", ()): 176.3, (TEMP, "2-1", CORE): 36.0, (TOTAL, "2-1", ()): 65536 * MIB},
    ),
    # npu-smi 20.2.0 (oldest 310 layout): NPU 215 chip 0 at 12.8 W, 56 C, 2703 / 8192 MB.
    "ascend/npu-smi_info_310_20.2.0_legacy.txt": (
        "huawei",
        {
            (POWER, "215-0", ()): 12.8,
            (TEMP, "215-0", CORE): 56.0,
            (USED, "215-0", ()): 2703 * MIB,
            (TOTAL, "215-0", ()): 8192 * MIB,
        },
    ),
    # npu-smi 21.0.4 (310): NPU 6 chip 1 at 74 C, 2867 / 8192 MB.
    "ascend/npu-smi_info_310_21.0.4_legacy.txt": (
        "huawei",
        {(TEMP, "6-1", CORE): 74.0, (USED, "6-1", ()): 2867 * MIB, (TOTAL, "6-1", ()): 8192 * MIB},
    ),
    # -t usages -i 0 (910B): HBM 32768 MB at 0 %; -t common -i 0: 46 C, 69 W.
    "ascend/npu-smi_info_-t_usages_-i_0_910B.txt": (
        "huawei",
        {(UTIL, "0-0", ()): 0.0, (USED, "0-0", ()): 0.0, (TOTAL, "0-0", ()): 32768 * MIB},
    ),
    "ascend/npu-smi_info_-t_common_-i_0_910B.txt": (
        "huawei",
        {(UTIL, "0-0", ()): 0.0, (TEMP, "0-0", CORE): 46.0, (POWER, "0-0", ()): 69.0},
    ),
    # -t usages / -t common -i 1 (310P, two chips): DDR 44280 / 43693 MB at 3 %; 60 / 59 C.
    "ascend/npu-smi_info_-t_usages_-i_1_310P.txt": (
        "huawei",
        {(TOTAL, "1-0", ()): 44280 * MIB, (TOTAL, "1-1", ()): 43693 * MIB},
    ),
    "ascend/npu-smi_info_-t_common_-i_1_310P.txt": (
        "huawei",
        {(TEMP, "1-0", CORE): 60.0, (TEMP, "1-1", CORE): 59.0},
    ),
    # npu-smi info -m: identity only (chips, skipping the Mcu pseudo-chip).
    "ascend/npu-smi_info_-m_310P_2chips_per_card.txt": ("huawei", {(catalog.UP, "1-1", ()): 1.0}),
    "ascend/npu-smi_info_-m_310_with_mcu.txt": ("huawei", {(catalog.UP, "6-1", ()): 1.0}),
    "ascend/npu-smi_info_-m_910A.txt": ("huawei", {(catalog.UP, "1-0", ()): 1.0}),
    "ascend/npu-smi_info_-m_910B_with_mcu.txt": ("huawei", {(catalog.UP, "1-0", ()): 1.0}),
    # hl-smi (Gaudi 3): AIP 3 at 40C, 228W / 900W, 672MiB / 131072MiB, AIP-Util 0%.
    "intel/hl-smi_gaudi3-HL-325L_1.21.0-fw59.2.1_drv1.20.1_8aip.txt": (
        "intel",
        {
            (UTIL, "3", ()): 0.0,
            (USED, "3", ()): 672 * MIB,
            (TOTAL, "3", ()): 131072 * MIB,
            (TEMP, "3", CORE): 40.0,
            (POWER, "3", ()): 228.0,
            (LIMIT, "3", ()): 900.0,
        },
    ),
    # hl-smi (Gaudi 2, 1.16.0): AIP 6 holds a Ray Serve replica: 27098MiB used, 101W / 600W, 26C.
    "intel/hl-smi_gaudi2-HL-225_1.16.0-fw50.1.2_drv1.16.0_8aip_1proc.txt": (
        "intel",
        {(USED, "6", ()): 27098 * MIB, (POWER, "6", ()): 101.0, (TEMP, "6", CORE): 26.0},
    ),
    # hl-smi (Gaudi 2, 1.14.0 tool on driver 1.15.0): AIP 5 at 26835MiB, 111W / 600W.
    "intel/hl-smi_gaudi2-HL-225_1.14.0-fw48.0.1_drv1.15.0_8aip.txt": (
        "intel",
        {(USED, "5", ()): 26835 * MIB, (POWER, "5", ()): 111.0, (LIMIT, "5", ()): 600.0},
    ),
    # hl-smi (Gaudi 2, 1.12.1): AIP 6 at 2% AIP-Util, 98W.
    "intel/hl-smi_gaudi2-HL-225_1.12.1-fw46.0.5_drv1.12.1_8aip.txt": (
        "intel",
        {(UTIL, "6", ()): 0.02, (POWER, "6", ()): 98.0, (TEMP, "6", CORE): 27.0},
    ),
    # hl-smi -Q ... -f csv,nounits (Gaudi HL-205): row 7 at 103 W, 38 C, 14 %, 512 / 32768 MiB.
    "intel/hl-smi_Q_csv_nounits_gaudi1-HL-205_1.18.0-fw53.1.1_8aip.csv.txt": (
        "intel",
        {(UTIL, "7", ()): 0.14, (USED, "7", ()): 512 * MIB, (TEMP, "7", CORE): 38.0, (POWER, "7", ()): 103.0},
    ),
    # npu-smi 24.1.0, 8 x 910B2: NPU 5 at 92.1 W, 52 C, HBM 3374 / 65536 MB.
    "ascend/npu-smi_info_910B2_24.1.0_8npu_no_procs.txt": (
        "huawei",
        {(POWER, "5-0", ()): 92.1, (TEMP, "5-0", CORE): 52.0, (USED, "5-0", ()): 3374 * MIB},
    ),
    # npu-smi 24.1.0 on a 310B4 SoC: Bus-Id NA; 7.7 W, 53 C, 1327 / 3514 MB.
    "ascend/npu-smi_info_310B4_24.1.0_soc_busid_NA.txt": (
        "huawei",
        {
            (POWER, "0-0", ()): 7.7,
            (TEMP, "0-0", CORE): 53.0,
            (USED, "0-0", ()): 1327 * MIB,
            (TOTAL, "0-0", ()): 3514 * MIB,
        },
    ),
}

# Truncated captures: a clean rejection (exit 1, one clear line per file, no traceback) or partial output.
EXCERPTS: dict[str, str | None] = {
    "amd/amd-smi_metric_-u_json_radeon-pro-w7700_excerpt.txt": "not valid amd-smi-json: amd-smi metric: invalid JSON",
    "amd/amd-smi_metric_-w_1_json_watch_excerpt.txt": "not valid amd-smi-json: amd-smi metric: invalid JSON",
    "amd/amd-smi_static_text_mi350x_excerpt.txt": "no known format matches",
    "amd/device-metrics-exporter_scrape_mi300x-vf_issue171_excerpt.prom": "no known format matches",
    # Default amd-smi and rocm-smi tables cut after complete device rows: partial output, exit 0.
    "amd/amd-smi_default_mi300x_dpx_rocm7.0.2_amdsmi-issue132_excerpt.txt": None,
    "amd/rocm-smi_concise_mi300x_spx_rocm6.4.1_legacy-rocm-build-4750_excerpt.txt": None,
    # Diagnostic dumps holding several npu-smi commands (one file per host): read block by block; the blocks
    # no format reads (a usage error, `-t board`) are named, one line each, and the others still read.
    "ascend/npu-smi_info_-t_health_Alarm_with_error_codes.txt": (
        " block 1 (`/usr/local/bin/npu-smi info -i 0 -t board`, line 2): the command printed no device output"
        " ('Invalid card id.'): nothing to read"
    ),
    "ascend/npu-smi_info_910A_23.0.5_m_board_usages_health_OK.txt": (
        " block 2 (`/usr/local/bin/npu-smi info -i 0 -c 0 -t board`, line 13): no known format matches"
    ),
    # The two device blocks the excerpt holds are complete: partial output, exit 0.
    "mthreads/mthreads-gmi_S5000_2.3.2_excerpt.txt": None,
    # One device block, cut before its closing rule with every line: read (used above total, as printed).
    "mthreads/mthreads-gmi_S4000_1.12.2_drv1.2.0_used-exceeds-total-44302of32768_88pct_excerpt.txt": None,
}


def _inspect(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xpuwatch", "inspect", "--node-name", "n1", str(path)],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _values(exposition: str) -> dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[str, float]]:
    identity = {"node", "vendor", "model", "device", "uuid"}
    out: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[str, float]] = {}
    for fam in text_string_to_metric_families(exposition):
        for s in fam.samples:
            extra = tuple(sorted((k, v) for k, v in s.labels.items() if k not in identity))
            key = (s.name, s.labels.get("device", ""), extra)
            assert key not in out, f"duplicate series {key}"
            out[key] = (s.labels.get("vendor", ""), s.value)
    return out


# Fixture folders that hold no vendor tool output: capture bundles, the relay's webhook/bot bodies, chart defaults.
NOT_VENDOR_DIRS = {"bundles", "alertmanager", "dingtalk", "wecom", "feishu", "kube-prometheus-stack"}


def test_every_fixture_is_covered() -> None:
    """Every fixture file of a vendor directory is listed here, as complete or as excerpt."""
    on_disk = {
        str(p.relative_to(FIXTURES))
        for p in FIXTURES.glob("*/*")
        if p.parent.name not in NOT_VENDOR_DIRS
        and p.suffix not in (".source", ".md")
        and not p.name.endswith(".expected.yaml")
        # captures with a hand-written <capture>.expected.yaml are checked value by value from it
        and not p.with_name(p.name + ".expected.yaml").exists()
    }
    assert on_disk <= set(COMPLETE) | set(EXCERPTS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMPLETE))
def test_inspect_prints_shared_schema_values(name: str) -> None:
    vendor, expected = COMPLETE[name]
    res = _inspect(FIXTURES / name)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    got = _values(res.stdout)
    for key, value in expected.items():
        assert key in got, f"{key} missing from inspect output"
        assert got[key] == (vendor, pytest.approx(value)), key
    ups = {k: v for k, v in got.items() if k[0] == catalog.UP}
    assert ups and all(v == (vendor, 1.0) for v in ups.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXCERPTS))
def test_inspect_on_excerpt_is_clean(name: str) -> None:
    res = _inspect(FIXTURES / name)
    assert "Traceback" not in res.stderr
    message = EXCERPTS[name]
    if message is None:
        assert res.returncode == 0, res.stderr
        assert res.stdout.count(f"{catalog.UP}{{") >= 1
    else:
        assert res.returncode == 1
        lines = res.stderr.splitlines()
        if " block " in message:  # a transcript: one line per unreadable block, the readable ones printed
            assert all(line.startswith(f"xpuwatch inspect: {FIXTURES / name} block ") for line in lines)
            assert res.stdout.count(f"{catalog.UP}{{") >= 1
        else:
            assert len(lines) == 1 and lines[0].startswith(f"xpuwatch inspect: {FIXTURES / name}: ")
        assert message in lines[0]


# Which format must claim each fixture (excerpts of a format are claimed by it and then rejected by its parser).
CLAIMED_BY: dict[str, str | None] = {
    "amd/rocm-smi_json_rx7800xt_rocm6.2.4.json": "rocm-smi-json",
    "amd/amd-smi_monitor_-q_rocm6.2.txt": "amd-smi-monitor",
    "amd/amd-smi_metric_-p_json_rocm6.1.json": "amd-smi-json",
    "amd/amd-smi_metric_-u_json_radeon-pro-w7700_excerpt.txt": "amd-smi-json",
    "amd/amd-smi_metric_-w_1_json_watch_excerpt.txt": "amd-smi-json",
    "amd/amd-smi_static_text_mi350x_excerpt.txt": None,
    "amd/device-metrics-exporter_scrape_mi300x-vf_issue171_excerpt.prom": None,
    "hygon/rocm-smi_json_hygon_dcu_dtk24.04.3.json": "hy-smi-json",
    "hygon/rocm-smi_table_dcu_dtk23.10.1.txt": "hy-smi-table",
    "amd/amd-smi_static_json_8x-mi300x_rocm7.2.1_ppt0-limit.json": "amd-smi-static-json",
    "amd/rocm-smi_-a_json_mi210_rocm5_driver5.18.13.json": "rocm-smi-json",
    "amd/amd-smi_default_R9700x2_26.2.1_rocm7.2.0_fan-pct-missing_procs-table.txt": "amd-smi-table",
    "amd/amd-smi_default_mi300x_dpx_rocm7.0.2_amdsmi-issue132_excerpt.txt": "amd-smi-table",
    "amd/rocm-smi_concise_R9700_kernel6.18_partitions-cols_degC_pwrcap210-manual.txt": "rocm-smi-table",
    "amd/rocm-smi_concise_mi300x_spx_rocm6.4.1_legacy-rocm-build-4750_excerpt.txt": "rocm-smi-table",
    "amd/rocm-smi_concise_rocm3.3_rx_ROC-smi-issue86.txt": "rocm-smi-table",
    "hygon/hy-smi_8hcu_800W_mixed-vram_100pct.txt": "hy-smi-table",
    "hygon/hy-smi_K100-AI_dtk24.04.1_4dcu_800W_dcu-header.txt": "hy-smi-table",
    "hygon/hy-smi_2hcu_400W_hcu-header_no-dec-enc.txt": "hy-smi-table",
    "hygon/hy-smi_json_BW_2hcu_dtk-hyhal_missing-commas.json": "hy-smi-json",
    "hygon/hy-smi_showuse_showmeminfo_8hcu_used-only.txt": "hy-smi-text",
    "hygon/hy-smi_showmemavailable_K100_AIx8_65438MiB_key-value.txt": "hy-smi-text",
    "ascend/npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt": "npu-smi-info",
    "ascend/npu-smi_info_910B2C_23.0.3_no_procs.txt": "npu-smi-info",
    "ascend/npu-smi_info_910A_22.0.3.1_8npu.txt": "npu-smi-info",
    "ascend/npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt": "npu-smi-info",
    "ascend/npu-smi_info_A3_Ascend910_24.1.rc3.7_2dies_no_procs.txt": "npu-smi-info",
    "ascend/npu-smi_info_310_20.2.0_legacy.txt": "npu-smi-info",
    "ascend/npu-smi_info_310_21.0.4_legacy.txt": "npu-smi-info",
    "ascend/npu-smi_info_-t_usages_-i_0_910B.txt": "npu-smi-usages",
    "ascend/npu-smi_info_-t_usages_-i_1_310P.txt": "npu-smi-usages",
    "ascend/npu-smi_info_-t_common_-i_0_910B.txt": "npu-smi-common",
    "ascend/npu-smi_info_-t_common_-i_1_310P.txt": "npu-smi-common",
    "ascend/npu-smi_info_-t_health_Alarm_with_error_codes.txt": "npu-smi-health",
    "ascend/npu-smi_info_910A_23.0.5_m_board_usages_health_OK.txt": "npu-smi-info-m",
    "ascend/npu-smi_info_-m_310P_2chips_per_card.txt": "npu-smi-info-m",
    "ascend/npu-smi_info_-m_310_with_mcu.txt": "npu-smi-info-m",
    "ascend/npu-smi_info_-m_910A.txt": "npu-smi-info-m",
    "ascend/npu-smi_info_-m_910B_with_mcu.txt": "npu-smi-info-m",
    "cambricon/cnmon_MLU370-X8_v5.10.13.txt": "cnmon-table",
    "enflame/efsmi_S60_1.2.0.301.txt": "efsmi-table",
    "iluvatar/ixsmi_BI-V150_4.3.0.txt": "ixsmi-table",
    "kunlunxin/xpu-smi_P800_drv5.0.21.21.txt": "xpu-smi-table",
    "kunlunxin/xpu_smi_R300_rt4.31_drv4.0.txt": "xpu-smi-devices",
    "metax/mx-smi_C550_2.2.4.txt": "mx-smi-table",
    "mthreads/mthreads-gmi_S5000_2.3.2_excerpt.txt": "mthreads-gmi-table",
    "mthreads/mthreads-gmi_S4000_1.12.2_drv1.2.0_used-exceeds-total-44302of32768_88pct_excerpt.txt": (
        "mthreads-gmi-table"
    ),
    "nvidia/nvidia-smi_q_x_tesla-t4_515.105.01.xml": "nvidia-smi-xml",
    "nvidia/nvidia-smi_q_x_a100-sxm4-80gb-mig_535.54.03.xml": "nvidia-smi-xml",
    "nvidia/nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01_load.csv.txt": "nvidia-smi-csv",
    "nvidia/nvidia-smi_query-gpu_h100-mig_590.48.01_load.csv.txt": "nvidia-smi-csv",
    "nvidia/nvidia-smi_q_x_rtx-4000-sff-ada_595.84_v13_avg-instant-power_4procs.xml": "nvidia-smi-xml",
    "ascend/npu-smi_info_910B2_24.1.0_8npu_no_procs.txt": "npu-smi-info",
    "ascend/npu-smi_info_310B4_24.1.0_soc_busid_NA.txt": "npu-smi-info",
    "intel/hl-smi_gaudi3-HL-325L_1.21.0-fw59.2.1_drv1.20.1_8aip.txt": "hl-smi-table",
    "intel/hl-smi_gaudi2-HL-225_1.16.0-fw50.1.2_drv1.16.0_8aip_1proc.txt": "hl-smi-table",
    "intel/hl-smi_gaudi2-HL-225_1.14.0-fw48.0.1_drv1.15.0_8aip.txt": "hl-smi-table",
    "intel/hl-smi_gaudi2-HL-225_1.12.1-fw46.0.5_drv1.12.1_8aip.txt": "hl-smi-table",
    "intel/hl-smi_Q_csv_nounits_gaudi1-HL-205_1.18.0-fw53.1.1_8aip.csv.txt": "hl-smi-csv",
}


def _claims(text: str) -> list[str]:
    return sorted(name for name, fmt in all_formats().items() if fmt.sniff(text))


def test_claim_table_lists_every_fixture() -> None:
    assert set(CLAIMED_BY) == set(COMPLETE) | set(EXCERPTS)


@pytest.mark.parametrize("name", sorted(CLAIMED_BY))
def test_each_fixture_is_claimed_by_exactly_its_format(name: str) -> None:
    text = (FIXTURES / name).read_text(encoding="utf-8", errors="replace")
    want = CLAIMED_BY[name]
    assert _claims(text) == ([want] if want else [])


def _ixsmi_csv() -> str:
    """Synthetic ``ixsmi --query-gpu=<CSV_FIELDS> --format=csv``: no real capture exists (vendors/iluvatar.py);
    the rows carry GPU 0 and 1 of the real ixsmi table fixture in nvidia-smi's CSV conventions."""
    from xpuwatch.vendors.iluvatar import CSV_FIELDS

    units = {"memory.used": " [MiB]", "memory.total": " [MiB]", "board.power.draw": " [W]"}
    units |= {"utilization.gpu": " [%]", "utilization.memory": " [%]"}
    head = ", ".join(f + units.get(f, "") for f in CSV_FIELDS)
    rows = [
        "0, Iluvatar BI-V150, 00000000:13:00.0, 4.3.0, 0 %, 0 %, 64 MiB, 32768 MiB, 35, N/A",
        "1, Iluvatar BI-V150, 00000000:16:00.0, 4.3.0, 0 %, 0 %, 64 MiB, 32768 MiB, 34, 103 W",
    ]
    return "\n".join([head, *rows]) + "\n"


def test_iluvatar_csv_and_nvidia_csv_are_told_apart() -> None:
    assert _claims(_ixsmi_csv()) == ["ixsmi-csv"]
    for name in [n for n, f in CLAIMED_BY.items() if f == "nvidia-smi-csv"]:
        assert "ixsmi-csv" not in _claims((FIXTURES / name).read_text(encoding="utf-8"))


def test_moffett_mx_smi_is_claimed_by_no_format() -> None:
    # Synthetic MOFFETT header (its user guide's title line, as in tests/vendors/test_metax.py) on the MetaX body.
    metax_text = (FIXTURES / "metax/mx-smi_C550_2.2.4.txt").read_text(encoding="utf-8")
    moffett = "| MOFFETT-SMI  v1.1.4   Driver Version: 1.1.4   |\n"
    assert _claims(moffett) == [] and _claims(moffett + metax_text) == []


def test_hygon_and_amd_rocm_smi_json_are_told_apart() -> None:
    amd = (FIXTURES / "amd/rocm-smi_json_rx7800xt_rocm6.2.4.json").read_text(encoding="utf-8")
    hygon = (FIXTURES / "hygon/rocm-smi_json_hygon_dcu_dtk24.04.3.json").read_text(encoding="utf-8")
    assert _claims(amd) == ["rocm-smi-json"] and _claims(hygon) == ["hy-smi-json"]
