"""A fake kube-apiserver at the HTTP level (aiohttp on 127.0.0.1) for the remediation tests.

It stands for the Kubernetes API server, driven by the real ``kubernetes_asyncio`` client, and reproduces
only the behaviours the controller relies on, as documented in:
- API conventions (github.com/kubernetes/community contributors/devel/sig-architecture/api-conventions.md):
  every write bumps ``metadata.resourceVersion``; a write carrying a stale resourceVersion is rejected
  with 409 ``Conflict``; creating an existing name is 409 ``AlreadyExists``; errors are ``Status`` objects.
- API concepts (kubernetes.io/docs/reference/using-api/api-concepts/, "Patch"): strategic-merge patch
  (maps merge, lists without a patch merge key such as ``spec.taints`` are replaced, ``null`` deletes),
  JSON merge patch (RFC 7386); custom resources reject strategic-merge patches with 415.
- Field selectors (kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/): pods
  support ``spec.nodeName``; an unsupported field is 400. Label selectors: equality ``k=v`` and ``k``.
- API-initiated eviction (kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/): POST
  ``pods/{name}/eviction`` answers 201 and deletes the pod, 429 when a PodDisruptionBudget forbids it,
  500 on misconfiguration, 404 when the pod is gone. Per-pod answers are scripted with ``eviction_plan``.
- Leases (coordination.k8s.io/v1): plain objects under optimistic concurrency, as client-go's LeaseLock
  uses them; Notebooks (kubeflow.org/v1) as custom resources.
- Events (core/v1): validated like ``pkg/apis/core/validation/events.go`` (an Event with ``eventTime``
  about a cluster-scoped object must live in ``default`` or ``kube-system``; reportingComponent,
  reportingInstance, action and reason are required), then stored as created.
It keeps a request log so tests can count calls (e.g. evictions per pod).
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from xpuwatch.deploy.standin_kube import merge_patch
from xpuwatch.deploy.standin_kube import status_response as _status

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


def _labels_match(labels: Mapping[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif term not in labels:
            return False
    return True


class FakeKube:
    """In-memory objects keyed by (kind, namespace, name). ``eviction_plan[(ns, pod)]`` is a list of
    status codes answered in turn (then 201)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.rv = 1000
        self.requests: list[tuple[str, str]] = []
        self.eviction_plan: dict[tuple[str, str], list[int]] = {}
        self.evictions: list[tuple[str, str]] = []  # accepted evictions
        self.eviction_bodies: list[Any] = []  # every eviction request body, as sent
        self.down = False  # answer 503 to everything (an unreachable/overloaded apiserver)
        self.app = web.Application()
        self.app.router.add_route("*", "/{path:.*}", self.dispatch)
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        self.runner = web.AppRunner(self.app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self.runner:
            await self.runner.cleanup()

    # -- seeding and inspection -------------------------------------------------------------------
    def _bump(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)

    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuidlib.uuid4()))
        self._bump(obj)
        self.objects[(kind, meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def add_node(self, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        return self.put(
            "nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": dict(labels or {})},
                "spec": {},
            },
        )

    def add_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        resources: Mapping[str, str] | None = None,
        owner: tuple[str, str] | None = ("ReplicaSet", "rs"),
        phase: str = "Running",
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if owner:
            meta["ownerReferences"] = [
                {"kind": owner[0], "name": owner[1], "controller": True, "apiVersion": "apps/v1", "uid": "x"}
            ]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "nodeName": node,
                "containers": [{"name": "main", "resources": {"limits": dict(resources or {})}}],
            },
            "status": {"phase": phase},
        }
        return self.put("pods", pod)

    def add_notebook(self, namespace: str, name: str) -> dict[str, Any]:
        nb = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "Notebook",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {},
        }
        return self.put("notebooks", nb)

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.objects.get((kind, namespace, name))

    def list(self, kind: str) -> list[dict[str, Any]]:
        return [o for (k, _, _), o in self.objects.items() if k == kind]

    # -- HTTP -------------------------------------------------------------------------------------
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        self.requests.append((request.method, path))
        if self.down:
            return _status(503, "ServiceUnavailable", "apiserver is down")
        parts = [p for p in path.split("/") if p]
        # /api/v1/... or /apis/<group>/<version>/...
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            rest = parts[3:]
        else:
            return _status(404, "NotFound", f"the server could not find the requested resource {path}")
        namespace = ""
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            return _status(404, "NotFound", path)
        kind, name, sub = rest[0], (rest[1] if len(rest) > 1 else ""), (rest[2] if len(rest) > 2 else "")
        body: Any = None
        if request.can_read_body:
            try:
                body = json.loads(await request.read())
            except ValueError:
                return _status(400, "BadRequest", "invalid JSON body")
        if sub == "eviction" and request.method == "POST":
            return self.evict(namespace, name, body)
        if not name:
            if request.method == "GET":
                return self.list_objects(kind, namespace, request.query)
            if request.method == "POST":
                return self.create(kind, namespace, body)
        else:
            key = (kind, namespace, name)
            if request.method == "GET":
                obj = self.objects.get(key)
                return (
                    web.json_response(obj) if obj else _status(404, "NotFound", f'{kind} "{name}" not found')
                )
            if request.method == "PATCH":
                return self.patch(key, body, request.content_type)
            if request.method == "PUT":
                return self.replace(key, body)
            if request.method == "DELETE":
                obj = self.objects.pop(key, None)
                return web.json_response(obj) if obj else _status(404, "NotFound", name)
        return _status(405, "MethodNotAllowed", f"{request.method} {path}")

    def list_objects(self, kind: str, namespace: str, query: Mapping[str, str]) -> web.Response:
        items = [
            o for (k, ns, _), o in self.objects.items() if k == kind and (not namespace or ns == namespace)
        ]
        fs = query.get("fieldSelector", "")
        if fs:
            for term in fs.split(","):
                field, _, value = term.partition("=")
                if kind != "pods" or field != "spec.nodeName":
                    return _status(400, "BadRequest", f'field label not supported: "{field}"')
                items = [o for o in items if o.get("spec", {}).get("nodeName") == value]
        ls = query.get("labelSelector", "")
        if ls:
            items = [o for o in items if _labels_match(o["metadata"].get("labels") or {}, ls)]
        return web.json_response(
            {
                "kind": "List",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }
        )

    def create(self, kind: str, namespace: str, body: Any) -> web.Response:
        if not isinstance(body, dict):
            return _status(400, "BadRequest", "body must be an object")
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuidlib.uuid4().hex[:8]
            else:
                return _status(400, "BadRequest", "name or generateName is required")
        meta["namespace"] = namespace or meta.get("namespace", "")
        if kind == "events":
            problem = self.invalid_event(namespace, body)
            if problem:
                return _status(422, "Invalid", f'Event "{meta["name"]}" is invalid: {problem}')
        key = (kind, namespace, meta["name"])
        if key in self.objects:
            return _status(409, "AlreadyExists", f'{kind} "{meta["name"]}" already exists')
        meta.pop("resourceVersion", None)
        return web.json_response(self.put(kind, body), status=201)

    @staticmethod
    def invalid_event(namespace: str, body: dict[str, Any]) -> str:
        """core/v1 Event validation (kubernetes pkg/apis/core/validation/events.go, legacyValidateEvent)."""
        inv = body.get("involvedObject") or {}
        if not inv:
            return "involvedObject: Required value"
        inv_ns = inv.get("namespace") or ""
        if body.get("eventTime"):  # a "new" Event
            if not inv_ns and namespace not in ("default", "kube-system"):
                return 'involvedObject.namespace: Invalid value: "": does not match event.namespace'
            for f in ("reportingComponent", "reportingInstance", "action", "reason"):
                if not body.get(f):
                    return f"{f}: Required value"
                if len(body[f]) > 128:
                    return f"{f}: Too long: may not be more than 128 bytes"
        elif (not inv_ns and namespace not in ("", "default")) or (inv_ns and inv_ns != namespace):
            return f'involvedObject.namespace: Invalid value: "{inv_ns}": does not match event.namespace'
        return ""

    def patch(self, key: tuple[str, str, str], body: Any, content_type: str) -> web.Response:
        obj = self.objects.get(key)
        if obj is None:
            return _status(404, "NotFound", f'{key[0]} "{key[2]}" not found')
        if key[0] == "notebooks" and content_type == SMP:
            return _status(
                415, "UnsupportedMediaType", "strategic merge patch is not supported for custom resources"
            )
        if content_type not in (SMP, MERGE):
            return _status(415, "UnsupportedMediaType", f"unsupported patch type {content_type}")
        want_rv = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        if want_rv is not None and want_rv != obj["metadata"]["resourceVersion"]:
            return _status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        new = merge_patch(obj, body)
        new["metadata"]["uid"] = obj["metadata"]["uid"]
        self._bump(new)
        self.objects[key] = new
        return web.json_response(new)

    def replace(self, key: tuple[str, str, str], body: Any) -> web.Response:
        obj = self.objects.get(key)
        if obj is None:
            return _status(404, "NotFound", key[2])
        if (
            not isinstance(body, dict)
            or (body.get("metadata") or {}).get("resourceVersion") != obj["metadata"]["resourceVersion"]
        ):
            return _status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        body["metadata"]["uid"] = obj["metadata"]["uid"]
        self._bump(body)
        self.objects[key] = body
        return web.json_response(body)

    def evict(self, namespace: str, name: str, body: Any) -> web.Response:
        self.eviction_bodies.append(body)
        if not isinstance(body, dict) or (body.get("metadata") or {}).get("name") != name:
            return _status(400, "BadRequest", "name parameter required")
        key = ("pods", namespace, name)
        if key not in self.objects:
            return _status(404, "NotFound", f'pods "{name}" not found')
        plan = self.eviction_plan.get((namespace, name))
        code = plan.pop(0) if plan else 201
        if code == 429:
            return _status(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
            )
        if code == 500:
            return _status(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            )
        del self.objects[key]
        self.evictions.append((namespace, name))
        return web.json_response(
            {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}, status=201
        )
