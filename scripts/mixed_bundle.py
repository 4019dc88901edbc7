"""Test-data assembly: one capture bundle of a node holding every vendor, from the real fixtures.

Writes ``tests/fixtures/bundles/mixed-node.json`` (the ``xpuwatch capture`` format of ``vendors.command``):
each tool call a CLI backend makes is mapped to the real captured text that call prints
(``tests/fixtures/<vendor>/``, provenance in each ``.source`` note). ``--check`` exits 1 when the committed
bundle differs from what this script would write (CI runs it). Usage::

    PYTHONPATH=$PWD python scripts/mixed_bundle.py [--check] [-o FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xpuwatch.vendors.amd import ROCM_SMI_MINIMAL_ARGS  # noqa: E402
from xpuwatch.vendors.command import CommandResult, write_bundle  # noqa: E402
from xpuwatch.vendors.hygon import SMI_MINIMAL_ARGS  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
BUNDLE = FIXTURES / "bundles" / "mixed-node.json"
NODE = "mixed-node-1"
CLOCK = 1700000000.0  # the golden tests' frozen clock (tests/exporter/conftest.py GOLDEN_CLOCK)


@dataclass(frozen=True)
class Call:
    """One recorded tool call: which backend makes it, its argv, and the fixture holding its stdout."""

    backend: str
    argv: tuple[str, ...]
    fixture: str  # relative to tests/fixtures
    edits: tuple[tuple[str, str], ...] = ()  # (old, new) text replacements, each found exactly once

    def stdout(self) -> str:
        """The fixture's text with the documented edits applied (none for most calls)."""
        text = (FIXTURES / self.fixture).read_text(encoding="utf-8")
        for old, new in self.edits:
            if text.count(old) != 1:
                raise ValueError(f"{self.fixture}: edit {old!r} does not match exactly once")
            text = text.replace(old, new)
        return text


# In backend priority order. Where a backend could run several tools, the argv is the one it picks first
# on a node that has them (see docs/vendors/README.md "Mixed-node bundle" for each choice and gap).
CALLS: tuple[Call, ...] = (
    Call("nvidia-smi", ("nvidia-smi", "-q", "-x"), "nvidia/nvidia-smi_q_x_a100-sxm4-80gb-mig_535.54.03.xml"),
    # Hygon's DTK ships its rocm-smi fork also as hy-smi, which the hygon backend tries first; recording it
    # under that name lets AMD's rocm-smi live on the same (artificial) node. Minimal flags = gpustack's.
    Call("hygon", ("hy-smi", *SMI_MINIMAL_ARGS), "hygon/rocm-smi_json_hygon_dcu_dtk24.04.3.json"),
    Call("amd", ("rocm-smi", *ROCM_SMI_MINIMAL_ARGS), "amd/rocm-smi_json_rx7800xt_rocm6.2.4.json"),
    # One Atlas 300I Duo (NPU 6, two 310P3 chips). Its card reports come from another 300I Duo whose npu-smi
    # answered as NPU 1 (same DDR capacities, 44280 / 43693 MB): the one edit is that NPU ID line.
    Call("ascend", ("npu-smi", "info"), "ascend/npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt"),
    Call(
        "ascend",
        ("npu-smi", "info", "-t", "usages", "-i", "6"),
        "ascend/npu-smi_info_-t_usages_-i_1_310P.txt",
        (("NPU ID                         : 1\n", "NPU ID                         : 6\n"),),
    ),
    Call(
        "ascend",
        ("npu-smi", "info", "-t", "common", "-i", "6"),
        "ascend/npu-smi_info_-t_common_-i_1_310P.txt",
        (("NPU ID                         : 1\n", "NPU ID                         : 6\n"),),
    ),
    # vNPU lists (issue 22): chip 0 answers with the real two-vNPU listing of a 910B chip (no public 310P
    # listing was found; the layout is the same command's), chip 1 with the same chip's empty listing.
    Call(
        "ascend",
        ("npu-smi", "info", "-t", "info-vnpu", "-i", "6", "-c", "0"),
        "ascend/npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_2vnpu.txt",
    ),
    Call(
        "ascend",
        ("npu-smi", "info", "-t", "info-vnpu", "-i", "6", "-c", "1"),
        "ascend/npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_none.txt",
    ),
    Call("cambricon", ("cnmon",), "cambricon/cnmon_MLU370-X8_v5.10.13.txt"),
    Call("kunlunxin", ("xpu_smi",), "kunlunxin/xpu-smi_P800_drv5.0.21.21.txt"),
    Call("metax", ("mx-smi",), "metax/mx-smi_C550_2.2.4.txt"),
    Call("mthreads", ("mthreads-gmi",), "mthreads/mthreads-gmi_S5000_2.3.2_excerpt.txt"),
    Call("iluvatar", ("ixsmi",), "iluvatar/ixsmi_BI-V150_4.3.0.txt"),
    Call("enflame", ("efsmi",), "enflame/efsmi_S60_1.2.0.301.txt"),
)


def results(calls: tuple[Call, ...] = CALLS) -> list[CommandResult]:
    """The recorded results: each fixture's text as the call's stdout, exit status 0, frozen timestamps."""
    return [CommandResult(c.argv, c.stdout(), "", 0, CLOCK, 0.0) for c in calls]


def meta(calls: tuple[Call, ...] = CALLS) -> dict[str, object]:
    """The bundle's meta: backends to replay, node, and each call's source fixture."""
    backends = list(dict.fromkeys(c.backend for c in calls))
    return {
        "backends": backends,
        "attempted": backends,
        "skipped": {},
        "errors": {},
        "node": NODE,
        "started": CLOCK,
        "finished": CLOCK,
        "redacted": False,
        "assembled_from": {
            " ".join(c.argv): f"tests/fixtures/{c.fixture}" + (" (edited: see README)" if c.edits else "")
            for c in calls
        },
    }


def write(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bundle(path, results(), meta())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default=str(BUNDLE))
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed bundle is stale")
    args = ap.parse_args(argv)
    out = Path(args.output)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = Path(tmp) / "bundle.json"
            write(fresh)
            if not out.exists() or out.read_bytes() != fresh.read_bytes():
                print(f"{out} is stale: run `python scripts/mixed_bundle.py`", file=sys.stderr)
                return 1
        return 0
    write(out)
    print(f"wrote {out}: {len(CALLS)} tool calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
