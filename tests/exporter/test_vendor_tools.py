"""Every vendor through the real subprocess path: fake tools on PATH (tests/exporter/faketools.py) driving
`xpuwatch capture` -> `serve --replay`, faults at node level, and the detection log of `xpuwatch serve`."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter import faketools
from tests.exporter.conftest import GOLDEN_CLOCK, ROOT, Exporter, cli_env, run_cli, wait_ready
from xpuwatch.exporter import catalog

GOLDEN = ROOT / "tests" / "golden" / "mixed-node.txt"
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _series(text: str, drop: tuple[str, ...] = ()) -> Series:
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in drop))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return str(r.read().decode())


def _env(bin_dir: Path, isolated: bool = False) -> dict[str, str]:
    # isolated: PATH holds only the fake tools (the fakes call cat/sleep by absolute path).
    path = str(bin_dir) if isolated else f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    return cli_env(PATH=path)


def _device_series(text: str, drop: tuple[str, ...]) -> Series:
    return {k: v for k, v in _series(text, drop).items() if k[0].startswith("accelerator_")}


@pytest.mark.slow
@pytest.mark.parametrize("redact", [False, True], ids=["plain", "redacted"])
def test_capture_of_every_vendor_replays_the_same_devices(
    tmp_path: Path, start_exporter: Callable[..., Exporter], redact: bool
) -> None:
    bins = faketools.every_vendor(tmp_path / "bin")
    bundle = tmp_path / "capture.json"
    names = [a for b in bins for a in ("--backend", b)]
    res = run_cli(
        "capture",
        "-o",
        str(bundle),
        "--node-name",
        "mixed-node-1",
        *names,
        *(["--redact"] if redact else []),
        env=_env(tmp_path / "bin"),
    )
    assert res.returncode == 0, res.stderr
    assert "errors" not in res.stdout
    doc = json.loads(bundle.read_text())
    assert doc["meta"]["backends"] == list(bins) and doc["meta"]["redacted"] is redact
    # The rocm-smi-family tools refused the full flag set (as an older build does); the backends fell back
    # to the captured flags, and the bundle keeps both calls so that the replay takes the same path.
    refused = sorted(Path(c["argv"][0]).name for c in doc["commands"] if c["returncode"] != 0)
    assert refused == ["hy-smi", "rocm-smi"]

    exp = start_exporter("--replay", str(bundle), "--node-name", "mixed-node-1", "--sim-clock", GOLDEN_CLOCK)
    wait_ready(exp)
    body = _scrape(exp.url)
    golden = GOLDEN.read_text()
    if not redact:
        # The same device series, label for label and value for value, as the assembled bundle's golden.
        assert _device_series(body, ()) == _device_series(golden, ())
        return
    # Redacted: identical except uuid and serial, and each original uuid maps to exactly one mask (and back).
    assert _device_series(body, ("uuid", "serial")) == _device_series(golden, ("uuid", "serial"))
    serials = {
        dict(lab)["vendor"] + dict(lab)["device"]: dict(lab)["serial"]
        for (name, lab) in _series(body)
        if name == catalog.INFO
    }
    # "N/A" serials (rocm-smi) stay absent instead of becoming an invented SERIALnnnn.
    assert serials["amd0"] == "" and serials["hygon0"].startswith("SERIAL")

    def uuids(text: str) -> dict[tuple[str, str], set[str]]:
        out: dict[tuple[str, str], set[str]] = {}
        for (name, labels), _ in _series(text).items():
            lab = dict(labels)
            if name.startswith("accelerator_") and "uuid" in lab:
                key = (lab["vendor"], lab["device"] + "/" + lab.get("slice_id", ""))
                out.setdefault(key, set()).add(lab["uuid"])
        return out

    before, after = uuids(golden), uuids(body)
    assert before.keys() == after.keys()
    assert all(len(v) == 1 for v in [*before.values(), *after.values()])
    mapping = {next(iter(before[k])): next(iter(after[k])) for k in before}
    assert len(set(mapping.values())) == len(mapping), "two devices share a mask"
    raw = bundle.read_text()
    masked = {orig: new for orig, new in mapping.items() if orig != new}
    # The Hygon serial (its uuid) is an identifier: masked, and gone from the bundle. NVIDIA's GPU UUID is
    # masked into the numbered shape (the fixture's placeholder ...0001 happens to be its own first mask).
    assert list(masked) == ["TPXxxxx"] and re.fullmatch(r"SERIAL\d{4}", masked["TPXxxxx"])
    assert "TPXxxxx" not in raw
    assert {m for o, m in mapping.items() if o.startswith("GPU-")} == {
        "GPU-00000000-0000-0000-0000-000000000001"
    }


def _wait_for(url: str, ok: Callable[[Series], bool], timeout: float = 60) -> Series:
    deadline = time.monotonic() + timeout
    got: Series = {}
    while time.monotonic() < deadline:
        got = _series(_scrape(url))
        if ok(got):
            return got
        time.sleep(0.2)
    raise AssertionError(f"condition not reached; last scrape: {sorted(got.items())}")


def _errors(s: Series, backend: str) -> dict[str, float]:
    return {
        dict(lab)["reason"]: v
        for (name, lab), v in s.items()
        if name == catalog.BACKEND_ERRORS and dict(lab)["backend"] == backend
    }


@pytest.mark.slow
def test_node_survives_a_hanging_a_failing_and_a_garbling_tool(
    tmp_path: Path, start_exporter: Callable[..., Exporter]
) -> None:
    bin_dir = tmp_path / "bin"
    healthy = {"nvidia-smi", "iluvatar", "kunlunxin", "hygon", "ascend"}
    for backend, tool in faketools.every_vendor(bin_dir).items():
        if backend not in healthy:
            tool.unlink()
    marker = f"0.{os.getpid()}{int(time.time())}"
    faketools.hanging(bin_dir, "cnmon", marker)  # cambricon
    faketools.failing(bin_dir, "efsmi", "Invalid card id.")  # enflame
    faketools.garbage(bin_dir, "mx-smi")  # metax
    broken = {"cambricon": "timeout", "enflame": "exit_status", "metax": "parse"}
    config = tmp_path / "xpuwatch.yaml"
    config.write_text(
        "backends:\n" + "".join(f"  {b}: {{interval: 1, timeout: 3, timeout_seconds: 1}}\n" for b in broken)
    )
    names = [a for b in [*healthy, *broken] for a in ("--backend", b)]
    exp = start_exporter(
        "--config", str(config), "--node-name", "mixed-node-1", *names, env=_env(bin_dir, isolated=True)
    )

    def settled(s: Series) -> bool:
        return all(_errors(s, b).get(reason, 0) >= 2 for b, reason in broken.items())

    got = _wait_for(exp.url, settled)
    for b, reason in broken.items():
        # only the expected reason counts up (timeout/unexpected/field are exported at 0 from the start)
        assert {r for r, v in _errors(got, b).items() if v} == {reason}, b
        assert got[(catalog.BACKEND_UP, (("backend", b),))] == 0.0
    for b in healthy:
        assert got[(catalog.BACKEND_UP, (("backend", b),))] == 1.0
        assert _errors(got, b) == {"timeout": 0.0, "unexpected": 0.0, "field": 0.0}
    # The healthy vendors' devices are all there and up; the broken vendors never produced any.
    ups = {dict(lab)["vendor"]: 0 for (name, lab), _ in got.items() if name == catalog.UP}
    for (name, lab), v in got.items():
        if name == catalog.UP:
            assert v == 1.0
            ups[dict(lab)["vendor"]] += 1
    assert ups == {"nvidia": 1, "iluvatar": 16, "kunlunxin": 8, "hygon": 1, "huawei": 2}
    golden = _device_series(GOLDEN.read_text(), ())
    healthy_vendors = set(ups)
    want = {k: v for k, v in golden.items() if dict(k[1]).get("vendor") in healthy_vendors}
    assert _device_series(_scrape(exp.url), ()) == want
    assert not any("Traceback" in line for line in exp.log)
    # Each hung cnmon was killed at its deadline: at most the one of the poll in flight is alive.
    assert faketools.alive(marker) <= 1


def _detection(log: list[str]) -> dict[str, str]:
    """Backend detection lines, from the exporter's JSON log (``--log.format=json``)."""
    out: dict[str, str] = {}
    for line in log:
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        m = re.fullmatch(r"backend (\S+): (found|skipped \((.*)\))", doc["msg"])
        if m and doc["logger"] == "xpuwatch":
            out[m.group(1)] = m.group(3) if m.group(3) is not None else "found"
    return out


