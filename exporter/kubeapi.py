"""Enrichment input: pod metadata of this node from the Kubernetes API (the exporter's only Kubernetes client use).

Reads ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`` and, for DRA claims,
``GET /apis/resource.k8s.io/<v1|v1beta2|v1beta1>/resourceslices?fieldSelector=spec.nodeName=<node>`` through the
official client (kubernetes_asyncio). RBAC needed: ``list`` on ``pods`` and on
``resourceslices.resource.k8s.io`` (cluster-wide, filtered by node).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client, config

from xpuwatch.exporter.workload import PodMeta


@dataclass(frozen=True)
class ApiAccess:
    """How to reach the API server: ``host`` set means that URL with ``token`` (tests, out-of-cluster);
    otherwise in-cluster service account, else the default kubeconfig."""

    host: str | None = None
    token: str | None = None
    verify_ssl: bool = True


class KubeApiError(Exception):
    """The pod list could not be read (connection, auth, timeout)."""


async def _configure(access: ApiAccess) -> client.Configuration:
    cfg = client.Configuration()
    if access.host:
        cfg.host = access.host
        cfg.verify_ssl = access.verify_ssl
        if access.token:
            cfg.api_key = {"BearerToken": access.token}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return cfg
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        await config.load_kube_config(client_configuration=cfg)
    return cfg


async def list_node_pods(node: str, access: ApiAccess, timeout: float = 10.0) -> tuple[PodMeta, ...]:
    """Metadata of every pod scheduled on ``node``. Raises KubeApiError on any failure."""
    try:
        cfg = await _configure(access)
        async with client.ApiClient(configuration=cfg) as api:
            v1 = client.CoreV1Api(api)
            pods = await asyncio.wait_for(
                v1.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={node}", _request_timeout=timeout
                ),
                timeout=timeout,
            )
    except Exception as exc:  # the client raises many types (ApiException, aiohttp errors, timeouts)
        raise KubeApiError(f"listing pods on {node}: {type(exc).__name__}: {exc}") from exc
    out = []
    for p in pods.items or ():
        md = p.metadata
        out.append(
            PodMeta(
                namespace=md.namespace or "",
                name=md.name or "",
                labels=dict(md.labels or {}),
                annotations=dict(md.annotations or {}),
                owner_kinds=tuple(o.kind for o in (md.owner_references or ()) if o.kind),
                containers=tuple(c.name for c in ((p.spec.containers if p.spec else None) or ())),
                uid=md.uid or "",
                container_ids=_container_ids(p.status),
            )
        )
    return tuple(out)


def _container_ids(status: Any) -> dict[str, str]:
    """``containerd://<id>`` -> ``<id>``: container name, over regular and init containers."""
    out: dict[str, str] = {}
    if status is None:
        return out
    for cs in [*(status.container_statuses or ()), *(status.init_container_statuses or ())]:
        cid = getattr(cs, "container_id", None) or ""
        if cs.name and cid:
            out[cid.split("://", 1)[-1]] = cs.name
    return out


RESOURCE_APIS = ("ResourceV1Api", "ResourceV1beta2Api", "ResourceV1beta1Api")  # newest first


async def list_node_resource_slices(
    node: str, access: ApiAccess, timeout: float = 10.0
) -> tuple[dict[str, Any], ...]:
    """The DRA ResourceSlices published for ``node`` as JSON objects, from the newest ``resource.k8s.io``
    version the server serves (v1 since Kubernetes 1.34, v1beta2 in 1.33, v1beta1 in 1.32). Read raw
    (``_preload_content=False``): v1beta1 nests attributes under ``basic``, and ``podmap.dra_devices_of``
    reads every version's JSON. Raises KubeApiError when none answers."""
    last: Exception | None = None
    try:
        cfg = await _configure(access)
        async with client.ApiClient(configuration=cfg) as api:
            for name in RESOURCE_APIS:
                try:
                    resp = await asyncio.wait_for(
                        getattr(client, name)(api).list_resource_slice(
                            field_selector=f"spec.nodeName={node}",
                            _request_timeout=timeout,
                            _preload_content=False,
                        ),
                        timeout=timeout,
                    )
                except client.ApiException as exc:
                    if exc.status == 404:  # this version is not served: try the older one
                        last = exc
                        continue
                    raise
                status = getattr(resp, "status", 200)
                text = await resp.read()
                if status == 404:  # raw reads do not raise: the same fallback
                    last = client.ApiException(status=404, reason=f"{name} not served")
                    continue
                if status >= 300:
                    raise client.ApiException(status=status, reason=text[:200].decode(errors="replace"))
                body = json.loads(text)
                return tuple(i for i in body.get("items") or () if isinstance(i, dict))
    except Exception as exc:
        raise KubeApiError(f"listing resourceslices on {node}: {type(exc).__name__}: {exc}") from exc
    raise KubeApiError(f"listing resourceslices on {node}: resource.k8s.io not served ({last})")
