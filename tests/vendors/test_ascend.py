"""Ascend backend: npu-smi fixtures in, exact per-chip values out; fuzzed parsers; a fake npu-smi on PATH."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpuwatch.vendors import ascend
from xpuwatch.vendors.base import BackendError, DeviceSample, ParseError
from xpuwatch.vendors.command import CommandResult, SubprocessRunner
from xpuwatch.vendors.registry import BackendContext, all_formats, all_specs

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ascend"
MIB = 1 << 20


def fixture(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def dump_blocks(name: str) -> dict[str, str]:
    """A diagnostic dump (command line, then its TAB-indented output) -> {"info -m": output, ...}."""
    blocks: dict[str, str] = {}
    cmd = None
    for line in fixture(name).splitlines(keepends=True):
        if line.startswith("/usr/local/bin/npu-smi "):
            cmd = line.removeprefix("/usr/local/bin/npu-smi ").strip()
            blocks[cmd] = ""
        elif cmd is not None:
            blocks[cmd] += line
    return blocks


def by_index(samples: Sequence[DeviceSample]) -> dict[str, DeviceSample]:
    return {s.device.index: s for s in samples}


# ---------------------------------------------------------------------------------------------------------
# npu-smi info: every complete fixture, every chip
# (index, uuid, util, memory used MiB, memory total MiB, temp C, power W, health OK)

INFO_EXPECTED: dict[
    str, tuple[str, str | None, list[tuple[str, str, float, int, int, float, float | None, bool]]]
] = {
    "npu-smi_info_310_20.2.0_legacy.txt": (
        "Ascend310",
        "20.2.0",
        [
            ("215-0", "ascend-0000:da:00.0-0", 0.0, 2703, 8192, 56, 12.8, True),
            ("215-1", "ascend-0000:dc:00.0-1", 0.0, 2703, 8192, 57, 12.8, True),
            ("215-2", "ascend-0000:dd:00.0-2", 0.0, 2703, 8192, 57, 12.8, True),
            ("215-3", "ascend-0000:db:00.0-3", 0.0, 2703, 8192, 55, 12.8, True),
        ],
    ),
    "npu-smi_info_310_21.0.4_legacy.txt": (
        "Ascend310",
        "21.0.4.B030",
        [
            ("6-0", "ascend-0000:89:00.0-0", 0.0, 2703, 8192, 73, 12.8, True),
            ("6-1", "ascend-0000:8a:00.0-1", 0.0, 2867, 8192, 74, 12.8, True),
            ("6-2", "ascend-0000:8b:00.0-2", 0.0, 2867, 8192, 70, 12.8, True),
            ("6-3", "ascend-0000:8c:00.0-3", 0.0, 2867, 8192, 65, 12.8, True),
        ],
    ),
    "npu-smi_info_910A_22.0.3.1_8npu.txt": (
        "Ascend910A",
        "22.0.3.1",
        [
            ("0-0", "ascend-0000:61:00.0-0", 0.0, 0, 32768, 43, 67.2, True),
            ("1-0", "ascend-0000:db:00.0-0", 0.0, 0, 32768, 38, 63.3, True),
            ("2-0", "ascend-0000:b2:00.0-0", 0.0, 0, 32768, 34, 64.8, True),
            ("3-0", "ascend-0000:3e:00.0-0", 0.0, 0, 32768, 42, 191.7, True),
            ("4-0", "ascend-0000:60:00.0-0", 0.0, 0, 32768, 44, 66.4, True),
            ("5-0", "ascend-0000:da:00.0-0", 0.0, 0, 32768, 33, 62.7, True),
            ("6-0", "ascend-0000:b1:00.0-0", 0.0, 0, 32768, 35, 64.5, True),
            ("7-0", "ascend-0000:3d:00.0-0", 0.0, 0, 32768, 40, 191.4, True),
        ],
    ),
    "npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt": (
        "Ascendxxx",
        "24.1.RC2",
        [
            ("0-0", "ascend-0000:c1:00.0-0", 0.0, 0, 32768, 42, 70.5, True),
            ("1-0", "ascend-0000:81:00.0-0", 0.0, 0, 32768, 36, 71.2, True),
            ("2-0", "ascend-0000:41:00.0-0", 0.0, 0, 32768, 35, 69.0, True),
            ("3-0", "ascend-0000:01:00.0-0", 0.0, 0, 32768, 39, 206.9, False),
            ("4-0", "ascend-0000:c2:00.0-0", 0.0, 0, 32768, 39, 70.2, True),
            ("5-0", "ascend-0000:82:00.0-0", 0.0, 0, 32768, 37, 64.9, True),
            ("6-0", "ascend-0000:42:00.0-0", 0.0, 0, 32768, 40, 69.4, True),
            ("7-0", "ascend-0000:02:00.0-0", 0.0, 0, 32768, 42, 203.2, False),
        ],
    ),
    "npu-smi_info_910B2C_23.0.3_no_procs.txt": (
        "Ascend910B2C",
        "23.0.3",
        [
            ("0-0", "ascend-0000:5a:00.0-0", 0.0, 3317, 65536, 53, 89.9, True),
            ("1-0", "ascend-0000:29:00.0-0", 0.0, 3316, 65536, 53, 93.8, True),
        ],
    ),
    "npu-smi_info_A3_Ascend910_24.1.rc3.7_2dies_no_procs.txt": (
        "Ascend910",
        "24.1.rc3.7",
        [
            ("2-0", "ascend-0000:95:00.0-0", 0.0, 3411, 65536, 36, 176.3, True),
            ("2-1", "ascend-0000:97:00.0-1", 0.0, 3208, 65536, 36, None, True),
        ],
    ),
    "npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt": (
        "Ascend310P3",
        "25.0.rc1.1",
        [
            ("6-0", "ascend-0000:83:00.0-0", 0.0, 1175, 44280, 55, None, True),
            ("6-1", "ascend-0000:83:00.0-1", 0.0, 8322, 43693, 52, None, True),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(INFO_EXPECTED))
def test_info_table_values_per_chip(name: str) -> None:
    model, driver, rows = INFO_EXPECTED[name]
    fmt = all_formats()["npu-smi-info"]
    text = fixture(name)
    assert fmt.sniff(text)
    samples = fmt.parse(text)
    assert [s.device.index for s in samples] == [r[0] for r in rows]
    for s, (index, uuid, util, used, total, temp, power, ok) in zip(samples, rows, strict=True):
        assert s.device.index == index
        assert s.up and s.error is None
        assert s.device.vendor == "huawei"
        assert s.device.model == model
        assert s.device.uuid == uuid
        assert s.device.pci_bus_id == uuid.split("-")[1]
        assert s.device.driver_version == driver
        assert s.utilization_ratio == util
        assert s.memory_used_bytes == used * MIB
        assert s.memory_total_bytes == total * MIB
        assert s.temperatures_celsius == {"core": temp}
        assert s.power_watts == power
        assert s.health == {"chip": ok}
        assert s.fault_events == {}


def test_910a_keeps_ddr_beside_hbm_and_warning_level() -> None:
    s = by_index(ascend.samples_from_info(fixture("npu-smi_info_910A_22.0.3.1_8npu.txt")))
    vm = s["2-0"].vendor_metrics
    assert vm[ascend.DDR_USED.name] == 1868 * MIB
    assert vm[ascend.DDR_TOTAL.name] == 15077 * MIB
    assert vm[ascend.HEALTH_STATE.name] == 0
    assert vm[ascend.ERROR_CODES_ACTIVE.name] == 0
    assert ascend.PROCESSES.name not in vm  # this capture printed no process table
    w = by_index(ascend.samples_from_info(fixture("npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt")))
    assert w["3-0"].vendor_metrics[ascend.HEALTH_STATE.name] == 1  # Warning
    assert ascend.ERROR_CODES_ACTIVE.name not in w["3-0"].vendor_metrics  # codes need -t health
    assert w["7-0"].vendor_metrics[ascend.DDR_TOTAL.name] == 15039 * MIB


def test_process_table() -> None:
    t = ascend.parse_info_table(fixture("npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt"))
    assert t.processes is not None and len(t.processes) == 32
    assert t.processes[0] == ascend.Process(0, 0, 37656, "hlt_host_devmm_", 686)
    s = by_index(ascend.samples_from_info(fixture("npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt")))
    assert s["5-0"].vendor_metrics[ascend.PROCESSES.name] == 4
    assert s["5-0"].vendor_metrics[ascend.PROCESS_MEMORY.name] == 4 * 686 * MIB
    p = by_index(ascend.samples_from_info(fixture("npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt")))
    assert p["6-0"].vendor_metrics[ascend.PROCESSES.name] == 0
    assert p["6-1"].vendor_metrics[ascend.PROCESSES.name] == 1
    assert p["6-1"].vendor_metrics[ascend.PROCESS_MEMORY.name] == 6612 * MIB
    assert p["6-1"].vendor_metrics[ascend.DDR_USED.name] == 8322 * MIB


def test_process_name_with_a_bar_does_not_break_the_table() -> None:
    text = fixture("npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt").replace(
        "| python3.11               |", "| a|b                      |"
    )
    (p,) = ascend.parse_info_table(text).processes or ()
    assert (p.pid, p.name, p.memory_mib) == (293029, "a|b", 6612)


def test_process_table_with_container_pid_column() -> None:
    """Newer drivers add "Process id in container" (layout as in Huawei's vNPU soft-partitioning docs)."""
    head = fixture("npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt").split(
        "+-------------------------------+-----------------+------------------------------------------------------+\n| NPU     Chip"
    )[0]
    text = head + (
        "+---------------------------+---------------+---------------------------------------------------+\n"
        "| NPU     Chip       | Process id    | Process name| Process memory(MB) |Process id in container|\n"
        "+===========================+===============+===================================================+\n"
        "| 6       1          | 293029        | python3.11  | 6612               | 17                    |\n"
        "+===========================+===============+===================================================+\n"
    )
    (p,) = ascend.parse_info_table(text).processes or ()
    assert (p.npu_id, p.chip_id, p.pid, p.name, p.memory_mib) == (6, 1, 293029, "python3.11", 6612)


def test_no_running_processes() -> None:
    t = ascend.parse_info_table(fixture("npu-smi_info_910B2C_23.0.3_no_procs.txt"))
    assert t.processes == ()
    assert t.idle_npus == frozenset({0, 1})
    s = by_index(ascend.samples_from_info(fixture("npu-smi_info_910B2C_23.0.3_no_procs.txt")))
    assert s["1-0"].vendor_metrics[ascend.PROCESSES.name] == 0
    assert s["1-0"].vendor_metrics[ascend.PROCESS_MEMORY.name] == 0
    # 910B2C: the DDR column reads 0 / 0, so no DDR series at all
    assert ascend.DDR_TOTAL.name not in s["1-0"].vendor_metrics


def test_a3_phy_id_column() -> None:
    t = ascend.parse_info_table(fixture("npu-smi_info_A3_Ascend910_24.1.rc3.7_2dies_no_procs.txt"))
    assert [(c.npu_id, c.chip_id, c.device_id) for c in t.chips] == [(2, 0, 4), (2, 1, 5)]
    assert t.idle_npus == frozenset({2})


def test_legacy_device_column() -> None:
    t = ascend.parse_info_table(fixture("npu-smi_info_310_21.0.4_legacy.txt"))
    assert [(c.npu_id, c.chip_id, c.device_id) for c in t.chips] == [
        (6, 0, 3),
        (6, 1, 4),
        (6, 2, 5),
        (6, 3, 6),
    ]
    assert t.processes is None


# ---------------------------------------------------------------------------------------------------------
# npu-smi info -m

CHIP_MAP_EXPECTED = {
    "npu-smi_info_-m_310P_2chips_per_card.txt": [
        ("1-0", 0, "Ascendxxx"),
        ("1-1", 1, "Ascendxxx"),
        ("2-0", 2, "Ascendxxx"),
        ("2-1", 3, "Ascendxxx"),
        ("4-0", 4, "Ascendxxx"),
        ("4-1", 5, "Ascendxxx"),
        ("5-0", 6, "Ascendxxx"),
        ("5-1", 7, "Ascendxxx"),
    ],
    "npu-smi_info_-m_310_with_mcu.txt": [(f"6-{i}", i, "AscendMiniD") for i in range(4)],
    "npu-smi_info_-m_910A.txt": [(f"{i}-0", i, "Ascend910A") for i in range(8)],
    "npu-smi_info_-m_910B_with_mcu.txt": [(f"{i}-0", i, "Ascendxxx") for i in range(8)],
}


@pytest.mark.parametrize("name", sorted(CHIP_MAP_EXPECTED))
def test_chip_map(name: str) -> None:
    text = fixture(name)
    fmt = all_formats()["npu-smi-info-m"]
    assert fmt.sniff(text)
    entries = ascend.parse_chip_map(text)
    expected = CHIP_MAP_EXPECTED[name]
    assert [(f"{e.npu_id}-{e.chip_id}", e.logic_id) for e in entries] == [(i, lg) for i, lg, _ in expected]
    samples = fmt.parse(text)
    assert [(s.device.index, s.device.model) for s in samples] == [(i, m) for i, _, m in expected]
    assert [s.device.uuid for s in samples] == [
        f"ascend-npu{i.replace('-', '-chip')}" for i, _, _ in expected
    ]
    assert all(s.utilization_ratio is None for s in samples)


def test_chip_map_from_tab_indented_dump() -> None:
    entries = ascend.parse_chip_map(
        dump_blocks("npu-smi_info_910A_23.0.5_m_board_usages_health_OK.txt")["info -m"]
    )
    assert [(e.npu_id, e.chip_id, e.logic_id, e.name) for e in entries] == [
        (i, 0, i, "Ascend 910A") for i in range(8)
    ]


# ---------------------------------------------------------------------------------------------------------
# -t usages / -t common / -t health


def test_usages_910b() -> None:
    text = fixture("npu-smi_info_-t_usages_-i_0_910B.txt")
    fmt = all_formats()["npu-smi-usages"]
    assert fmt.sniff(text) and not all_formats()["npu-smi-common"].sniff(text)
    (s,) = fmt.parse(text)
    assert s.device.index == "0-0"
    assert s.utilization_ratio == 0
    assert s.memory_total_bytes == 32768 * MIB  # HBM Capacity
    assert s.memory_used_bytes == 0
    assert s.memory_bandwidth_utilization_ratio == 0  # HBM Bandwidth Usage Rate
    assert s.vendor_metrics == {
        ascend.AICPU.name: 0,
        ascend.CTRLCPU.name: 0.09,
        ascend.DDR_BANDWIDTH.name: 0,
    }


def test_usages_310p_two_chips_ddr_only() -> None:
    rep = ascend.parse_card_report(fixture("npu-smi_info_-t_usages_-i_1_310P.txt"))
    assert (rep.npu_id, rep.chip_count, sorted(rep.chips)) == (1, 2, [0, 1])
    assert rep.chips[1]["DDR Capacity(MB)"] == "43693"
    s = by_index(ascend.samples_from_usages(fixture("npu-smi_info_-t_usages_-i_1_310P.txt")))
    assert s["1-0"].memory_total_bytes == 44280 * MIB
    assert s["1-0"].memory_used_bytes == round(44280 * 0.03 * MIB)
    assert s["1-1"].memory_total_bytes == 43693 * MIB
    assert s["1-1"].memory_bandwidth_utilization_ratio == 0.51  # DDR bandwidth: no HBM on 310P
    assert s["1-1"].vendor_metrics[ascend.CTRLCPU.name] == 0.03
    assert s["1-1"].vendor_metrics[ascend.VECTORCORE.name] == 0


def test_usages_from_tab_indented_dump() -> None:
    (s,) = ascend.samples_from_usages(
        dump_blocks("npu-smi_info_910A_23.0.5_m_board_usages_health_OK.txt")["info -i 0 -t usages"]
    )
    assert s.device.index == "0-0"
    assert s.memory_total_bytes == 31129 * MIB
    assert s.memory_used_bytes == 0
    assert s.vendor_metrics[ascend.CTRLCPU.name] == 0


def test_common_910b() -> None:
    text = fixture("npu-smi_info_-t_common_-i_0_910B.txt")
    fmt = all_formats()["npu-smi-common"]
    assert fmt.sniff(text) and not all_formats()["npu-smi-usages"].sniff(text)
    (s,) = fmt.parse(text)
    assert s.device.index == "0-0"
    assert s.utilization_ratio == 0
    assert s.temperatures_celsius == {"core": 46}
    assert s.power_watts == 69.0  # the chip's own, not the mcu's 45.2
    assert s.vendor_metrics == {
        ascend.AICORE_FREQ.name: 1000e6,
        ascend.AICORE_RATED_FREQ.name: 1000e6,
    }


def test_common_310p_card_power_on_lowest_chip_only() -> None:
    rep = ascend.parse_card_report(fixture("npu-smi_info_-t_common_-i_1_310P.txt"))
    assert ascend.card_power(rep) == 45.2
    s = by_index(ascend.samples_from_common(fixture("npu-smi_info_-t_common_-i_1_310P.txt")))
    assert s["1-0"].power_watts is None and s["1-1"].power_watts is None
    assert s["1-0"].vendor_metrics[ascend.CARD_POWER.name] == 45.2
    assert ascend.CARD_POWER.name not in s["1-1"].vendor_metrics
    assert s["1-1"].temperatures_celsius == {"core": 59}
    assert s["1-1"].vendor_metrics[ascend.AICORE_FREQ.name] == 960e6
    assert s["1-1"].vendor_metrics[ascend.AICORE_RATED_FREQ.name] == 1080e6


def test_health_alarm_with_error_codes() -> None:
    blocks = dump_blocks("npu-smi_info_-t_health_Alarm_with_error_codes.txt")
    rep = ascend.parse_health(blocks["info -i 0 -c 0 -t health"])
    assert rep.status == "Alarm"
    assert rep.codes == ("A4025021", "8C03A000", "8C084E00")
    assert rep.information == (
        "ascend_monitor adda heart beat lost error node type=process-manager, sensor type=General Software, "
        "event state=The process start failed or exit abnormally node type=adda, sensor type=Heartbeat "
        "Sensor, event state=Heartbeat Lost."
    )
    fmt = all_formats()["npu-smi-health"]
    assert fmt.sniff(blocks["info -i 0 -c 0 -t health"])
    (s,) = fmt.parse(blocks["info -i 0 -c 0 -t health"])
    assert s.health == {"chip": False}
    assert s.fault_events == {"A4025021": 1, "8C03A000": 1, "8C084E00": 1}
    assert s.vendor_metrics == {ascend.HEALTH_STATE.name: 2, ascend.ERROR_CODES_ACTIVE.name: 3}


def test_health_ok() -> None:
    text = dump_blocks("npu-smi_info_910A_23.0.5_m_board_usages_health_OK.txt")["info -i 0 -c 0 -t health"]
    rep = ascend.parse_health(text)
    assert (rep.status, rep.codes, rep.information) == ("OK", (), "")
    (s,) = ascend.samples_from_health(text)
    assert s.health == {"chip": True} and s.fault_events == {}
    assert s.vendor_metrics == {ascend.HEALTH_STATE.name: 0, ascend.ERROR_CODES_ACTIVE.name: 0}


@pytest.mark.parametrize("level", ["OK", "Warning", "Alarm", "Critical"])
def test_health_levels(level: str) -> None:
    (s,) = ascend.samples_from_health(f"Health Status : {level}\nError Code : NA\n")
    assert s.health == {"chip": level == "OK"}
    assert s.vendor_metrics[ascend.HEALTH_STATE.name] == ["OK", "Warning", "Alarm", "Critical"].index(level)


def test_health_error_code_list_forms() -> None:
    rep = ascend.parse_health("Health Status : Critical\nError Code : 80E18402, 0x80CF8008 ...\n")
    assert rep.codes == ("80E18402", "0x80CF8008")
    with pytest.raises(ParseError, match="bad Error Code"):
        ascend.parse_health("Health Status : Alarm\nError Code : 80E1840Z\n")


def test_unknown_health_word_is_unhealthy_without_level() -> None:
    (s,) = ascend.samples_from_health("Health Status : Unknown\nError Code : NA\n")
    assert s.health == {"chip": False}
    assert ascend.HEALTH_STATE.name not in s.vendor_metrics


def test_invalid_card_id_is_rejected_everywhere() -> None:
    text = dump_blocks("npu-smi_info_-t_health_Alarm_with_error_codes.txt")["info -i 0 -t board"]
    assert "Invalid card id." in text
    for parse in (
        ascend.parse_card_report,
        ascend.parse_health,
        ascend.parse_chip_map,
        ascend.parse_info_table,
    ):
        with pytest.raises(ParseError, match="Invalid card id"):
            parse(text)


def test_info_rejects_truncated_and_garbage() -> None:
    full = fixture("npu-smi_info_910B2C_23.0.3_no_procs.txt")
    lines = full.splitlines(keepends=True)
    with pytest.raises(ParseError, match="chip row"):
        ascend.parse_info_table("".join(lines[:7]))  # cut after the first NPU row
    with pytest.raises(ParseError):
        ascend.parse_info_table("".join(lines[:8]) + lines[8][:40])  # cut mid-line
    with pytest.raises(ParseError, match="headers"):
        ascend.parse_info_table("dcmi module initialize failed. ret is -8005\n")
    with pytest.raises(ParseError):
        ascend.parse_info_table("")


def test_text_around_the_table() -> None:
    full = fixture("npu-smi_info_910B2C_23.0.3_no_procs.txt")
    expected = ascend.samples_from_info(full)
    assert (
        ascend.samples_from_info("[WARNING] dcmi log dir not writable\n" + full + "\nnote: 2 NPUs\n")
        == expected
    )
    lines = full.splitlines(keepends=True)
    with pytest.raises(ParseError, match="not a table line"):
        ascend.parse_info_table("".join([*lines[:7], "oops\n", *lines[7:]]))  # inside a row pair
    with pytest.raises(ParseError, match="row cut short"):
        ascend.parse_info_table("".join([*lines[:9], lines[9][:40] + "\n"]))  # after a border
    with pytest.raises(ParseError, match="broken border"):
        ascend.parse_info_table("".join([*lines[:8], lines[8][:30] + "\n"]))


def test_npu_row_without_a_name() -> None:
    text = fixture("npu-smi_info_910B2C_23.0.3_no_procs.txt").replace(
        "| 1     910B2C              | OK     ", "| 1                         | Alarm  "
    )
    s = by_index(ascend.samples_from_info(text))
    assert s["1-0"].device.model == "Ascend"
    assert s["1-0"].health == {"chip": False}
    assert s["1-0"].vendor_metrics[ascend.HEALTH_STATE.name] == 2


def test_truncated_at_every_line_is_rejected_or_a_clean_prefix() -> None:
    """Each cut at a line boundary either fails with ParseError or yields a prefix of the full chips with
    the same values (a cut exactly on a border loses the later chips, which the backend reports lost)."""
    for name in INFO_EXPECTED:
        full = ascend.samples_from_info(fixture(name))
        lines = fixture(name).splitlines(keepends=True)
        for cut in range(len(lines)):
            try:
                part = ascend.samples_from_info("".join(lines[:cut]))
            except ParseError:
                continue
            assert [s.device for s in part] == [s.device for s in full[: len(part)]]
            for a, b in zip(part, full, strict=False):
                assert (a.utilization_ratio, a.memory_used_bytes, a.power_watts, a.health) == (
                    b.utilization_ratio,
                    b.memory_used_bytes,
                    b.power_watts,
                    b.health,
                )


def test_sniffers_pick_exactly_one_format() -> None:
    ours = [f for f in all_formats().values() if f.name.startswith("npu-smi")]
    texts = {
        "npu-smi-info": [fixture(n) for n in INFO_EXPECTED],
        "npu-smi-info-m": [fixture(n) for n in CHIP_MAP_EXPECTED],
        "npu-smi-usages": [
            fixture("npu-smi_info_-t_usages_-i_0_910B.txt"),
            fixture("npu-smi_info_-t_usages_-i_1_310P.txt"),
        ],
        "npu-smi-common": [
            fixture("npu-smi_info_-t_common_-i_0_910B.txt"),
            fixture("npu-smi_info_-t_common_-i_1_310P.txt"),
        ],
        "npu-smi-health": [
            dump_blocks("npu-smi_info_-t_health_Alarm_with_error_codes.txt")["info -i 0 -c 0 -t health"]
        ],
    }
    for name, samples in texts.items():
        for text in samples:
            assert [f.name for f in ours if f.sniff(text)] == [name]


def test_sniffers_leave_other_vendors_outputs_alone() -> None:
    """Every other vendor's fixture in this repository (present once the vendor branches are merged)."""
    for path in sorted(FIX.parent.rglob("*")):
        if not path.is_file() or path.suffix == ".source" or FIX in path.parents:
            continue
        if path.parent.name == "bundles":  # capture bundles hold many tools' outputs, Ascend's among them
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        assert [f.name for f in ascend.FORMATS if f.sniff(text)] == [], path


def test_registration() -> None:
    spec = all_specs()["ascend"]
    assert (spec.vendor, spec.priority) == ("huawei", 60)
    assert {f.name for f in spec.formats} == {
        "npu-smi-info",
        "npu-smi-info-m",
        "npu-smi-usages",
        "npu-smi-common",
        "npu-smi-health",
        "npu-smi-info-vnpu",
    }
    names = [m.name for m in spec.metrics]
    assert len(names) == len(set(names))
    assert all(n.startswith("accelerator_huawei_") for n in names)
    from xpuwatch.exporter.catalog import by_name

    assert set(names) <= set(by_name())


# ---------------------------------------------------------------------------------------------------------
# Fuzz: mutated / truncated outputs raise nothing but ParseError

ALL_TEXTS = [p.read_text(encoding="utf-8") for p in sorted(FIX.glob("npu-smi*.txt"))]
ALL_TEXTS += [
    b
    for n in (
        "npu-smi_info_-t_health_Alarm_with_error_codes.txt",
        "npu-smi_info_910A_23.0.5_m_board_usages_health_OK.txt",
    )
    for b in dump_blocks(n).values()
]
PARSERS = [
    ascend.parse_info_table,
    ascend.parse_chip_map,
    ascend.parse_card_report,
    ascend.parse_health,
    *(f.parse for f in ascend.FORMATS),
]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(ALL_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        n = len(text)
        i = draw(st.integers(0, n))
        j = draw(st.integers(i, min(n, i + 80)))
        op = draw(st.sampled_from(["cut", "delete", "insert", "replace", "dup"]))
        if op == "cut":
            text = text[:i]
        elif op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = (
                text[:i]
                + draw(st.text(alphabet=st.sampled_from("0123456789|/+-=.: \n\tNAabcOK%xé\x00"), max_size=20))
                + text[i:]
            )
        elif op == "replace":
            text = text[:i] + draw(st.text(max_size=8)) + text[j:]
        else:
            text = text[:j] + text[i:j] + text[j:]
    return text


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated())
def test_fuzz_parsers_raise_only_parse_error(text: str) -> None:
    for parse in PARSERS:
        with contextlib.suppress(ParseError):
            parse(text)
    for fmt in ascend.FORMATS:
        assert fmt.sniff(text) in (True, False)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=300))
