"""The Cambricon, Kunlunxin, MetaX, Moore Threads, Iluvatar and Enflame backends end to end: sniffers that
claim only their own tool's output, hypothesis fuzz of every parser, lost-device tracking, and the real
subprocess path (``vendors.command.SubprocessRunner``) driven by fake vendor tools on PATH."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpuwatch.vendors import cambricon, enflame, iluvatar, kunlunxin, metax, mthreads
from xpuwatch.vendors.base import BackendError, DeviceSample, ParseError
from xpuwatch.vendors.command import CommandResult, RecordingRunner, ReplayRunner, SubprocessRunner
from xpuwatch.vendors.registry import BackendContext, OutputFormat, all_formats, all_specs

FIXTURES = Path(__file__).parents[1] / "fixtures"

# backend, tool name on PATH, fixture, output format, devices in the fixture
CASES = [
    ("cambricon", "cnmon", "cambricon/cnmon_MLU370-X8_v5.10.13.txt", "cnmon-table", 2),
    ("kunlunxin", "xpu-smi", "kunlunxin/xpu-smi_P800_drv5.0.21.21.txt", "xpu-smi-table", 8),
    ("kunlunxin", "xpu_smi", "kunlunxin/xpu_smi_R300_rt4.31_drv4.0.txt", "xpu-smi-devices", 2),
    ("metax", "mx-smi", "metax/mx-smi_C550_2.2.4.txt", "mx-smi-table", 8),
    ("mthreads", "mthreads-gmi", "mthreads/mthreads-gmi_S5000_2.3.2_excerpt.txt", "mthreads-gmi-table", 2),
    ("iluvatar", "ixsmi", "iluvatar/ixsmi_BI-V150_4.3.0.txt", "ixsmi-table", 16),
    ("enflame", "efsmi", "enflame/efsmi_S60_1.2.0.301.txt", "efsmi-table", 2),
    (
        "cambricon",
        "cnmon",
        "cambricon/cnmon_MLU370-X4x3_v4.20.11_legacy-inited-vmemory-cols.txt",
        "cnmon-table",
        3,
    ),
    ("metax", "ht-smi", "metax/ht-smi_X201x8_2.2.9_board-gpu-cols.txt", "ht-smi-table", 8),
]
# Every capture of these vendors names its format in its hand-written <capture>.expected.yaml.
OWN_FORMAT = {
    str(p.relative_to(FIXTURES)).removesuffix(".expected.yaml"): yaml.safe_load(p.read_text())["format"]
    for vendor in ("cambricon", "kunlunxin", "metax", "mthreads", "iluvatar", "enflame")
    for p in (FIXTURES / vendor).glob("*.expected.yaml")
}
OURS = set(OWN_FORMAT.values()) | {"ixsmi-csv"}
MODULES = {"cambricon": cambricon, "kunlunxin": kunlunxin, "metax": metax, "mthreads": mthreads}
MODULES |= {"iluvatar": iluvatar, "enflame": enflame}


def read(fixture: str) -> str:
    return (FIXTURES / fixture).read_text()


def every_fixture() -> list[Path]:
    return sorted(
        p
        for p in FIXTURES.rglob("*")
        if p.is_file()
        and not p.name.endswith((".source", ".expected.yaml"))
        and p.name != "SOURCES.md"
        # capture bundles hold many tools' outputs at once: not one tool's output
        and p.parent.name != "bundles"
    )


# --- registration -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_registers_one_backend(name: str) -> None:
    spec = all_specs()[name]
    assert spec.vendor == name
    assert 70 <= spec.priority <= 90
    assert spec.auto
    for m in spec.metrics:
        assert m.name.startswith(f"accelerator_{name}_")


# --- sniffers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", every_fixture(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_our_sniffers_claim_only_their_own_tool(path: Path) -> None:
    text = path.read_text(errors="replace")
    rel = str(path.relative_to(FIXTURES))
    claims = {name for name, fmt in all_formats().items() if name in OURS and fmt.sniff(text)}
    assert claims == ({OWN_FORMAT[rel]} if rel in OWN_FORMAT else set())


@pytest.mark.parametrize("fixture", sorted(OWN_FORMAT))
def test_no_registered_format_but_ours_claims_our_fixture(fixture: str) -> None:
    text = read(fixture)
    assert {name for name, fmt in all_formats().items() if fmt.sniff(text)} == {OWN_FORMAT[fixture]}


# --- fuzz ---------------------------------------------------------------------------------------------

TABLE_CHARS = "|+-=/%()0123456789 .:CWMiBNA\n"


@st.composite
def mutated(draw: st.DrawFn, text: str) -> str:
    """A vendor output damaged the ways real ones are: cut short, lines dropped, duplicated or garbled,
    characters flipped, random text spliced in."""
    for op in draw(st.lists(st.sampled_from(["cut", "drop", "dup", "garble", "flip", "splice"]), max_size=4)):
        lines = text.splitlines(keepends=True)
        if op == "cut":
            text = text[: draw(st.integers(0, len(text)))]
        elif op in ("drop", "dup", "garble") and lines:
            k = draw(st.integers(0, len(lines) - 1))
            if op == "drop":
                del lines[k]
            elif op == "dup":
                lines.insert(k, lines[k])
            else:
                lines[k] = draw(st.text(alphabet=TABLE_CHARS, max_size=90)) + "\n"
            text = "".join(lines)
        elif op == "flip" and text:
            i = draw(st.integers(0, len(text) - 1))
            text = text[:i] + draw(st.sampled_from(TABLE_CHARS + "x\x00é")) + text[i + 1 :]
        elif op == "splice":
            i = draw(st.integers(0, len(text)))
            text = text[:i] + draw(st.text(max_size=40)) + text[i:]
    return text


def check_parse(fmt: OutputFormat, text: str) -> None:
    assert isinstance(fmt.sniff(text), bool)
    try:
        samples: Sequence[DeviceSample] = fmt.parse(text)
    except ParseError:
        return
    assert samples
    assert len({s.device.uuid for s in samples}) == len(samples)
    for s in samples:
        for v in (s.utilization_ratio, s.memory_used_bytes, s.memory_total_bytes, s.power_watts):
            assert v is None or (math.isfinite(v) and v >= 0)
        assert s.up or (s.error or "").startswith("parse: ")


@pytest.mark.parametrize("fixture", sorted(fixture for _, _, fixture, _, _ in CASES))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_output_raises_nothing_but_parse_error(fixture: str, data: st.DataObject) -> None:
    check_parse(all_formats()[OWN_FORMAT[fixture]], data.draw(mutated(read(fixture))))


@pytest.mark.parametrize("name", sorted(OURS))
@settings(max_examples=100, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(TABLE_CHARS + "xyzRTXPUMLU"), max_size=400) | st.text(max_size=200)
)
def test_arbitrary_text_raises_nothing_but_parse_error(name: str, text: str) -> None:
    check_parse(all_formats()[name], text)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_kunlunxin_dispatch_fuzz(data: st.DataObject) -> None:
    text = data.draw(
        mutated(
            read("kunlunxin/xpu-smi_P800_drv5.0.21.21.txt") + read("kunlunxin/xpu_smi_R300_rt4.31_drv4.0.txt")
        )
    )
    check_parse(OutputFormat("dispatch", kunlunxin.parse, lambda _t: True), text)


# --- backend over an in-process runner ----------------------------------------------------------------


class ScriptedRunner:
    """Stands in for a CommandRunner: answers each run with the next scripted stdout (or raises it)."""

    def __init__(self, tool: str, outputs: list[str | BackendError]) -> None:
        self.tool = tool
        self.outputs = outputs
        self.calls: list[tuple[tuple[str, ...], float]] = []

    def which(self, tool: str) -> str | None:
        return f"/opt/bin/{tool}" if tool == self.tool else None

    def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
        self.calls.append((tuple(argv), timeout))
        out = self.outputs.pop(0)
        if isinstance(out, BackendError):
            raise out
        return CommandResult(tuple(argv), out, "", 0, 0.0, 0.0)


def test_device_missing_from_a_later_output_is_reported_lost() -> None:
    full = read("kunlunxin/xpu-smi_P800_drv5.0.21.21.txt")
    cut = full[: full.index("00000000:65:00.0")]
    runner = ScriptedRunner("xpu_smi", [full, cut, full])
    backend = all_specs()["kunlunxin"].create(BackendContext(runner=runner, options={"timeout_seconds": 3}))
    backend.open()
    assert all(s.up for s in backend.sample())
    second = backend.sample()
    assert [(s.device.index, s.up) for s in second] == [(str(i), i < 3) for i in range(8)]
    assert {s.error for s in second if not s.up} == {"missing from xpu_smi output"}
    assert all(s.up for s in backend.sample())
    assert runner.calls[0] == (("/opt/bin/xpu_smi",), 3.0)


def test_parse_error_names_the_tool_and_its_stderr() -> None:
    class Stderr(ScriptedRunner):
        def run(self, argv: Sequence[str], timeout: float) -> CommandResult:
            return CommandResult(tuple(argv), "", "Invalid card id.\n", 0, 0.0, 0.0)

    backend = all_specs()["cambricon"].create(BackendContext(runner=Stderr("cnmon", [])))
    with pytest.raises(ParseError, match=r"cnmon: .*\(stderr: Invalid card id.\)") as err:
        backend.sample()
    assert err.value.reason == "parse"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_missing_tool_is_skipped_with_reason_and_not_found_on_open(name: str) -> None:
    spec = all_specs()[name]
    ctx = BackendContext(runner=ScriptedRunner("nothing-here", []))
    detection = spec.detect(ctx)
    assert not detection.found and "not on PATH" in detection.why
    with pytest.raises(BackendError) as err:
        spec.create(ctx).open()
    assert err.value.reason == "not_found"


def test_metax_detection_reads_the_header() -> None:
    moffett = "| MOFFETT-SMI  v1.1.4   Driver Version: 1.1.4   |\n"
    spec = all_specs()["metax"]
    assert not spec.detect(BackendContext(runner=ScriptedRunner("mx-smi", [moffett]))).found
    assert spec.detect(
        BackendContext(runner=ScriptedRunner("mx-smi", [read("metax/mx-smi_C550_2.2.4.txt")]))
    ).found
    hung = BackendError("mx-smi: no answer within 10s, killed", reason="timeout")
    assert spec.detect(BackendContext(runner=ScriptedRunner("mx-smi", [hung]))).found


# --- the real subprocess path with fake tools on PATH -------------------------------------------------


def fake_tool(bin_dir: Path, tool: str, body: str) -> None:
    """A stand-in for the vendor binary: a shell script named like it, first on PATH."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / tool
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def context(bin_dir: Path, timeout: float = 5.0, runner: object = None) -> BackendContext:
    sub = SubprocessRunner(env={"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"})
    return BackendContext(runner=runner or sub, options={"timeout_seconds": timeout})  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "tool", "fixture", "fmt", "count"), CASES)
