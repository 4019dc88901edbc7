"""The default ``amd-smi`` table and plain ``rocm-smi`` concise tables (issue 24 item 1) and the AMD compute
and memory partitions they print (issue 22 item 4): real captures in tests/fixtures/amd (see each
``.source``), constructed layouts marked so, and hypothesis over both readers (only ParseError escapes)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from xpuwatch.exporter.cli import detect_format, inspect_files
from xpuwatch.vendors import amd
from xpuwatch.vendors.base import DeviceSample, ParseError, Partition
from xpuwatch.vendors.registry import all_formats

AMD = FIXTURES / "amd"
R9700 = AMD / "amd-smi_default_R9700x2_26.2.1_rocm7.2.0_fan-pct-missing_procs-table.txt"
DPX = AMD / "amd-smi_default_mi300x_dpx_rocm7.0.2_amdsmi-issue132_excerpt.txt"
CONCISE7 = AMD / "rocm-smi_concise_R9700_kernel6.18_partitions-cols_degC_pwrcap210-manual.txt"
CONCISE3 = AMD / "rocm-smi_concise_rocm3.3_rx_ROC-smi-issue86.txt"
SPX = AMD / "rocm-smi_concise_mi300x_spx_rocm6.4.1_legacy-rocm-build-4750_excerpt.txt"
MIB = 1024**2

# CONSTRUCTED (not a capture): the ROCm 6.4 concise layout of SPX above (ROCm/legacy-rocm-build#4750) with
# one MI300X in CPX mode, partition ids 0..7 as AMD documents CPX ("each XCD appears as a separate logical
# GPU, i.e., eight separate GPUs per MI300X", ROCm/rccl#1555 docs), power on partition 0 only as amd-smi
# prints it (ROCm/amdsmi#132), and N/A modes on partitions > 0 as rocm-smi 6.4.1 prints them
# (ROCm/legacy-rocm-build#4759); then an unpartitioned card.
_WIDTHS = (8, 6, 17, 12, 10, 20, 8, 8, 5, 6, 8, 7, 6)  # the SPX capture's column widths


def _row(*cells: str) -> str:
    return "".join(c.ljust(w) for c, w in zip(cells, _WIDTHS, strict=True))


CPX_CONSTRUCTED = "\n".join(
    [
        "=" * 40 + " ROCm System Management Interface " + "=" * 40,
        "=" * 50 + " Concise Info " + "=" * 50,
        _row(
            "Device",
            "Node",
            "IDs",
            "Temp",
            "Power",
            "Partitions",
            "SCLK",
            "MCLK",
            "Fan",
            "Perf",
            "PwrCap",
            "VRAM%",
            "GPU%",
        ),
        _row("", "", "(DID,     GUID)", "(Junction)", "(Socket)", "(Mem, Compute, ID)", *[""] * 7),
        "=" * 114,
        _row(
            "0",
            "2",
            "0x74a1,   28851",
            "48.0°C",
            "135.0W",
            "NPS1, CPX, 0",
            "124Mhz",
            "900Mhz",
            "0%",
            "auto",
            "750.0W",
            "0%",
            "0%",
        ),
        *[
            _row(
                str(i),
                str(i + 2),
                f"0x74a1,   {1000 + i}",
                "N/A",
                "N/A",
                f"N/A, N/A, {i}",
                "N/A",
                "N/A",
                "0%",
                "auto",
                "N/A",
                "0%",
                "0%",
            )
            for i in range(1, 8)
        ],
        _row(
            "8",
            "10",
            "0x74a1,   43178",
            "42.0°C",
            "131.0W",
            "NPS1, SPX, 0",
            "145Mhz",
            "900Mhz",
            "0%",
            "auto",
            "750.0W",
            "0%",
            "0%",
        ),
        "=" * 114,
    ]
)

# CONSTRUCTED: the ROCm 6.0 concise layout whose rows take two lines (``[Model : Revision]`` over
# ``Name (20 chars)``), as rocm_smi.py 6.0 prints it; values from the SPX capture above.
ROCM60_CONSTRUCTED = """\
========================================= ROCm System Management Interface =========================================
=================================================== Concise Info ===================================================
Device  [Model : Revision]    Temp        Power     Partitions      SCLK    MCLK     Fan  Perf  PwrCap  VRAM%  GPU%
        Name (20 chars)       (Junction)  (Socket)  (Mem, Compute)
