"""Hygon DCU backend: DTK fixtures in, exact values out; fake hy-smi/rocm-smi on PATH; detection; fuzzing."""

from __future__ import annotations

import contextlib
import json
import re
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.vendors import capture_expectations
from xpuwatch.vendors import amd, hygon
from xpuwatch.vendors.base import BackendError, DeviceSample, ParseError
from xpuwatch.vendors.command import SubprocessRunner
from xpuwatch.vendors.registry import BackendContext, all_formats, detect

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "hygon"
JSON_FIXTURE = "rocm-smi_json_hygon_dcu_dtk24.04.3.json"
TABLE_FIXTURE = "rocm-smi_table_dcu_dtk23.10.1.txt"
MIB = 1024 * 1024


def fixture(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def test_dtk_rocm_smi_json_exact_values() -> None:
    (s,) = hygon.parse_hygon_json(fixture(JSON_FIXTURE))
    d = s.device
    assert (d.vendor, d.index, d.model) == ("hygon", "0", "DCU xxxx")
    # Unique ID is all zeros (masked): the serial number is the id.
    assert d.uuid == "TPXxxxx" and d.serial == "TPXxxxx"
    assert s.up is True and s.error is None
    assert s.utilization_ratio == 0.0
    assert s.memory_total_bytes == 65520 * MIB  # "(MiB)", not bytes
    assert s.memory_used_bytes == 2 * MIB
    assert s.temperatures_celsius == {"core": 41.0, "hotspot": 39.0, "memory": 44.0}
    assert s.power_watts == 80.0
    assert s.power_limit_watts is None
    assert s.ecc_errors == {}
    assert s.memory_bandwidth_utilization_ratio is None


def test_dtk_table_exact_values() -> None:
    samples = hygon.parse_hygon_table(fixture(TABLE_FIXTURE))
    got = [
        (
            s.device.index,
            s.device.uuid,
            s.temperatures_celsius,
            s.power_watts,
            s.power_limit_watts,
            s.utilization_ratio,
        )
        for s in samples
    ]
    assert got == [
        ("0", "hygon-index-0", {"core": 30.0}, 38.0, 280.0, 0.0),
        ("1", "hygon-index-1", {"core": 30.0}, 41.0, 280.0, 0.0),
        ("2", "hygon-index-2", {"core": 29.0}, 38.0, 280.0, 0.0),
        ("3", "hygon-index-3", {"core": 29.0}, 39.0, 280.0, 0.0),
    ]
    assert all(s.memory_used_bytes is None and s.memory_total_bytes is None for s in samples)


def test_hy_smi_style_keys() -> None:
    """Keys SWAN's hygon.py reads from ``hy-smi --json`` (reference 3.2); values invented."""
    doc = {
        "card0": {
            "Card Series": "K100_AI",
            "Card Vendor": "Chengdu Haiguang IC Design Co., Ltd.",
            "Unique ID": "0x5a3c21ffee019b77",
            "PCI Bus": "0000:3D:00.0",
            "DCU use (%)": "73.0",
            "DCU memory use (%)": "18",
            "Temperature (Sensor junction) (C)": "62.0",
            "Average Graphics Package Power (W)": "211.0",
            "Max Graphics Package Power (W)": "350.0",
        },
        "card1": {"Card Series": "K100_AI", "DCU use (%)": "N/A", "PCI Bus": "0000:40:00.0"},
    }
    s0, s1 = hygon.parse_hygon_json(json.dumps(doc))
    assert s0.device.uuid == "0x5a3c21ffee019b77" and s0.device.pci_bus_id == "0000:3D:00.0"
    assert s0.utilization_ratio == 0.73
    # "DCU memory use (%)" is the share of VRAM allocated (hy-smi's VRAM%: 98 % for 64169 of 65520 MiB in
    # the BW capture), not bus activity; without bytes it is the memory_used_ratio.
    assert s0.memory_bandwidth_utilization_ratio is None
    assert s0.memory_used_ratio == 0.18
    assert s0.temperatures_celsius == {"hotspot": 62.0}
    assert (s0.power_watts, s0.power_limit_watts) == (211.0, 350.0)
    assert s1.device.uuid == "pci-0000:40:00.0"
    assert s1.utilization_ratio is None


def test_sniffers_separate_hygon_from_amd() -> None:
    fmts = all_formats()
    amd_json = (FIX.parent / "amd" / "rocm-smi_json_rx7800xt_rocm6.2.4.json").read_text()
    claims = {name for name, f in fmts.items() if f.sniff(fixture(JSON_FIXTURE))}
    assert "hy-smi-json" in claims and not claims & {"rocm-smi-json", "amd-smi-json"}
    assert {n for n, f in fmts.items() if f.sniff(fixture(TABLE_FIXTURE))} >= {"hy-smi-table"}
    assert not fmts["hy-smi-table"].sniff(amd_json)
    assert not fmts["hy-smi-json"].sniff(amd_json)
    with pytest.raises(ParseError, match="AMD"):
        hygon.parse_hygon_json(amd_json)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "garbage",
        '{"card0": "x", "DCU": 1}',
        "DCU  Temp   AvgPwr  DCU%\nzero 30.0c 38.0W 0%\n",
        fixture(TABLE_FIXTURE)[:150],
        fixture(JSON_FIXTURE)[:200],
    ],
)
def test_bad_and_truncated_output_is_parse_error(raw: str) -> None:
    with pytest.raises(ParseError):
        hygon.parse_hygon_output(raw)


