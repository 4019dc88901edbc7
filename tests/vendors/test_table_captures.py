"""The boxed-table vendors (cnmon, efsmi, xpu-smi/xpu_smi, mx-smi/ht-smi, ixsmi, mthreads-gmi) on every real
capture: at least three captures per vendor, each with its source and hand-written expectations (checked
value by value by tests/vendors/test_corpus.py), one masked or dashed cell per column leaving the device up
with its other readings, hypothesis fuzz of the header-driven reader, and ht-smi through a fake tool on PATH.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpuwatch.vendors import smi_table as t
from xpuwatch.vendors.base import DeviceSample, ParseError
from xpuwatch.vendors.command import RecordingRunner, ReplayRunner, SubprocessRunner
from xpuwatch.vendors.registry import BackendContext, all_formats, all_specs

FIXTURES = Path(__file__).parents[1] / "fixtures"
VENDORS = ("cambricon", "enflame", "kunlunxin", "metax", "iluvatar", "mthreads")
MIB = 2**20


def captures() -> list[Path]:
    return sorted(
        p
        for v in VENDORS
        for p in (FIXTURES / v).iterdir()
        if p.is_file() and not p.name.endswith((".source", ".expected.yaml"))
    )


def expectations(capture: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(capture.with_name(capture.name + ".expected.yaml").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def reading(sample: DeviceSample, key: str) -> Any:
    """A DeviceSample field by its expectation name: ``power_watts`` or dotted ``temperatures_celsius.core``."""
    field, _, sub = key.partition(".")
    value = getattr(sample, field)
    if sub:
        assert isinstance(value, Mapping), key
        return value.get(sub)
    return value


def by_index(text: str, fmt: str) -> dict[str, DeviceSample]:
    return {s.device.index: s for s in all_formats()[fmt].parse(text)}


def test_every_capture_has_expectations_and_a_source() -> None:
    assert len(captures()) >= 3 * len(VENDORS)
    for capture in captures():
        assert capture.with_name(capture.name + ".expected.yaml").is_file(), capture
        assert capture.with_name(capture.name + ".source").is_file(), capture
    per_vendor = {v: sum(1 for c in captures() if c.parent.name == v) for v in VENDORS}
    assert all(n >= 3 for n in per_vendor.values()), per_vendor


# --- one bad cell per column -----------------------------------------------------------------------------

ECC_CN = "vendor_metrics.accelerator_cambricon_ecc_errors_total"
L3_TOTAL = "vendor_metrics.accelerator_kunlunxin_l3_total_bytes"
# (capture, printed text (its first occurrence is in one device's block), same-width replacement, reading
# it feeds, another reading of that device that must stay)
MASKS = [
    ("cambricon/cnmon_MLU370-X8_v5.10.13.txt", "32C ", "xxC ", "temperatures_celsius.core", "power_watts"),
    ("cambricon/cnmon_MLU370-X8_v5.10.13.txt", "106 W/", "xxx W/", "power_watts", "power_limit_watts"),
    ("cambricon/cnmon_MLU370-X8_v5.10.13.txt", "/ 250 W", "/ xxx W", "power_limit_watts", "power_watts"),
    ("cambricon/cnmon_MLU370-X8_v5.10.13.txt", "0 MiB/", "x MiB/", "memory_used_bytes", "memory_total_bytes"),
    ("cambricon/cnmon_MLU370-X8_v5.10.13.txt", "| 0%  ", "| x%  ", "utilization_ratio", "power_watts"),
    ("enflame/efsmi_S60_1.2.0.301.txt", "39 C", "xx C", "temperatures_celsius.core", "power_watts"),
    ("enflame/efsmi_S60_1.2.0.301.txt", "105W", "xxxW", "power_watts", "power_limit_watts"),
    ("enflame/efsmi_S60_1.2.0.301.txt", "49120MiB", "xxxxxMiB", "memory_total_bytes", "utilization_ratio"),
    ("enflame/efsmi_S60_1.2.0.301.txt", "0.0%", "x.x%", "utilization_ratio", "memory_total_bytes"),
    ("kunlunxin/xpu-smi_P800_drv5.0.21.21.txt", "37C", "xxC", "temperatures_celsius.core", "power_watts"),
    ("kunlunxin/xpu-smi_P800_drv5.0.21.21.txt", "88W /", "xxW /", "power_watts", "power_limit_watts"),
    (
        "kunlunxin/xpu-smi_P800_drv5.0.21.21.txt",
        "0MiB / 98304MiB",
        "0MiB / xxxxxMiB",
        "memory_total_bytes",
        "memory_used_bytes",
    ),
    ("kunlunxin/xpu-smi_P800_drv5.0.21.21.txt", "     0%  ", "     x%  ", "utilization_ratio", "power_watts"),
    (
        "kunlunxin/xpu_smi_R200-K100_drv4.0_wide-power-temp.txt",
        "|       25 |",
        "|       xx |",
        "power_watts",
        "temperatures_celsius.core",
    ),
    (
        "kunlunxin/xpu_smi_R200-K100_drv4.0_wide-power-temp.txt",
        "|   49 |",
        "|   xx |",
        "temperatures_celsius.core",
        "power_watts",
    ),
    (
        "kunlunxin/xpu_smi_R200-K100_drv4.0_wide-power-temp.txt",
        "0 / 16384 MB",
        "0 / xxxxx MB",
        "memory_total_bytes",
        "memory_used_bytes",
    ),
    ("metax/mx-smi_C550_2.2.4.txt", "29C ", "xxC ", "temperatures_celsius.core", "power_watts"),
    ("metax/mx-smi_C550_2.2.4.txt", "53W /", "xxW /", "power_watts", "power_limit_watts"),
    (
        "metax/mx-smi_C550_2.2.4.txt",
        "858/65536 MiB",
        "858/xxxxx MiB",
        "memory_total_bytes",
        "memory_used_bytes",
    ),
    (
        "metax/ht-smi_X201x8_2.2.9_board-gpu-cols.txt",
        "34C ",
        "xxC ",
        "temperatures_celsius.core",
        "power_watts",
    ),
    ("metax/ht-smi_X201x8_2.2.9_board-gpu-cols.txt", "38W /", "xxW /", "power_watts", "memory_used_bytes"),
    ("iluvatar/ixsmi_BI-V150_4.3.0.txt", "35C ", "xxC ", "temperatures_celsius.core", "memory_used_bytes"),
    ("iluvatar/ixsmi_BI-V150_4.3.0.txt", "64MiB /", "xxMiB /", "memory_used_bytes", "memory_total_bytes"),
    ("iluvatar/ixsmi_BI-V150_4.3.0.txt", "1500MHz", "xxxxMHz", "clocks_hertz.sm", "clocks_hertz.memory"),
    (
        "mthreads/mthreads-gmi_S5000x8_2.4.1.txt",
        "48C ",
        "xxC ",
        "temperatures_celsius.core",
        "memory_total_bytes",
    ),
    (
        "mthreads/mthreads-gmi_S5000x8_2.4.1.txt",
        "0MiB(81920MiB)",
        "xMiB(81920MiB)",
        "memory_used_bytes",
        "memory_total_bytes",
    ),
    (
        "mthreads/mthreads-gmi_S5000x8_2.4.1.txt",
        "|0%    0MiB",
        "|x%    0MiB",
        "utilization_ratio",
        "temperatures_celsius.core",
    ),
    (
        "mthreads/mthreads-gmi_S5000x8_2.4.1.txt",
        "(81920MiB)",
        "(xxxxxMiB)",
        "memory_total_bytes",
        "memory_used_bytes",
    ),
    (
        "cambricon/cnmon_MLU370-X8_v5.10.13.txt",
        "/ 23374 MiB",
        "/ xxxxx MiB",
        "memory_total_bytes",
        "memory_used_bytes",
    ),
    ("cambricon/cnmon_MLU370-X8x2_v5.10.22_mode-col.txt", "  0 |\n", "  x |\n", ECC_CN, "power_watts"),
    ("enflame/efsmi_S60_1.2.0.301.txt", "300W |", "xxxW |", "power_limit_watts", "power_watts"),
    (
        "kunlunxin/xpu-smi_P800_drv5.0.21.21.txt",
        "0MiB / 98304MiB",
        "xMiB / 98304MiB",
        "memory_used_bytes",
        "memory_total_bytes",
    ),
    ("kunlunxin/xpu-smi_P800_drv5.0.21.21.txt", "/    96MiB", "/    xxMiB", L3_TOTAL, "memory_total_bytes"),
    (
        "kunlunxin/xpu-smi_P800_drv5.0.21.21.txt",
        "    0 |\n",
        "    x |\n",
        "ecc_errors.uncorrected",
        "power_watts",
    ),
    ("metax/mx-smi_C550_2.2.4.txt", "| 0%     ", "| x%     ", "utilization_ratio", "power_watts"),
    (
        "metax/mx-smi_C550_2.2.4.txt",
        "858/65536 MiB",
        "xxx/65536 MiB",
        "memory_used_bytes",
        "memory_total_bytes",
    ),
    (
        "metax/mx-smi_C550x8_2.1.6_kmd2.5.014_old-header.txt",
        "44W ",
        "xxW ",
        "power_watts",
        "temperatures_celsius.core",
    ),
    ("iluvatar/ixsmi_BI-V150_4.3.0.txt", "103W /", "xxxW /", "power_watts", "power_limit_watts"),
    ("iluvatar/ixsmi_BI-V150_4.3.0.txt", "/ 350W", "/ xxxW", "power_limit_watts", "power_watts"),
    (
        "iluvatar/ixsmi_BI-V150_4.3.0.txt",
        "| 0%        Default",
        "| x%        Default",
        "utilization_ratio",
        "temperatures_celsius.core",
    ),
]


def _damaged(
    capture: str, old: str, new: str
) -> tuple[str, str, dict[str, DeviceSample], dict[str, DeviceSample]]:
    text = (FIXTURES / capture).read_text(encoding="utf-8")
    fmt = expectations(FIXTURES / capture)["format"]
    assert len(old) == len(new) and old in text
    return fmt, text, by_index(text, fmt), by_index(text.replace(old, new, 1), fmt)


@pytest.mark.parametrize(("capture", "old", "new", "field", "kept"), MASKS, ids=lambda v: str(v)[:24])
def test_a_masked_cell_costs_only_its_reading(
    capture: str, old: str, new: str, field: str, kept: str
) -> None:
    _, _, clean, damaged = _damaged(capture, old, new)
    assert damaged.keys() == clean.keys()
    assert all(s.up for s in damaged.values())
    (hit,) = [i for i in clean if damaged[i] != clean[i]]  # one device changed, the others are untouched
    assert reading(clean[hit], field) is not None
    assert reading(damaged[hit], field) is None
    assert set(damaged[hit].unread) == {field}
    assert reading(damaged[hit], kept) == reading(clean[hit], kept) is not None


@pytest.mark.parametrize(("capture", "old", "new", "field", "kept"), MASKS, ids=lambda v: str(v)[:24])
def test_a_dashed_cell_is_no_reading_and_not_an_error(
    capture: str, old: str, new: str, field: str, kept: str
) -> None:
    # The quantity becomes "-" (what efsmi prints for a sleeping card): unavailable, not unread.
    fmt, text, clean, _ = _damaged(capture, old, new)
    damaged = by_index(text.replace(old, _only_dash(old, new), 1), fmt)
    assert all(s.up for s in damaged.values())
    (hit,) = [i for i in clean if damaged[i] != clean[i]]
    assert reading(damaged[hit], field) is None
    assert damaged[hit].unread == {}
    assert reading(damaged[hit], kept) == reading(clean[hit], kept)


def _only_dash(old: str, masked: str) -> str:
    """``old`` with the number that ``masked`` masks replaced by "-" (its unit stays), same width."""
    start = masked.index("x")
    end = start
    while (
        end < len(masked) and masked[end] not in " /|(" and not (masked[end].isalpha() and masked[end] != "x")
    ):
        end += 1
    return old[:start] + "-".ljust(end - start) + old[end:]


def test_sleeping_efsmi_cards_are_up_without_temperature_or_power() -> None:
    got = by_index(
        (FIXTURES / "enflame/efsmi_S60x2_1.4.0.505_drv1.4.4.501_sleep-temp-power-dash.txt").read_text(),
        "efsmi-table",
    )
    assert [(s.up, s.unread, s.power_watts, dict(s.temperatures_celsius)) for s in got.values()] == [
        (True, {}, None, {}),
        (True, {}, None, {}),
    ]
    assert [s.device.serial for s in got.values()] == [None, None]  # SN masked "xxx" by the publisher


def test_cnmon_masked_total_keeps_all_eight_cards_up_with_their_power() -> None:
    got = by_index(
        (FIXTURES / "cambricon/cnmon_MLUxxx-x8_v5.10.31_masked-memory-total.txt").read_text(), "cnmon-table"
    )
    assert [s.power_watts for s in got.values()] == [105.0, 100.0, 100.0, 109.0, 107.0, 105.0, 102.0, 105.0]
    assert {s.device.index: dict(s.unread) for s in got.values()} == {
        str(i): {"memory_total_bytes": "masked"} for i in range(8)
    }


def test_a_device_whose_bus_id_is_masked_is_left_out_not_the_others() -> None:
    text = (
        (FIXTURES / "cambricon/cnmon_MLU370-X8_v5.10.13.txt")
        .read_text()
        .replace("0000:39:00.0", "0000:xx:00.0")
    )
    (only,) = all_formats()["cnmon-table"].parse(text)
    assert only.up and only.device.pci_bus_id == "0000:3d:00.0" and only.power_watts == 106.0
    with pytest.raises(ParseError, match="bus id"):
        all_formats()["cnmon-table"].parse(text.replace("0000:3D:00.0", "0000:xx:00.0"))


# --- the header-driven reader ------------------------------------------------------------------------------


def test_columns_are_found_by_header_name_whatever_their_offset() -> None:
    head = "+------------------+\n| A      Pwr:Usage/Cap |\n+==================+\n"
    near = head + "| 1        9W / 90W |\n+------------------+\n"
    far = head + "| 1  9W / 90W       |\n+------------------+\n"
    for text in (near, far):
        (row,) = t.table_rows(text, "Pwr:Usage/Cap")
        assert row.get("pwr:usage/cap") == "9W / 90W" and row.get("A") == "1"


@pytest.mark.parametrize(
    ("cell", "pair"),
    [
        ("106 W/ 250 W", (106.0, 250.0)),
        ("88W / 400W", (88.0, 400.0)),
        ("105W 300W", (105.0, 300.0)),
        ("44W", (44.0, None)),
        ("N/A / N/A", (None, None)),
        ("-", (None, None)),
    ],
)
def test_power_pair_cells(cell: str, pair: tuple[float | None, float | None]) -> None:
    c = t.CellReader(t.Row({"pwr": cell}, cell))
    assert c.pair(("power_watts", "power_limit_watts"), ["pwr"], t.WATTS) == pair
    assert c.unread == {}


def test_memory_pair_takes_the_right_unit_and_masks_are_unread() -> None:
    c = t.CellReader(t.Row({"m": "858/xxxxx MiB"}, ""))
    assert c.pair(("memory_used_bytes", "memory_total_bytes"), ["m"], t.MEMORY_AS_BYTES) == (858 * MIB, None)
    assert c.unread == {"memory_total_bytes": "masked"}


TABLE_CHARS = "|+-=/%()0123456789 .:CWMiBNAx℃\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_table_rows_and_cell_reader_raise_nothing_but_parse_error(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(captures())).read_text(encoding="utf-8")
    lines = base.splitlines()
    for _ in range(data.draw(st.integers(0, 4))):
        k = data.draw(st.integers(0, len(lines) - 1))
        lines[k] = data.draw(st.sampled_from([lines[k][: data.draw(st.integers(0, len(lines[k])))], ""]))
        lines[k] += data.draw(st.text(alphabet=TABLE_CHARS, max_size=30))
    text = "\n".join(lines)
    anchor = data.draw(st.sampled_from(["Pwr:Usage/Cap", "Pwr(Usage/Cap)", "Memory-Usage", "MPC Capable"]))
    try:
        rows = t.table_rows(text, anchor)
    except ParseError:
        return
    for row in rows:
        c = t.CellReader(row)
        for name in list(row.values):
            for units in (t.WATTS, t.CELSIUS, t.MEMORY_AS_BYTES, t.PERCENT_AS_RATIO):
                for v in (*c.pair(("a", "b"), [name], units), c.number("n", [name], units, "C")):
                    assert v is None or math.isfinite(v)


@pytest.mark.parametrize("capture", captures(), ids=lambda p: f"{p.parent.name}/{p.name}")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, 10**6), junk=st.text(alphabet=TABLE_CHARS, max_size=20))
def test_cut_or_spliced_captures_raise_nothing_but_parse_error(capture: Path, cut: int, junk: str) -> None:
    text = capture.read_text(encoding="utf-8")
    fmt = all_formats()[expectations(capture)["format"]]
    i = cut % (len(text) + 1)
    for damaged in (text[:i], text[:i] + junk + text[i:]):
        try:
            samples = fmt.parse(damaged)
        except ParseError:
            continue
        assert all(s.up for s in samples)


# --- ht-smi through a fake tool on PATH -------------------------------------------------------------------


@pytest.mark.slow
def test_fake_ht_smi_on_path_is_detected_and_read(tmp_path: Path) -> None:
    """A shell script named ht-smi, first on PATH, prints the real 2.2.9 capture: the metax backend finds
    it (no mx-smi installed), runs it through the real subprocess runner and reads all 8 GPUs."""
    capture = FIXTURES / "metax/ht-smi_X201x8_2.2.9_board-gpu-cols.txt"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "ht-smi"
    tool.write_text(f"#!/bin/sh\nexec cat '{capture}'\n")
    tool.chmod(0o755)
    runner = SubprocessRunner(env={"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"})
    ctx = BackendContext(runner=runner, options={"timeout_seconds": 5})
    spec = all_specs()["metax"]
    detection = spec.detect(ctx)
    assert detection.found and "ht-smi" in detection.why
    recorder = RecordingRunner(runner)
    backend = spec.create(BackendContext(runner=recorder, options=ctx.options))
    backend.open()
    samples = list(backend.sample())
    assert [s.device.index for s in samples] == [str(i) for i in range(8)]
    assert [s.power_watts for s in samples] == [38.0, 37.0, 36.0, 43.0, 36.0, 37.0, 37.0, 44.0]
    assert all(s.up and s.device.model == "Mars X201" for s in samples)
    replayed = spec.create(BackendContext(runner=ReplayRunner(recorder.results)))
    replayed.open()
    assert list(replayed.sample()) == samples
