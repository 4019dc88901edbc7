"""Golden file: the whole /metrics of the real server replaying one node that holds every vendor.

The bundle (tests/fixtures/bundles/mixed-node.json) is assembled by scripts/mixed_bundle.py from the real
captures in tests/fixtures/<vendor>/. Regenerate the golden with
`pytest tests/exporter/test_mixed_node.py --update-golden` and review the diff.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.exporter.conftest import GOLDEN_CLOCK, ROOT, Exporter, cli_env, stable_exposition, wait_ready
from xpuwatch.exporter import catalog

BUNDLE = ROOT / "tests" / "fixtures" / "bundles" / "mixed-node.json"
GOLDEN = ROOT / "tests" / "golden" / "mixed-node.txt"
VENDORS = {
    "nvidia",
    "amd",
    "hygon",
    "huawei",
    "cambricon",
    "kunlunxin",
    "metax",
    "mthreads",
    "iluvatar",
    "enflame",
}
GIB = 2**30
# Memory capacity each model is sold with (vendor data sheets), as a [low, high] GiB window around the
# usable size the tool reports (ECC/firmware reservations take a few percent).
MEMORY_GIB = {
    "NVIDIA A100-SXM4-80GB": (76, 80),
    "DCU xxxx": (60, 64),  # Hygon K100-class DCU, 64 GB HBM
    "Navi 32 [Radeon RX 7700 XT / 7800 XT]": (11, 16),
    "MLU370-X8": (22, 24),
    "P800 OAM": (90, 96),
    "MetaX C550": (60, 64),
    "MTT S5000": (76, 80),
    "Iluvatar BI-V150": (30, 32),
    "Ascend310P3": (40, 48),  # Atlas 300I Duo: 96 GB LPDDR4X, 48 GB per chip
    "S60": (40, 48),  # 48 GB; with ECC enabled (device 1 of the capture) 1/8 less is usable
}


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return str(r.read().decode())


def _samples(text: str) -> list[Sample]:
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def test_bundle_is_reproducible() -> None:
    res = subprocess.run(
        [sys.executable, "scripts/mixed_bundle.py", "--check"],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr


def test_bundle_lists_every_cli_backend_and_its_sources() -> None:
    doc = json.loads(BUNDLE.read_text())
    assert doc["meta"]["backends"] == [
        "nvidia-smi",
        "hygon",
        "amd",
        "ascend",
        "cambricon",
        "kunlunxin",
        "metax",
        "mthreads",
        "iluvatar",
        "enflame",
    ]
    for cmd in doc["commands"]:
        source, edited, _ = doc["meta"]["assembled_from"][" ".join(cmd["argv"])].partition(" (edited")
        text = (ROOT / source).read_text(encoding="utf-8")
        if edited:  # the Ascend card reports: only their NPU ID line differs (README of the bundle)
            diff = [
                (a, b) for a, b in zip(text.splitlines(), cmd["stdout"].splitlines(), strict=True) if a != b
            ]
            assert [(a.split(":")[0], b.split(":")[0]) for a, b in diff] == [("NPU ID" + " " * 25,) * 2]
        else:
            assert cmd["stdout"] == text
        assert (
            Path(f"{ROOT / source}.source").exists() or (ROOT / source).parent.joinpath("SOURCES.md").exists()
        )


@pytest.mark.slow
def test_golden_metrics_of_mixed_node(start_exporter: Callable[..., Exporter], update_golden: bool) -> None:
    exp = start_exporter("--replay", str(BUNDLE), "--sim-clock", GOLDEN_CLOCK)
    wait_ready(exp)
    body = stable_exposition(_scrape(exp.url))
    if update_golden:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(body)
    assert body == GOLDEN.read_text(), "golden differs: rerun with --update-golden and review the diff"
    # Every recorded call was answered: no backend asked for a command the bundle lacks.
    assert not any("not in the capture bundle" in line and "refused" not in line for line in exp.log)


@pytest.mark.slow
def test_mixed_golden_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required"
    res = subprocess.run(
        [promtool, "check", "metrics"], input=GOLDEN.read_text(), capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout == res.stderr == ""


def test_mixed_golden_has_no_duplicate_series() -> None:
    lines = [ln for ln in GOLDEN.read_text().splitlines() if ln and not ln.startswith("#")]
    series = Counter(ln.rsplit(" ", 1)[0] for ln in lines)
    assert [s for s, n in series.items() if n > 1] == []
    assert len(_samples(GOLDEN.read_text())) == len(lines)


def test_mixed_golden_is_coherent() -> None:
    samples = _samples(GOLDEN.read_text())
    by_name: dict[str, list[Sample]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s)

    ups = by_name[catalog.UP]
    assert {s.labels["vendor"] for s in ups} == VENDORS
    assert all(s.value == 1.0 for s in ups)
    identity = [(s.labels["vendor"], s.labels["device"]) for s in ups]
    assert len(identity) == len(set(identity)), "one accelerator_up per device"
    assert len({(s.labels["vendor"], s.labels["uuid"]) for s in ups}) == len(ups)
    assert Counter(v for v, _ in identity) == {
        "nvidia": 1,
        "hygon": 1,
        "amd": 1,
        "huawei": 2,
        "cambricon": 2,
        "kunlunxin": 8,
        "metax": 8,
        "mthreads": 2,
        "iluvatar": 16,
        "enflame": 2,
    }
    assert {s.labels["node"] for s in samples if "node" in s.labels} == {"mixed-node-1"}

    # Every device series belongs to a device that has accelerator_up, with the same identity labels.
    keys = ("node", "vendor", "model", "device", "uuid")
    known = {tuple(s.labels[k] for k in keys) for s in ups}
    for s in samples:
        if s.name.startswith("accelerator_") and not s.name.startswith("accelerator_slice_"):
            assert tuple(s.labels.get(k) for k in keys) in known, s

    backends = {s.labels["backend"]: s.value for s in by_name[catalog.BACKEND_UP]}
    assert set(backends) == {"nvidia-smi", "ascend", *VENDORS - {"nvidia", "huawei"}}
    assert set(backends.values()) == {1.0}
    assert {s.value for s in by_name[catalog.BACKEND_ERRORS]} == {0.0}  # no backend failed, not even once

    totals = {(s.labels["vendor"], s.labels["device"]): s for s in by_name[catalog.MEMORY_TOTAL]}
    assert {v for v, _ in totals} == VENDORS, "every vendor reports its memory size"
    for s in totals.values():
        low, high = MEMORY_GIB[s.labels["model"]]
        assert low * GIB <= s.value <= high * GIB, s
    for s in by_name[catalog.MEMORY_USED]:
        assert 0 <= s.value <= totals[(s.labels["vendor"], s.labels["device"])].value, s
    assert all(0.0 <= s.value <= 1.0 for s in by_name[catalog.UTILIZATION])
    assert all(10.0 <= s.value <= 110.0 for s in by_name[catalog.TEMPERATURE])
    assert all(5.0 <= s.value <= 700.0 for s in by_name[catalog.POWER])
    limits = {(s.labels["vendor"], s.labels["device"]): s.value for s in by_name[catalog.POWER_LIMIT]}
    for s in by_name[catalog.POWER]:
        cap = limits.get((s.labels["vendor"], s.labels["device"]))
        assert cap is None or s.value <= cap, s
    # Base units only: no sample value printed as a MiB/MB count or percent slipped through.
    assert not [s for s in by_name[catalog.UTILIZATION] if s.value > 1]
    assert all(re.fullmatch(r"[a-z_:][a-z0-9_:]*", s.name) for s in samples)