def test_truncated_table_keeps_complete_rows() -> None:
    """A table cut after two rows (no closing rule) still gives those two DCUs; a row cut after its
    temperature gives that reading, and the columns it lacks are unread (never a made-up value)."""
    lines = fixture(TABLE_FIXTURE).splitlines()
    two = "\n".join(lines[:5])
    assert [s.device.index for s in hygon.parse_hygon_table(two)] == ["0", "1"]
    *_, cut = hygon.parse_hygon_table(two + "\n2    29.0c")
    assert cut.up and cut.temperatures_celsius == {"core": 29.0}
    assert cut.power_watts is None and cut.utilization_ratio is None
    assert set(cut.unread) == {"power_watts", "power_limit_watts", "memory_used_ratio", "utilization_ratio"}


# ---------------------------------------------------------------------------------------------------
# Tools on PATH: detection and the real subprocess path


def fake_tool(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _ctx(directory: Path, **options: Any) -> BackendContext:
    return BackendContext(
        runner=SubprocessRunner(env={"PATH": f"{directory}:/usr/bin:/bin"}), options=options
    )


@pytest.mark.slow
def test_detect_hy_smi_and_rocm_smi_enables_hygon_and_supersedes_amd(tmp_path: Path) -> None:
    fake_tool(tmp_path, "hy-smi", f"cat {FIX / JSON_FIXTURE}")
    fake_tool(tmp_path, "rocm-smi", f"cat {FIX / JSON_FIXTURE}")
    enabled, skipped = detect(_ctx(tmp_path))
    assert "hygon" in enabled and "amd" not in enabled
    assert ("amd", "superseded by hygon") in skipped


@pytest.mark.slow
def test_detect_dtk_rocm_smi_alone_by_dcu_markers(tmp_path: Path) -> None:
    fake_tool(tmp_path, "rocm-smi", f"cat {FIX / JSON_FIXTURE}")
    d = hygon.detect(_ctx(tmp_path))
    assert d.found is True and "Hygon" in d.why
    enabled, skipped = detect(_ctx(tmp_path))
    assert "hygon" in enabled and ("amd", "superseded by hygon") in skipped


@pytest.mark.slow
def test_detect_amd_rocm_smi_is_not_hygon(tmp_path: Path) -> None:
    fake_tool(tmp_path, "rocm-smi", f"cat {FIX.parent / 'amd' / 'rocm-smi_json_rx7800xt_rocm6.2.4.json'}")
    assert hygon.detect(_ctx(tmp_path)).found is False
    enabled, _ = detect(_ctx(tmp_path))
    assert "amd" in enabled and "hygon" not in enabled


@pytest.mark.slow
def test_fake_hy_smi_prints_fixture(tmp_path: Path) -> None:
    fake_tool(tmp_path, "hy-smi", f"cat {FIX / JSON_FIXTURE}")
    backend = hygon.HygonBackend(_ctx(tmp_path))
    backend.open()
    (s,) = backend.sample()
    assert s.power_watts == 80.0 and s.memory_total_bytes == 65520 * MIB


@pytest.mark.slow
def test_fake_hy_smi_table_fallback_and_lost_dcu(tmp_path: Path) -> None:
    table = tmp_path / "table.txt"
    table.write_text(fixture(TABLE_FIXTURE))
    fake_tool(tmp_path, "hy-smi", f"cat {table}")
    backend = hygon.HygonBackend(_ctx(tmp_path))
    assert [s.device.index for s in backend.sample()] == ["0", "1", "2", "3"]
    lines = fixture(TABLE_FIXTURE).splitlines()
    table.write_text("\n".join([*lines[:5], *lines[7:]]))  # DCU 2 and 3 vanish
    out = backend.sample()
    assert [(s.device.index, s.up) for s in out] == [("0", True), ("1", True), ("2", False), ("3", False)]
    assert out[2].error == "missing from hy-smi output"


@pytest.mark.slow
def test_fake_hy_smi_hang_exit_garbage(tmp_path: Path) -> None:
    fake_tool(tmp_path, "hy-smi", "sleep 300")
    with pytest.raises(BackendError) as err:
        hygon.HygonBackend(_ctx(tmp_path, timeout_seconds=0.5)).sample()
    assert err.value.reason == "timeout"
    fake_tool(tmp_path, "hy-smi", "echo 'Invalid card id.' >&2; exit 1")
    with pytest.raises(BackendError) as err:
        hygon.HygonBackend(_ctx(tmp_path)).sample()
    assert err.value.reason == "exit_status" and "Invalid card id." in str(err.value)
    fake_tool(tmp_path, "hy-smi", "head -c 300 /dev/urandom | tr -d '{['")
    with pytest.raises(ParseError):
        hygon.HygonBackend(_ctx(tmp_path)).sample()


def test_no_tool_is_init_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError) as err:
        hygon.HygonBackend(_ctx(tmp_path)).open()
    assert err.value.reason == "init"
    assert hygon.detect(_ctx(tmp_path)).found is False


