"""The Kubernetes edge of remediation: the ONLY module importing ``kubernetes_asyncio``.

Reads come back as frozen views (``NodeView``, ``PodView``, ``LeaseView``); writes take plain dicts.
Requests go through the official client (so serialization, content types and auth are the real ones)
with ``_preload_content=False``: bodies are parsed here, which is cheaper than the generated models and
lets every status code reach one place. Non-2xx answers raise ``KubeError(status, reason, message)``.

API facts relied on (kubernetes.io/docs/reference/using-api/api-concepts/ and the pages cited inline):
- a dict body to ``patch_*`` is sent as a strategic-merge patch; ``spec.taints`` has no patch merge key,
  so a taint patch replaces the list: taints are read-modify-written with ``metadata.resourceVersion``
  in the patch, which turns a concurrent change into 409 Conflict (retried here);
- custom resources accept only JSON/merge patches: Notebook patches are sent as merge-patch;
- Eviction (kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/): 201 evicted, 429 blocked by
  a PodDisruptionBudget, 500 misconfiguration (several PDBs), 404 pod already gone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from .settings import KubeSettings

NOTEBOOK_GROUP, NOTEBOOK_VERSION, NOTEBOOK_PLURAL = "kubeflow.org", "v1", "notebooks"
MERGE_PATCH = "application/merge-patch+json"


class KubeError(Exception):
    """A non-2xx answer (or transport failure, ``status=0``) from the API server."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeView:
    name: str
    resource_version: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    taints: tuple[Taint, ...]
    unschedulable: bool


@dataclass(frozen=True)
class PodView:
    """A pod as the actions need it. ``gpu_resources``: names of ``nvidia.com/*`` (and other vendor)
    extended resources its containers request, with the limit strings (e.g. ``nvidia.com/gpumem: 8000``)."""

    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_kind: str
    owner_name: str
    gpu_resources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LeaseView:
    resource_version: str
    holder: str
    lease_duration_seconds: int
    acquire_time: str
    renew_time: str
    transitions: int


@dataclass(frozen=True)
class ObjectRef:
    """What an Event is about (``involvedObject``)."""

    kind: str
    name: str
    namespace: str = ""
    api_version: str = "v1"
    uid: str = ""


EvictionResult = Literal["evicted", "blocked", "gone", "error"]
GPU_RESOURCE_PREFIXES = ("nvidia.com/", "amd.com/", "huawei.com/")