@pytest.mark.slow
def test_serve_without_backend_logs_found_and_skipped(
    tmp_path: Path, start_exporter: Callable[..., Exporter]
) -> None:
    bins = faketools.every_vendor(tmp_path / "bin")
    exp = start_exporter("--node-name", "n1", "--log.format=json", env=_env(tmp_path / "bin", isolated=True))
    wait_ready(exp)
    found = _detection(exp.log)
    assert {b for b, why in found.items() if why == "found"} == set(bins) - {"amd"}
    assert found["amd"] == "superseded by hygon"
    assert found["nvml"] and found["nvml"] != "found"  # no NVIDIA driver in the test machine
    assert found["dcgm"] and found["dcgm"] != "found"
    backends = {
        dict(lab)["backend"] for (name, lab) in _series(_scrape(exp.url)) if name == catalog.BACKEND_UP
    }
    assert backends == set(bins) - {"amd"}


@pytest.mark.slow
def test_amd_rocm_smi_is_not_taken_for_hygon(tmp_path: Path, start_exporter: Callable[..., Exporter]) -> None:
    """With only AMD's rocm-smi on PATH, hygon runs it once, sees no DCU, and AMD is enabled."""
    mb = faketools.mixed_bundle()
    amd = next(c for c in mb.CALLS if c.backend == "amd")
    tool = faketools.printing(tmp_path / "bin", "rocm-smi", mb.FIXTURES / amd.fixture)
    exp = start_exporter("--node-name", "n1", "--log.format=json", env=_env(tmp_path / "bin", isolated=True))
    wait_ready(exp)
    found = _detection(exp.log)
    assert found["amd"] == "found"
    assert found["hygon"] == f"rocm-smi at {tool} reports no Hygon DCU (AMD's)"
    assert found["cambricon"] == "cnmon not on PATH"
    assert found["kunlunxin"] == "xpu-smi / xpu_smi not on PATH"
    assert found["metax"] == "mx-smi / ht-smi not on PATH"