# ---------------------------------------------------------------------------------------------------
# Fuzzing


def _mutate(raw: str, data: st.DataObject) -> str:
    i = data.draw(st.integers(min_value=0, max_value=max(len(raw) - 1, 0)))
    kind = data.draw(st.sampled_from(["truncate", "replace", "insert"]))
    if kind == "truncate":
        return raw[:i]
    piece = data.draw(
        st.text(alphabet=st.sampled_from(list('{}[]",:0123456789.-NA/ \ncWMiB%=DCU')), max_size=6)
    )
    return raw[:i] + piece + raw[i + (1 if kind == "replace" else 0) :]


HCU_TABLE = "hy-smi_8hcu_800W_mixed-vram_100pct.txt"
DCU_TABLE = "hy-smi_K100-AI_dtk24.04.1_4dcu_800W_dcu-header.txt"
BW_JSON = "hy-smi_json_BW_2hcu_dtk-hyhal_missing-commas.json"
MEMINFO = "hy-smi_showuse_showmeminfo_8hcu_used-only.txt"
AVAILABLE = "hy-smi_showmemavailable_K100_AIx8_65438MiB_key-value.txt"

TARGETS: list[tuple[str, Callable[[str], Sequence[DeviceSample]]]] = [
    (JSON_FIXTURE, hygon.parse_hygon_json),
    (TABLE_FIXTURE, hygon.parse_hygon_table),
    (JSON_FIXTURE, hygon.parse_hygon_output),
    (TABLE_FIXTURE, hygon.parse_hygon_output),
    (HCU_TABLE, hygon.parse_hygon_table),
    (DCU_TABLE, hygon.parse_hygon_table),
    (BW_JSON, hygon.parse_hygon_json),
    (MEMINFO, hygon.parse_hy_smi_text),
    (AVAILABLE, hygon.parse_hy_smi_text),
]


@pytest.mark.parametrize(
    ("name", "parse"),
    TARGETS,
    ids=[
        "json",
        "table",
        "auto-json",
        "auto-table",
        "hcu-table",
        "dcu-table",
        "hyhal-json",
        "meminfo",
        "available",
    ],
)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_fuzz_mutations_raise_only_parse_error(
    name: str, parse: Callable[[str], Sequence[DeviceSample]], data: st.DataObject
) -> None:
    raw = fixture(name)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        raw = _mutate(raw, data)
    try:
        out = parse(raw)
    except ParseError:
        return
    assert all(isinstance(s, DeviceSample) for s in out)


