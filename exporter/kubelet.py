"""Enrichment input: which container holds which device, from the kubelet PodResources v1 gRPC API.

The kubelet serves ``v1.PodResourcesLister`` on a unix socket (default
``/var/lib/kubelet/pod-resources/kubelet.sock``). ``List`` returns, per pod and container, the device IDs each
device plugin allocated (``resource_name`` + ``device_ids``) and, since Kubernetes 1.27 (KEP-3695), the
Dynamic Resource Allocation claims (``dynamic_resources``: claim name/namespace and per allocated device the
driver, pool and device name plus the CDI device names the driver prepared). This module only talks gRPC and
returns frozen records; matching IDs to devices is ``exporter.podmap``'s job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


class KubeletError(Exception):
    """The PodResources API could not be read. ``reason`` is a bounded label value:
    ``socket_absent``, ``unavailable``, ``timeout``, ``rpc_error``."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ContainerDevices:
    """Devices of one resource held by one container, as the device plugin named them."""

    namespace: str
    pod: str
    container: str
    resource: str  # e.g. "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "huawei.com/Ascend910"
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class ContainerClaim:
    """One DRA-allocated device used by one container (PodResources v1 ``DynamicResource`` x
    ``ClaimResource``). ``driver``/``pool``/``device`` name the device in its ResourceSlice (e.g.
    ``gpu.nvidia.com`` / the node name / ``gpu-0``); ``cdi_devices`` are fully qualified CDI names such as
    ``k8s.gpu.nvidia.com/device=gpu-0`` or ``k8s.gpu.nvidia.com/claim=<claim uid>-gpu-0``."""

    namespace: str
    pod: str
    container: str
    claim_namespace: str
    claim_name: str
    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodResources:
    """One ``List`` answer, flattened: device-plugin allocations and DRA claim devices."""

    devices: tuple[ContainerDevices, ...] = ()
    claims: tuple[ContainerClaim, ...] = ()


def list_allocations(socket_path: str = DEFAULT_SOCKET, timeout: float = 5.0) -> tuple[ContainerDevices, ...]:
    """The device-plugin allocations of ``list_pod_resources`` (same errors)."""
    return list_pod_resources(socket_path, timeout).devices


def list_pod_resources(socket_path: str = DEFAULT_SOCKET, timeout: float = 5.0) -> PodResources:
    """Call ``PodResourcesLister.List`` once over the unix socket and flatten the answer.

    Raises KubeletError when the socket is absent, the kubelet does not answer within ``timeout`` seconds,
    or the call fails. A new channel per call: the kubelet restarts and recreates its socket, and a cached
    channel to a deleted socket would keep failing.
    """
    # gRPC and protobuf come with the `kubernetes` extra: imported here so that the records above (and
    # every node without pod mapping) need neither.
    import grpc

    from xpuwatch.exporter.podresources import api_pb2, api_pb2_grpc

    if not os.path.exists(socket_path):
        raise KubeletError(f"pod-resources socket {socket_path} does not exist", "socket_absent")
    channel = grpc.insecure_channel(f"unix://{socket_path}")
    try:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        resp = stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        reason = {
            grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
            grpc.StatusCode.UNAVAILABLE: "unavailable",
        }.get(code, "rpc_error")  # type: ignore[arg-type]
        raise KubeletError(f"PodResources List failed: {code}: {exc}", reason) from exc
    finally:
        channel.close()
    out: list[ContainerDevices] = []
    claims: list[ContainerClaim] = []
    for pod in resp.pod_resources:
        for ctr in pod.containers:
            for dyn in ctr.dynamic_resources:
                for res in dyn.claim_resources:
                    claims.append(
                        ContainerClaim(
                            namespace=pod.namespace,
                            pod=pod.name,
                            container=ctr.name,
                            claim_namespace=dyn.claim_namespace,
                            claim_name=dyn.claim_name,
                            driver=res.driver_name,
                            pool=res.pool_name,
                            device=res.device_name,
                            cdi_devices=tuple(c.name for c in res.cdi_devices),
                        )
                    )
            for dev in ctr.devices:
                if dev.device_ids:
                    out.append(
                        ContainerDevices(
                            namespace=pod.namespace,
                            pod=pod.name,
                            container=ctr.name,
                            resource=dev.resource_name,
                            device_ids=tuple(dev.device_ids),
                        )
                    )
    return PodResources(tuple(out), tuple(claims))
