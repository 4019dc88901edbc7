"""nvidia-smi parsers on real captures (exact values), hostile input, and the backend over the real subprocess path."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from xpuwatch.vendors.base import BackendError, ParseError
from xpuwatch.vendors.command import CommandResult, SubprocessRunner
from xpuwatch.vendors.nvidia_smi import (
    NvidiaSmiBackend,
    is_absent,
    mig_profile_name,
    parse_nvidia_smi_csv,
    parse_nvidia_smi_xml,
    sniff_csv,
    sniff_xml,
)
from xpuwatch.vendors.registry import BackendContext, all_formats, all_specs

NV = FIXTURES / "nvidia"
A100 = NV / "nvidia-smi_q_x_a100-sxm4-80gb-mig_535.54.03.xml"
T4 = NV / "nvidia-smi_q_x_tesla-t4_515.105.01.xml"
H100_CSV = NV / "nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01_load.csv.txt"
H100_MIG_CSV = NV / "nvidia-smi_query-gpu_h100-mig_590.48.01_load.csv.txt"
MIB = 1024 * 1024
PSTATE = "accelerator_nvidia_performance_state"
PERSISTENCE = "accelerator_nvidia_persistence_mode"
REASONS_ALL_INACTIVE = {
    "gpu_idle": False,
    "clocks_setting": False,
    "sw_power_cap": False,
    "hw_slowdown": False,
    "sync_boost": False,
    "sw_thermal": False,
    "hw_thermal": False,
    "hw_power_brake": False,
    "display_clocks": False,
}


def test_every_xml_fixture_has_its_source_note() -> None:
    xmls = sorted(NV.glob("*.xml"))
    assert len(xmls) == 3
    for x in xmls:
        assert (x.parent / (x.name + ".source")).read_text().startswith("SOURCE:")


def test_a100_mig_v12_exact_values() -> None:
    (s,) = parse_nvidia_smi_xml(A100.read_text())
    d = s.device
    assert (d.vendor, d.model, d.index) == ("nvidia", "NVIDIA A100-SXM4-80GB", "0")
    assert d.uuid == "GPU-00000000-0000-0000-0000-000000000001"
    assert (d.pci_bus_id, d.driver_version, d.serial) == ("00000000:01:00.0", "535.54.03", "0000000000000")
    assert s.up is True
    assert s.utilization_ratio is None  # N/A in MIG mode
    assert s.memory_bandwidth_utilization_ratio is None
    assert s.memory_used_bytes == 50 * MIB
    assert s.memory_total_bytes == 81920 * MIB
    assert s.temperatures_celsius == {"core": 27.0, "memory": 44.0}
    assert s.power_watts == 67.03  # <gpu_power_readings> (v12 name)
    assert s.power_limit_watts == 500.0  # current_power_limit
    assert s.energy_joules is None
    assert s.clocks_hertz == {"graphics": 1275e6, "sm": 1275e6, "memory": 1593e6}
    assert s.clock_throttled == REASONS_ALL_INACTIVE  # <clocks_event_reasons> (535.113 name)
    assert s.ecc_errors == {"corrected": 0, "uncorrected": 0}
    assert s.remapped_rows == {}  # remapped_rows N/A, retired pages N/A
    assert (s.remap_pending, s.remap_failed) == (None, None)
    assert s.pcie_replay_errors == 0
    # mig_mode Enabled, performance_state P0, persistence_mode Disabled; fan_speed N/A gives no series
    assert s.vendor_metrics == {"accelerator_nvidia_mig_mode": 1.0, PSTATE: 0.0, PERSISTENCE: 0.0}
    assert [(x.slice_id, x.profile, x.kind, x.parent_uuid) for x in s.slices] == [
        ("3/0", "1g.20gb", "mig", d.uuid),
        ("4/0", "1g.20gb", "mig", d.uuid),
        ("5/0", "1g.20gb", "mig", d.uuid),
        ("6/0", "1g.20gb", "mig", d.uuid),
    ]
    for x in s.slices:
        assert (x.memory_used_bytes, x.memory_total_bytes) == (12 * MIB, 19968 * MIB)
        assert x.uuid is None  # -q -x v12 has no MIG UUID


def test_tesla_t4_v11_exact_values() -> None:
    (s,) = parse_nvidia_smi_xml(T4.read_text())
    d = s.device
    assert (d.model, d.index, d.uuid) == ("Tesla T4", "0", "GPU-00000000-0000-0000-0000-000000000002")
    assert (d.pci_bus_id, d.driver_version) == ("00000000:00:1E.0", "515.105.01")
    assert s.utilization_ratio == 0.0
    assert s.memory_bandwidth_utilization_ratio == 0.0
    assert s.memory_used_bytes == 1032 * MIB
    assert s.memory_total_bytes == 15360 * MIB
    assert s.temperatures_celsius == {"core": 40.0}  # memory_temp N/A
    assert s.power_watts == 26.78  # <power_readings> (v11 name)
    assert s.power_limit_watts == 70.0  # enforced_power_limit
    assert s.clocks_hertz == {"graphics": 585e6, "sm": 585e6, "memory": 5000e6}
    assert s.clock_throttled == REASONS_ALL_INACTIVE  # <clocks_throttle_reasons> (pre-535.113 name)
    assert s.ecc_errors == {"corrected": 0, "uncorrected": 0}
    assert s.remapped_rows == {"correctable": 0, "uncorrectable": 0}  # retired pages (Turing)
    assert (s.remap_pending, s.remap_failed) == (False, None)
    assert s.pcie_replay_errors == 0
    # mig_mode N/A (not a MIG-capable GPU) and fan_speed N/A give no series; P0, persistence Disabled
    assert s.vendor_metrics == {PSTATE: 0.0, PERSISTENCE: 0.0}
    assert s.slices == ()


def test_h100_query_gpu_csv_exact_values() -> None:
    (s,) = parse_nvidia_smi_csv(H100_CSV.read_text())
    d = s.device
    assert (d.model, d.index, d.uuid) == (
        "NVIDIA H100 80GB HBM3",
        "0",
        "GPU-00000000-0000-0000-0000-000000000000",
    )
    assert (d.pci_bus_id, d.driver_version, d.serial) == ("00000000:00:09.0", "590.48.01", "0000000000000")
    assert s.utilization_ratio == 1.0
    assert s.memory_bandwidth_utilization_ratio == 0.11
    assert s.memory_used_bytes == 19818 * MIB
    assert s.memory_total_bytes == 81559 * MIB
    assert s.temperatures_celsius == {"core": 59.0, "memory": 54.0}
    assert s.power_watts == 631.95
    assert s.power_limit_watts == 700.0
    assert s.clocks_hertz == {"graphics": 1980e6, "sm": 1980e6, "memory": 2619e6}
    assert s.clock_throttled == REASONS_ALL_INACTIVE  # display_clocks from the hex masks
    assert s.ecc_errors == {"corrected": 0, "uncorrected": 0}
    assert s.remapped_rows == {"correctable": 0, "uncorrectable": 0}
    assert (s.remap_pending, s.remap_failed) == (False, False)
    assert s.vendor_metrics == {"accelerator_nvidia_mig_mode": 0.0, PSTATE: 0.0, PERSISTENCE: 1.0}


def test_h100_mig_query_gpu_csv_na_fields_are_absent() -> None:
    (s,) = parse_nvidia_smi_csv(H100_MIG_CSV.read_text())
    assert s.utilization_ratio is None and s.memory_bandwidth_utilization_ratio is None
    assert s.remapped_rows == {} and s.remap_pending is None and s.remap_failed is None
    assert s.memory_used_bytes == 11125 * MIB
    assert s.temperatures_celsius == {"core": 53.0, "memory": 59.0}
    assert s.power_watts == 433.78
    assert s.vendor_metrics == {"accelerator_nvidia_mig_mode": 1.0, PSTATE: 0.0, PERSISTENCE: 1.0}


def test_csv_nounits() -> None:
    text = "index, uuid, memory.used [MiB], power.draw [W], utilization.gpu [%]\n0, GPU-x, 1024, 250.5, 37\n"
    (s,) = parse_nvidia_smi_csv(text)
    assert (s.device.uuid, s.memory_used_bytes, s.power_watts, s.utilization_ratio) == (
        "GPU-x",
        1024 * MIB,
        250.5,
        0.37,
    )


@pytest.mark.parametrize(
    "text",
    [
        "N/A",
        "[N/A]",
        "[Not Supported]",
        "[Insufficient Permissions]",
        "[Requested functionality has been deprecated]",
        "[Unknown Error]",
        "",
        "  ",
    ],
)
def test_placeholders_mean_absent(text: str) -> None:
    assert is_absent(text)
    xml = T4.read_text().replace("<gpu_temp>40 C</gpu_temp>", f"<gpu_temp>{text}</gpu_temp>")
    xml = xml.replace("<power_draw>26.78 W</power_draw>", f"<power_draw>{text}</power_draw>")
    (s,) = parse_nvidia_smi_xml(xml)
    assert s.temperatures_celsius == {}
    assert s.power_watts is None


def test_active_reason_and_newer_layouts() -> None:
    xml = A100.read_text()
    xml = xml.replace(
        "<clocks_event_reason_sw_power_cap>Not Active</clocks_event_reason_sw_power_cap>",
        "<clocks_event_reason_sw_power_cap>Active</clocks_event_reason_sw_power_cap>",
    )
    xml = xml.replace(
        "<remapped_rows>N/A</remapped_rows>",
        "<remapped_rows><remapped_row_corr>3</remapped_row_corr><remapped_row_unc>1</remapped_row_unc>"
        "<remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure>"
        "</remapped_rows>",
    )
    xml = xml.replace(
        "<volatile>\n                <sram_correctable>0</sram_correctable>",
        "<volatile>\n                <sram_correctable>4</sram_correctable>",
        1,
    ).replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>", 1)
    (s,) = parse_nvidia_smi_xml(xml)
    assert s.clock_throttled["sw_power_cap"] is True
    assert sum(s.clock_throttled.values()) == 1
    assert s.remapped_rows == {"correctable": 3, "uncorrectable": 1}
    assert (s.remap_pending, s.remap_failed) == (True, False)
    assert s.ecc_errors == {"corrected": 4, "uncorrected": 2}


def test_pre_ampere_single_double_bit_ecc_layout() -> None:
    xml = T4.read_text()
    start, end = xml.index("<ecc_errors>"), xml.index("</ecc_errors>")
    xml = (
        xml[:start]
        + "<ecc_errors><volatile><single_bit><device_memory>5</device_memory><total>7</total></single_bit>"
        + "<double_bit><device_memory>1</device_memory><total>1</total></double_bit></volatile></ecc_errors>"
        + xml[end + len("</ecc_errors>") :]
    )
    assert parse_nvidia_smi_xml(xml)[0].ecc_errors == {"corrected": 7, "uncorrected": 1}


def test_mig_profile_name_derivation() -> None:
    assert mig_profile_name("NVIDIA A100-SXM4-80GB", 14, 19968, 81920) == "1g.20gb"
    assert mig_profile_name("NVIDIA A100-SXM4-80GB", 14, 9728, 81920) == "1g.10gb"
    assert mig_profile_name("NVIDIA A100-SXM4-80GB", 98, 80896, 81920) == "7g.80gb"
    assert mig_profile_name("NVIDIA A100-SXM4-40GB", 42, 20096, 40960) == "3g.20gb"
    assert mig_profile_name("NVIDIA H100 80GB HBM3", 16, 10240, 81559) == "1g.10gb"
    assert mig_profile_name("Some Future GPU", 16, 10240, 81559) == "unknown"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "garbage",
        "<nvidia_smi_log>",  # truncated
        "<other_root/>",
        '{"gpu": []}',
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
        "<nvidia_smi_log><driver_version>&b;</driver_version></nvidia_smi_log>",
    ],
)
def test_empty_garbage_truncated_and_entity_xml_raise_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_nvidia_smi_xml(text)


def test_half_a_fixture_is_rejected() -> None:
    text = A100.read_text()
    with pytest.raises(ParseError):
        parse_nvidia_smi_xml(text[: len(text) // 2])


def test_csv_rejects_empty_and_ragged() -> None:
    for text in (
        "",
        "# only a comment\n",
        "name, memory.used [MiB]\nA, 1\n",
        "index, uuid\n0, GPU-a, extra\n",
    ):
        with pytest.raises(ParseError):
            parse_nvidia_smi_csv(text)


def _mutate(text: str, data: st.DataObject) -> str:
    op = data.draw(st.sampled_from(["truncate", "replace", "insert", "delete"]))
    i = data.draw(st.integers(0, len(text)))
    if op == "truncate":
        return text[:i]
    j = data.draw(st.integers(i, min(len(text), i + 64)))
    if op == "delete":
        return text[:i] + text[j:]
    junk = data.draw(
        st.one_of(
            st.text(max_size=32),
            st.sampled_from(
                ["<", ">", "&", "]]>", "[N/A]", "1e999 W", "-5 MiB", "nan %", "<gpu>", "<!ENTITY"]
            ),
        )
    )
    return text[:i] + junk + (text[j:] if op == "replace" else text[i:])


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.sampled_from([A100, T4]), st.data())
def test_fuzz_xml_raises_only_parse_error(path: Path, data: st.DataObject) -> None:
    text = _mutate(path.read_text(), data)
    try:
        samples = parse_nvidia_smi_xml(text)
    except ParseError:
        return
    for s in samples:
        assert s.memory_used_bytes is None or s.memory_used_bytes >= 0
        assert s.utilization_ratio is None or 0 <= s.utilization_ratio <= 1
        assert all(-40 <= t <= 200 for t in s.temperatures_celsius.values())


@FUZZ
@given(st.sampled_from([H100_CSV, H100_MIG_CSV]), st.data())
def test_fuzz_csv_raises_only_parse_error(path: Path, data: st.DataObject) -> None:
    text = _mutate(path.read_text(), data)
    try:
        parse_nvidia_smi_csv(text)
    except ParseError:
        return


@FUZZ
@given(st.text(max_size=300))
def test_fuzz_arbitrary_text(text: str) -> None:
    for parse in (parse_nvidia_smi_xml, parse_nvidia_smi_csv):
        with contextlib.suppress(ParseError):
            parse(text)
    sniff_xml(text)
    sniff_csv(text)


def test_formats_are_registered_and_sniffed() -> None:
    formats = all_formats()
    xml, csv_ = formats["nvidia-smi-xml"], formats["nvidia-smi-csv"]
    assert xml.sniff(A100.read_text()) and xml.sniff(T4.read_text())
    assert not xml.sniff(H100_CSV.read_text())
    assert csv_.sniff(H100_CSV.read_text()) and not csv_.sniff(A100.read_text())
    assert xml.parse(T4.read_text())[0].power_watts == 26.78


# ------------------------------------------------------------------------------------------ backend


class ScriptedRunner:
    """A CommandRunner answering each call with the next scripted stdout (or exception)."""

    def __init__(self, outputs: Sequence[str | BaseException]) -> None:
        self.outputs = list(outputs)
        self.argv: list[tuple[str, ...]] = []

    def which(self, tool: str) -> str | None:
        return f"/usr/bin/{tool}"

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        self.argv.append(tuple(argv))
        out = self.outputs.pop(0)
        if isinstance(out, BaseException):
            raise out
        return CommandResult(tuple(argv), out, "", 0, 0.0, 0.01)


def test_backend_reports_a_vanished_gpu_as_lost() -> None:
    two = T4.read_text().replace("<attached_gpus>1</attached_gpus>", "<attached_gpus>2</attached_gpus>")
    gpu = two[two.index("<gpu ") : two.index("</gpu>") + len("</gpu>")]
    second = gpu.replace(
        "GPU-00000000-0000-0000-0000-000000000002", "GPU-00000000-0000-0000-0000-000000000003"
    )
    two = two.replace("</gpu>", "</gpu>\n" + second, 1)
    runner = ScriptedRunner([two, T4.read_text()])
    b = NvidiaSmiBackend(runner, timeout_seconds=3)
    b.open()
    assert [s.up for s in b.sample()] == [True, True]
    samples = b.sample()
    assert [(s.device.uuid, s.up) for s in samples] == [
        ("GPU-00000000-0000-0000-0000-000000000002", True),
        ("GPU-00000000-0000-0000-0000-000000000003", False),
    ]
    assert samples[1].error == "missing from nvidia-smi output"
    assert runner.argv[0] == ("nvidia-smi", "-q", "-x")
    b.close()


def test_backend_with_no_gpus_is_an_error() -> None:
    b = NvidiaSmiBackend(ScriptedRunner(["<nvidia_smi_log></nvidia_smi_log>"]))
    with pytest.raises(BackendError) as err:
        b.sample()
    assert err.value.reason == "no_devices"


def _fake_tool(tmp_path: Path, body: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


@pytest.mark.slow
def test_real_subprocess_prints_fixture(tmp_path: Path) -> None:
    env = _fake_tool(tmp_path, f"cat '{T4}'")
    ctx = BackendContext(runner=SubprocessRunner(env=env))
    spec = all_specs()["nvidia-smi"]
    assert spec.detect(ctx).found
    b = spec.create(ctx)
    b.open()
    (s,) = b.sample()
    assert (s.device.model, s.power_watts, s.memory_used_bytes) == ("Tesla T4", 26.78, 1032 * MIB)


@pytest.mark.slow
def test_real_subprocess_exit_1_is_backend_error(tmp_path: Path) -> None:
    env = _fake_tool(
        tmp_path,
        "echo 'NVIDIA-SMI has failed because it couldn'\"'\"'t communicate with the NVIDIA driver.' >&2; exit 1",
    )
    b = NvidiaSmiBackend(SubprocessRunner(env=env))
    with pytest.raises(BackendError) as err:
        b.sample()
    assert err.value.reason == "exit_status"
    assert "couldn't communicate" in str(err.value)


@pytest.mark.slow
def test_real_subprocess_hang_is_killed_with_its_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    env = _fake_tool(tmp_path, f"sleep 300 &\necho $! > '{pid_file}'\nwait")
    b = NvidiaSmiBackend(
        SubprocessRunner(env=env), timeout_seconds=2
    )  # long enough for the shell to write its child's pid on a loaded machine
    with pytest.raises(BackendError) as err:
        b.sample()
    assert err.value.reason == "timeout"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 30  # the kill is immediate; reaping by init may take a moment (loaded CI)
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_r570_power_layout_and_missing_uuid() -> None:
    # R570+ drop <power_draw> for average/instant readings; the average is what NVML's power usage reports.
    xml = """<?xml version="1.0" ?><nvidia_smi_log><driver_version>570.86.15</driver_version>
    <gpu id="00000000:3B:00.0"><product_name>NVIDIA L40S</product_name><uuid>[N/A]</uuid>
    <gpu_power_readings><power_state>P0</power_state><average_power_draw>211.37 W</average_power_draw>
    <instant_power_draw>230.02 W</instant_power_draw><current_power_limit>350.00 W</current_power_limit>
    </gpu_power_readings></gpu></nvidia_smi_log>"""
    (s,) = parse_nvidia_smi_xml(xml)
    assert (s.device.uuid, s.device.pci_bus_id, s.device.serial) == (
        "00000000:3B:00.0",
        "00000000:3B:00.0",
        None,
    )
    assert (s.power_watts, s.power_limit_watts) == (211.37, 350.0)
    assert s.memory_used_bytes is None and s.clocks_hertz == {} and s.clock_throttled == {}


def test_csv_sniff_leaves_other_vendors_clones_alone() -> None:
    iluvatar = "index, name, uuid, memory.used [MiB]\n0, Iluvatar BI-V150, GPU-1234, 100 MiB\n"
    assert not sniff_csv(iluvatar)
    assert sniff_csv("index, name, uuid\n0, Tesla T4, GPU-1\n")
    assert sniff_csv("uuid, power.draw [W]\nGPU-1, 30 W\n")
    assert not sniff_csv("uuid, power.draw [W]\n")


@pytest.mark.slow
def test_real_subprocess_usage_text_is_a_parse_error(tmp_path: Path) -> None:
    env = _fake_tool(
        tmp_path, "echo 'Invalid combination of input arguments. Please run nvidia-smi -h for help.'"
    )
    b = NvidiaSmiBackend(SubprocessRunner(env=env))
    with pytest.raises(ParseError) as err:
        b.sample()
    assert err.value.reason == "parse"


@pytest.mark.parametrize(
    ("path", "old", "new", "reading"),
    [
        (T4, "<gpu_temp>40 C", "<gpu_temp>xx C", "temperatures_celsius.core"),
        (T4, "<used>1032 MiB", "<used>xxxxx MiB", "memory_used_bytes"),
        (T4, "<power_draw>26.78 W", "<power_draw>-- W", "power_watts"),
        (T4, "<gpu_util>0 %", "<gpu_util>abc %", "utilization_ratio"),
        (H100_CSV, "19818 MiB", "xxxxx MiB", "memory_used_bytes"),
    ],
)
def test_a_garbled_cell_is_unread_and_the_gpu_stays_up(path: Path, old: str, new: str, reading: str) -> None:
    text = path.read_text()
    assert old in text
    parse = parse_nvidia_smi_xml if path.suffix == ".xml" else parse_nvidia_smi_csv
    (s,) = parse(text.replace(old, new, 1))
    assert s.up and set(s.unread) == {reading}
    assert s.power_watts is not None or reading == "power_watts"
    (clean,) = parse(text)
    assert clean.unread == {}