@settings(max_examples=200, deadline=None)
@given(
    key=st.sampled_from(sorted(json.loads(fixture(JSON_FIXTURE))["card0"])),
    value=st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=10)
    | st.lists(st.integers()),
)
def test_fuzz_values_of_every_key(key: str, value: Any) -> None:
    doc = json.loads(fixture(JSON_FIXTURE))
    doc["card0"][key] = value
    with contextlib.suppress(ParseError):
        hygon.parse_hygon_json(json.dumps(doc))


def test_amd_module_is_not_claimed_twice() -> None:
    assert amd.SPEC.priority > hygon.SPEC.priority and hygon.SPEC.supersedes == ("amd",)


@pytest.mark.slow
def test_tool_refusing_extra_flags_falls_back_to_the_minimal_set(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    body = (
        f'echo "$*" >> {calls}\n'
        'case " $* " in *" --showmaxpower "*) echo "rocm-smi: error: unrecognized arguments" >&2; exit 2;; esac\n'
        f"cat {FIX / JSON_FIXTURE}"
    )
    fake_tool(tmp_path, "hy-smi", body)
    backend = hygon.HygonBackend(_ctx(tmp_path))
    (s,) = backend.sample()
    assert s.power_watts == 80.0
    backend.sample()
    lines = calls.read_text().splitlines()
    assert lines == [
        " ".join(hygon.SMI_ARGS),
        " ".join(hygon.SMI_MINIMAL_ARGS),
        " ".join(hygon.SMI_MINIMAL_ARGS),
    ]


@pytest.mark.slow
def test_backend_trusts_its_own_tool_without_markers(tmp_path: Path) -> None:
    """A DTK build printing AMD-style keys is still Hygon when hy-smi printed it; as a format it is AMD's."""
    amd_style = FIX.parent / "amd" / "rocm-smi_json_rx7800xt_rocm6.2.4.json"
    fake_tool(tmp_path, "hy-smi", f"cat {amd_style}")
    (s,) = hygon.HygonBackend(_ctx(tmp_path)).sample()
    assert s.device.vendor == "hygon" and s.power_watts == 53.0
    with pytest.raises(ParseError):
        hygon.parse_hygon_json(amd_style.read_text())


# ---------------------------------------------------------------------------------------------------
# Every capture has hand-written expectations (checked by tests/vendors/test_corpus.py)


def test_every_hygon_capture_has_expectations() -> None:
    on_disk = {p.name for p in FIX.iterdir() if p.suffix not in (".source", ".yaml")}
    assert on_disk == {p.name for p in capture_expectations.captures(FIX)}


# ---------------------------------------------------------------------------------------------------
# hyhal JSON repair, tables by header name, one spoiled cell, --showmeminfo vram


def test_hyhal_json_is_repaired_not_guessed() -> None:
    raw = fixture(BW_JSON)
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)  # the capture really is invalid JSON
    s0, s1 = hygon.parse_hygon_json(raw)
    # Values on both sides of each missing comma are read, the empty "" keys are dropped.
    assert (s0.power_watts, s1.power_watts) == (91.0, 84.0)
    # Sensor core is named: it is the core temperature, and edge keeps its own name
    assert s0.temperatures_celsius == {"core": 51.0, "edge": 54.0, "hotspot": 57.0, "memory": 51.0}
    assert s0.memory_used_bytes == 64169 * MIB and s0.memory_total_bytes == 65520 * MIB
    # bytes are there, so the "HCU memory use (%)" share is not exported a second time
    assert s0.memory_used_ratio is None and not s0.unread


@pytest.mark.parametrize(
    "raw",
    [
        '{"card0": {"HCU use (%)": "1.0" 2}}',  # a missing comma before a non-string: not the known defect
        '{"card0": {"HCU use (%)": "1.0",, "x": "1"}}',
        '{"card0" {"HCU use (%)": "1.0"}}',
        '{"card0": {' + '"a" ' * 400 + "}}",  # more missing commas than any real output
    ],
)
def test_hyhal_json_other_defects_are_parse_errors(raw: str) -> None:
    with pytest.raises(ParseError):
        hygon.parse_hygon_json(raw)