====================================================================================================================
0       [0x74a1 : 0x00]       35.0°C      140.0W    NPS1, SPX       132Mhz  900Mhz   0%   auto  750.0W    0%   0%
        AMD Instinct MI300X
====================================================================================================================
"""


def _read(path: object) -> str:
    return path.read_text(encoding="utf-8")  # type: ignore[attr-defined]


def test_amd_smi_table_reads_processes_and_fan_without_percent() -> None:
    s0, s1 = amd.parse_amd_smi_table(_read(R9700))
    assert (s0.device.model, s0.device.uuid, s0.device.partition) == (
        "Radeon AI PRO R9700",
        "pci-0000:03:00.0",
        None,
    )
    assert (s0.power_watts, s0.power_limit_watts, s0.memory_total_bytes) == (103.0, 300.0, 32624 * MIB)
    assert s0.unread == {} and s1.unread == {}  # Fan "38.82" (no %) and "40.0 %" cost nothing
    assert s0.processes is not None
    assert [(p.pid, p.memory_used_bytes) for p in s0.processes] == [
        (213534, 54.7 * 1024),
        (213890, 54.7 * 1024),
        (213952, 19.6 * 1024**3),
        (213953, 19.1 * 1024**3),
    ]


def test_amd_smi_table_dpx_partitions_tie_to_their_card() -> None:
    p0, p1, other = amd.parse_amd_smi_table(_read(DPX))
    card = "pci-0000:05:00.0"
    assert p0.device.partition == Partition(card, "0", "DPX", "NPS1")
    assert p1.device.partition == Partition(card, "1", "DPX", "NPS1")  # mode from partition 0's row
    assert other.device.partition == Partition("pci-0000:26:00.0", "0", "DPX", "NPS1")
    # As amd-smi prints them: the card's power on partition 0 only; memory per partition, with
    # partition 0 showing the whole card (196592 MB) and partition 1 half of it.
    assert (p0.power_watts, p1.power_watts) == (142.0, None)
    assert (p0.memory_total_bytes, p1.memory_total_bytes) == (196592 * MIB, 98296 * MIB)
    assert p1.utilization_ratio is None and p1.temperatures_celsius == {}


def test_rocm_smi_tables_one_and_two_line_headers() -> None:
    (r7,) = amd.parse_rocm_smi_table(_read(CONCISE7))
    assert r7.temperatures_celsius == {"core": 45.0}  # "(Edge)" names the sensor
    assert (r7.power_watts, r7.power_limit_watts, r7.memory_used_ratio) == (31.0, 210.0, 0.76)
    assert r7.device.partition is None  # "N/A, N/A, 0": a Radeon card has no partition mode
    (r3,) = amd.parse_rocm_smi_table(_read(CONCISE3))
    assert (r3.device.index, r3.temperatures_celsius, r3.memory_used_ratio) == ("1", {"core": 24.0}, None)
    spx = amd.parse_rocm_smi_table(_read(SPX))
    assert [s.device.partition for s in spx] == [
        Partition(f"amd-index-{i}", "0", "SPX", "NPS1") for i in range(3)
    ]
    assert spx[0].temperatures_celsius == {"hotspot": 48.0}  # "(Junction)"
    (r60,) = amd.parse_rocm_smi_table(ROCM60_CONSTRUCTED)
    assert r60.device.model == "AMD Instinct MI300X"
    assert r60.device.partition == Partition("amd-index-0", "0", "SPX", "NPS1")


def test_rocm_smi_cpx_partitions_follow_their_card() -> None:
    got = amd.parse_rocm_smi_table(CPX_CONSTRUCTED)
    assert len(got) == 9
    assert [s.device.partition for s in got[:8]] == [
        Partition("amd-index-0", str(i), "CPX", "NPS1") for i in range(8)
    ]
    assert got[8].device.partition == Partition("amd-index-8", "0", "SPX", "NPS1")
    assert [s.power_watts for s in got] == [135.0, *[None] * 7, 131.0]


def test_inspect_detects_the_tables_and_names_what_it_tried() -> None:
    formats = all_formats()
    for path, name in ((R9700, "amd-smi-table"), (CONCISE7, "rocm-smi-table"), (CONCISE3, "rocm-smi-table")):
        found = detect_format(formats, _read(path))
        assert not isinstance(found, str) and found[0].name == name
    why = detect_format(formats, "GPU things\nnothing to see\n")
    assert isinstance(why, str)
    assert why.startswith(f"no known format matches (tried {len(formats)}: ")
    assert "amd-smi-table" in why and "rocm-smi-table" in why and why.endswith("pass --format NAME")
    # A table cut inside its header: the claiming format says why it cannot read it.
    cut = "\n".join(_read(R9700).splitlines()[:7])
    assert detect_format(formats, cut) == (
        "not valid amd-smi-table: device table header is not enclosed by rules (output cut short?)"
    )


def test_partitions_and_table_readings_reach_the_exposition() -> None:
    body, errors = inspect_files([str(DPX)], None, "n1")
    assert errors == []
    text = body.decode()
    assert (
        'accelerator_power_watts{device="0",model="AMD Instinct MI300X",node="n1",uuid="pci-0000:05:00.0",vendor="amd"} 142.0'
        in text
    )
    assert (
        'accelerator_partition_info{compute_partition="DPX",device="1",memory_partition="NPS1",model="AMD Instinct MI300X",'
        'node="n1",parent_uuid="pci-0000:05:00.0",partition_id="1",uuid="pci-0000:05:00.1",vendor="amd"} 1.0'
    ) in text


# ---------------------------------------------------------------------------------------------------
# hypothesis: only ParseError escapes


def _mutate(raw: str, data: st.DataObject) -> str:
    kind = data.draw(st.sampled_from(["truncate", "replace", "insert", "delete"]))
    i = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    if kind == "truncate":
        return raw[:i]
    if kind == "delete":
        return raw[:i] + raw[data.draw(st.integers(min_value=i, max_value=len(raw))) :]
    piece = data.draw(st.text(alphabet=st.sampled_from(list("|=-+ \n0123456789.,/%°CWMBNA:()x")), max_size=8))
    return raw[:i] + piece + raw[i + (1 if kind == "replace" else 0) :]


TARGETS: list[tuple[str, Callable[[str], Sequence[DeviceSample]]]] = [
    ("amd-smi-r9700", amd.parse_amd_smi_table),
    ("amd-smi-dpx", amd.parse_amd_smi_table),
    ("rocm-smi-7", amd.parse_rocm_smi_table),
    ("rocm-smi-3", amd.parse_rocm_smi_table),
    ("rocm-smi-cpx", amd.parse_rocm_smi_table),
    ("rocm-smi-6.0", amd.parse_rocm_smi_table),
]
TEXTS = {
    "amd-smi-r9700": R9700,
    "amd-smi-dpx": DPX,
    "rocm-smi-7": CONCISE7,
    "rocm-smi-3": CONCISE3,
}


def _text(name: str) -> str:
    if name == "rocm-smi-cpx":
        return CPX_CONSTRUCTED
    if name == "rocm-smi-6.0":
        return ROCM60_CONSTRUCTED
    return _read(TEXTS[name])


@pytest.mark.parametrize(("name", "parse"), TARGETS, ids=[n for n, _ in TARGETS])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_tables_raise_only_parse_error(
    name: str, parse: Callable[[str], Sequence[DeviceSample]], data: st.DataObject
) -> None:
    raw = _text(name)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        raw = _mutate(raw, data) if raw else raw
    try:
        out = parse(raw)
    except ParseError:
        return
    assert out and all(isinstance(s, DeviceSample) for s in out)
    for fmt in ("amd-smi-table", "rocm-smi-table"):
        assert all_formats()[fmt].sniff(raw) in (True, False)


@settings(max_examples=200, deadline=None)
@given(raw=st.text(max_size=400))
def test_random_text_raises_only_parse_error(raw: str) -> None:
    for parse in (amd.parse_amd_smi_table, amd.parse_rocm_smi_table):
        with contextlib.suppress(ParseError):
            parse(raw)
    assert amd.sniff_amd_smi_table(raw) in (True, False) and amd.sniff_rocm_smi_table(raw) in (True, False)


# ---------------------------------------------------------------------------------------------------
# the live paths: amd-smi static --json and the amdsmi library


def _static_partitioned() -> str:
    """CONSTRUCTED from the real 8 x MI300X ``amd-smi static --json`` capture (its first GPU) with the
    ``partition`` section amd-smi static prints on partition-capable cards (keys compute_partition,
    memory_partition, partition_id: AMD's amd-smi CLI docs, ``amd-smi static --partition``), one card in
    CPX split in two listed partitions at functions .0/.1 sharing the ASIC serial; partition 1 prints N/A
    modes as amdsmi did before ROCm/rocm-systems#8491."""
    import json

    doc = json.loads(_read(AMD / "amd-smi_static_json_8x-mi300x_rocm7.2.1_ppt0-limit.json"))
    gpu = doc["gpu_data"][0]
    gpu["asic"] = {
        **gpu["asic"],
        "asic_serial": "0x5A1F2B3C4D5E6F70",
    }  # the capture's serials are masked to 0
    p0 = {
        **gpu,
        "gpu": 0,
        "partition": {"compute_partition": "CPX", "memory_partition": "NPS4", "partition_id": 0},
    }
    p1 = {
        **gpu,
        "gpu": 1,
        "bus": {**gpu["bus"], "bdf": gpu["bus"]["bdf"][:-1] + "1"},
        "partition": {"compute_partition": "N/A", "memory_partition": "N/A", "partition_id": 1},
    }
    return json.dumps({"gpu_data": [p0, p1]})


def test_amd_smi_static_partition_section_ties_partitions() -> None:
    s0, s1 = amd.parse_amd_smi_static_samples(_static_partitioned())
    card = s0.device.uuid
    assert card == "0x5a1f2b3c4d5e6f70"
    assert s0.device.partition == Partition(card, "0", "CPX", "NPS4")
    assert s1.device.uuid == f"{card}:p1"  # one ASIC serial, two logical GPUs: two series
    assert s1.device.partition == Partition(card, "1", "CPX", "NPS4")
    plain = amd.parse_amd_smi_static_samples(
        _read(AMD / "amd-smi_static_json_8x-mi300x_rocm7.2.1_ppt0-limit.json")
    )
    assert [s.device.partition for s in plain] == [None] * 8  # no partition section printed: nothing claimed


def test_amdsmi_library_reads_partition_modes() -> None:
    from tests.vendors.fake_amdsmi import AmdSmiRetCode, make_amdsmi, mi300x_gcd
    from xpuwatch.vendors.amd import AmdSmiLibrary

    p0 = {**mi300x_gcd("0xabc", "0000:05:00.0"), "compute_partition": "DPX", "memory_partition": "NPS1"}
    p0["kfd"] = {"kfd_id": 1, "node_id": 2, "current_partition_id": 0}
    p1 = {**mi300x_gcd("0xabc", "0000:05:00.1"), "compute_partition": AmdSmiRetCode.ERR_NOT_SUPPORTED}
    lib = AmdSmiLibrary(make_amdsmi([p0, p1]))
    lib.open()
    a, b = lib.sample()
    assert a.device.partition == Partition(a.device.uuid, "0", "DPX", "NPS1")
    assert b.device.partition == Partition(a.device.uuid, "1", "DPX", "NPS1")  # id from the PCI function
    assert b.device.uuid == f"{a.device.uuid}:p1"


def test_rocm5_one_line_header_names_the_sensor_in_the_column() -> None:
    """CONSTRUCTED: the ROCm 5 concise header writes the sensor into the one header line ("Temp (DieEdge)");
    values from the ROCm 3.3 capture (ROCm/ROC-smi#86)."""
    text = "\n".join(
        [
            "======================= ROCm System Management Interface =======================",
            "================================= Concise Info =================================",
            "GPU  Temp (DieEdge)  AvgPwr  SCLK    MCLK    Fan     Perf  PwrCap  VRAM%  GPU%  ",
            "0    24.0c           3.0W    852Mhz  167Mhz  13.73%  auto  170.0W    5%   0%    ",
            "================================================================================",
        ]
    )
    (s,) = amd.parse_rocm_smi_table(text)
    assert (s.temperatures_celsius, s.power_watts, s.memory_used_ratio) == ({"core": 24.0}, 3.0, 0.05)
