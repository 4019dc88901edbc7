"""The kubelet attribution source: refresh on its own timer, failure drops only pod labels, API enrichment."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from xpuwatch.exporter.attribution import Holder, MappingStatus, slice_key
from xpuwatch.exporter.kubelet import ContainerClaim, ContainerDevices
from xpuwatch.exporter.podmap import DeviceRef, SliceRef
from xpuwatch.exporter.podsource import KubeletAttributionSource, PodMappingSettings
from xpuwatch.vendors.base import Slice

from .kube_api_fake import FakeKubeApi, FakeResourceSlices
from .kubelet_server import KubeletServer

A, B, C, MIG = "GPU-a", "GPU-b", "GPU-c", "MIG-x"
DEVS = (
    [DeviceRef("nvidia", A, "0"), DeviceRef("nvidia", B, "1"), DeviceRef("nvidia", C, "7")],
    [SliceRef(A, "1/0", MIG)],
)
ALLOCS = [
    ContainerDevices("ml", "jupyter-alice", "notebook", "nvidia.com/mig-1g.10gb", (MIG,)),
    ContainerDevices("ml", "train-0", "main", "nvidia.com/gpu", (B,)),
]


def _source(sock: str, **kw: object) -> KubeletAttributionSource:
    return KubeletAttributionSource(
        # A generous timeout for a loaded machine: tests of a hung kubelet pass their own.
        PodMappingSettings(enabled=True, socket=sock, **{"timeout_seconds": 30, **kw}),  # type: ignore[arg-type]
        "gpu-1",
        lambda: DEVS,
    )


def test_refresh_maps_devices_and_slices(tmp_path: Path) -> None:
    srv = KubeletServer(str(tmp_path / "k.sock"), ALLOCS)
    srv.start()
    try:
        src = _source(srv.socket_path)
        assert src.up() is None and src.current().entries == ()
        assert src.refresh() is True
        att = src.current()
        assert src.up() is True
        assert att.for_device(B) == (Holder("ml", "train-0", "main", "unknown", ""),)
        assert att.for_device(A) == ()
        assert att.for_slice(Slice(A, "1/0", "1g.10gb", "mig", uuid=MIG)) == (
            Holder("ml", "jupyter-alice", "notebook", "unknown", ""),
        )
        assert att.for_slice(Slice(A, "1/0", "1g.10gb", "mig")) == att.for_slice(
            Slice(A, "1/0", "1g.10gb", "mig", uuid=MIG)
        )
    finally:
        srv.stop()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_outage_shorter_than_grace_keeps_labels_longer_drops_them(tmp_path: Path) -> None:
    sock = str(tmp_path / "k.sock")
    srv = KubeletServer(sock, ALLOCS)
    srv.start()
    mono = _Clock()
    src = KubeletAttributionSource(
        PodMappingSettings(enabled=True, socket=sock, timeout_seconds=1, grace_seconds=60),
        "gpu-1",
        lambda: DEVS,
        clock=mono,
        wall=lambda: 1.7e9 + mono.now,
    )
    assert src.status() is None  # nothing known before the first refresh
    assert src.refresh() and src.current().for_device(B)
    assert src.status() == MappingStatus(True, 1.7e9 + 1000.0, ())
    srv.stop()
    Path(sock).unlink(missing_ok=True)
    mono.now += 30  # the kubelet restarts: 30 s < grace
    assert src.refresh() is False
    assert src.up() is False
    assert src.current().for_device(B) == (Holder("ml", "train-0", "main", "unknown", ""),)
    assert src.status() == MappingStatus(False, 1.7e9 + 1000.0, ())  # age = now - last success = 30 s
    mono.now += 31  # 61 s since the last good List > 60 s grace: dropped without waiting for a refresh
    assert src.current().entries == ()
    srv = KubeletServer(sock, ALLOCS)
    srv.start()
    try:
        assert src.refresh() is True and src.up() is True and src.current().for_device(B)
        assert src.status() == MappingStatus(True, 1.7e9 + 1061.0, ())
    finally:
        srv.stop()


def test_zero_grace_drops_at_the_first_failure(tmp_path: Path) -> None:
    sock = str(tmp_path / "k.sock")
    srv = KubeletServer(sock, ALLOCS)
    srv.start()
    src = _source(sock, grace_seconds=0)
    assert src.refresh()
    srv.stop()
    Path(sock).unlink(missing_ok=True)
    threading.Event().wait(0.01)
    assert src.refresh() is False and src.current().entries == ()


def test_unmatched_ids_are_counted_per_resource(tmp_path: Path) -> None:
    allocs = [*ALLOCS, ContainerDevices("x", "p", "c", "nvidia.com/gpu", ("GPU-1", "nvidia0"))]
    srv = KubeletServer(str(tmp_path / "k.sock"), allocs)
    srv.start()
    try:
        src = _source(srv.socket_path)
        assert src.refresh()
        status = src.status()
        assert status is not None and status.unmatched == (("nvidia.com/gpu", 2),)
        assert src.unmatched == 2
        assert src.current().for_device(A) == ()  # "nvidia0" is not device 0
    finally:
        srv.stop()


@pytest.mark.slow
def test_hung_kubelet_does_not_block_current(tmp_path: Path) -> None:
    srv = KubeletServer(str(tmp_path / "k.sock"), ALLOCS)
    srv.start()
    srv.hang = True
    try:
        src = _source(srv.socket_path, timeout_seconds=1)
        t = threading.Thread(target=src.refresh)
        t.start()
        assert src.current().entries == ()  # answers while the refresh waits on the kubelet
        t.join(5)
        assert src.up() is False
    finally:
        srv.stop()


class _RecordedWaits:
    """Stands in for the refresh loop's stop event: records each wait's delay (returning at once) and
    calls ``on_wait(n)`` after the n-th; the loop ends after ``stop_after`` waits."""

    def __init__(self, stop_after: int, on_wait: Callable[[int], None]) -> None:
        self.delays: list[float] = []
        self.stop_after = stop_after
        self.on_wait = on_wait

    def is_set(self) -> bool:
        return len(self.delays) >= self.stop_after

    def wait(self, delay: float) -> bool:
        self.delays.append(delay)
        self.on_wait(len(self.delays))
        return self.is_set()

    def set(self) -> None:
        self.stop_after = 0


def test_background_loop_backs_off_while_failing_and_returns_to_the_interval(tmp_path: Path) -> None:
    sock = str(tmp_path / "k.sock")
    servers: list[KubeletServer] = []

    def kubelet_returns_after_the_third_failure(n: int) -> None:
        if n == 3:
            servers.append(KubeletServer(sock, ALLOCS))
            servers[0].start()

    src = _source(sock, interval_seconds=0.05, max_backoff_seconds=0.4)
    waits = _RecordedWaits(6, kubelet_returns_after_the_third_failure)
    src._stop = waits  # type: ignore[assignment]
    try:
        src._run()  # the background thread's loop, here on the test's thread
    finally:
        for srv in servers:
            srv.stop()
    # Doubling from the interval while the socket is absent, capped at the ceiling; the interval again
    # once a refresh succeeds.
    assert waits.delays == [0.1, 0.2, 0.4, 0.05, 0.05, 0.05]
    assert src.refreshes == 6 and src.up() is True


async def test_api_enrichment_sets_kind_owner_and_hami(tmp_path: Path) -> None:
    hami_pod = {
        "metadata": {
            "name": "share-1",
            "namespace": "infer",
            "labels": {"owner": "erin"},
            "annotations": {"hami.io/vgpu-devices-allocated": f"{A},NVIDIA,8000,30:;"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "s", "apiVersion": "apps/v1", "uid": "u"}],
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "server"}]},
    }
    nb = {
        "metadata": {
            "name": "jupyter-alice",
            "namespace": "ml",
            "labels": {"component": "singleuser-server", "hub.jupyter.org/username": "alice"},
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "notebook"}]},
    }
    dra_pod = {
        "metadata": {"name": "dra-0", "namespace": "ml", "labels": {"owner": "dana"}, "uid": "u-dra"},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "main"}]},
        "status": {
            "containerStatuses": [
                {
                    "name": "main",
                    "containerID": "containerd://" + "ab" * 32,
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "imageID": "sha256:" + "cd" * 32,
                    "ready": True,
                    "restartCount": 0,
                }
            ]
        },
    }
    fake = FakeKubeApi("tok", [hami_pod, nb, dra_pod])
    rs = FakeResourceSlices(
        [
            {
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": "gpu-1",
                    "pool": {"name": "gpu-1"},
                    "devices": [{"name": "gpu-7", "basic": {"attributes": {"uuid": {"string": C}}}}],
                }
            }
        ],
        versions=("v1beta1",),  # an older API server: the client falls back from v1
    )
    app = web.Application()
    app.router.add_get("/api/v1/pods", fake.pods)
    app.router.add_get("/apis/resource.k8s.io/{version}/resourceslices", rs.list)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    # HAMi's kubelet-side choice (B) is not where the share lives; the annotation says A.
    allocs = [*ALLOCS, ContainerDevices("infer", "share-1", "server", "nvidia.com/gpu", (f"{B}-3",))]
    claims = [
        ContainerClaim(
            "ml",
            "dra-0",
            "main",
            "ml",
            "c",
            "gpu.nvidia.com",
            "gpu-1",
            "gpu-7",
            ("k8s.gpu.nvidia.com/device=gpu-7",),
        )
    ]
    srv = KubeletServer(str(tmp_path / "k.sock"), allocs, claims)
    srv.start()
    try:
        settings = PodMappingSettings(
            enabled=True,
            socket=srv.socket_path,
            kube_api=True,
            kube_api_host=f"http://127.0.0.1:{server.port}",
        )
        src = KubeletAttributionSource(settings, "gpu-1", lambda: DEVS, api_token="tok")
        import asyncio

        ok = await asyncio.to_thread(src.refresh)
        assert ok
        att = src.current()
        assert att.for_slice(Slice(A, "1/0", "1g.10gb", "mig", uuid=MIG)) == (
            Holder("ml", "jupyter-alice", "notebook", "notebook", "alice"),
        )
        assert att.for_device(A) == (Holder("infer", "share-1", "server", "service", "erin"),)
        assert att.for_device(B) == (Holder("ml", "train-0", "main", "unknown", ""),)
        dana = Holder("ml", "dra-0", "main", "unknown", "dana")
        assert att.for_device(C) == (dana,)  # DRA claim -> ResourceSlice uuid -> the card
        assert att.for_container("ab" * 32) == dana  # runtime container ID -> container, for processes
        assert rs.requests[0].startswith(
            "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName"
        )
        assert rs.requests[-1].startswith("/apis/resource.k8s.io/v1beta1/")
        assert slice_key(A, "x") == "GPU-a/x"
    finally:
        srv.stop()
        await server.close()


async def test_ascend_real_annotation_names_the_holder_of_the_real_chip(tmp_path: Path) -> None:
    """Issue 22: under Volcano, MindCluster's device plugin may mount another chip than the kubelet chose,
    recording the kubelet's IDs in huawei.com/kltDev and the real ones in huawei.com/AscendReal (comma-
    separated, position by position: Ascend/ascend-device-plugin plugin_api.go updatePodAnnotation). The
    holder goes to the real chip and the move is counted; vNPU IDs go to their slice."""
    from xpuwatch.exporter import catalog
    from xpuwatch.exporter.collector import families

    chip = {n: f"ascend-0000:{n + 1:02x}:00.0-0" for n in range(8)}
    devs = ([DeviceRef("huawei", chip[n], f"{n}-0") for n in range(8)], [SliceRef(chip[0], "100", None)])
    train = {
        "metadata": {
            "name": "train-0",
            "namespace": "ml",
            "labels": {"volcano.sh/job-name": "train", "owner": "dana"},
            "annotations": {
                "huawei.com/Ascend910": "Ascend910-5,Ascend910-6",
                "huawei.com/kltDev": "Ascend910-3,Ascend910-4",
                "huawei.com/AscendReal": "Ascend910-5,Ascend910-6",
            },
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "main"}]},
    }
    plain = {  # no annotation (or API enrichment off): the kubelet's IDs stand
        "metadata": {"name": "infer-0", "namespace": "ml", "labels": {"owner": "erin"}},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "srv"}]},
    }
    vnpu = {
        "metadata": {"name": "nb-0", "namespace": "hub", "labels": {"owner": "fay"}},
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "nb"}]},
    }
    fake = FakeKubeApi("tok", [train, plain, vnpu])
    app = web.Application()
    app.router.add_get("/api/v1/pods", fake.pods)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    allocs = [
        ContainerDevices("ml", "train-0", "main", "huawei.com/Ascend910", ("Ascend910-3", "Ascend910-4")),
        ContainerDevices("ml", "infer-0", "srv", "huawei.com/Ascend910", ("Ascend910-7",)),
        ContainerDevices("hub", "nb-0", "nb", "huawei.com/Ascend910-10c", ("Ascend910-10c-100-0",)),
    ]
    srv = KubeletServer(str(tmp_path / "k.sock"), allocs)
    srv.start()
    try:
        settings = PodMappingSettings(
            enabled=True,
            socket=srv.socket_path,
            kube_api=True,
            kube_api_host=f"http://127.0.0.1:{server.port}",
        )
        src = KubeletAttributionSource(settings, "gpu-1", lambda: devs, api_token="tok")
        import asyncio

        assert await asyncio.to_thread(src.refresh)
        att = src.current()
        dana = Holder("ml", "train-0", "main", "job", "dana")
        assert att.for_device(chip[5]) == (dana,) and att.for_device(chip[6]) == (dana,)
        assert att.for_device(chip[3]) == () and att.for_device(chip[4]) == ()  # the kubelet's choice
        assert att.for_device(chip[7]) == (Holder("ml", "infer-0", "srv", "unknown", "erin"),)
        assert att.for_slice(Slice(chip[0], "100", "vir10_3c_16g", "vnpu")) == (
            Holder("hub", "nb-0", "nb", "unknown", "fay"),
        )
        assert att.for_device(chip[0]) == ()  # the vNPU holder holds the slice, not the chip
        status = src.status()
        assert status is not None
        assert status.reassigned == (("huawei.com/Ascend910", 2),)
        assert status.unmatched == ()
        fams = families("gpu-1", [], att, True, mapping_status=status)
        got = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in fams
            for s in f.samples
            if s.name == catalog.POD_MAPPING_REASSIGNED
        }
        assert got == {(catalog.POD_MAPPING_REASSIGNED, (("resource", "huawei.com/Ascend910"),)): 2.0}
    finally:
        srv.stop()
        await server.close()


def test_real_allocations_without_kubelet_record() -> None:
    """AscendReal without a usable huawei.com/kltDev: a pod holding Ascend chips in one container gets the
    real IDs; one spread over two containers keeps the kubelet's (which container got which is unknown)."""
    from xpuwatch.exporter.podsource import real_allocations
    from xpuwatch.exporter.workload import PodMeta

    one = PodMeta("ml", "a", {}, {"huawei.com/AscendReal": "Ascend910-1"})
    two = PodMeta("ml", "b", {}, {"huawei.com/AscendReal": "Ascend910-2,Ascend910-3"})
    allocs = [
        ContainerDevices("ml", "a", "c", "huawei.com/Ascend910", ("Ascend910-0",)),
        ContainerDevices("ml", "b", "c1", "huawei.com/Ascend910", ("Ascend910-4",)),
        ContainerDevices("ml", "b", "c2", "huawei.com/Ascend910", ("Ascend910-5",)),
        ContainerDevices("ml", "a", "g", "nvidia.com/gpu", ("GPU-x",)),
    ]
    out, moved = real_allocations(allocs, [one, two])
    assert [a.device_ids for a in out] == [("Ascend910-1",), ("Ascend910-4",), ("Ascend910-5",), ("GPU-x",)]
    assert moved == (("huawei.com/Ascend910", 1),)
    assert real_allocations(allocs, None) == (tuple(allocs), ())