def test_table_layouts_found_by_header_name() -> None:
    hcu = hygon.parse_hygon_table(fixture(HCU_TABLE))
    dcu = hygon.parse_hygon_table(fixture(DCU_TABLE))
    assert [s.memory_used_ratio for s in hcu] == [0.98, 0.99, 0.98, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert hcu[3].power_watts == 133.0 and hcu[3].power_limit_watts == 800.0
    assert dcu[3].temperatures_celsius == {"core": 49.0} and dcu[3].utilization_ratio == 0.0
    # Upper-case TEMP, a leading banner and columns in another order read the same.
    moved = (
        "banner\nHCU   VRAM%   TEMP    PwrCap   AvgPwr   HCU%\n0     50%     41.0°C  400.0W   99.0W    3.5%\n"
    )
    (s,) = hygon.parse_hygon_table(moved)
    assert (s.memory_used_ratio, s.temperatures_celsius, s.power_limit_watts) == (0.5, {"core": 41.0}, 400.0)
    assert (s.power_watts, s.utilization_ratio) == (99.0, 0.035)


@pytest.mark.parametrize("spoil", ["xxxxx", "xxxxx MiB", "N/A", "-", "12Q"])
@pytest.mark.parametrize("name", [HCU_TABLE, DCU_TABLE, TABLE_FIXTURE])
def test_each_spoiled_table_cell_costs_that_reading_only(name: str, spoil: str) -> None:
    """The cell of DCU/HCU 2 in each column replaced where it stands (its column keeps its place)."""
    if name == TABLE_FIXTURE and " " in spoil:
        pytest.skip("DTK 23.10's 6-character columns hold no two-word cell")
    lines = fixture(name).splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["2"])
    base = hygon.parse_hygon_table("\n".join(lines))
    spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", lines[at])]
    for column in range(1, len(spans)):
        start = spans[column][0]
        stop = spans[column + 1][0] if column + 1 < len(spans) else start + len(spoil) + 1
        line = lines[at]
        spoiled = line[:start] + spoil.ljust(stop - start - 1) + " " + line[stop:]
        got = hygon.parse_hygon_table("\n".join([*lines[:at], spoiled, *lines[at + 1 :]]))
        assert [s.device.index for s in got] == [s.device.index for s in base]
        assert [s for i, s in enumerate(got) if i != 2] == [s for i, s in enumerate(base) if i != 2]
        capture_expectations.assert_one_reading_lost(base[2], got[2], garbled=spoil not in ("N/A", "-"))


@pytest.mark.parametrize("spoil", ["xxxxx", "N/A", "-"])
def test_each_spoiled_hyhal_json_value_costs_that_reading_only(spoil: str) -> None:
    raw = fixture(BW_JSON)
    base = hygon.parse_hygon_json(raw)
    keys = re.findall(r'"([^"]+ \((?:W|C|%|MiB)\))": "[^"]*"', raw.split('"card1"')[0])
    assert len(keys) >= 10
    for key in keys:
        spoiled = re.sub(rf'("{re.escape(key)}": )"[^"]*"', rf'\1"{spoil}"', raw, count=1)
        got = hygon.parse_hygon_json(spoiled)
        assert got[1] == base[1]
        if key == "Temperature (Sensor edge) (C)" and spoil != "xxxxx":
            # no edge reading at all: the core sensor is the core temperature (an unreadable edge is not)
            assert got[0].temperatures_celsius["core"] == 51.0 and not got[0].unread
            continue
        capture_expectations.assert_one_reading_lost(base[0], got[0], garbled=spoil == "xxxxx")


def test_meminfo_text_fills_bytes_and_drops_the_percentage() -> None:
    table = hygon.parse_hygon_table(fixture(HCU_TABLE))
    mem = hygon.parse_hy_smi_meminfo(fixture(MEMINFO))
    assert mem["3"] == (12058 * MIB, None, {})
    merged = hygon.merge_meminfo(table, mem)
    # used bytes but no capacity line: the ratio stays (it is still the only share we have)
    assert merged[3].memory_used_bytes == 12058 * MIB and merged[3].memory_used_ratio == 1.0
    full = "HCU[3]\t\t: vram Total Memory (MiB): 65520\nHCU[3]\t\t: vram Total Used Memory (MiB): xxxxx\n"
    (s3,) = [s for s in hygon.merge_meminfo(table, hygon.parse_hy_smi_meminfo(full)) if s.device.index == "3"]
    assert s3.memory_total_bytes == 65520 * MIB and s3.memory_used_bytes is None
    assert s3.memory_used_ratio == 1.0 and set(s3.unread) == {"memory_used_bytes"}
    with pytest.raises(ParseError):
        hygon.parse_hy_smi_meminfo("HCU[0] : HCU use (%): 1.0\n")


