"""Reclaim on Kubeflow: the Notebook CR's stop annotation, gated on the notebook's own /api/kernels.

The Jupyter server is a loopback aiohttp stand-in answering ``GET /notebook/<ns>/<name>/api/kernels``
with the kernel list shape the Kubeflow culler reads (``culler.go``: id, name, last_activity,
execution_state, connections).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from tests.remediation.kit import Clock, alerts_of, am_alert, make_controller, make_settings
from xpuwatch.remediation.actions.reclaim import STOP_ANNOTATION
from xpuwatch.remediation.settings import ReclaimSettings, Rule


class Kernels:
    def __init__(self) -> None:
        self.answer: tuple[int, Any] = (200, [])
        self.calls = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        code, body = self.answer
        return web.json_response(body, status=code)


@pytest.fixture
async def kernels() -> AsyncIterator[tuple[Kernels, str]]:
    k = Kernels()
    app = web.Application()
    app.router.add_get("/notebook/{ns}/{name}/api/kernels", k.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield k, f"http://127.0.0.1:{port}/notebook/{{namespace}}/{{name}}/api/kernels"
    await runner.cleanup()


def kernel(state: str, last: str) -> dict[str, Any]:
    return {"id": "k1", "name": "python3", "last_activity": last, "execution_state": state, "connections": 1}


def alert(fp: str = "nb1") -> dict[str, Any]:
    return am_alert(
        fingerprint=fp,
        alertname="AcceleratorIdleNotebook",
        action="reclaim",
        node="gpu-0",
        uuid="GPU-1",
        namespace="team-a",
        pod="bert-0",
        container="bert",
        workload_kind="notebook",
        owner="alice",
    )


def settings(url: str):  # type: ignore[no-untyped-def]
    return make_settings(
        rules=(Rule("reclaim", params={"platform": "kubeflow"}),),
        reclaim=ReclaimSettings(idle_seconds=3600, grace_seconds=600, kernels_url=url),
    )


async def test_idle_notebook_gets_the_stop_annotation_after_grace(fake, kube, session, kernels) -> None:
    k, url = kernels
    fake.add_notebook("team-a", "bert")
    k.answer = (200, [kernel("idle", "2026-11-30T09:00:00.000000Z")])
    clock = Clock()
    ctl = make_controller(settings(url), kube, session, clock)
    res = await ctl.handle(alerts_of(alert()))
    assert res[0]["result"] == "ok"
    nb = fake.get("notebooks", "bert", "team-a")
    assert STOP_ANNOTATION not in nb["metadata"]["annotations"]  # type: ignore[index]
    clock.advance(600)
    done = await ctl.tick()
    assert done == [
        {
            "target": "notebook/team-a/bert",
            "action": "reclaim",
            "result": "ok",
            "detail": "set kubeflow-resource-stopped on Notebook team-a/bert",
        }
    ]
    nb = fake.get("notebooks", "bert", "team-a")
    assert nb["metadata"]["annotations"][STOP_ANNOTATION] == "2026-11-30T12:10:00Z"  # type: ignore[index]
    assert "xpuwatch.io/reclaim-pending" not in nb["metadata"]["labels"]  # type: ignore[index]
    patches = [r for r in fake.requests if r[0] == "PATCH"]
    assert all(p[1] == "/apis/kubeflow.org/v1/namespaces/team-a/notebooks/bert" for p in patches)


async def test_busy_kernel_is_activity(fake, kube, session, kernels) -> None:
    k, url = kernels
    fake.add_notebook("team-a", "bert")
    k.answer = (200, [kernel("idle", "2026-11-30T09:00:00Z"), kernel("busy", "2026-11-30T09:00:00Z")])
    ctl = make_controller(settings(url), kube, session, Clock())
    res = await ctl.handle(alerts_of(alert()))
    assert (res[0]["result"], res[0]["detail"]) == ("skipped", "a kernel is busy")


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ((403, {"message": "RBAC: access denied"}), "kernels probe answered 403"),  # kubeflow#7160
        ((200, []), "kernels probe returned no kernels"),
        ((200, {"not": "a list"}), "kernels probe returned no kernels"),
        (
            (200, [{"execution_state": "idle", "last_activity": "yesterday"}]),
            "last_activity: expected an RFC 3339 timestamp",
        ),
    ],
)
async def test_failed_probe_means_no_action(fake, kube, session, kernels, answer, why) -> None:
    k, url = kernels
    fake.add_notebook("team-a", "bert")
    k.answer = answer
    ctl = make_controller(settings(url), kube, session, Clock())
    res = await ctl.handle(alerts_of(alert()))
    assert res[0]["result"] == "blocked" and why in res[0]["detail"]
    assert "annotations" not in fake.get("notebooks", "bert", "team-a")["metadata"]  # type: ignore[index]


async def test_gpu_alert_resolving_cancels_the_reclaim(fake, kube, session, kernels) -> None:
    k, url = kernels
    fake.add_notebook("team-a", "bert")
    k.answer = (200, [kernel("idle", "2026-11-30T09:00:00Z")])
    clock = Clock()
    ctl = make_controller(settings(url), kube, session, clock)
    await ctl.handle(alerts_of(alert()))
    clock.advance(60)
    res = await ctl.handle(alerts_of(am_alert(status="resolved", **alert()["labels"], fingerprint="nb1")))
    assert res[0]["step"] == "cancel"
    clock.advance(3600)
    assert await ctl.tick() == []
    assert STOP_ANNOTATION not in fake.get("notebooks", "bert", "team-a")["metadata"]["annotations"]  # type: ignore[index]


async def test_cooldown_after_a_stop(fake, kube, session, kernels) -> None:
    k, url = kernels
    fake.add_notebook("team-a", "bert")
    k.answer = (200, [kernel("idle", "2026-11-30T09:00:00Z")])
    clock = Clock()
    ctl = make_controller(settings(url), kube, session, clock)
    await ctl.handle(alerts_of(alert()))
    clock.advance(600)
    await ctl.tick()
    fresh = make_controller(settings(url), kube, session, clock)  # restarted: only the annotations remember
    clock.advance(60)
    res = await fresh.handle(
        alerts_of(am_alert(starts=clock.now, **alert("nb2")["labels"], fingerprint="nb2"))
    )
    assert res[0]["refused"] == "cooldown"


async def test_dry_run_reports_the_probe_and_writes_nothing(fake, kube, session, kernels) -> None:
    k, url = kernels
    fake.add_notebook("team-a", "bert")
    k.answer = (200, [kernel("idle", "2026-11-30T09:00:00Z")])
    s = settings(url)
    ctl = make_controller(replace(s, guard=replace(s.guard, dry_run=True)), kube, session, Clock())
    res = await ctl.handle(alerts_of(alert()))
    assert res[0]["result"] == "dry-run"
    assert res[0]["detail"] == (
        "would notify reclaim on notebook/team-a/bert: GPU idle while allocated; last activity 2026-11-30T09:00:00Z"
    )
    assert k.calls == 1
    assert [r[0] for r in fake.requests if r[0] != "GET"] == ["POST"]  # the DryRun Event only
    assert "annotations" not in fake.get("notebooks", "bert", "team-a")["metadata"]  # type: ignore[index]