def test_fake_tool_printing_fixture(
    tmp_path: Path, backend: str, tool: str, fixture: str, fmt: str, count: int
) -> None:
    (tmp_path / "out.txt").write_text(read(fixture))
    fake_tool(tmp_path / "bin", tool, f"cat '{tmp_path / 'out.txt'}'\n")
    spec = all_specs()[backend]
    ctx = context(tmp_path / "bin")
    assert spec.detect(ctx).found
    recorder = RecordingRunner(ctx.runner)
    live = spec.create(BackendContext(runner=recorder, options=ctx.options))
    live.open()
    samples = list(live.sample())
    assert samples == list(all_formats()[fmt].parse(read(fixture)))
    assert len(samples) == count
    replayed = spec.create(BackendContext(runner=ReplayRunner(recorder.results)))
    replayed.open()
    assert list(replayed.sample()) == samples
    live.close()


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "tool"), sorted({(b, t) for b, t, _, _, _ in CASES}))
def test_fake_tool_hanging_is_killed_with_its_process_group(tmp_path: Path, backend: str, tool: str) -> None:
    pidfile = tmp_path / "child.pid"
    fake_tool(tmp_path / "bin", tool, f"sleep 60 &\necho $! > '{pidfile}'\nwait\n")
    b = all_specs()[backend].create(
        context(tmp_path / "bin", timeout=2)
    )  # long enough for the shell to write its child's pid on a loaded machine
    with pytest.raises(BackendError) as err:
        b.sample()
    assert err.value.reason == "timeout"
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 30  # a safety net, not a speed assertion
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child), "the tool's child process survived the timeout"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "tool"), sorted({(b, t) for b, t, _, _, _ in CASES}))
def test_fake_tool_exiting_1_or_printing_usage(tmp_path: Path, backend: str, tool: str) -> None:
    fake_tool(tmp_path / "bin", tool, 'echo "Invalid card id." >&2\nexit 1\n')
    b = all_specs()[backend].create(context(tmp_path / "bin"))
    with pytest.raises(BackendError, match=r"Invalid card id\.") as err:
        b.sample()
    assert err.value.reason == "exit_status"

    fake_tool(
        tmp_path / "bin", tool, f'echo "Usage: {tool} [OPTIONS]"\necho "  -h, --help  show this help"\n'
    )
    with pytest.raises(ParseError) as perr:
        b.sample()
    assert perr.value.reason == "parse"
