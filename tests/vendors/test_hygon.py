"""Hygon DCU backend: DTK fixtures in, exact values out; fake hy-smi/rocm-smi on PATH; detection; fuzzing."""

from __future__ import annotations

import contextlib
import json
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.vendors import capture_expectations
from vendors import amd, hygon
from vendors.base import BackendError, DeviceSample, ParseError
from vendors.command import SubprocessRunner
from vendors.registry import BackendContext, all_formats, detect

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


TARGETS: list[tuple[str, Callable[[str], Sequence[DeviceSample]]]] = [
    (JSON_FIXTURE, hygon.parse_hygon_json),
    (TABLE_FIXTURE, hygon.parse_hygon_table),
    (JSON_FIXTURE, hygon.parse_hygon_output),
    (TABLE_FIXTURE, hygon.parse_hygon_output),
]


@pytest.mark.parametrize(("name", "parse"), TARGETS, ids=["json", "table", "auto-json", "auto-table"])
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
# Every capture against its hand-written expectations (interim, until tests/vendors/test_corpus.py lands)


def test_every_hygon_capture_has_expectations() -> None:
    on_disk = {p.name for p in FIX.iterdir() if p.suffix not in (".source", ".yaml")}
    assert on_disk == {p.name for p in capture_expectations.captures(FIX)}


@pytest.mark.parametrize("capture", capture_expectations.captures(FIX), ids=lambda p: p.name)
def test_capture_reads_as_expected(capture: Path) -> None:
    assert capture_expectations.check(capture) > 0
