"""Intel Gaudi: hl-smi table and CSV parsers on real captures, per-cell isolation, the HLML path through a
`pyhlml` stand-in, the hl-smi path through a fake tool on PATH, and fuzzing."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from tests.vendors import fake_pyhlml
from xpuwatch.vendors import intel
from xpuwatch.vendors.base import BackendError, ParseError
from xpuwatch.vendors.command import SubprocessRunner
from xpuwatch.vendors.intel_hlsmi import CSV_FIELDS, parse_csv, parse_table, sniff_csv, sniff_table
from xpuwatch.vendors.registry import BackendContext, all_formats

INTEL = FIXTURES / "intel"
GAUDI3 = INTEL / "hl-smi_gaudi3-HL-325L_1.21.0-fw59.2.1_drv1.20.1_8aip.txt"
GAUDI2_PROC = INTEL / "hl-smi_gaudi2-HL-225_1.16.0-fw50.1.2_drv1.16.0_8aip_1proc.txt"
CSV = INTEL / "hl-smi_Q_csv_nounits_gaudi1-HL-205_1.18.0-fw53.1.1_8aip.csv.txt"
TABLES = sorted(p for p in INTEL.glob("hl-smi_gaudi*.txt"))
MIB = 1 << 20


def test_gaudi3_table_exact_values() -> None:
    samples = parse_table(GAUDI3.read_text())
    assert [s.device.index for s in samples] == [str(i) for i in range(8)]
    s = samples[
        3
    ]  # "|   3  HL-325L ... | 0000:ad:00.0 ..." / "| N/A   40C   P0  228W /  900W | 672MiB / 131072MiB | 0% 0% |"
    assert (s.device.model, s.device.pci_bus_id, s.device.uuid) == (
        "HL-325L",
        "0000:ad:00.0",
        "hl-0000:ad:00.0",
    )
    assert s.device.driver_version == "1.20.1-366eb9c"
    assert (s.up, s.utilization_ratio, s.temperatures_celsius) == (True, 0.0, {"core": 40.0})
    assert (s.power_watts, s.power_limit_watts) == (228.0, 900.0)
    assert (s.memory_used_bytes, s.memory_total_bytes) == (672 * MIB, 131072 * MIB)
    assert s.ecc_errors == {"uncorrected": 0} and s.unread == {}


def test_unterminated_process_row_does_not_matter() -> None:
    samples = parse_table(GAUDI2_PROC.read_text())
    assert samples[6].memory_used_bytes == 27098 * MIB and all(s.up for s in samples)


@pytest.mark.parametrize(
    ("old", "new", "unread", "kept"),
    [
        ("228W /  900W", "xxxW /  900W", "power_watts", ("power_limit_watts", 900.0)),
        (
            "672MiB / 131072MiB",
            "xxxxx MiB / 131072MiB",
            "memory_used_bytes",
            ("memory_total_bytes", 131072 * MIB),
        ),
        ("N/A   36C", "N/A   ##C", "temperatures_celsius.core", ("power_watts", 228.0)),
        ("     0%            0% |", "     -7%           0% |", "utilization_ratio", ("power_watts", 228.0)),
    ],
)
def test_a_garbled_cell_costs_that_reading_only(
    old: str, new: str, unread: str, kept: tuple[str, float]
) -> None:
    text = GAUDI3.read_text()
    assert old in text
    samples = parse_table(text.replace(old, new, 1))
    s = samples[0]
    assert s.up and unread in s.unread, s.unread
    assert getattr(s, kept[0]) == kept[1]
    assert all(x.up and x.unread == {} for x in samples[1:])


def test_na_cells_are_absent_not_unread() -> None:
    text = GAUDI3.read_text().replace("228W /  900W", " N/A /  N/A", 1)
    s = parse_table(text)[0]
    assert (s.power_watts, s.power_limit_watts, s.unread) == (None, None, {})


def test_csv_with_header_and_noheader() -> None:
    samples = parse_csv(CSV.read_text())
    assert len(samples) == 8
    s = samples[7]
    assert (s.device.index, s.device.model, s.device.uuid) == (
        "7",
        "HL-205",
        "00P1-HL2000A1-14-P00000-00-00-08",
    )
    assert (s.power_watts, s.temperatures_celsius, s.utilization_ratio) == (103.0, {"core": 38.0}, 0.14)
    assert (s.memory_used_bytes, s.memory_total_bytes) == (512 * MIB, 32768 * MIB)
    row = "3, HL-225, UUID-3, 0000:19:00.0, 27 C, 5 %, 768 MiB, 98304 MiB, 93 W, 600 W\n"
    (t,) = parse_csv(row, CSV_FIELDS)
    assert (t.device.index, t.device.pci_bus_id, t.power_limit_watts, t.utilization_ratio) == (
        "3",
        "0000:19:00.0",
        600.0,
        0.05,
    )
    (g,) = parse_csv(row.replace("93 W", "9x3 W"), CSV_FIELDS)
    assert g.up and g.power_watts is None and "power_watts" in g.unread and g.power_limit_watts == 600.0


@pytest.mark.parametrize(
    "text",
    ["", "garbage", "| HL-SMI Version: x |\n", GAUDI3.read_text()[:900], "name, uuid\n", "index, name\n0\n"],
)
def test_bad_outputs_are_parse_errors(text: str) -> None:
    with pytest.raises(ParseError):
        (parse_csv if text.startswith(("name", "index")) else parse_table)(text)


def test_formats_are_registered_and_told_apart() -> None:
    formats = all_formats()
    assert formats["hl-smi-table"].parse is parse_table and formats["hl-smi-csv"].parse is parse_csv
    for table in TABLES:
        assert sniff_table(table.read_text()) and not sniff_csv(table.read_text())
    assert sniff_csv(CSV.read_text()) and not sniff_table(CSV.read_text())
    ixsmi = (FIXTURES / "iluvatar" / "ixsmi_BI-V150_4.3.0.txt").read_text()
    nv_csv = (FIXTURES / "nvidia" / "nvidia-smi_query-gpu_h100-80gb-hbm3_590.48.01_load.csv.txt").read_text()
    assert not sniff_table(ixsmi) and not sniff_csv(nv_csv)
    assert not sniff_csv("index, name, pci.bus_id, memory.used [MiB]\n0, BI-V150, 00000000:13:00.0, 64 MiB\n")


# --------------------------------------------------------------------------------------------------------
# HLML through the pyhlml stand-in


def _ctx(**options: object) -> BackendContext:
    return BackendContext(options=options)


def test_hlml_path_reads_every_aip_in_base_units(monkeypatch: pytest.MonkeyPatch) -> None:
    aips = [
        fake_pyhlml.FakeAip(),
        fake_pyhlml.FakeAip(
            uuid="01P0-HL3090A0-18-TN0000-00-00-02",
            bus_id="0000:C1:00.0",
            temp_hbm=None,
            limit_mw=None,
            errors={"hlmlDeviceGetPowerUsage": fake_pyhlml.HLML_ERROR_UNKNOWN},
        ),
        fake_pyhlml.FakeAip(errors={"hlmlDeviceGetMemoryInfo": fake_pyhlml.HLML_ERROR_AIP_IS_LOST}),
    ]
    mod = fake_pyhlml.make(aips)
    monkeypatch.setitem(sys.modules, "pyhlml", mod)
    b = intel.IntelBackend(_ctx())
    b.open()
    assert b.source_in_use == "hlml"
    s0, s1, s2 = b.sample()
    assert (s0.device.model, s0.device.uuid, s0.device.pci_bus_id) == (
        "HL-325L",
        "01P0-HL3090A0-18-TN0000-00-00-01",
        "0000:e9:00.0",
    )
    assert (s0.device.serial, s0.device.driver_version) == ("AN00000001", "1.20.1-366eb9c")
    assert s0.utilization_ratio == 0.37
    assert (s0.memory_used_bytes, s0.memory_total_bytes) == (672 * MIB, 131072 * MIB)
    assert s0.temperatures_celsius == {"core": 36.0, "memory": 41.0}
    assert (s0.power_watts, s0.power_limit_watts, s0.energy_joules) == (228.0, 900.0, 123456.789)
    assert (s0.ecc_errors, s0.pcie_replay_errors, s0.unread) == ({"corrected": 2, "uncorrected": 0}, 0, {})
    # Not supported -> absent; the default limit stands in; a failing call costs that reading only.
    assert s1.up and s1.temperatures_celsius == {"core": 36.0} and s1.power_limit_watts == 850.0
    assert s1.power_watts is None and set(s1.unread) == {"power_watts"}
    assert "HLML Error with code 49" in s1.unread["power_watts"]
    assert not s2.up and "AIP is lost" in (s2.error or "")
    b.close()
    assert mod.state["init"] == 0  # type: ignore[attr-defined]


def test_hlml_source_fails_without_the_library_and_auto_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyhlml", None)  # import pyhlml -> ImportError
    with pytest.raises(BackendError, match="pyhlml"):
        intel.IntelBackend(_ctx(source="hlml")).open()
    broken = fake_pyhlml.make([], init_error=fake_pyhlml.HLML_ERROR_DRIVER_NOT_LOADED)
    assert not intel.detect(_ctx(source="hlml"), broken).found
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "hl-smi"
    tool.write_text(f"#!/bin/sh\nexec cat {shlex.quote(str(GAUDI3))}\n")
    tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    ctx = BackendContext(runner=SubprocessRunner(env=env), options={"mode": "table"})
    assert intel.detect(ctx).found
    b = intel.IntelBackend(ctx)
    samples = b.sample()
    assert b.source_in_use == "hl-smi"
    assert len(samples) == 8 and samples[7].power_watts == 227.0 and all(s.up for s in samples)


def test_default_cli_mode_runs_the_csv_query(tmp_path: Path) -> None:
    """A fake hl-smi that answers only the exact query the backend documents, with rows carrying the values
    of the Gaudi 3 capture's AIP 0 and 1 in hl-smi's CSV conventions (units printed, no header)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    want = " ".join(shlex.quote(a) for a in intel.CSV_ARGS)
    rows = (
        "0, HL-325L, UUID-0, 0000:e9:00.0, 36 C, 0 %, 672 MiB, 131072 MiB, 228 W, 900 W\n"
        "1, HL-325L, UUID-1, 0000:c1:00.0, 37 C, 0 %, 672 MiB, 131072 MiB, 226 W, 900 W\n"
    )
    (bin_dir / "rows.csv").write_text(rows)
    tool = bin_dir / "hl-smi"
    tool.write_text(
        f'#!/bin/sh\n[ "$*" = {shlex.quote(" ".join(intel.CSV_ARGS))} ] || {{ echo "usage" >&2; exit 2; }}\n'
        f"exec cat {shlex.quote(str(bin_dir / 'rows.csv'))}\n"
    )
    tool.chmod(0o755)
    assert want
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    b = intel.IntelBackend(BackendContext(runner=SubprocessRunner(env=env), options={"source": "cli"}))
    s0, s1 = b.sample()
    assert (s0.device.uuid, s0.power_watts, s0.power_limit_watts, s1.temperatures_celsius) == (
        "UUID-0",
        228.0,
        900.0,
        {"core": 37.0},
    )