@pytest.mark.slow
def test_partitioned_amd_card_on_metrics(tmp_path: Path, start_exporter: Callable[..., Exporter]) -> None:
    """A fake ``amd-smi`` on PATH for one MI300X in DPX (two logical GPUs at functions .0/.1): /metrics of the
    real server ties both to the card and carries power only where amd-smi prints it. CONSTRUCTED answers:
    the static document is the real 8 x MI300X capture's first GPU with a ``partition`` section (keys of
    ``amd-smi static --partition``); the metric values are those of the DPX table in ROCm/amdsmi#132
    (partition 0: 142 W, 196592 MB total; partition 1: power N/A, 98296 MB)."""
    static = json.loads(
        (ROOT / "tests/fixtures/amd/amd-smi_static_json_8x-mi300x_rocm7.2.1_ppt0-limit.json").read_text()
    )["gpu_data"][0]
    gpus, metrics = [], []
    for pid, power, total in ((0, {"value": 142, "unit": "W"}, 196592), (1, "N/A", 98296)):
        gpus.append(
            {
                **static,
                "gpu": pid,
                "bus": {**static["bus"], "bdf": f"0000:05:00.{pid}"},
                "partition": {"compute_partition": "DPX", "memory_partition": "NPS1", "partition_id": pid},
            }
        )
        metrics.append(
            {
                "gpu": pid,
                "power": {"socket_power": power},
                "mem_usage": {
                    "total_vram": {"value": total, "unit": "MB"},
                    "used_vram": {"value": 283, "unit": "MB"},
                },
            }
        )
    answers = tmp_path / "answers"
    answers.mkdir()
    (answers / "static.json").write_text(json.dumps({"gpu_data": gpus}))
    (answers / "metric.json").write_text(json.dumps({"gpu_data": metrics}))
    faketools.answering(
        tmp_path / "bin",
        "amd-smi",
        {("static", "--json"): answers / "static.json", ("metric", "--json"): answers / "metric.json"},
    )
    exp = start_exporter("--node-name", "n1", env=_env(tmp_path / "bin", isolated=True))
    wait_ready(exp)
    deadline = time.monotonic() + 30
    while "accelerator_partition_info" not in (text := _scrape(exp.url)) and time.monotonic() < deadline:
        time.sleep(0.5)
    got = _series(text, drop=("model", "vendor", "node"))
    card = "pci-0000:05:00.0"
    for pid in (0, 1):
        key = (
            "accelerator_partition_info",
            (
                ("compute_partition", "DPX"),
                ("device", str(pid)),
                ("memory_partition", "NPS1"),
                ("parent_uuid", card),
                ("partition_id", str(pid)),
                ("uuid", f"pci-0000:05:00.{pid}"),
            ),
        )
        assert got[key] == 1.0
    power = {k[1]: v for k, v in got.items() if k[0] == catalog.POWER}
    assert power == {(("device", "0"), ("uuid", card)): 142.0}


