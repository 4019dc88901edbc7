"""`xpuwatch inspect --explain`: per device what was not read and why, and the columns a parser does not use."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import FIXTURES
from tests.exporter.conftest import ROOT, cli_env
from xpuwatch.exporter.cli import inspect_files
from xpuwatch.exporter.explain import explain
from xpuwatch.vendors.base import Device, DeviceSample, ParseError
from xpuwatch.vendors.nvidia_smi import explain_csv
from xpuwatch.vendors.registry import OutputFormat, all_formats

DEV = Device("fakevendor", "Fake X1", "3", "GPU-3")


def test_explain_lists_unread_cells_missing_readings_down_devices_and_unused_columns() -> None:
    fmt = OutputFormat("fake", lambda t: [], lambda t: True, lambda t: ["Fan(%): no reading maps it"])
    samples = [
        DeviceSample(
            DEV,
            utilization_ratio=0.5,
            memory_total_bytes=1.0,
            power_limit_watts=300.0,
            temperatures_celsius={"core": 40.0},
            unread={"memory_used_bytes": "'xxxxx MiB' is not a number with unit MiB"},
        ),
        DeviceSample.lost(Device("fakevendor", "Fake X1", "4", "GPU-4"), "Health: Lost"),
    ]
    assert explain("out.txt", fmt, "text", samples) == [
        "# explain out.txt: format fake, 2 device(s)",
        "#   device 3 (Fake X1, uuid GPU-3): up",
        "#     unread memory_used_bytes: 'xxxxx MiB' is not a number with unit MiB",
        "#     no value (printed as N/A, or not in this output): power_watts",
        "#   device 4 (Fake X1, uuid GPU-4): DOWN: Health: Lost",
        "#   not read: Fan(%): no reading maps it",
    ]


def test_explain_survives_a_failing_hook_and_a_format_without_one() -> None:
    def boom(_t: str) -> list[str]:
        raise ValueError("bad")

    s = [DeviceSample(DEV, utilization_ratio=0.1)]
    lines = explain("f", OutputFormat("x", lambda t: [], lambda t: True, boom), "", s)
    assert lines[-1] == "#   unused columns: could not be listed: ValueError: bad"
    lines = explain("f", OutputFormat("x", lambda t: [], lambda t: True), "", s)
    assert lines[-1] == "#   unused columns: not known (x has no explain hook)"


def test_nvidia_csv_names_the_columns_it_does_not_read() -> None:
    text = (FIXTURES / "nvidia" / "nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01_load.csv.txt").read_text()
    unused = {line.split(":", 1)[0] for line in explain_csv(text)}
    assert {"timestamp", "pci.domain", "clocks.current.video"} <= unused
    assert not {"fan.speed", "pstate", "persistence_mode"} & unused  # the NVIDIA-only gauges read them
    read = {"utilization.gpu", "memory.used", "power.draw", "temperature.gpu", "uuid", "index"}
    read |= {"clocks_event_reasons.sw_power_cap", "ecc.errors.corrected.volatile.total"}
    assert not read & unused


def test_ascend_report_explain_names_unmapped_keys() -> None:
    text = (FIXTURES / "ascend" / "npu-smi_info_-t_common_-i_0_910B.txt").read_text()
    hook = all_formats()["npu-smi-common"].explain
    assert hook is not None
    assert list(hook(text)) == [
        "Memory Usage Rate(%): no reading of the shared schema or of accelerator_huawei_* maps it",
        "HBM Usage Rate(%): no reading of the shared schema or of accelerator_huawei_* maps it",
        "Aicore Count: no reading of the shared schema or of accelerator_huawei_* maps it",
        "Temperature(C) (mcu block): the card's MCU temperature, not a chip's",
    ]
    info = (FIXTURES / "ascend" / "npu-smi_info_910A_22.0.3.1_8npu.txt").read_text()
    info_hook = all_formats()["npu-smi-info"].explain
    assert info_hook is not None
    assert list(info_hook(info)) == ["Hugepages-Usage(page): no reading of the shared schema maps it"]


def test_inspect_files_collects_explanations_only_when_asked() -> None:
    f = str(FIXTURES / "ascend" / "npu-smi_info_A3_Ascend910_24.1.rc3.7_2dies_no_procs.txt")
    explained: list[str] = []
    body, errors = inspect_files([f], None, "n1", explained)
    assert errors == []
    assert explained[0] == f"# explain {f}: format npu-smi-info, 2 device(s)"
    assert "#   device 2-1 (Ascend910, uuid ascend-0000:97:00.0-1): up" in explained
    assert "#     no value (printed as N/A, or not in this output): power_limit_watts" in explained
    assert inspect_files([f], None, "n1") == (body, [])


def test_inspect_explain_cli_keeps_stdout_a_valid_exposition() -> None:
    f = FIXTURES / "ascend" / "npu-smi_info_-t_usages_-i_1_310P.txt"
    res = subprocess.run(
        [sys.executable, "-m", "xpuwatch", "inspect", "--explain", str(f)],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert "#   not read: DVPP VDEC Usage Rate(%): no reading of the shared schema" in res.stdout
    assert "#   device 1-1 (Ascend, uuid ascend-npu1-chip1): up" in res.stdout
    fams = {f.name: f for f in text_string_to_metric_families(res.stdout)}
    (util,) = [s for s in fams["accelerator_utilization_ratio"].samples if s.labels["device"] == "1-1"]
    assert util.value == 0.0


FORMATS_WITH_HOOKS = sorted(n for n, f in all_formats().items() if f.explain is not None)
SAMPLES = {
    "hl-smi-table": FIXTURES / "intel" / "hl-smi_gaudi3-HL-325L_1.21.0-fw59.2.1_drv1.20.1_8aip.txt",
    "hl-smi-csv": FIXTURES / "intel" / "hl-smi_Q_csv_nounits_gaudi1-HL-205_1.18.0-fw53.1.1_8aip.csv.txt",
    "nvidia-smi-csv": FIXTURES / "nvidia" / "nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01_load.csv.txt",
    "npu-smi-info": FIXTURES / "ascend" / "npu-smi_info_910A_22.0.3.1_8npu.txt",
    "npu-smi-usages": FIXTURES / "ascend" / "npu-smi_info_-t_usages_-i_1_310P.txt",
    "npu-smi-common": FIXTURES / "ascend" / "npu-smi_info_-t_common_-i_0_910B.txt",
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FORMATS_WITH_HOOKS), st.data())
def test_fuzz_explain_hooks_raise_only_parse_error(name: str, data: st.DataObject) -> None:
    path = SAMPLES.get(name)
    text = path.read_text() if path else ""
    i = data.draw(st.integers(0, len(text)))
    text = text[:i] + data.draw(st.text(max_size=20)) + text[i + data.draw(st.integers(0, 30)) :]
    hook = all_formats()[name].explain
    assert hook is not None
    try:
        lines = list(hook(text))
    except ParseError:
        return
    assert all(isinstance(x, str) for x in lines)
