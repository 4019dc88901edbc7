"""What users paste (issue 35): the plain ``nvidia-smi`` table in every driver era, ``hl-smi -L``, ``xpu-smi -q``
and efsmi's monitor view, read from real captures: each claimed by its own format only, columns found by the
header's cells (not offsets), ``N/A`` no reading and a garbled cell one reading lost, MIG devices as slices,
damaged input raising nothing but ParseError (hypothesis), and ``inspect --explain`` naming the sections read
and the columns skipped. Values of every capture are checked by ``tests/vendors/test_corpus.py``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.vendors.capture_expectations import assert_one_reading_lost
from tests.vendors.test_cn_tools import check_parse, mutated
from xpuwatch.exporter.explain import explain
from xpuwatch.vendors import enflame, intel_hlsmi, kunlunxin, nvidia_smi_table
from xpuwatch.vendors.base import BackendError, ParseError
from xpuwatch.vendors.command import CommandResult, ReplayRunner
from xpuwatch.vendors.nvidia_smi import NvidiaSmiBackend
from xpuwatch.vendors.registry import all_formats
from xpuwatch.vendors.smi_table import is_rule

FIXTURES = Path(__file__).parents[1] / "fixtures"
MIB = 2**20
NEW_FORMATS = ("nvidia-smi-table", "hl-smi-listing", "xpu-smi-query", "efsmi-monitor")
# Every capture of the new formats (and hl-smi 1.4's "Mib" table), by the format its expectations name.
OWN: dict[str, str] = {
    str(p.relative_to(FIXTURES)).removesuffix(".expected.yaml"): fmt
    for p in sorted(FIXTURES.glob("*/*.expected.yaml"))
    if (fmt := yaml.safe_load(p.read_text()).get("format")) in NEW_FORMATS or "Mib" in p.name
}
TABLES = sorted(name for name, fmt in OWN.items() if fmt == "nvidia-smi-table")
H100 = "nvidia/nvidia-smi_table_h100-80gb-hbm3-x8_565.57.01.txt"
GTX = "nvidia/nvidia-smi_table_gtx-1080-ti-x8_390.25_cut-names_13procs.txt"
MIG_580 = "nvidia/nvidia-smi_table_a100-sxm4-40gb_580.126.09_mig-2ci-share-gi.txt"
PRO_610 = (
    "nvidia/nvidia-smi_table_rtx-pro-6000-blackwell_610.43.02_kmd-umd-header_mig-1g.24gb_in-pod_fb-NA.txt"
)
HL_L = "intel/hl-smi_-L_-i_gaudi2-HL-225_1.12.1-fw46.0.5_drv1.12.1_1aip.txt"
XPU_Q = "kunlunxin/xpu-smi_-q_P800-PCIe_drv5.0.21.26_1of2.txt"
EF_MON = "enflame/efsmi_dmon-columns_S60x7_2024-2025_MUsed-pct_Sleep_go-test-fixture.txt"


def read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def table(text: str) -> dict[str, object]:
    return {s.device.index: s for s in nvidia_smi_table.parse_table(text)}


@pytest.mark.parametrize("name", sorted(OWN))
def test_each_capture_is_claimed_by_its_own_format_only(name: str) -> None:
    text = read(name)
    assert [n for n, f in sorted(all_formats().items()) if f.sniff(text)] == [OWN[name]]


def test_plain_table_captures_span_the_driver_eras() -> None:
    """At least 15 real captures, from the 3xx banner without CUDA version through 610's KMD/UMD banner."""
    assert len(TABLES) >= 15
    majors = {int(re.search(r"_(\d{3})\.\d", name).group(1)) // 100 for name in TABLES}  # type: ignore[union-attr]
    assert majors >= {3, 4, 5, 6}
    banners = {nvidia_smi_table.read_layout(read(n)).cuda_version is None for n in TABLES}
    assert banners == {True, False}  # with and without "CUDA Version"
    assert any("KMD Version" in read(n) for n in TABLES) and any("Driver-Model" in read(n) for n in TABLES)


def test_the_shared_610_capture_reads_as_the_issue_says() -> None:
    """GPU 108 W of 600 W at 34 C; its one MIG device 1786 of 24192 MiB; the pod sees no GPU memory."""
    (s,) = nvidia_smi_table.parse_table(read(PRO_610))
    assert (s.power_watts, s.power_limit_watts, s.temperatures_celsius) == (108.0, 600.0, {"core": 34.0})
    assert s.device.model == "NVIDIA RTX PRO 6000 Blac..."  # cut as printed
    assert s.device.driver_version == "610.43.02"
    assert s.memory_used_bytes is None and s.memory_total_bytes is None and s.utilization_ratio is None
    assert not s.unread  # N/A is no reading, not an error
    (mig,) = s.slices
    assert (mig.slice_id, mig.kind, mig.memory_used_bytes, mig.memory_total_bytes) == (
        "6/0",
        "mig",
        1786 * MIB,
        24192 * MIB,
    )
    assert [p.pid for p in s.processes or ()] == [1]  # the container's PID namespace, as printed


def test_two_compute_instances_of_one_gpu_instance_share_its_memory() -> None:
    (s,) = nvidia_smi_table.parse_table(read(MIG_580))
    by_id = {x.slice_id: x for x in s.slices}
    assert [by_id[i].profile for i in ("2/0", "3/0", "3/1", "9/0")] == [
        "4g.20gb",
        "1c.2g.10gb",
        "1c.2g.10gb",
        "1g.5gb",
    ]  # the names the article's `nvidia-smi -L` prints
    assert by_id["3/0"].memory_used_bytes == by_id["3/1"].memory_used_bytes == 71 * MIB
    assert by_id["3/0"].memory_total_bytes == by_id["3/1"].memory_total_bytes == 9984 * MIB


def test_columns_are_found_by_header_cells_not_offsets() -> None:
    """Widening every cell (header and values alike) or re-aligning a value inside its cell reads the same."""
    text = read(GTX)
    widened = "\n".join(
        line.replace("|", "|   ") if line.lstrip().startswith("|") and not is_rule(line) else line
        for line in text.splitlines()
    )
    shifted = text.replace("| 53%   75C    P2   223W / 250W |", "|  53%  75C  P2      223W /250W  |")
    base = nvidia_smi_table.parse_table(text)
    for other in (widened, shifted):
        assert nvidia_smi_table.parse_table(other) == base


@pytest.mark.parametrize(
    ("printed", "spoiled", "garbled"),
    [
        ("75C", "N/A", False),
        ("75C", "ERR!", True),
        ("223W / 250W", "ERR! / 250W", True),
        ("10807MiB / 11178MiB", "xxxxxMiB / 11178MiB", True),
        ("98%", "ERR!", True),
        ("98%", "N/A", False),
        ("53%", "ERR!", True),
    ],
)
def test_a_spoiled_cell_costs_its_reading_only(printed: str, spoiled: str, garbled: bool) -> None:
    text = read(GTX)
    line = next(ln for ln in text.splitlines() if printed in ln)
    base, got = table(text)["0"], table(text.replace(line, line.replace(printed, spoiled, 1)))["0"]
    assert_one_reading_lost(base, got, garbled)  # type: ignore[arg-type]


def test_two_word_compute_mode_keeps_the_utilization() -> None:
    text = read(H100).replace("|      0%      Default |", "|      0%   E. Process |", 1)
    s = table(text)["0"]
    assert s.utilization_ratio == 0.0 and not s.unread  # type: ignore[attr-defined]


def test_processes_are_unknown_without_a_closed_section_and_unread_for_a_garbled_row() -> None:
    text = read(GTX)
    cut = text[: text.index("|    7      9908")]  # the paste stops inside the processes section
    assert all(s.processes is None and "processes" not in s.unread for s in table(cut).values())  # type: ignore[attr-defined]
    garbled = table(text.replace("|    4     14293      C   python3", "|    4     14x93      C   python3"))
    assert garbled["4"].processes is None and "processes" in garbled["4"].unread  # type: ignore[attr-defined]
    assert len(garbled["3"].processes) == 2  # type: ignore[attr-defined]


def test_a_second_nvidia_smi_run_pasted_below_is_not_read_into_the_first() -> None:
    text = read(PRO_610) + "\n" + read(H100)
    assert list(table(text)) == ["0"]


def test_the_nvidia_smi_backend_does_not_fall_back_to_the_table() -> None:
    """The backend asks for -q -x; a plain table in its place is a parse error, never read as GPUs whose uuid
    (the bus id) would differ from -q -x's GPU UUID."""
    answer = CommandResult(("nvidia-smi", "-q", "-x"), read(H100), "", 0, 0.0, 0.0)
    backend = NvidiaSmiBackend(ReplayRunner([answer]))
    with pytest.raises(BackendError):
        backend.sample()


def test_hl_smi_listing_sums_the_rails_and_takes_the_hottest_sensors() -> None:
    text = read(HL_L)
    (s,) = intel_hlsmi.parse_listing(text)
    assert (s.power_watts, s.power_limit_watts) == (81.0, 600.0)
    assert s.temperatures_celsius == {"core": 30.0, "memory": 32.0}
    # one rail's draw garbled: the sum is lost (unread), the limit stays
    (g,) = intel_hlsmi.parse_listing(
        text.replace("Power Draw              : 31 W", "Power Draw              : 3x W")
    )
    assert g.power_watts is None and "power_watts" in g.unread and g.power_limit_watts == 600.0
    # one rail that cannot tell (N/A): no sum, and no error
    (n,) = intel_hlsmi.parse_listing(
        text.replace("Power Draw              : 31 W", "Power Draw              : N/A")
    )
    assert n.power_watts is None and not n.unread
    # an HBM sensor garbled costs the memory temperature only
    (h,) = intel_hlsmi.parse_listing(text.replace("HBM 1 Temp         :  32 C", "HBM 1 Temp         :  ?? C"))
    assert h.temperatures_celsius == {"core": 30.0} and set(h.unread) == {"temperatures_celsius.memory"}


def test_xpu_smi_query_garbled_value_costs_one_reading() -> None:
    text = read(XPU_Q)
    (base,) = kunlunxin.parse_query(text)
    (got,) = kunlunxin.parse_query(
        text.replace("Power Draw                        : 76.00 W", "Power Draw : 7x.00 W")
    )
    assert_one_reading_lost(base, got, garbled=True)
    with pytest.raises(ParseError):
        kunlunxin.parse_query("==============XPUSMI LOG==============\nDriver Version : 5.0.21.26\n")


def test_efsmi_monitor_rows() -> None:
    text = read(EF_MON)
    base = {s.device.index: s for s in enflame.parse_monitor(text)}
    assert len(base) == 7 and {s.memory_total_bytes for s in base.values()} == {42976 * MIB}
    assert (base["0"].memory_used_ratio, base["4"].memory_used_ratio) == pytest.approx((0.841, 0.026))
    # a row that lost a value cannot be aligned: the GCU stays up, its readings unread
    cut = text.replace(
        "1    98     37     0.0    0.0    Sleep   83.7", "1    98     37     0.0    Sleep   83.7"
    )
    one = {s.device.index: s for s in enflame.parse_monitor(cut)}["1"]
    assert one.up and one.power_watts is None and "power_watts" in one.unread
    # a sleeping GCU's "-" is no reading; a monitor repeating its header keeps each GCU's last row
    again = text + text.split("\n\n", 1)[1].replace("0    101    36", "0    -      40", 1)
    zero = {s.device.index: s for s in enflame.parse_monitor(again)}["0"]
    assert (zero.power_watts, zero.temperatures_celsius, zero.unread) == (None, {"core": 40.0}, {})


@pytest.mark.parametrize("name", [PRO_610, MIG_580, HL_L, XPU_Q, EF_MON])
def test_explain_names_the_sections_read_and_the_columns_skipped(name: str) -> None:
    fmt = all_formats()[OWN[name]]
    text = read(name)
    lines = explain(name, fmt, text, fmt.parse(text))
    assert any(line.startswith("#   read: ") for line in lines), lines
    assert any(line.startswith("#   not read: ") for line in lines), lines


def test_explain_of_the_plain_table_names_each_section() -> None:
    fmt = all_formats()["nvidia-smi-table"]
    text = read(PRO_610)
    read_lines = [ln for ln in explain(PRO_610, fmt, text, fmt.parse(text)) if ln.startswith("#   read: ")]
    assert [ln.split(":", 2)[1].strip().split(" section")[0] for ln in read_lines] == [
        "banner",
        "GPU",
        "MIG devices",
        "Processes",
    ]


@pytest.mark.parametrize("name", sorted(OWN))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_output_raises_nothing_but_parse_error(name: str, data: st.DataObject) -> None:
    check_parse(all_formats()[OWN[name]], data.draw(mutated(read(name))))


@pytest.mark.parametrize("fmt", NEW_FORMATS)
@settings(max_examples=100, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from("| +-=NVIDIA-SMI Driver Version:*DevIdx[0]AIP XPU 0:. \n/%WCMiB"),
        max_size=400,
    )
)
def test_arbitrary_text_raises_nothing_but_parse_error(fmt: str, text: str) -> None:
    check_parse(all_formats()[fmt], text)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_one_garbled_cell_of_a_gpu_costs_at_most_that_reading(data: st.DataObject) -> None:
    """Any value token of a GPU's second line replaced by junk: the GPU stays up with its other readings."""
    text = read(H100)
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("| N/A   30C"))  # GPU 0's second line
    tokens = [m for m in re.finditer(r"[0-9]+(?:C|W|MiB|%)", lines[at])]
    m = data.draw(st.sampled_from(tokens))
    junk = data.draw(st.text(alphabet="xX?!#@E", min_size=1, max_size=len(m.group(0))))
    junk = junk.ljust(len(m.group(0)))
    lines[at] = lines[at][: m.start()] + junk + lines[at][m.end() :]
    assert_one_reading_lost(table(text)["0"], table("\n".join(lines) + "\n")["0"], garbled=True)  # type: ignore[arg-type]