def test_fuzz_random_text(text: str) -> None:
    for parse in PARSERS:
        with contextlib.suppress(ParseError):
            parse(text)


# ---------------------------------------------------------------------------------------------------------
# Backend with an in-process runner (protocol boundary: CommandRunner)


def _renumber(text: str, npu: int) -> str:
    """A card report captured for one NPU ID, answered for another (the fake host's card numbers)."""
    lines = text.splitlines(keepends=True)
    return "".join(
        f"NPU ID                         : {npu}\n" if ln.strip().startswith("NPU ID") else ln for ln in lines
    )


class FakeRunner:
    """Stands for npu-smi behind the CommandRunner protocol (vendors/command.py): answers argv (without the
    tool path) from a dict; a value that is an Exception is raised, as SubprocessRunner raises for a
    timeout or a non-zero exit. Unknown arguments print npu-smi's "Invalid card id." usage text."""

    def __init__(self, answers: dict[str, str | BackendError]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def which(self, tool: str) -> str | None:
        return f"/usr/local/sbin/{tool}"

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        key = " ".join(argv[1:])
        self.calls.append(key)
        ans = self.answers.get(
            key,
            "Invalid card id.\nError parameter of -i\nUsage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n",
        )
        if isinstance(ans, BackendError):
            raise ans
        return CommandResult(tuple(argv), ans, "", 0, 0.0, 0.0)


def host_910a() -> dict[str, str | BackendError]:
    """8 x 910A (24.1.RC2 table, two chips in Warning) with 910B usages/common answers per card and the
    Alarm health report for card 3."""
    answers: dict[str, str | BackendError] = {
        "info": fixture("npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt")
    }
    for n in range(8):
        answers[f"info -t usages -i {n}"] = _renumber(fixture("npu-smi_info_-t_usages_-i_0_910B.txt"), n)
        answers[f"info -t common -i {n}"] = _renumber(fixture("npu-smi_info_-t_common_-i_0_910B.txt"), n)
    answers["info -t health -i 3 -c 0"] = dump_blocks("npu-smi_info_-t_health_Alarm_with_error_codes.txt")[
        "info -i 0 -c 0 -t health"
    ]
    answers["info -t health -i 7 -c 0"] = dump_blocks(
        "npu-smi_info_910A_23.0.5_m_board_usages_health_OK.txt"
    )["info -i 0 -c 0 -t health"]
    return answers


def host_310p() -> dict[str, str | BackendError]:
    """One Atlas 300I Duo (NPU 6, two 310P3 chips) with the 310P usages/common reports as card 6."""
    return {
        "info": fixture("npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt"),
        "info -t usages -i 6": _renumber(fixture("npu-smi_info_-t_usages_-i_1_310P.txt"), 6),
        "info -t common -i 6": _renumber(fixture("npu-smi_info_-t_common_-i_1_310P.txt"), 6),
    }


def make_backend(runner: object, **opts: object) -> ascend.AscendBackend:
    spec = all_specs()["ascend"]
    backend = spec.create(BackendContext(runner=runner, options=opts))  # type: ignore[arg-type]
    assert isinstance(backend, ascend.AscendBackend)
    backend.open()
    return backend


def test_backend_310p_combines_table_usages_common() -> None:
    runner = FakeRunner(host_310p())
    s = by_index(make_backend(runner).sample())
    assert runner.calls[0] == "info"  # then the detail queries, concurrently (all OK: no -t health)
    assert sorted(runner.calls[1:]) == [
        "info -t common -i 6",
        "info -t info-vnpu -i 6 -c 0",
        "info -t info-vnpu -i 6 -c 1",
        "info -t usages -i 6",
    ]
    a, b = s["6-0"], s["6-1"]
    assert a.up and b.up
    assert a.device.uuid == "ascend-0000:83:00.0-0" and a.device.model == "Ascend310P3"
    assert (a.memory_used_bytes, a.memory_total_bytes) == (1175 * MIB, 44280 * MIB)
    assert (b.memory_used_bytes, b.memory_total_bytes) == (8322 * MIB, 43693 * MIB)
    assert a.temperatures_celsius == {"core": 55} and b.temperatures_celsius == {"core": 52}
    assert a.power_watts is None and b.power_watts is None
    assert a.memory_bandwidth_utilization_ratio == 0.51
    assert a.vendor_metrics == {
        ascend.DDR_USED.name: 1175 * MIB,
        ascend.DDR_TOTAL.name: 44280 * MIB,
        ascend.PROCESSES.name: 0,
        ascend.PROCESS_MEMORY.name: 0,
        ascend.AICPU.name: 0,
        ascend.CTRLCPU.name: 0.02,
        ascend.VECTORCORE.name: 0,
        ascend.DDR_BANDWIDTH.name: 0.51,
        ascend.AICORE_FREQ.name: 960e6,
        ascend.AICORE_RATED_FREQ.name: 1080e6,
        ascend.CARD_POWER.name: 45.2,
        ascend.HEALTH_STATE.name: 0,
        ascend.ERROR_CODES_ACTIVE.name: 0,
    }
    assert ascend.CARD_POWER.name not in b.vendor_metrics
    assert b.vendor_metrics[ascend.CTRLCPU.name] == 0.03
    assert b.vendor_metrics[ascend.PROCESS_MEMORY.name] == 6612 * MIB


def test_backend_910a_health_codes_counted_once_per_appearance() -> None:
    answers = host_910a()
    runner = FakeRunner(answers)
    backend = make_backend(runner, detail_queries_per_poll=64)  # every detail query in one poll
    s = by_index(backend.sample())
    assert sorted(c for c in runner.calls if "health" in c) == [
        "info -t health -i 3 -c 0",
        "info -t health -i 7 -c 0",
    ]
    assert len(s) == 8 and all(x.up for x in s.values())
    three = s["3-0"]
    assert three.health == {"chip": False}
    assert three.fault_events == {"A4025021": 1, "8C03A000": 1, "8C084E00": 1}
    assert three.vendor_metrics[ascend.HEALTH_STATE.name] == 2  # -t health says Alarm (table said Warning)
    assert three.vendor_metrics[ascend.ERROR_CODES_ACTIVE.name] == 3
    assert three.power_watts == 206.9 and three.memory_total_bytes == 32768 * MIB
    assert three.memory_bandwidth_utilization_ratio == 0  # HBM Bandwidth Usage Rate
    assert three.vendor_metrics[ascend.CTRLCPU.name] == 0.09
    assert three.vendor_metrics[ascend.AICORE_FREQ.name] == 1000e6
    seven = s["7-0"]
    assert seven.health == {"chip": True} and seven.fault_events == {}
    # Still active at the next poll: not counted again.
    assert by_index(backend.sample())["3-0"].fault_events == {"A4025021": 1, "8C03A000": 1, "8C084E00": 1}
    # Cleared (table says OK), then back: counted again.
    answers["info"] = fixture("npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt").replace(
        "| 3     xxx            | Warning", "| 3     xxx            | OK     "
    )
    cleared = by_index(backend.sample())["3-0"]
    assert cleared.health == {"chip": True}
    assert cleared.fault_events == {"A4025021": 1, "8C03A000": 1, "8C084E00": 1}
    assert cleared.vendor_metrics[ascend.ERROR_CODES_ACTIVE.name] == 0
    answers["info"] = fixture("npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt")
    assert by_index(backend.sample())["3-0"].fault_events == {"A4025021": 2, "8C03A000": 2, "8C084E00": 2}


def test_backend_detail_failures_cost_readings_never_the_chip(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 22: a chip npu-smi info lists is up. A detail query that fails (usage text, exit status,
    timeout, garbage, wrong card) keeps the table's readings, leaves that query's readings unread with the
    reason, and is logged once per query and cause."""
    answers = host_910a()
    backend = make_backend(FakeRunner(answers), detail_queries_per_poll=64)
    assert all(s.up for s in backend.sample())  # every query has answered once
    answers["info -t usages -i 5"] = "Invalid card id.\nError parameter of -i\n"
    answers["info -t common -i 6"] = BackendError("npu-smi exited 1: dcmi error", reason="exit_status")
    answers["info -t common -i 2"] = BackendError("npu-smi: no answer within 10s, killed", reason="timeout")
    answers["info -t health -i 3 -c 0"] = "+-----\n| garbage"
    answers["info -t usages -i 1"] = _renumber(fixture("npu-smi_info_-t_usages_-i_0_910B.txt"), 4)
    caplog.set_level("WARNING", logger="xpuwatch.vendors.ascend.backend")
    for _ in range(2):
        s = by_index(backend.sample())
        assert all(v.up and v.error is None for v in s.values())
    assert (
        s["5-0"].unread[ascend.AICPU.name]
        == "-t usages: parse: npu-smi: rejected the query: Invalid card id."
    )
    assert s["5-0"].unread["memory_bandwidth_utilization_ratio"].startswith("-t usages: parse:")
    assert (
        s["5-0"].memory_bandwidth_utilization_ratio is None
        and ascend.AICPU.name not in s["5-0"].vendor_metrics
    )
    assert s["5-0"].power_watts is not None and s["5-0"].utilization_ratio is not None  # the table's readings
    assert s["6-0"].unread[ascend.AICORE_FREQ.name] == "-t common: exit_status: npu-smi exited 1: dcmi error"
    assert ascend.AICORE_FREQ.name not in s["6-0"].vendor_metrics
    assert s["6-0"].vendor_metrics[ascend.CTRLCPU.name] == 0.09  # -t usages of card 6 still read
    assert s["2-0"].unread[ascend.AICORE_RATED_FREQ.name].startswith("-t common: timeout:")
    assert (
        s["1-0"].unread[ascend.CTRLCPU.name]
        == "-t usages: parse: npu-smi info -t usages -i 1: answered for NPU 4"
    )
    three = s["3-0"]
    assert three.unread == {"fault_events": three.unread["fault_events"]}
    assert three.unread["fault_events"].startswith("-t health: parse: npu-smi info -t health")
    assert three.health == {"chip": False}  # the table's Warning
    assert three.vendor_metrics[ascend.HEALTH_STATE.name] == 1
    assert three.fault_events == {"A4025021": 1, "8C03A000": 1, "8C084E00": 1}  # counts kept, not reset
    assert s["0-0"].unread == {} and s["0-0"].power_watts == 70.5
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 5  # one per failing query and cause, not one per poll
    assert any("npu-smi info -t common -i 2 failed (timeout" in m for m in warned)
    # Answers again: readings back, and a later failure is logged again.
    answers["info -t common -i 2"] = _renumber(fixture("npu-smi_info_-t_common_-i_0_910B.txt"), 2)
    s = by_index(backend.sample())
    assert s["2-0"].vendor_metrics[ascend.AICORE_FREQ.name] == 1000e6 and not s["2-0"].unread
    answers["info -t common -i 2"] = BackendError("npu-smi: no answer within 10s, killed", reason="timeout")
    caplog.clear()
    backend.sample()
    assert len([r for r in caplog.records if "-t common -i 2" in r.getMessage()]) == 1


def test_backend_query_that_never_answered_is_unsupported() -> None:
    """A driver that does not answer `-t usages` (usage text, exit status) costs those readings for
    UNSUPPORTED_AFTER polls; then the query is no longer run."""
    answers = host_310p()
    answers["info -t usages -i 6"] = BackendError(
        "npu-smi exited 255: unknown type usages", reason="exit_status"
    )
    runner = FakeRunner(answers)
    backend = make_backend(runner)
    for _ in range(ascend.UNSUPPORTED_AFTER):
        s = by_index(backend.sample())
        assert s["6-0"].up and s["6-1"].up
        assert s["6-0"].memory_used_bytes == 1175 * MIB
        assert s["6-0"].memory_bandwidth_utilization_ratio is None  # -t usages is the source
        assert s["6-0"].vendor_metrics[ascend.CARD_POWER.name] == 45.2  # -t common still read
        assert s["6-0"].unread["memory_bandwidth_utilization_ratio"] == (
            "-t usages: exit_status: npu-smi exited 255: unknown type usages"
        )
    # -t common failing on the 310P card: its MCU card power is unread on the card's lowest chip only
    answers["info -t common -i 6"] = BackendError("npu-smi exited 1: dcmi error", reason="exit_status")
    s = by_index(make_backend(FakeRunner(answers)).sample())
    assert s["6-0"].unread[ascend.CARD_POWER.name] == "-t common: exit_status: npu-smi exited 1: dcmi error"
    assert (
        ascend.CARD_POWER.name not in s["6-1"].unread
        and ascend.CARD_POWER.name not in s["6-0"].vendor_metrics
    )
    answers["info -t common -i 6"] = _renumber(fixture("npu-smi_info_-t_common_-i_1_310P.txt"), 6)
    assert runner.calls.count("info -t usages -i 6") == ascend.UNSUPPORTED_AFTER
    runner.calls.clear()
    s = by_index(backend.sample())
    assert "info -t usages -i 6" not in runner.calls and "info -t common -i 6" in runner.calls
    assert s["6-0"].up and s["6-0"].error is None and s["6-0"].unread == {}


def test_backend_main_table_failure_is_a_backend_error() -> None:
    for answer, reason in (
        (BackendError("npu-smi: no answer within 10s, killed", reason="timeout"), "timeout"),
        (BackendError("npu-smi exited 1", reason="exit_status"), "exit_status"),
        ("Invalid card id.\n", "parse"),
        (fixture("npu-smi_info_910B2C_23.0.3_no_procs.txt")[:900], "parse"),
    ):
        with pytest.raises(BackendError) as exc:
            make_backend(FakeRunner({"info": answer})).sample()
        assert exc.value.reason == reason


def test_backend_chip_missing_from_table_is_lost() -> None:
    answers = host_910a()
    runner = FakeRunner(answers)
    backend = make_backend(runner)
    assert len(backend.sample()) == 8
    lines = fixture("npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt").splitlines(keepends=True)
    answers["info"] = "".join(lines[:9] + lines[12:])  # card 1's rows gone
    s = by_index(backend.sample())
    assert len(s) == 8
    assert not s["1-0"].up and s["1-0"].error == "missing from npu-smi info"
    assert s["1-0"].device.uuid == "ascend-0000:81:00.0-0"
    assert all(v.up for k, v in s.items() if k != "1-0")


def test_backend_without_card_queries_reads_only_the_table() -> None:
    runner = FakeRunner(host_310p())
    s = by_index(make_backend(runner, card_queries=False, vnpu=False).sample())
    assert runner.calls == ["info"]
    assert s["6-0"].memory_bandwidth_utilization_ratio is None and s["6-0"].up


def test_backend_poll_budget_and_rotation() -> None:
    """The first poll reads every detail query once, 4 at a time; later polls run `npu-smi info` plus at most
    detail_queries_per_poll detail calls (health of chips that are not OK first, then a rotation); each
    call's timeout is capped by what is left of the budget; a call the budget does not reach costs
    readings, never a chip."""
    now = [0.0]
    timeouts: list[float] = []

    class SlowRunner(FakeRunner):
        def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
            timeouts.append(timeout)
            if " ".join(argv[1:]) == "info":
                now[0] += 12.0  # the table alone takes 12 of the 15 s
            return super().run(argv, timeout)

    runner = SlowRunner(host_910a())
    backend = ascend.AscendBackend(runner, ascend.AscendOptions(source="cli"), monotonic=lambda: now[0])
    backend.open()
    s = by_index(backend.sample())
    assert len(runner.calls) == 1 + 2 + 16 + 8  # table, 2 health, usages+common per card, vNPU per chip
    assert all(v.up for v in s.values()) and all(not v.unread for v in s.values())
    assert s["5-0"].vendor_metrics[ascend.AICORE_FREQ.name] == 1000e6
    for poll in range(2):
        runner.calls.clear()
        timeouts.clear()
        now[0] = 100.0 * (poll + 1)
        s = by_index(backend.sample())
        assert len(runner.calls) == 5 and runner.calls[0] == "info"
        assert sorted(runner.calls[1:3]) == ["info -t health -i 3 -c 0", "info -t health -i 7 -c 0"]
        assert sorted(timeouts) == [3.0, 3.0, 3.0, 3.0, 8.0]  # 8 s per call, capped by the 3 s left
        assert all(v.up for v in s.values())
        assert s["5-0"].vendor_metrics[ascend.AICORE_FREQ.name] == 1000e6  # cached, not re-read
    assert set(runner.calls[3:]) == {"info -t usages -i 1", "info -t common -i 1"}  # the rotation moves on
    # Older than detail_max_age_seconds: no series (not unread: nothing failed).
    now[0] = 1000.0
    s = by_index(backend.sample())
    assert ascend.AICORE_FREQ.name not in s["7-0"].vendor_metrics and not s["7-0"].unread

    # The budget spent before the detail calls: they cost their readings, the chips stay up.
    now[0] = 0.0

    class SpentRunner(SlowRunner):
        def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
            if " ".join(argv[1:]) == "info":
                now[0] += 20.0
            return FakeRunner.run(self, argv, timeout)

    spent = ascend.AscendBackend(SpentRunner(host_910a()), ascend.AscendOptions(), monotonic=lambda: now[0])
    spent.open()
    s = by_index(spent.sample())
    assert all(v.up for v in s.values())
    assert s["3-0"].unread["fault_events"] == "-t health: timeout: npu-smi: poll budget exhausted"
    assert s["0-0"].unread[ascend.AICPU.name] == "-t usages: timeout: npu-smi: poll budget exhausted"


def test_backend_forks_per_poll_do_not_grow_with_chips() -> None:
    """16 cards, all OK: after the first poll's full read, every poll forks 1 + detail_queries_per_poll
    times; the rotation reaches every card's usages/common and every chip's vNPU list in 12 polls."""
    answers: dict[str, str | BackendError] = {"info": _sixteen_cards()}
    for n in range(16):
        answers[f"info -t usages -i {n}"] = _renumber(fixture("npu-smi_info_-t_usages_-i_0_910B.txt"), n)
        answers[f"info -t common -i {n}"] = _renumber(fixture("npu-smi_info_-t_common_-i_0_910B.txt"), n)
        answers[f"info -t info-vnpu -i {n} -c 0"] = fixture(
            "npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_none.txt"
        )
    runner = FakeRunner(answers)
    backend = make_backend(runner)
    backend.sample()
    assert len(runner.calls) == 1 + 48
    seen: set[str] = set()
    for poll in range(12):
        runner.calls.clear()
        s = backend.sample()
        assert len(runner.calls) == 5, poll
        seen.update(runner.calls[1:])
        assert len(s) == 16 and all(x.up for x in s)
    assert len(seen) == 48
    assert all(ascend.AICORE_FREQ.name in x.vendor_metrics for x in s)
    assert all(x.memory_bandwidth_utilization_ratio is not None for x in s)


def _sixteen_cards() -> str:
    """The 910A 24.1.RC2 table's header and card 0 repeated as cards 0..15 (NPU ids and bus ids renumbered;
    no process section)."""
    lines = fixture("npu-smi_info_910A_24.1.RC2_8npu_warning_procs.txt").splitlines(keepends=True)
    out = lines[:6]
    for n in range(16):
        out.append(lines[6].replace("| 0     xxx", f"| {n:<2}    xxx", 1))
        out.append(lines[7].replace("0000:C1:00.0", f"0000:{n + 1:02X}:00.0"))
        out.append(lines[8])
    return "".join(out)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(text=mutated(), which=st.sampled_from(["info", "info -t usages -i 6", "info -t common -i 6"]))
def test_fuzz_backend_raises_only_backend_error(text: str, which: str) -> None:
    answers = host_310p()
    answers[which] = text
    try:
        samples = make_backend(FakeRunner(answers)).sample()
    except BackendError:
        return
    assert all(isinstance(s, DeviceSample) for s in samples)


def test_detect() -> None:
    spec = all_specs()["ascend"]
    assert spec.detect(BackendContext(runner=FakeRunner({}))).found  # type: ignore[arg-type]
    empty = SubprocessRunner(env={"PATH": "/nonexistent"})
    d = spec.detect(BackendContext(runner=empty))
    assert d.found == any(os.access(p, os.X_OK) for p in ascend.STANDARD_PATHS)


# ---------------------------------------------------------------------------------------------------------
# The real subprocess path: a fake npu-smi on PATH

FAKE_NPU_SMI = '''#!{python}
"""Fake npu-smi: stands for Huawei's npu-smi CLI (the outputs in tests/fixtures/ascend). Answers
`npu-smi <args>` from answers/<args joined by _>.txt next to it; a file named <key>.hang makes it sleep,
<key>.exit1 makes it print to stderr and exit 1; unknown args print the "Invalid card id." usage text."""
import os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
key = "_".join(sys.argv[1:]).replace("-", "")
base = os.path.join(here, "answers", key)
if os.path.exists(base + ".hang"):
    time.sleep(60)
if os.path.exists(base + ".exit1"):
    sys.stderr.write("dcmi_get_device_info failed, ret = -8005\\n")
    sys.exit(1)
if os.path.exists(base + ".txt"):
    sys.stdout.write(open(base + ".txt", encoding="utf-8").read())
    sys.exit(0)
sys.stdout.write("Invalid card id.\\nError parameter of -i\\nUsage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\\n")
sys.exit(0)
'''


@pytest.fixture
def fake_tool(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    (bindir / "answers").mkdir(parents=True)
    tool = bindir / "npu-smi"
    tool.write_text(FAKE_NPU_SMI.format(python=sys.executable), encoding="utf-8")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    for args, text in host_310p().items():
        assert isinstance(text, str)
        (bindir / "answers" / (args.replace(" ", "_").replace("-", "") + ".txt")).write_text(
            text, encoding="utf-8"
        )
    return bindir


def real_backend(bindir: Path) -> ascend.AscendBackend:
    runner = SubprocessRunner(env={**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"})
    ctx = BackendContext(runner=runner, options={"timeout_seconds": 2.0})
    assert all_specs()["ascend"].detect(ctx).found
    backend = ascend.create(ctx)
    backend.open()
    return backend


@pytest.mark.slow
def test_subprocess_fake_npu_smi_healthy(fake_tool: Path) -> None:
    s = by_index(real_backend(fake_tool).sample())
    assert s["6-0"].up and s["6-1"].up
    assert s["6-0"].memory_used_bytes == 1175 * MIB
    assert s["6-0"].vendor_metrics[ascend.CARD_POWER.name] == 45.2
    assert s["6-1"].vendor_metrics[ascend.CTRLCPU.name] == 0.03


@pytest.mark.slow
def test_subprocess_fake_npu_smi_hang_exit_and_usage_text(fake_tool: Path) -> None:
    answers = fake_tool / "answers"
    backend = real_backend(fake_tool)
    assert all(s.up for s in backend.sample())
    (answers / "info_t_common_i_6.hang").touch()  # a hung detail query: the chips stay up
    s = by_index(backend.sample())
    assert s["6-0"].up and s["6-1"].up and s["6-0"].memory_used_bytes == 1175 * MIB
    assert s["6-0"].unread[ascend.AICORE_FREQ.name].startswith(f"-t common: timeout: {fake_tool / 'npu-smi'}")
    (answers / "info_t_common_i_6.hang").unlink()
    (answers / "info_t_usages_i_6.exit1").touch()
    s = by_index(backend.sample())
    assert s["6-0"].up
    assert s["6-0"].unread[ascend.AICPU.name].startswith("-t usages: exit_status:")
    assert "dcmi_get_device_info failed" in s["6-0"].unread[ascend.AICPU.name]
    (answers / "info_t_usages_i_6.exit1").unlink()
    (answers / "info_t_common_i_6.txt").unlink()  # "Invalid card id." with status 0: still listed, still up
    s = by_index(backend.sample())
    assert s["6-1"].up
    assert (
        s["6-1"].unread[ascend.AICORE_FREQ.name]
        == "-t common: parse: npu-smi: rejected the query: Invalid card id."
    )
    (answers / "info.hang").touch()
    with pytest.raises(BackendError) as exc:
        real_backend(fake_tool).sample()
    assert exc.value.reason == "timeout"
    (answers / "info.hang").unlink()
    (answers / "info.exit1").touch()
    with pytest.raises(BackendError) as exc:
        real_backend(fake_tool).sample()
    assert exc.value.reason == "exit_status"


# ---------------------------------------------------------------------------------------------------------
# The DCMI source: a fake libdcmi.so built from tests/vendors/ascend_fake/libdcmi_fake.c

FAKE_DCMI_C = Path(__file__).resolve().parent / "ascend_fake" / "libdcmi_fake.c"


@pytest.fixture(scope="module")
def fake_dcmi(tmp_path_factory: pytest.TempPathFactory) -> str:
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the fake libdcmi.so")
    out = tmp_path_factory.mktemp("dcmi") / "libdcmi.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(FAKE_DCMI_C)], check=True)
    return str(out)


def dcmi_backend(lib: str, source: str = "dcmi", runner: object | None = None) -> ascend.AscendBackend:
    opts = {"source": source, "dcmi_library": lib}
    return make_backend(runner or FakeRunner({}), **opts)


def test_dcmi_source_values(fake_dcmi: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("FAKE_DCMI_INIT_FAIL", "FAKE_DCMI_HEALTH_FAIL", "FAKE_DCMI_CARDS"):
        monkeypatch.delenv(var, raising=False)
    backend = dcmi_backend(fake_dcmi)
    assert backend.source == "dcmi"
    s = by_index(backend.sample())
    assert sorted(s) == ["0-0", "3-0", "3-1"]
    b = s["0-0"]
    # Same identity as npu-smi gives for this chip (npu-smi_info_910B2C_23.0.3_no_procs.txt, NPU 0).
    cli = by_index(ascend.samples_from_info(fixture("npu-smi_info_910B2C_23.0.3_no_procs.txt")))["0-0"]
    assert (b.device.uuid, b.device.model, b.device.pci_bus_id) == (
        cli.device.uuid,
        cli.device.model,
        cli.device.pci_bus_id,
    )
    assert (b.memory_used_bytes, b.memory_total_bytes) == (3317 * MIB, 65536 * MIB)
    assert (b.utilization_ratio, b.power_watts) == (0, 89.9)
    assert b.temperatures_celsius == {"core": 53, "memory": 40}  # HBM temperature: DCMI only
    assert b.memory_bandwidth_utilization_ratio == 0.07
    assert b.health == {"chip": True} and b.fault_events == {}
    assert b.vendor_metrics == {
        ascend.AICPU.name: 0,
        ascend.CTRLCPU.name: 0.09,
        ascend.AICORE_FREQ.name: 1000e6,
        ascend.AICORE_RATED_FREQ.name: 1000e6,
        ascend.HEALTH_STATE.name: 0,
        ascend.ERROR_CODES_ACTIVE.name: 0,
    }
    p0, p1 = s["3-0"], s["3-1"]
    assert p0.device.uuid == "ascend-0000:83:00.0-0" and p1.device.uuid == "ascend-0000:83:00.0-1"
    assert p0.device.model == "Ascend310P3"
    assert (p0.memory_used_bytes, p0.memory_total_bytes) == (1175 * MIB, 44280 * MIB)
    assert (p1.memory_used_bytes, p1.memory_total_bytes) == (8322 * MIB, 43693 * MIB)
    assert p0.utilization_ratio == 0.12 and p0.power_watts is None
    assert p0.temperatures_celsius == {"core": 55}  # no HBM on 310P
    assert p0.memory_bandwidth_utilization_ratio == 0.51
    assert p1.vendor_metrics[ascend.CTRLCPU.name] == 0.03
    assert p1.health == {"chip": False}
    assert p1.fault_events == {"A4025021": 1, "8C03A000": 1}
    assert p1.vendor_metrics[ascend.HEALTH_STATE.name] == 2
    assert p1.vendor_metrics[ascend.ERROR_CODES_ACTIVE.name] == 2
    assert by_index(backend.sample())["3-1"].fault_events == {"A4025021": 1, "8C03A000": 1}


def test_dcmi_source_faults(fake_dcmi: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("FAKE_DCMI_INIT_FAIL", "FAKE_DCMI_HEALTH_FAIL", "FAKE_DCMI_CARDS"):
        monkeypatch.delenv(var, raising=False)
    backend = dcmi_backend(fake_dcmi)
    assert len(backend.sample()) == 3
    monkeypatch.setenv("FAKE_DCMI_HEALTH_FAIL", "3-1")
    s = by_index(backend.sample())
    # issue 22: a failed health call is no lost chip (that fired AcceleratorLost, action drain): the chip stays
    # up with its other readings, health and fault events unread with the library's answer
    assert s["3-0"].up and s["3-1"].up
    assert s["3-1"].utilization_ratio is not None and s["3-1"].memory_total_bytes == 43693 * MIB
    assert s["3-1"].health == {}
    assert set(s["3-1"].unread) >= {"health", "fault_events"}
    assert s["3-1"].unread["health"].startswith("library: dcmi_get_device_health")
    assert s["3-1"].fault_events == {"A4025021": 1, "8C03A000": 1}  # the counts read before are kept
    monkeypatch.delenv("FAKE_DCMI_HEALTH_FAIL")
    monkeypatch.setenv("FAKE_DCMI_CARDS", "1")
    s = by_index(backend.sample())
    assert s["0-0"].up
    assert [s[k].error for k in ("3-0", "3-1")] == ["missing from the DCMI card list"] * 2
    monkeypatch.delenv("FAKE_DCMI_CARDS")
    monkeypatch.setenv("FAKE_DCMI_INIT_FAIL", "1")
    with pytest.raises(BackendError) as exc:
        dcmi_backend(fake_dcmi)
    assert exc.value.reason == "init"
    fallback = dcmi_backend(fake_dcmi, source="auto", runner=FakeRunner(host_310p()))
    assert fallback.source == "cli"
    assert sorted(by_index(fallback.sample())) == ["6-0", "6-1"]


def test_dcmi_library_missing(tmp_path: Path) -> None:
    spec = all_specs()["ascend"]
    ctx = BackendContext(
        runner=SubprocessRunner(env={"PATH": "/nonexistent"}),
        options={"source": "dcmi", "dcmi_library": str(tmp_path / "nope.so")},
    )
    assert not spec.detect(ctx).found
    with pytest.raises(BackendError) as exc:
        spec.create(ctx).open()
    assert exc.value.reason == "not_found"
    with pytest.raises(BackendError) as exc:
        ascend.AscendOptions.from_mapping({"source": "ioctl"})
    assert exc.value.reason == "config"


def test_dcmi_reading_maps_like_npu_smi() -> None:
    r = ascend.ChipReading(
        card=1,
        device=0,
        bus_id="0000:3b:00.0",
        chip_name="910B3",
        health=3,
        error_codes=(0x80E18402, 0x80E18402),
        aicore_percent=75,
        temperature_celsius=61,
        power_deciwatts=3105,
        hbm_total_mib=65536,
        hbm_used_mib=60000,
        hbm_bandwidth_percent=40,
    )
    row = ascend.row_from_reading(r)
    assert (row.index, row.name, row.health, row.power_watts) == ("1-0", "910B3", "Critical", 310.5)
    assert ascend.health_from_reading(r).codes == ("80E18402",)
    assert ascend.row_from_reading(replace(r, health=7, bus_id=None), "0000:3b:00.0").health == "Unknown"
    assert ascend.row_from_reading(replace(r, bus_id=None), "0000:3b:00.0").bus_id == "0000:3b:00.0"


@pytest.mark.slow
def test_capture_and_replay_give_the_same_samples(fake_tool: Path, tmp_path: Path) -> None:
    from xpuwatch.vendors.command import RecordingRunner, ReplayRunner, read_bundle, write_bundle

    live = SubprocessRunner(
        env={**os.environ, "PATH": f"{fake_tool}{os.pathsep}{os.environ.get('PATH', '')}"}
    )
    recorder = RecordingRunner(live)
    recorded = make_backend(recorder).sample()
    bundle = tmp_path / "bundle.json"
    write_bundle(bundle, recorder.results, {"node": "n1"})
    _, results = read_bundle(bundle)
    assert results[0].argv[1:] == ("info",)
    assert sorted(r.argv[1:] for r in results[1:]) == [
        ("info", "-t", "common", "-i", "6"),
        ("info", "-t", "info-vnpu", "-i", "6", "-c", "0"),
        ("info", "-t", "info-vnpu", "-i", "6", "-c", "1"),
        ("info", "-t", "usages", "-i", "6"),
    ]
    replayed = make_backend(ReplayRunner(results)).sample()
    assert replayed == recorded
    assert by_index(replayed)["6-1"].vendor_metrics[ascend.PROCESS_MEMORY.name] == 6612 * MIB


@pytest.mark.parametrize(
    ("old", "new", "reading", "kept"),
    [
        ("| 89.9        53 ", "| xx.x        53 ", "power_watts", ("memory_used_bytes", 3317 * MIB)),
        ("| 89.9        53 ", "| 89.9        ## ", "temperatures_celsius.core", ("power_watts", 89.9)),
        (
            "| 0           0    / 0          3317",
            "| ?           0    / 0          3317",
            "utilization_ratio",
            ("power_watts", 89.9),
        ),
        ("3317 / 65536", "xxxx / 65536", "memory_used_bytes", ("memory_total_bytes", 65536 * MIB)),
        ("3317 / 65536", "3317 / xxxxx", "memory_total_bytes", ("memory_used_bytes", 3317 * MIB)),
    ],
)
def test_a_masked_cell_costs_that_reading_only(
    old: str, new: str, reading: str, kept: tuple[str, float]
) -> None:
    """Issue 11 item 2: one unreadable cell never takes the chip (or the table) down."""
    text = fixture("npu-smi_info_910B2C_23.0.3_no_procs.txt")
    assert old in text
    s0, s1 = ascend.samples_from_info(text.replace(old, new, 1))
    assert s0.up and reading in s0.unread, s0.unread
    assert getattr(s0, kept[0]) == kept[1]
    assert getattr(s0, reading.split(".")[0]) in (None, {})
    assert s1.up and s1.unread == {} and s1.power_watts == 93.8


# ---------------------------------------------------------------------------------------------------------
# vNPU listings (issue 22): npu-smi info -t info-vnpu -i N -c C


def test_vnpu_listing() -> None:
    rep = ascend.parse_vnpu_info(fixture("npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_2vnpu.txt"))
    assert rep.resources["aicore"] == (0, 20) and rep.resources["memory"] == (0, 32)
    assert rep.resources["pngd"] == (None, None)
    assert [(v.vnpu_id, v.vgroup_id, v.container_id, v.status, v.template) for v in rep.vnpus] == [
        (100, 0, "ffffffffffff", 1, "vir10_3c_16g"),
        (101, 1, "000000000000", 0, "vir10_3c_16g"),
    ]
    slices = ascend.vnpu_slices(rep, "ascend-0000:c1:00.0-0")
    assert [(s.slice_id, s.profile, s.kind, s.memory_total_bytes, s.compute_limit_ratio) for s in slices] == [
        ("100", "vir10_3c_16g", "vnpu", 16 * 2**30, 0.5),
        ("101", "vir10_3c_16g", "vnpu", 16 * 2**30, 0.5),
    ]
    assert all(s.parent_uuid == "ascend-0000:c1:00.0-0" and s.uuid is None for s in slices)
    empty = ascend.parse_vnpu_info(fixture("npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_none.txt"))
    assert empty.vnpus == () and empty.resources["aicore"] == (20, 20)


@pytest.mark.parametrize(
    ("template", "cores", "gib"),
    [("vir02", 2, None), ("vir16", 16, None), ("vir05_1c_8g", 5, 8), ("vir04_3c_ndvpp", 4, None)],
)
def test_vnpu_template_sizes(template: str, cores: int, gib: int | None) -> None:
    assert ascend.template_size(template) == (cores, None if gib is None else gib * 2**30)


def test_vnpu_listing_truncated_or_garbled_is_a_parse_error() -> None:
    text = fixture("npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_2vnpu.txt")
    lines = text.splitlines(keepends=True)
    for bad in (
        "".join(lines[:-2]),  # one vNPU row missing
        text.replace("vir10_3c_16g  ", "banana        ", 1),
        text.replace("| 0/20 ", "| x/20 "),
        "Invalid card id.\nError parameter of -i\n",
    ):
        with pytest.raises(ParseError):
            ascend.parse_vnpu_info(bad)


def test_backend_exports_vnpus_as_slices_of_their_chip() -> None:
    answers = host_310p()
    answers["info -t info-vnpu -i 6 -c 0"] = fixture("npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_2vnpu.txt")
    answers["info -t info-vnpu -i 6 -c 1"] = fixture("npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_none.txt")
    backend = make_backend(FakeRunner(answers))
    s = by_index(backend.sample())
    assert [(x.slice_id, x.profile, x.kind, x.parent_uuid) for x in s["6-0"].slices] == [
        ("100", "vir10_3c_16g", "vnpu", "ascend-0000:83:00.0-0"),
        ("101", "vir10_3c_16g", "vnpu", "ascend-0000:83:00.0-0"),
    ]
    assert s["6-1"].slices == ()
    # A listing that fails after having answered costs the slices (unread), not the chip.
    answers["info -t info-vnpu -i 6 -c 0"] = BackendError(
        "npu-smi: no answer within 8s, killed", reason="timeout"
    )
    s = by_index(backend.sample())
    assert s["6-0"].up and s["6-0"].slices == ()
    assert s["6-0"].unread["slices"].startswith("-t info-vnpu: timeout:")
