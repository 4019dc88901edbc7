"""Capture corpus: every real vendor tool output in tests/fixtures/<vendor>/ read against its hand-written
``<capture>.expected.yaml`` (what the tool printed, in base units), through the registry's OutputFormat.

Expectations format (BRIEF, issue 11 item 7)::

    format: hy-smi-table          # registry OutputFormat name (xpuwatch inspect --list-formats)
    devices: 8                    # number of devices the capture gives
    device:
      "0":                        # Device.index as the parser gives it
        up: true                  # optional, default true; every device not marked false must be up
        model: "K100_AI"          # optional Device fields: model, uuid, pci_bus_id, driver_version, serial
        values:                   # DeviceSample field -> value; mapping fields dotted (temperatures_celsius.core)
          power_watts: 87.0
        absent: [power_limit_watts]   # readings that must NOT be given
        unread: [memory_used_bytes]   # readings that must be in DeviceSample.unread (and no other may be)
        implausible: {used_above_total: 1}   # exporter.plausibility counts (default: none may be)
        slices:                       # optional: the device's slices by slice_id, and nothing else
          "3/1": {kind: mig, profile: 1c.2g.10gb, memory_used_bytes: 74448896, memory_total_bytes: 10468982784}
        processes: 2                  # optional: how many processes it lists; null = cannot tell (None)

A diagnostic dump of several tool calls (each command line at column 0, its output indented) has
``blocks: {"<command line as printed>": {format: ..., devices: ..., device: ...}}`` instead.

Adding a user's capture is the capture, its ``.source`` note and this file. A capture without
expectations fails ``test_every_capture_has_expectations`` unless it is in ``NOT_CAPTURES`` with a reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import FIXTURES
from xpuwatch.exporter.plausibility import implausible
from xpuwatch.vendors.base import DeviceSample
from xpuwatch.vendors.registry import all_formats

# Fixture folders that hold no vendor tool outputs (alert/relay payloads, capture bundles, chart defaults).
NOT_VENDOR_DIRS = {"alertmanager", "bundles", "dingtalk", "feishu", "kube-prometheus-stack", "wecom"}
# Companion files that are not captures.
COMPANION_SUFFIXES = (".source", ".expected.yaml", ".md")
# Files in vendor folders that are not complete outputs of a tool a backend reads, with the reason.
# ("_excerpt" in a name marks a partial output by convention: skipped without a listing here.)
NOT_CAPTURES: dict[str, str] = {
    "amd/device-metrics-exporter_scrape_mi300x-vf_issue171_excerpt.prom": (
        "another exporter's /metrics scrape, kept to compare metric names; no backend reads it"
    ),
}
# Captures whose expectations other helpers of issue 11 write on their own branches ("hyamd": AMD, Hygon;
# "tables": Cambricon, Enflame, Iluvatar, Kunlunxin, MetaX, Moore Threads). Checked like any other once their
# .expected.yaml exists; test_skip_lists_are_current fails then, to have the entry removed.
AWAITING: dict[str, str] = {}  # captures whose expectations are still being written (none now)

DEVICE_FIELDS = ("model", "uuid", "pci_bus_id", "driver_version", "serial")
MAPPING_FIELDS = (
    "temperatures_celsius",
    "clocks_hertz",
    "clock_throttled",
    "ecc_errors",
    "remapped_rows",
    "fault_events",
    "health",
    "vendor_metrics",
)
REL_TOL = 1e-6


def _captures() -> list[Path]:
    out = []
    for vendor_dir in sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name not in NOT_VENDOR_DIRS):
        for f in sorted(vendor_dir.iterdir()):
            if not f.is_file() or f.name.endswith(COMPANION_SUFFIXES):
                continue
            out.append(f)
    return out


def _rel(path: Path) -> str:
    return path.relative_to(FIXTURES).as_posix() if path.is_relative_to(FIXTURES) else path.name


def _expectation_files() -> list[Path]:
    return sorted(p for p in FIXTURES.glob("*/*.expected.yaml") if p.parent.name not in NOT_VENDOR_DIRS)


def _expectations(capture: Path) -> Path:
    return capture.with_name(capture.name + ".expected.yaml")


def _skipped(path: Path) -> bool:
    return "_excerpt" in path.name or _rel(path) in NOT_CAPTURES or _rel(path) in AWAITING


@pytest.mark.parametrize("capture", _captures(), ids=_rel)
def test_every_capture_has_expectations(capture: Path) -> None:
    if _skipped(capture):
        return
    exp = _expectations(capture)
    assert exp.is_file(), (
        f"{_rel(capture)} has no expectations: write {exp.name} by hand from the capture text "
        "(format in tests/vendors/test_corpus.py), or list it in NOT_CAPTURES with a reason"
    )


def test_skip_lists_are_current() -> None:
    missing = [name for name in [*NOT_CAPTURES, *AWAITING] if not (FIXTURES / name).is_file()]
    assert missing == [], f"NOT_CAPTURES/AWAITING name files that are gone: {missing}"
    done = [name for name in AWAITING if _expectations(FIXTURES / name).is_file()]
    assert done == [], f"these captures have expectations now: remove them from AWAITING: {done}"


def reading(sample: DeviceSample, key: str) -> Any:
    """The value of a reading named as in the yaml (``power_watts``, ``temperatures_celsius.core``); None
    when not given."""
    head, _, sub = key.partition(".")
    if head in MAPPING_FIELDS:
        if not sub:
            raise KeyError(f"{key!r}: a mapping field needs a key (e.g. {head}.core)")
        mapping: Mapping[str, Any] = getattr(sample, head)
        return mapping.get(sub)
    if sub or not hasattr(sample, head) or head in ("device", "slices", "unread", "link_errors"):
        raise KeyError(f"{key!r} is not a DeviceSample reading")
    return getattr(sample, head)


def same(got: Any, want: Any) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(float(got), float(want), rel_tol=REL_TOL, abs_tol=0.0)
    return bool(got == want)


def dump_blocks(text: str) -> dict[str, str]:
    """A diagnostic dump (a command line at column 0, then that command's indented output, repeated) ->
    {command line: output}."""
    blocks: dict[str, str] = {}
    cmd: str | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith("/"):
            cmd = line.strip()
            blocks[cmd] = ""
        elif cmd is not None:
            blocks[cmd] += line
    return blocks


def check_capture(capture: Path, exp: Mapping[str, Any]) -> list[str]:
    """Every mismatch between what the capture parses to and its expectations, one line each, naming the
    capture, the device and the field. A diagnostic dump of several tool calls has ``blocks:`` instead:
    {command line as printed: the expectations of that call's output}."""
    text = capture.read_text(encoding="utf-8")
    if "blocks" in exp:
        found = dump_blocks(text)
        problems: list[str] = []
        for cmd, sub in (exp.get("blocks") or {}).items():
            if cmd not in found:
                problems.append(f"{_rel(capture)}: no block {cmd!r} (blocks: {sorted(found)})")
                continue
            problems += check_text(f"{_rel(capture)} [{cmd}]", found[cmd], sub)
        return problems
    return check_text(_rel(capture), text, exp)


def check_text(name: str, text: str, exp: Mapping[str, Any]) -> list[str]:
    """``check_capture`` for one tool output ``text``, reported under ``name``."""
    fmt_name = exp.get("format")
    formats = all_formats()
    if fmt_name not in formats:
        return [f"{name}: format {fmt_name!r} is not registered (known: {', '.join(sorted(formats))})"]
    samples = list(formats[fmt_name].parse(text))
    problems: list[str] = []
    if len(samples) != exp.get("devices"):
        problems.append(f"{name}: {len(samples)} devices, expected {exp.get('devices')}")
    by_index = {s.device.index: s for s in samples}
    if len(by_index) != len(samples):
        problems.append(f"{name}: device indexes repeat: {[s.device.index for s in samples]}")
    wanted: Mapping[str, Any] = exp.get("device") or {}
    for index, s in by_index.items():
        spec = wanted.get(index) or {}
        if s.up != spec.get("up", True):
            problems.append(f"{name}: device {index}: up={s.up} (error {s.error!r}), expected {not s.up}")
    for index, spec in wanted.items():
        where = f"{name}: device {index}"
        found = by_index.get(str(index))
        if found is None:
            problems.append(f"{where}: not given (devices: {sorted(by_index)})")
            continue
        s = found
        spec = spec or {}
        unknown = set(spec) - {
            "up",
            "values",
            "absent",
            "unread",
            "implausible",
            "slices",
            "processes",
            *DEVICE_FIELDS,
        }
        if unknown:
            problems.append(f"{where}: unknown expectation keys {sorted(unknown)}")
        for f in DEVICE_FIELDS:
            if f in spec and getattr(s.device, f) != spec[f]:
                problems.append(f"{where}: {f} is {getattr(s.device, f)!r}, expected {spec[f]!r}")
        for key, want in (spec.get("values") or {}).items():
            try:
                got = reading(s, key)
            except KeyError as exc:
                problems.append(f"{where}: {exc.args[0]}")
                continue
            if got is None:
                why = f" (unread: {s.unread[key]})" if key in s.unread else ""
                problems.append(f"{where}: {key} not given{why}, expected {want!r}")
            elif not same(got, want):
                problems.append(f"{where}: {key} is {got!r}, expected {want!r}")
        for key in spec.get("absent") or ():
            try:
                got = reading(s, key)
            except KeyError as exc:
                problems.append(f"{where}: {exc.args[0]}")
                continue
            if got is not None:
                problems.append(f"{where}: {key} is {got!r}, expected absent")
        for key in spec.get("unread") or ():
            if key not in s.unread:
                problems.append(f"{where}: {key} not in unread (unread: {dict(s.unread)})")
        if "slices" in spec:
            problems += _check_slices(where, s, spec["slices"] or {})
        if "processes" in spec:
            got_n = None if s.processes is None else len(s.processes)
            if got_n != spec["processes"]:
                problems.append(f"{where}: {got_n} processes listed, expected {spec['processes']}")
    for index, s in by_index.items():
        odd = dict(implausible(s))
        if odd != ((wanted.get(index) or {}).get("implausible") or {}):
            problems.append(
                f"{name}: device {index}: implausible readings {odd}, expected "
                f"{(wanted.get(index) or {}).get('implausible') or {}}"
            )
        listed = set((wanted.get(index) or {}).get("unread") or ())
        for key, why in s.unread.items():
            if key not in listed:
                problems.append(
                    f"{name}: device {index}: {key} printed but not read ({why}), not in 'unread'"
                )
    return problems


def _check_slices(where: str, sample: DeviceSample, want: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The device's slices against ``{slice_id: {field: value}}``: the same slice ids, each field equal."""
    got = {sl.slice_id: sl for sl in sample.slices}
    problems = []
    if set(got) != set(want):
        problems.append(f"{where}: slices {sorted(got)}, expected {sorted(want)}")
    for slice_id, fields in want.items():
        sl = got.get(slice_id)
        for f, value in (fields or {}).items() if sl is not None else ():
            if not hasattr(sl, f):
                problems.append(f"{where}: slice {slice_id}: {f!r} is not a Slice field")
            elif not same(getattr(sl, f), value):
                problems.append(f"{where}: slice {slice_id}: {f} is {getattr(sl, f)!r}, expected {value!r}")
    return problems


@pytest.mark.parametrize("exp_file", _expectation_files(), ids=_rel)
def test_capture_reads_as_expected(exp_file: Path) -> None:
    capture = exp_file.with_name(exp_file.name.removesuffix(".expected.yaml"))
    assert capture.is_file(), f"{_rel(exp_file)}: the capture {capture.name} is missing"
    exp = yaml.safe_load(exp_file.read_text(encoding="utf-8"))
    assert isinstance(exp, dict), f"{_rel(exp_file)}: not a mapping"
    problems = check_capture(capture, exp)
    assert not problems, "\n".join(problems)


def test_checker_names_capture_device_and_field(tmp_path: Path) -> None:
    """The checker itself fails on a wrong value, a given absent reading, a down device and a count."""
    src = FIXTURES / "nvidia" / "nvidia-smi_q_x_tesla-t4_515.105.01.xml"
    capture = tmp_path / src.name
    capture.write_bytes(src.read_bytes())
    exp = {
        "format": "nvidia-smi-xml",
        "devices": 2,
        "device": {
            "0": {
                "model": "Tesla P4",
                "values": {"power_watts": 1.0, "temperatures_celsius.core": 1.0},
                "absent": ["memory_used_bytes"],
                "unread": ["power_watts"],
            },
            "7": {},
        },
    }
    problems = check_capture(capture, exp)
    joined = "\n".join(problems)
    for part in (
        f"{src.name}: 1 devices, expected 2",
        f"{src.name}: device 0: model is 'Tesla T4', expected 'Tesla P4'",
        f"{src.name}: device 0: power_watts is",
        f"{src.name}: device 0: temperatures_celsius.core is",
        f"{src.name}: device 0: memory_used_bytes is",
        f"{src.name}: device 0: power_watts not in unread",
        f"{src.name}: device 7: not given",
    ):
        assert part in joined, joined
    assert check_capture(capture, {"format": "nvidia-smi-xml", "devices": 1, "device": {"0": {"up": False}}})
    assert check_capture(capture, {"format": "no-such-format", "devices": 1})[0].endswith(")")


def test_checker_fails_on_an_unread_cell_not_listed(tmp_path: Path) -> None:
    src = FIXTURES / "nvidia" / "nvidia-smi_q_x_tesla-t4_515.105.01.xml"
    capture = tmp_path / "garbled.xml"
    capture.write_text(src.read_text().replace("<gpu_temp>40 C", "<gpu_temp>xx C"))
    exp: dict[str, Any] = {"format": "nvidia-smi-xml", "devices": 1}
    (problem,) = check_capture(capture, exp)
    assert problem == (
        "garbled.xml: device 0: temperatures_celsius.core printed but not read "
        "('xx C' is not a number in C), not in 'unread'"
    )
    exp["device"] = {"0": {"unread": ["temperatures_celsius.core"], "absent": ["temperatures_celsius.core"]}}
    assert check_capture(capture, exp) == []


def test_checker_reads_dump_blocks() -> None:
    dump = FIXTURES / "ascend" / "npu-smi_info_-t_health_Alarm_with_error_codes.txt"
    cmd = "/usr/local/bin/npu-smi info -i 0 -c 0 -t health"
    assert set(dump_blocks(dump.read_text())) == {"/usr/local/bin/npu-smi info -i 0 -t board", cmd}
    wrong = {
        "blocks": {
            cmd: {"format": "npu-smi-health", "devices": 1, "device": {"": {"values": {"health.chip": True}}}}
        }
    }
    assert check_capture(dump, wrong) == [
        f"ascend/{dump.name} [{cmd}]: device : health.chip is False, expected True"
    ]
    (missing,) = check_capture(dump, {"blocks": {"/usr/local/bin/npu-smi info -m": {}}})
    assert missing.startswith(f"ascend/{dump.name}: no block '/usr/local/bin/npu-smi info -m'")
