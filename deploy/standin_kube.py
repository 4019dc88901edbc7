"""Demo edge: a tiny in-memory stand-in for the Kubernetes API server, enough for remediation in dry-run.

``xpuwatch demo`` has no cluster, yet the remediation controller reads the objects it would act on (the
node, the notebook pod), holds a ``coordination.k8s.io/v1`` Lease and writes core/v1 Events, through the
real ``kubernetes_asyncio`` client. This stand-in answers those requests over HTTP on 127.0.0.1, as the API
server does per the API conventions (github.com/kubernetes/community, sig-architecture/api-conventions.md):
errors are ``Status`` objects, every write bumps ``metadata.resourceVersion``, a create of an existing
name is 409 ``AlreadyExists`` and a replace carrying a stale resourceVersion is 409 ``Conflict``; list
calls honour ``fieldSelector=spec.nodeName=`` on pods and equality ``labelSelector``s. It is NOT a general
fake: patches are JSON merge patches (enough for annotations and labels), there is no watch, no admission
and no eviction, and custom resources (Kubeflow Notebooks) answer 404, as a cluster without the CRD does.
In dry-run the controller only reads, renews its Lease and creates Events, all of which this covers.
The test suite's full fake (tests/remediation/fakekube.py) stays test-only.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from xpuwatch.vendors.sim import Scenario, SimPod

# What a notebook, job or service pod is owned by in a real cluster (JupyterHub's KubeSpawner pods have
# no controller; Jobs own their pods; Deployments own theirs through a ReplicaSet).
_OWNERS: Mapping[str, tuple[str, str] | None] = {
    "notebook": None,
    "job": ("Job", "batch/v1"),
    "service": ("ReplicaSet", "apps/v1"),
}


@dataclass(frozen=True)
class KubeEvent:
    """A core/v1 Event the controller created: what it is about and what it says."""

    namespace: str
    kind: str
    name: str
    reason: str
    message: str


def status_response(code: int, reason: str, message: str) -> web.Response:
    """A Kubernetes ``Status`` failure body (API conventions, "Response Status Kind")."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }
    return web.json_response(body, status=code)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` deletes a key)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _selected(labels: Mapping[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, eq, value = term.replace("==", "=").partition("=")
        if (eq and labels.get(key) != value) or (not eq and key not in labels):
            return False
    return True


def scenario_objects(scenario: Scenario) -> list[tuple[str, dict[str, Any]]]:
    """(resource, object) for the scenario's node and every pod its timeline ever assigns, so the
    controller finds the targets the alerts name. Pure."""
    pods: dict[tuple[str, str], SimPod] = {}
    for ev in scenario.timeline:
        for p in ev.pods or ():
            pods.setdefault((p.namespace, p.pod), p)
    objs: list[tuple[str, dict[str, Any]]] = [
        ("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": scenario.node}, "spec": {}})
    ]
    for (ns, name), p in sorted(pods.items()):
        meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": {}}
        owner = _OWNERS.get(p.workload_kind)
        if owner:
            meta["ownerReferences"] = [
                {
                    "kind": owner[0],
                    "apiVersion": owner[1],
                    "name": name.rsplit("-", 1)[0],
                    "controller": True,
                    "uid": f"owner-{ns}-{name}",
                }
            ]
        if p.workload_kind == "notebook" and p.owner:
            meta["labels"] = {"component": "singleuser-server", "hub.jupyter.org/username": p.owner}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"nodeName": scenario.node, "containers": [{"name": p.container}]},
            "status": {"phase": "Running"},
        }
        objs.append(("pods", pod))
    return objs


class KubeStandIn:
    """The API server stand-in: objects keyed by (resource, namespace, name); ``on_event`` is called with
    every Event created. Serve it with ``app()`` (an aiohttp Application)."""

    def __init__(
        self,
        objects: Iterable[tuple[str, dict[str, Any]]] = (),
        on_event: Callable[[KubeEvent], None] | None = None,
    ) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._rv = itertools.count(1000)
        self._uid = itertools.count(1)
        self.on_event = on_event
        self.events: list[KubeEvent] = []
        for resource, obj in objects:
            self._store(resource, copy.deepcopy(obj))

    def _store(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"standin-{next(self._uid):06d}")
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[(resource, meta.get("namespace", "") or "", meta["name"])] = obj
        return obj

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.dispatch)
        return app

    async def dispatch(self, request: web.Request) -> web.Response:
        parts = [p for p in request.match_info["path"].split("/") if p]
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis" and parts[1] == "coordination.k8s.io":
            rest = parts[3:]
        else:
            return status_response(
                404, "NotFound", f"the server could not find the requested resource ({request.path})"
            )
        namespace = ""
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 2:
            return status_response(
                404, "NotFound", f"the server could not find the requested resource ({request.path})"
            )
        resource, name = rest[0], (rest[1] if len(rest) == 2 else "")
        body: Any = None
        if request.can_read_body:
            try:
                body = json.loads(await request.read())
            except ValueError:
                return status_response(400, "BadRequest", "the body is not valid JSON")
            if not isinstance(body, dict):
                return status_response(400, "BadRequest", "the body must be a JSON object")
        method = request.method
        if not name and method == "GET":
            return self._list(resource, namespace, request.query)
        if not name and method == "POST":
            return self._create(resource, namespace, body or {})
        key = (resource, namespace, name)
        obj = self.objects.get(key)
        if obj is None and method in ("GET", "PUT", "PATCH"):
            return status_response(404, "NotFound", f'{resource} "{name}" not found')
        if method == "GET":
            return web.json_response(obj)
        if method == "PUT":
            return self._replace(key, obj or {}, body or {})
        if method == "PATCH":
            if request.query.get("dryRun"):
                return web.json_response(merge_patch(obj, body))
            return web.json_response(self._store(resource, merge_patch(obj, body)))
        return status_response(405, "MethodNotAllowed", f"{method} is not supported by this stand-in")

    def _list(self, resource: str, namespace: str, query: Mapping[str, str]) -> web.Response:
        items = [o for (r, ns, _), o in self.objects.items() if r == resource and namespace in ("", ns)]
        for term in filter(None, query.get("fieldSelector", "").split(",")):
            field, _, value = term.partition("=")
            if resource != "pods" or field != "spec.nodeName":
                return status_response(400, "BadRequest", f'field label not supported: "{field}"')
            items = [o for o in items if o["spec"].get("nodeName") == value]
        if query.get("labelSelector"):
            items = [o for o in items if _selected(o["metadata"].get("labels") or {}, query["labelSelector"])]
        return web.json_response(
            {
                "kind": "List",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(next(self._rv))},
                "items": items,
            }
        )

    def _create(self, resource: str, namespace: str, body: dict[str, Any]) -> web.Response:
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                return status_response(
                    422, "Invalid", "metadata.name: Required value: name or generateName is required"
                )
            meta["name"] = f"{meta['generateName']}{next(self._uid):08x}"
        meta["namespace"] = namespace
        meta.pop("resourceVersion", None)
        if (resource, namespace, meta["name"]) in self.objects:
            return status_response(409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists')
        obj = self._store(resource, body)
        if resource == "events":
            inv = body.get("involvedObject") or {}
            ev = KubeEvent(
                namespace,
                str(inv.get("kind", "")),
                str(inv.get("name", "")),
                str(body.get("reason", "")),
                str(body.get("message", "")),
            )
            self.events.append(ev)
            if self.on_event is not None:
                self.on_event(ev)
        return web.json_response(obj, status=201)

    def _replace(self, key: tuple[str, str, str], obj: dict[str, Any], body: dict[str, Any]) -> web.Response:
        sent = (body.get("metadata") or {}).get("resourceVersion")
        if sent != obj["metadata"]["resourceVersion"]:
            return status_response(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        body["metadata"]["uid"] = obj["metadata"]["uid"]
        return web.json_response(self._store(key[0], body))
