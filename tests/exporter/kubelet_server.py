"""A kubelet PodResources endpoint for tests: the real gRPC server (grpcio) on a unix socket serving the
real ``v1.PodResourcesLister`` service generated from the kubelet's api.proto, answering ``List`` from
fixture allocations. It stands in for the kubelet only in *what* it answers; transport and protocol are real.
DRA claims are served as the kubelet does (pkg/kubelet/apis/podresources, KEP-3695): per container one
``DynamicResource`` per claim (class name empty since structured parameters, claim name/namespace), with one
``ClaimResource`` per allocated device carrying driver, pool and device name and the CDI device names the
driver's NodePrepareResources returned (NVIDIA's: ``k8s.gpu.nvidia.com/device=gpu-0``).
``hang`` makes List block (to test client deadlines); ``fail`` makes it abort with UNAVAILABLE.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent import futures

import grpc

from xpuwatch.exporter.kubelet import ContainerClaim, ContainerDevices
from xpuwatch.exporter.podresources import api_pb2, api_pb2_grpc


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, server: KubeletServer) -> None:
        self.server = server

    def List(self, request, context):
        self.server.calls += 1
        if self.server.hang:
            self.server.release.wait(30)
        if self.server.fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet restarting")
        pods: dict[tuple[str, str], dict[str, list[ContainerDevices | ContainerClaim]]] = {}
        for a in [*self.server.allocations, *self.server.claims]:
            pods.setdefault((a.namespace, a.pod), {}).setdefault(a.container, []).append(a)
        resp = api_pb2.ListPodResourcesResponse()
        for (ns, name), ctrs in pods.items():
            pr = resp.pod_resources.add(name=name, namespace=ns)
            for cname, allocs in ctrs.items():
                cr = pr.containers.add(name=cname)
                dyn: dict[tuple[str, str], api_pb2.DynamicResource] = {}
                for a in allocs:
                    if isinstance(a, ContainerDevices):
                        cr.devices.add(resource_name=a.resource, device_ids=list(a.device_ids))
                        continue
                    key = (a.claim_namespace, a.claim_name)
                    if key not in dyn:
                        dyn[key] = cr.dynamic_resources.add(
                            claim_name=a.claim_name, claim_namespace=a.claim_namespace
                        )
                    res = dyn[key].claim_resources.add(
                        driver_name=a.driver, pool_name=a.pool, device_name=a.device
                    )
                    for cdi in a.cdi_devices:
                        res.cdi_devices.add(name=cdi)
        return resp


class KubeletServer:
    """Start with ``start()``, stop with ``stop()``; ``allocations`` may be replaced while running."""

    def __init__(
        self,
        socket_path: str,
        allocations: Sequence[ContainerDevices],
        claims: Sequence[ContainerClaim] = (),
    ) -> None:
        self.socket_path = socket_path
        self.allocations = list(allocations)
        self.claims = list(claims)
        self.hang = False
        self.fail = False
        self.calls = 0
        self.release = threading.Event()
        self._server: grpc.Server | None = None

    def start(self) -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)
        self._server.add_insecure_port(f"unix://{self.socket_path}")
        self._server.start()

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None
