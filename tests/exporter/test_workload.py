"""Workload identity: pod metadata from a Kubernetes API fake (HTTP level, real client) -> classify()."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter.kubeapi import ApiAccess, KubeApiError, list_node_pods
from exporter.workload import JOB, NOTEBOOK, SERVICE, UNKNOWN, PodMeta, Workload, classify

PODS = [
    {
        "metadata": {
            "name": "jupyter-alice",
            "namespace": "hub",
            "labels": {"component": "singleuser-server", "hub.jupyter.org/username": "alice-2e"},
            "annotations": {"hub.jupyter.org/username": "alice.e"},
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c"}]},
    },
    {
        "metadata": {
            "name": "bob-nb-0",
            "namespace": "kubeflow-bob",
            "labels": {"notebook-name": "bob-nb"},
            "annotations": {"notebooks.kubeflow.org/creator": "bob@example.com"},
            "ownerReferences": [
                {"kind": "StatefulSet", "name": "bob-nb", "apiVersion": "apps/v1", "uid": "u1"}
            ],
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c"}]},
    },
    {
        "metadata": {
            "name": "train-x",
            "namespace": "ml",
            "labels": {"job-name": "train", "owner": "carol"},
            "ownerReferences": [{"kind": "Job", "name": "train", "apiVersion": "batch/v1", "uid": "u2"}],
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c"}]},
    },
    {
        "metadata": {
            "name": "vllm-abc",
            "namespace": "infer",
            "labels": {"app": "vllm"},
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": "vllm-1", "apiVersion": "apps/v1", "uid": "u3"}
            ],
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c"}]},
    },
    {
        "metadata": {"name": "elsewhere", "namespace": "x", "labels": {}},
        "spec": {"nodeName": "gpu-2", "containers": [{"name": "c"}]},
    },
]


class FakeKubeApi:
    """Kubernetes API stand-in for ``GET /api/v1/pods`` (core/v1 PodList) following the API reference
    "List Pod" and field-selector semantics (only ``spec.nodeName=`` is supported, as the kubelet-side
    selector); requires the bearer token; 401 otherwise (Kubernetes API "Authenticating")."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.requests: list[str] = []

    async def pods(self, request: web.Request) -> web.Response:
        self.requests.append(str(request.rel_url))
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "Unauthorized",
                    "code": 401,
                },
                status=401,
            )
        sel = request.query.get("fieldSelector", "")
        items = PODS
        if sel:
            key, _, val = sel.partition("=")
            if key != "spec.nodeName":
                return web.json_response(
                    {
                        "kind": "Status",
                        "status": "Failure",
                        "reason": "BadRequest",
                        "message": f"field label not supported: {key}",
                        "code": 400,
                    },
                    status=400,
                )
            items = [p for p in PODS if p["spec"]["nodeName"] == val]
        return web.json_response(
            {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": items}
        )


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
