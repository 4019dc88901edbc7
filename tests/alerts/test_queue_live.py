"""The queue alerts end to end: a real Prometheus scrapes the simulated exporter and a kube-state-metrics
stand-in (tests/ksm_standin.py), evaluates the generated rules, and both queue alerts fire."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import ksm_standin
from tests.alerts.test_sim_prometheus import _get, _stack, pytestmark  # noqa: F401  (slow, needs prometheus)


@pytest.fixture
def ksm() -> Iterator[str]:
    with ksm_standin.serve() as target:
        yield target


def test_queue_alerts_fire_end_to_end(tmp_path: Path, ksm: str) -> None:
    overrides = {
        "AcceleratorJobsQueuedWhileIdle": {"for": "0s", "pending_seconds": 600},
        "AcceleratorQueueTimeHigh": {"for": "0s", "pending_seconds": 1800},
    }
    with _stack(tmp_path, None, overrides, extra_jobs={"kube-state-metrics": ksm}) as base:
        deadline = time.monotonic() + 90
        firing: dict[str, dict[str, str]] = {}
        while time.monotonic() < deadline and len(firing) < 2:
            time.sleep(1)
            firing = {
                a["labels"]["alertname"]: a["labels"]
                for a in _get(f"{base}/api/v1/alerts")["data"]["alerts"]
                if a["state"] == "firing"
                and a["labels"]["alertname"].startswith(("AcceleratorJobs", "AcceleratorQueue"))
            }
        pending = _get(f"{base}/api/v1/query?query=namespace_resource:kube_pod_accelerator_requests:pending")
    # NVIDIA: the sim fleet has idle NVIDIA cards (free ones and alice's idle notebook) -> queued while idle
    assert {
        k: firing["AcceleratorJobsQueuedWhileIdle"][k]
        for k in ("namespace", "resource", "vendor", "category")
    } == {
        "namespace": "ml",
        "resource": "nvidia_com_gpu",
        "vendor": "nvidia",
        "category": "performance",
    }
    # Cambricon: no MLU in this cluster has room -> a capacity signal, not the idle-waste alert
    assert {
        k: firing["AcceleratorQueueTimeHigh"][k] for k in ("namespace", "resource", "vendor", "severity")
    } == {
        "namespace": "mlu",
        "resource": "cambricon_com_mlu",
        "vendor": "cambricon",
        "severity": "warning",  # not info: kube-prometheus-stack's InfoInhibitor would mute it
    }
    # the scheduled-but-Pending pod and the CPU requests are not queued accelerators
    got = {
        (r["metric"]["namespace"], r["metric"]["resource"]): float(r["value"][1])
        for r in pending["data"]["result"]
    }
    assert got == {("ml", "nvidia_com_gpu"): 8.0, ("mlu", "cambricon_com_mlu"): 4.0}