def _meminfo_text(used: Sequence[int]) -> str:
    """``hy-smi --showmeminfo vram`` text in the layout of the real captures (rule lines, "HCU[n]\\t\\t: ...");
    the numbers are invented, each a plausible match for the table fixture's VRAM% column."""
    rows = [
        f"HCU[{i}]\t\t: vram Total Memory (MiB): 65520\nHCU[{i}]\t\t: vram Total Used Memory (MiB): {u}\n"
        for i, u in enumerate(used)
    ]
    rule = "=" * 96
    return f"{rule}\n{''.join(rows)}{rule}\n"


MEM_USED = [64210, 64866, 64210, 65520, 3, 3, 3, 3]


@pytest.mark.slow
def test_fake_hy_smi_table_plus_showmeminfo_gives_bytes(tmp_path: Path) -> None:
    """An hy-smi that ignores --json (prints its HCU table) is asked once more for --showmeminfo vram."""
    calls = tmp_path / "calls"
    (tmp_path / "mem.txt").write_text(_meminfo_text(MEM_USED))
    body = (
        f'echo "$*" >> {calls}\n'
        f'if [ "$*" = "--showmeminfo vram" ]; then cat {tmp_path}/mem.txt; else cat {FIX / HCU_TABLE}; fi'
    )
    fake_tool(tmp_path, "hy-smi", body)
    out = hygon.HygonBackend(_ctx(tmp_path)).sample()
    assert [s.memory_used_bytes for s in out] == [u * MIB for u in MEM_USED]
    assert all(s.memory_total_bytes == 65520 * MIB and s.memory_used_ratio is None for s in out)
    assert out[0].power_watts == 131.0 and out[0].power_limit_watts == 800.0
    assert calls.read_text().splitlines() == [" ".join(hygon.SMI_ARGS), "--showmeminfo vram"]