def test_bad_options_are_config_errors() -> None:
    for opts in ({"source": "ctypes"}, {"mode": "json"}):
        with pytest.raises(BackendError) as exc:
            intel.IntelBackend(_ctx(**opts))
        assert exc.value.reason == "config"


# --------------------------------------------------------------------------------------------------------
# Fuzzing: mutated and truncated outputs raise nothing but ParseError


def _mutate(text: str, data: st.DataObject) -> str:
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, min(len(text), i + 40)))
    op = data.draw(st.sampled_from(["cut", "replace", "insert"]))
    if op == "cut":
        return text[:i]
    junk = data.draw(
        st.one_of(st.text(max_size=12), st.sampled_from(["|", "/", "N/A", "xxxxx MiB", "1e999W", ",", "\n"]))
    )
    return text[:i] + junk + (text[j:] if op == "replace" else text[i:])


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.sampled_from(TABLES), st.data())
def test_fuzz_table_raises_only_parse_error(path: Path, data: st.DataObject) -> None:
    try:
        samples = parse_table(_mutate(path.read_text(), data))
    except ParseError:
        return
    for s in samples:
        assert s.up
        assert s.utilization_ratio is None or s.utilization_ratio >= 0
        assert s.memory_used_bytes is None or s.memory_used_bytes >= 0


@FUZZ
@given(st.data())
def test_fuzz_csv_raises_only_parse_error(data: st.DataObject) -> None:
    try:
        parse_csv(_mutate(CSV.read_text(), data))
    except ParseError:
        return


@FUZZ
@given(st.text(max_size=300))
def test_fuzz_arbitrary_text(text: str) -> None:
    for parse in (parse_table, parse_csv):
        with contextlib.suppress(ParseError):
            parse(text)
    sniff_table(text)
    sniff_csv(text)
