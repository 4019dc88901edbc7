"""Enrichment input: pod metadata of this node from the Kubernetes API (the exporter's only Kubernetes client use).

Reads ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`` through the official client
(kubernetes_asyncio). RBAC needed: ``get``, ``list`` on ``pods`` (cluster-wide, filtered by node).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kubernetes_asyncio import client, config

from exporter.workload import PodMeta


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
            )
        )
    return tuple(out)
