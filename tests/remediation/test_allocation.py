"""Holders of a shared device from a REAL Prometheus scraping ``accelerator_allocated`` series."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from tests.ports import free_port
from tests.remediation.kit import alerts_of, am_alert, drain_labels, make_controller, make_settings
from xpuwatch.exporter.catalog import ALLOCATED
from xpuwatch.remediation.allocation import AllocationError, holders_of, query
from xpuwatch.remediation.settings import DrainSettings

LABELS = [
    "node",
    "vendor",
    "model",
    "device",
    "uuid",
    "namespace",
    "pod",
    "container",
    "workload_kind",
    "owner",
]


def test_query_escapes_label_values() -> None:
    assert query('n"1', "GPU\\x") == 'accelerator_allocated{node="n\\"1",uuid="GPU\\\\x"} == 1'


@pytest.fixture
async def prometheus(tmp_path: Path) -> AsyncIterator[str]:
    if not shutil.which("prometheus"):
        pytest.skip("prometheus not installed")
    reg = CollectorRegistry()
    g = Gauge(ALLOCATED, "holder", LABELS, registry=reg)
    for pod in ("svc-a", "svc-b"):
        g.labels(
            "gpu-0", "nvidia", "NVIDIA GeForce RTX 4090", "1", "GPU-S", "ml", pod, "main", "service", ""
        ).set(1)
    g.labels(
        "gpu-0", "nvidia", "NVIDIA GeForce RTX 4090", "0", "GPU-OK", "ml", "train-0", "main", "job", ""
    ).set(1)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(reg), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    target = f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    (tmp_path / "prometheus.yml").write_text(
        f"global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: xpuwatch\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        await runner.cleanup()


@pytest.mark.slow
async def test_shared_device_holders_are_evicted(prometheus, fake, kube, session, clock) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 120  # a bound for a loaded machine
    while time.monotonic() < deadline:  # until the first scrape landed
        try:
            if len(await holders_of(session, prometheus, "gpu-0", "GPU-S")) == 2:
                break
        except AllocationError:
            pass
        await asyncio.sleep(0.1)
    assert await holders_of(session, prometheus, "gpu-0", "GPU-S") == ["ml/svc-a", "ml/svc-b"]
    fake.add_node("gpu-0")
    for pod in ("svc-a", "svc-b", "train-0"):
        fake.add_pod("ml", pod, "gpu-0", {"nvidia.com/gpu": "1"})
    settings = make_settings(drain=DrainSettings(default_mode="immediate", prometheus_url=prometheus))
    ctl = make_controller(settings, kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", "GPU-S"))))  # shared: no pod labels
    assert sorted(fake.evictions) == [("ml", "svc-a"), ("ml", "svc-b")]


async def test_unreachable_prometheus_taints_but_evicts_nothing_on_a_guess(
    fake, kube, session, clock
) -> None:  # type: ignore[no-untyped-def]
    fake.add_node("gpu-0")
    fake.add_pod("ml", "svc-a", "gpu-0", {"nvidia.com/gpu": "1"})
    url = f"http://127.0.0.1:{free_port()}"
    settings = make_settings(drain=DrainSettings(default_mode="immediate", prometheus_url=url))
    ctl = make_controller(settings, kube, session, clock)
    await ctl.refresh_view(clock())
    await ctl.handle(alerts_of(am_alert(**drain_labels("gpu-0", "GPU-S"))))
    assert fake.evictions == []
    assert fake.get("nodes", "gpu-0")["spec"]["taints"][0]["value"] == "GPU-S"  # type: ignore[index]
    step = next(r for r in ctl.audit.records or [] if r.get("step") == "taint")
    assert "holders from alert labels only (cannot reach Prometheus at " in step["detail"]