@pytest.mark.slow
def test_fake_hy_smi_refusing_showmeminfo_keeps_the_ratio_and_stops_asking(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    body = (
        f'echo "$*" >> {calls}\n'
        'if [ "$*" = "--showmeminfo vram" ]; then echo "unrecognized arguments" >&2; exit 2; fi\n'
        f"cat {FIX / HCU_TABLE}"
    )
    fake_tool(tmp_path, "hy-smi", body)
    backend = hygon.HygonBackend(_ctx(tmp_path))
    for _ in range(2):
        out = backend.sample()
        assert [s.memory_used_ratio for s in out][:4] == [0.98, 0.99, 0.98, 1.0]
        assert all(s.up and s.memory_used_bytes is None for s in out)
    assert calls.read_text().splitlines().count("--showmeminfo vram") == 1


@pytest.mark.slow
def test_fake_hy_smi_hyhal_json_needs_no_extra_call(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    fake_tool(tmp_path, "hy-smi", f'echo "$*" >> {calls}\ncat {FIX / BW_JSON}')
    s0, s1 = hygon.HygonBackend(_ctx(tmp_path)).sample()
    assert s0.device.model == "BW" and s0.memory_used_bytes == 64169 * MIB and s1.power_watts == 84.0
    assert calls.read_text().splitlines() == [" ".join(hygon.SMI_ARGS)]


def test_amd_text_outputs_are_not_claimed_as_hygon() -> None:
    fmts = all_formats()
    amd_meminfo = (
        "GPU[0]\t\t: VRAM Total Memory (B): 17163091968\nGPU[0]\t\t: VRAM Total Used Memory (B): 1\n"
    )
    # AMD rocm-smi's concise table (MI300X, ROCm/legacy-rocm-build#5231): "Device ... Temp ... VRAM% GPU%"
    amd_table = (
        "Device  Node  IDs              Temp        Power     Partitions          SCLK     MCLK    Fan  Perf  "
        "PwrCap  VRAM%  GPU%\n0       1     0x74b5,   21947  39.0°C      191.0W    NPS1, SPX, 0        2105Mhz  "
        "900Mhz  0%   auto  750.0W  95%    0%\n"
    )
    for text in (amd_meminfo, amd_table):
        assert not fmts["hy-smi-text"].sniff(text) and not fmts["hy-smi-table"].sniff(text)
    # the backend, which ran a Hygon tool, still reads GPU[n] lines
    assert hygon.parse_hy_smi_meminfo(amd_meminfo)["0"][1] == 17163091968


# hy-smi key-value modes as rocm-smi's text mode prints them ("HCU[n]\t\t: <key> (<unit>): <value>"); the keys
# are those of the hyhal JSON capture (hy-smi_json_BW_2hcu_*), which hy-smi builds from the same strings.
KEY_VALUE_TEXT = (
    "============================ System Management Interface =============================\n"
    "HCU[0]\t\t: Temperature (Sensor edge) (C): 54.0\n"
    "HCU[0]\t\t: Temperature (Sensor junction) (C): 57.0\n"
    "HCU[0]\t\t: Temperature (Sensor mem) (C): 51.0\n"
    "HCU[0]\t\t: Temperature (Sensor core) (C): 50.0\n"
    "HCU[0]\t\t: Average Graphics Package Power (W): 91.0\n"
    "HCU[0]\t\t: Max Graphics Package Power (W): 400.0\n"
    "HCU[0]\t\t: HCU use (%): 15.0\n"
    "HCU[0]\t\t: vram Total Memory (MiB): 65520\n"
    "HCU[0]\t\t: vram Total Used Memory (MiB): 64169\n"
    "HCU[0]\t\t: PCI Bus: 0000:3B:00.0\n"
    "HCU[0]\t\t: Available memory size (MiB): xxxxx\n"
    "================================= End of SMI Log =================================\n"
)


def test_key_value_modes_read_by_key() -> None:
    (s,) = hygon.parse_hy_smi_text(KEY_VALUE_TEXT)
    assert s.temperatures_celsius == {"core": 50.0, "edge": 54.0, "hotspot": 57.0, "memory": 51.0}
    assert (s.power_watts, s.power_limit_watts, s.utilization_ratio) == (91.0, 400.0, 0.15)
    assert (s.memory_used_bytes, s.memory_total_bytes) == (64169 * MIB, 65520 * MIB)
    assert s.device.pci_bus_id == "0000:3B:00.0" and s.device.uuid == "pci-0000:3b:00.0"
    assert set(s.unread) == {"accelerator_hygon_memory_available_bytes"} and not s.vendor_metrics
    assert all_formats()["hy-smi-text"].sniff(KEY_VALUE_TEXT)
    unused = hygon.explain_hy_smi_text(KEY_VALUE_TEXT + "HCU[0]\t\t: Fan speed (%): 20\n")
    assert unused == ["Fan speed (%): no schema reading"]


def test_showmemavailable_is_a_vendor_metric_not_a_total() -> None:
    samples = hygon.parse_hy_smi_text(fixture(AVAILABLE))
    assert [s.device.index for s in samples] == [str(i) for i in range(8)]
    for s in samples:
        assert s.vendor_metrics == {"accelerator_hygon_memory_available_bytes": 65438 * MIB}
        assert s.memory_total_bytes is None and s.memory_used_bytes is None and not s.unread
    with pytest.raises(ParseError):
        hygon.parse_hy_smi_text("GPU[0]\t\t: GPU use (%): 1\n")  # AMD's prefix: not claimed


def test_a_build_ignoring_json_prints_key_value_text_and_needs_no_extra_call() -> None:
    """What the backend's flags print on a build without --json: the --show* sections as key-value text."""
    text = KEY_VALUE_TEXT.replace("HCU[0]", "GPU[0]")
    (s,) = hygon.parse_hygon_output(text, require_markers=False)
    assert (s.memory_used_bytes, s.memory_total_bytes, s.power_watts) == (64169 * MIB, 65520 * MIB, 91.0)
    assert s.memory_used_ratio is None and s.temperatures_celsius["core"] == 50.0
    assert hygon.parse_hygon_output(fixture(HCU_TABLE))[0].power_limit_watts == 800.0  # the table still reads