@pytest.mark.slow
def test_ascend_hung_detail_query_keeps_the_chip_up(
    tmp_path: Path, start_exporter: Callable[..., Exporter]
) -> None:
    """Issue 22 through the real exporter: npu-smi answers its table but hangs on `-t common -i 6`. The
    card's chips stay accelerator_up 1 with the table's readings, the clocks that query gives are absent,
    the unread readings are counted under xpuwatch_backend_errors_total{reason="field"}, and the failure is
    logged once, not once per poll."""
    fix = ROOT / "tests" / "fixtures" / "ascend"
    texts = tmp_path / "answers"
    texts.mkdir()
    answers: dict[tuple[str, ...], Path] = {}
    for args, name, edit in (
        (("info",), "npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt", False),
        (("info", "-t", "usages", "-i", "6"), "npu-smi_info_-t_usages_-i_1_310P.txt", True),
        (
            ("info", "-t", "info-vnpu", "-i", "6", "-c", "0"),
            "npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_none.txt",
            False,
        ),
        (
            ("info", "-t", "info-vnpu", "-i", "6", "-c", "1"),
            "npu-smi_info_-t_info-vnpu_-i_0_-c_0_910B_none.txt",
            False,
        ),
    ):
        text = (fix / name).read_text(encoding="utf-8")
        if edit:  # the card report of another 300I Duo, answered as NPU 6 (as in scripts/mixed_bundle.py)
            text = text.replace(
                "NPU ID                         : 1\n", "NPU ID                         : 6\n"
            )
        path = texts / "_".join(args)
        path.write_text(text, encoding="utf-8")
        answers[args] = path
    marker = f"0.{os.getpid()}{int(time.time())}7"
    bin_dir = tmp_path / "bin"
    faketools.stalling(bin_dir, "npu-smi", answers, marker)  # `-t common -i 6` hangs
    config = tmp_path / "xpuwatch.yaml"
    config.write_text(
        "backends:\n  ascend: {interval: 1, timeout: 4, timeout_seconds: 1, poll_budget_seconds: 2, source: cli}\n"
    )
    exp = start_exporter("--config", str(config), "--backend", "ascend", env=_env(bin_dir))

    def settled(s: Series) -> bool:
        return _errors(s, "ascend").get("field", 0.0) >= 6  # two polls x (2 clocks) x 2 chips, at least

    got = _wait_for(exp.url, settled, 40)
    ups = {dict(lab)["device"]: v for (name, lab), v in got.items() if name == catalog.UP}
    assert ups == {"6-0": 1.0, "6-1": 1.0}
    temps = {
        dict(lab)["device"]: v
        for (name, lab), v in got.items()
        if name == catalog.TEMPERATURE and dict(lab).get("sensor") == "core"
    }
    assert temps == {"6-0": 55.0, "6-1": 52.0}  # the table's readings stay
    assert not [k for k in got if k[0] == "accelerator_huawei_aicore_frequency_hertz"]
    assert [v for (name, lab), v in got.items() if name == "accelerator_huawei_ctrlcpu_utilization_ratio"]
    assert got[(catalog.BACKEND_UP, (("backend", "ascend"),))] == 1.0
    warned = [ln for ln in exp.log if "npu-smi info -t common -i 6 failed" in ln]
    assert len(warned) == 1, warned
