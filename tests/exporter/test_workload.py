"""Workload identity: pod metadata from a Kubernetes API fake (HTTP level, real client) -> classify()."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from xpuwatch.exporter.kubeapi import ApiAccess, KubeApiError, list_node_pods
from xpuwatch.exporter.workload import JOB, NOTEBOOK, SERVICE, UNKNOWN, PodMeta, Workload, classify

from .kube_api_fake import FakeKubeApi


@pytest.fixture
async def api():  # type: ignore[no-untyped-def]
    fake = FakeKubeApi("t0ken")
    app = web.Application()
    app.router.add_get("/api/v1/pods", fake.pods)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield fake, f"http://127.0.0.1:{server.port}"
    await server.close()


async def test_list_node_pods_through_the_real_client(api) -> None:  # type: ignore[no-untyped-def]
    fake, url = api
    pods = await list_node_pods("gpu-1", ApiAccess(host=url, token="t0ken"))
    assert [p.name for p in pods] == ["jupyter-alice", "bob-nb-0", "train-x", "vllm-abc"]
    assert "fieldSelector=spec.nodeName%3Dgpu-1" in fake.requests[0]
    kinds = {p.name: classify(p) for p in pods}
    assert kinds == {
        "jupyter-alice": Workload(NOTEBOOK, "alice.e"),
        "bob-nb-0": Workload(NOTEBOOK, "bob@example.com"),
        "train-x": Workload(JOB, "carol"),
        "vllm-abc": Workload(SERVICE, ""),
    }


async def test_bad_token_is_a_clear_error(api) -> None:  # type: ignore[no-untyped-def]
    _, url = api
    with pytest.raises(KubeApiError, match=r"Unauthorized|401"):
        await list_node_pods("gpu-1", ApiAccess(host=url, token="wrong"))


async def test_unreachable_api_is_a_clear_error() -> None:
    with pytest.raises(KubeApiError):
        await list_node_pods("gpu-1", ApiAccess(host="http://127.0.0.1:9"), timeout=2)


def test_classify_unknown_and_owner_labels() -> None:
    p = PodMeta("ns", "p", {"user": "dave"}, {})
    assert classify(p) == Workload(UNKNOWN, "dave")
    assert classify(PodMeta("ns", "p", {"team-owner": "x"}, {}), owner_labels=("team-owner",)) == Workload(
        UNKNOWN, "x"
    )
