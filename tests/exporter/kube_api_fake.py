"""Kubernetes API stand-in for the exporter's pod enrichment (see FakeKubeApi)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

PODS: list[dict[str, Any]] = [
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

    def __init__(self, token: str, pods: list[dict[str, Any]] | None = None) -> None:
        self.token = token
        self.pods_list = PODS if pods is None else pods
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
        items = self.pods_list
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
            items = [p for p in self.pods_list if p["spec"]["nodeName"] == val]
        return web.json_response(
            {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": items}
        )


class FakeResourceSlices:
    """Kubernetes API stand-in for ``GET /apis/resource.k8s.io/<version>/resourceslices`` (ResourceSliceList,
    API reference "ResourceSlice v1", field selector ``spec.nodeName``). Serves only ``versions``: others
    answer 404 NotFound as an API server without that group version does (the client then falls back)."""

    def __init__(self, slices: list[dict[str, Any]], versions: tuple[str, ...] = ("v1",)) -> None:
        self.slices = slices
        self.versions = versions
        self.requests: list[str] = []

    async def list(self, request: web.Request) -> web.Response:
        self.requests.append(str(request.rel_url))
        version = request.match_info["version"]
        if version not in self.versions:
            return web.json_response(
                {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}, status=404
            )
        key, _, val = request.query.get("fieldSelector", "").partition("=")
        items = [s for s in self.slices if key != "spec.nodeName" or s["spec"].get("nodeName") == val]
        return web.json_response(
            {
                "kind": "ResourceSliceList",
                "apiVersion": f"resource.k8s.io/{version}",
                "metadata": {"resourceVersion": "9"},
                "items": items,
            }
        )
