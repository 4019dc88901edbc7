"""Issue: who holds the card. The real server on the sim fleet with a kubelet PodResources endpoint (real
gRPC on a unix socket): exact pod labels on exact devices and slices (golden), kubelet loss and return,
and sums over a MIG GPU through a real Prometheus that never double-count."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter.conftest import GOLDEN_CLOCK, Exporter, stable_exposition, wait_ready
from tests.exporter.kubelet_server import KubeletServer
from xpuwatch.exporter.kubelet import ContainerDevices

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "pods.txt"
# Device identities of the default sim fleet at seed 42 (see tests/golden/metrics.txt).
A100_MIG = "GPU-c1419565-95bd-718b-5f3b-9f644ffec4c8"
A100_WHOLE = "GPU-c19da510-79e8-fe29-ceae-3bb42ec3a044"
RTX_SHARED = "GPU-c6145b67-8cf1-b98d-de6a-fc087d1cebe0"
MIG_3G = "MIG-bec658a9-7f33-9dc2-f8dd-b3674736b016"
MIG_2G = "MIG-85567f7d-db53-885c-567d-09d1b7346153"
AMD_0 = "0x44c549c2e5c33a8f"

ALLOCATIONS = [
    ContainerDevices("ml-team", "train-7b-0", "trainer", "nvidia.com/gpu", (A100_WHOLE,)),
    ContainerDevices("serving", "llm-0", "server", "nvidia.com/mig-3g.40gb", (MIG_3G,)),
    ContainerDevices("ml-team", "jupyter-carol", "notebook", "nvidia.com/mig-2g.20gb", (MIG_2G,)),
    ContainerDevices("infer", "ts-a", "app", "nvidia.com/gpu", (f"{RTX_SHARED}::0", f"{RTX_SHARED}::1")),
    ContainerDevices("infer", "ts-b", "app", "nvidia.com/gpu", (f"{RTX_SHARED}::2",)),
    ContainerDevices("rocm", "bench-0", "bench", "amd.com/gpu", (AMD_0,)),
    ContainerDevices("npu", "pretrain-0", "trainer", "huawei.com/Ascend910", ("Ascend910-2",)),
    ContainerDevices("bad", "weird-0", "c", "nvidia.com/gpu", ("not-a-device",)),
]


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


def _samples(body: str, name: str) -> list[dict[str, str]]:
    out = []
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            if s.name == name:
                out.append({**s.labels, "__value__": str(s.value)})
    return out


def _wait_for(url: str, pred: Callable[[str], bool], timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        body = _metrics(url)
        if pred(body):
            return body
        time.sleep(0.1)
    raise AssertionError(f"condition not met; last /metrics:\n{body[:3000]}")


def _config(tmp_path: Path, sock: str, grace: float = 1.5) -> str:
    cfg = tmp_path / "xpuwatch.yaml"
    cfg.write_text(
        f"pod_mapping:\n  enabled: true\n  socket: {sock}\n  interval: 0.2\n  max_backoff: 0.4\n  grace: {grace}\n"
    )
    return str(cfg)


@pytest.fixture
def kubelet(tmp_path: Path):  # type: ignore[no-untyped-def]
    srv = KubeletServer(str(tmp_path / "kubelet.sock"), ALLOCATIONS)
    srv.start()
    yield srv
    srv.stop()


def _mapped(body: str) -> bool:
    return any(s["pod"] == "pretrain-0" for s in _samples(body, "accelerator_allocated")) and any(
        s.get("pod") == "llm-0" for s in _samples(body, "accelerator_slice_info")
    )


@pytest.mark.slow
def test_pod_labels_on_exact_devices_and_slices(
    start_exporter: Callable[..., Exporter], kubelet: KubeletServer, tmp_path: Path, update_golden: bool
) -> None:
    exp = start_exporter(
        "--simulate",
        "--seed",
        "42",
        "--sim-clock",
        GOLDEN_CLOCK,
        "--config",
        _config(tmp_path, kubelet.socket_path),
    )
    wait_ready(exp)
    body = _wait_for(exp.url, _mapped)
    up = {s["uuid"]: s for s in _samples(body, "accelerator_up")}
    assert (up[A100_WHOLE]["namespace"], up[A100_WHOLE]["pod"], up[A100_WHOLE]["container"]) == (
        "ml-team",
        "train-7b-0",
        "trainer",
    )
    assert "pod" not in up[RTX_SHARED]  # two holders: labels only on accelerator_allocated
    assert "pod" not in up[A100_MIG]  # the MIG parent is held through its slices
    held = sorted((s["uuid"], s["pod"]) for s in _samples(body, "accelerator_allocated"))
    assert held == sorted(
        [
            (A100_WHOLE, "train-7b-0"),
            (A100_MIG, "llm-0"),
            (A100_MIG, "jupyter-carol"),
            (RTX_SHARED, "ts-a"),
            (RTX_SHARED, "ts-b"),
            (AMD_0, "bench-0"),
            (
                next(u for u, s in up.items() if s["vendor"] == "huawei" and s["device"] == "2-0"),
                "pretrain-0",
            ),
        ]
    )
    slices = {
        s["slice_id"]: s.get("pod") for s in _samples(body, "accelerator_slice_info") if s["uuid"] == A100_MIG
    }
    assert slices == {"2/0": "llm-0", "3/0": "jupyter-carol", "9/0": None}
    assert _samples(body, "xpuwatch_pod_mapping_up")[0]["__value__"] == "1.0"
    body = stable_exposition(body)
    if update_golden:
        GOLDEN.write_text(body)
    assert body == GOLDEN.read_text(), "golden differs: rerun with --update-golden and review the diff"


@pytest.mark.slow
def test_kubelet_loss_drops_only_pod_labels_and_recovers(
    start_exporter: Callable[..., Exporter], kubelet: KubeletServer, tmp_path: Path
) -> None:
    exp = start_exporter(
        "--simulate",
        "--seed",
        "42",
        "--sim-clock",
        GOLDEN_CLOCK,
        "--config",
        _config(tmp_path, kubelet.socket_path),
    )
    wait_ready(exp)
    before = _wait_for(exp.url, _mapped)
    devices = len(_samples(before, "accelerator_up"))
    kubelet.stop()
    Path(kubelet.socket_path).unlink(missing_ok=True)
    # Within the grace period (1.5 s here) the kubelet is down but every pod label stays.
    down = _wait_for(exp.url, lambda b: _samples(b, "xpuwatch_pod_mapping_up")[0]["__value__"] == "0.0")
    assert _mapped(down)
    lost = _wait_for(exp.url, lambda b: _samples(b, "accelerator_allocated") == [])
    assert _samples(lost, "xpuwatch_pod_mapping_up")[0]["__value__"] == "0.0"
    assert len(_samples(lost, "accelerator_up")) == devices
    assert _samples(lost, "accelerator_allocated") == []
    assert all("pod" not in s for s in _samples(lost, "accelerator_up"))
    srv = KubeletServer(kubelet.socket_path, ALLOCATIONS)
    srv.start()
    try:
        back = _wait_for(exp.url, _mapped)
        assert _samples(back, "xpuwatch_pod_mapping_up")[0]["__value__"] == "1.0"
    finally:
        srv.stop()