def _node(doc: Mapping[str, Any]) -> NodeView:
    meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
    return NodeView(
        name=meta.get("name", ""),
        resource_version=str(meta.get("resourceVersion", "")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        taints=tuple(
            Taint(t.get("key", ""), t.get("value", "") or "", t.get("effect", ""))
            for t in spec.get("taints") or []
        ),
        unschedulable=bool(spec.get("unschedulable")),
    )


def _pod(doc: Mapping[str, Any]) -> PodView:
    meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
    owners = meta.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    gpu: dict[str, str] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        for section in ("limits", "requests"):
            for name, qty in (res.get(section) or {}).items():
                if name.startswith(GPU_RESOURCE_PREFIXES):
                    gpu.setdefault(name, str(qty))
    return PodView(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        node=spec.get("nodeName", "") or "",
        phase=(doc.get("status") or {}).get("phase", "") or "",
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        owner_kind=owner.get("kind", ""),
        owner_name=owner.get("name", ""),
        gpu_resources=gpu,
    )


def _lease(doc: Mapping[str, Any]) -> LeaseView:
    meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
    return LeaseView(
        resource_version=str(meta.get("resourceVersion", "")),
        holder=spec.get("holderIdentity") or "",
        lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime") or "",
        renew_time=spec.get("renewTime") or "",
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def micro_time(dt: datetime) -> str:
    """``metav1.MicroTime`` wire format (RFC 3339 with microseconds, UTC)."""
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Kube:
    """Async client facade. Construct with ``connect(settings)`` (or ``Kube(api_client)`` in tests) and
    ``await close()`` at the end."""

    def __init__(
        self, api: k8s.ApiClient, component: str = "xpuwatch-remediation", instance: str = ""
    ) -> None:
        self.api = api
        self.core = k8s.CoreV1Api(api)
        self.coord = k8s.CoordinationV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.component = component
        self.instance = instance

    @classmethod
    async def connect(cls, settings: KubeSettings, instance: str = "") -> Kube:
        conf = k8s.Configuration()
        if settings.host:
            conf.host = settings.host
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=conf)
            except k8s_config.ConfigException:
                await k8s_config.load_kube_config(config_file=settings.kubeconfig, client_configuration=conf)
        return cls(k8s.ApiClient(conf), settings.component, instance)

    async def close(self) -> None:
        await self.api.close()

    async def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            resp = await fn(*args, _preload_content=False, **kwargs)
        except k8s.ApiException as exc:  # raised before the request for bad arguments
            raise KubeError(exc.status or 0, str(exc.reason), str(exc.body or "")) from None
        except (TimeoutError, OSError) as exc:
            raise KubeError(0, "Unreachable", str(exc)) from None
        except Exception as exc:  # aiohttp.ClientError without importing aiohttp types here
            if exc.__class__.__module__.startswith("aiohttp"):
                raise KubeError(0, "Unreachable", str(exc)) from None
            raise
        try:
            body = await resp.read()
        finally:
            resp.release()
        try:
            doc = json.loads(body) if body else {}
        except (ValueError, RecursionError):
            doc = {}
        if not 200 <= resp.status <= 299:
            reason = doc.get("reason", "") if isinstance(doc, dict) else ""
            message = doc.get("message", "") if isinstance(doc, dict) else ""
            raise KubeError(resp.status, reason or str(resp.reason), message)
        return doc

    # -- nodes ------------------------------------------------------------------------------------
    async def get_node(self, name: str) -> NodeView:
        return _node(await self._call(self.core.read_node, name))

    async def list_nodes(self) -> list[NodeView]:
        doc = await self._call(self.core.list_node)
        return [_node(i) for i in doc.get("items") or []]

    async def patch_node(self, name: str, body: Mapping[str, Any], dry_run: bool = False) -> NodeView:
        """Strategic-merge patch (labels, annotations, ``spec.unschedulable``); None values delete keys."""
        kwargs = {"dry_run": "All"} if dry_run else {}
        return _node(await self._call(self.core.patch_node, name, dict(body), **kwargs))

    async def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> NodeView:
        return await self.patch_node(name, {"metadata": {"annotations": dict(annotations)}})

    async def update_taints(
        self, name: str, mutate: Callable[[tuple[Taint, ...]], tuple[Taint, ...]], attempts: int = 5
    ) -> NodeView:
        """Read-modify-write ``spec.taints`` guarded by resourceVersion; retries on 409 Conflict."""
        for attempt in range(attempts):
            node = await self.get_node(name)
            new = mutate(node.taints)
            if new == node.taints:
                return node
            body = {
                "metadata": {"resourceVersion": node.resource_version},
                "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in new]},
            }
            try:
                return await self.patch_node(name, body)
            except KubeError as exc:
                if exc.status != 409 or attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    # -- pods -------------------------------------------------------------------------------------
    async def pods_on_node(self, node: str) -> list[PodView]:
        doc = await self._call(self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}")
        return [_pod(i) for i in doc.get("items") or []]

    async def pods_labelled(self, selector: str) -> list[PodView]:
        doc = await self._call(self.core.list_pod_for_all_namespaces, label_selector=selector)
        return [_pod(i) for i in doc.get("items") or []]

    async def get_pod(self, namespace: str, name: str) -> PodView | None:
        try:
            return _pod(await self._call(self.core.read_namespaced_pod, name, namespace))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def patch_pod_meta(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        labels: Mapping[str, str | None] = {},
    ) -> None:
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if labels:
            meta["labels"] = dict(labels)
        await self._call(self.core.patch_namespaced_pod, name, namespace, {"metadata": meta})

    async def evict(self, namespace: str, name: str, grace_seconds: int | None = None) -> EvictionResult:
        """POST policy/v1 Eviction. 201/200 evicted, 429 blocked (PDB), 404 gone, else error."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if grace_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_seconds}
        try:
            await self._call(self.core.create_namespaced_pod_eviction, name, namespace, body)
        except KubeError as exc:
            return {429: "blocked", 404: "gone"}.get(exc.status, "error")  # type: ignore[return-value]
        return "evicted"

    # -- Kubeflow notebooks -----------------------------------------------------------------------
    async def get_notebook(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            doc = await self._call(
                self.custom.get_namespaced_custom_object,
                NOTEBOOK_GROUP,
                NOTEBOOK_VERSION,
                namespace,
                NOTEBOOK_PLURAL,
                name,
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return dict(doc)

    async def patch_notebook_meta(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        labels: Mapping[str, str | None] = {},
    ) -> None:
        meta: dict[str, Any] = {"annotations": dict(annotations)}
        if labels:
            meta["labels"] = dict(labels)
        await self._call(
            self.custom.patch_namespaced_custom_object,
            NOTEBOOK_GROUP,
            NOTEBOOK_VERSION,
            namespace,
            NOTEBOOK_PLURAL,
            name,
            {"metadata": meta},
            _content_type=MERGE_PATCH,
        )

    async def notebooks_labelled(self, selector: str) -> list[dict[str, Any]]:
        doc = await self._call(
            self.custom.list_cluster_custom_object,
            NOTEBOOK_GROUP,
            NOTEBOOK_VERSION,
            NOTEBOOK_PLURAL,
            label_selector=selector,
        )
        return list(doc.get("items") or [])

    # -- events -----------------------------------------------------------------------------------
    async def emit_event(
        self,
        ref: ObjectRef,
        reason: str,
        message: str,
        now: datetime,
        type_: str = "Normal",
    ) -> None:
        """Create a core/v1 Event with ``eventTime`` set, which the API server validates as a "new" Event
        (kubernetes ``pkg/apis/core/validation/events.go``): namespaced objects' Events live in the
        object's namespace, cluster-scoped objects' (nodes) in ``default``; ``reportingComponent``,
        ``reportingInstance``, ``action`` and ``reason`` are required (<= 128 chars), the message is
        kept within the 1 kB note limit."""
        ns = ref.namespace or "default"
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{ref.name}.", "namespace": ns},
            "involvedObject": {
                "kind": ref.kind,
                "name": ref.name,
                "namespace": ref.namespace,
                "apiVersion": ref.api_version,
                "uid": ref.uid,
            },
            "reason": reason,
            "message": message.encode()[:1024].decode(errors="ignore"),
            "type": type_,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": (self.instance or self.component)[:128],
            "action": reason,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": micro_time(now),
        }
        await self._call(self.core.create_namespaced_event, ns, body)

    # -- leases -----------------------------------------------------------------------------------
    async def get_lease(self, namespace: str, name: str) -> LeaseView | None:
        try:
            return _lease(await self._call(self.coord.read_namespaced_lease, name, namespace))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def write_lease(
        self, namespace: str, name: str, spec: Mapping[str, Any], resource_version: str | None
    ) -> LeaseView:
        """Create (``resource_version`` None; 409 if it exists) or replace with optimistic concurrency
        (409 if the lease changed since it was read)."""
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": dict(spec),
        }
        if resource_version is None:
            return _lease(await self._call(self.coord.create_namespaced_lease, namespace, body))
        body["metadata"]["resourceVersion"] = resource_version
        return _lease(await self._call(self.coord.replace_namespaced_lease, name, namespace, body))
