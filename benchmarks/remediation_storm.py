"""Benchmark: how fast the remediation controller absorbs an alert storm (prints figures, asserts nothing).

An in-process fake API server (tests/remediation/fakekube.py) with NODES nodes, the real
kubernetes_asyncio client, and ALERTS drain alerts posted through the real webhook in BATCHES
concurrent payloads. Run from the repo root: ``PYTHONPATH=$PWD python benchmarks/remediation_storm.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp
from aiohttp import web

from tests.remediation.fakekube import FakeKube
from tests.remediation.kit import Clock, am_alert, am_payload, drain_labels, make_controller, make_settings
from xpuwatch.remediation.kube import Kube
from xpuwatch.remediation.settings import DrainSettings, GuardSettings, KubeSettings
from xpuwatch.remediation.webhook import PATH, build_app


async def main(nodes: int, alerts: int, batches: int, cap: int) -> None:
    fake = FakeKube()
    await fake.start()
    for n in range(nodes):
        fake.add_node(f"gpu-{n:04d}")
    kube = await Kube.connect(KubeSettings(host=fake.url), instance="bench")
    per_node = max(1, alerts // nodes)
    async with aiohttp.ClientSession() as session:
        settings = make_settings(
            guard=GuardSettings(dry_run=False, max_disrupted_nodes=cap, max_disrupted_ratio=1.0),
            drain=DrainSettings(default_mode="immediate"),
        )
        ctl = make_controller(settings, kube, session, Clock())
        await ctl.refresh_view(ctl.clock())
        runner = web.AppRunner(build_app(ctl))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}{PATH}"  # type: ignore[union-attr]
        items = [
            am_alert(fingerprint=f"{n}-{d}", **drain_labels(f"gpu-{n:04d}", f"GPU-{n}-{d}"))
            for n in range(nodes)
            for d in range(per_node)
        ][:alerts]
        size = -(-len(items) // batches)
        bodies = [json.dumps(am_payload(*items[i : i + size])).encode() for i in range(0, len(items), size)]
        t0 = time.perf_counter()
        codes = await asyncio.gather(*(session.post(url, data=b) for b in bodies))
        elapsed = time.perf_counter() - t0
        await runner.cleanup()
    await kube.close()
    await fake.stop()
    tainted = sum(1 for n in fake.list("nodes") if n["spec"].get("taints"))
    print(f"alerts={len(items)} nodes={nodes} payloads={len(bodies)} cap={cap}")
    print(
        f"http={sorted({c.status for c in codes})} tainted_nodes={tainted} api_requests={len(fake.requests)}"
    )
    print(f"elapsed_seconds={elapsed:.3f} alerts_per_second={len(items) / elapsed:.0f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--alerts", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--cap", type=int, default=5)
    a = ap.parse_args()
    asyncio.run(main(a.nodes, a.alerts, a.batches, a.cap))
