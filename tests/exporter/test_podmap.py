"""Pod attribution: real gRPC PodResources server on a unix socket -> kubelet client -> matcher."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from xpuwatch.exporter.kubelet import (
    ContainerClaim,
    ContainerDevices,
    KubeletError,
    list_allocations,
    list_pod_resources,
)
from xpuwatch.exporter.podmap import (
    DeviceRef,
    HolderRef,
    SliceRef,
    dra_devices_of,
    match,
    normalize_pci,
    parse_hami_allocation,
)

from .kubelet_server import KubeletServer

A100_0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
A100_1 = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
RTX_0 = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
MIG_A = "MIG-cccccccc-0000-0000-0000-00000000000a"
MIG_B = "MIG-cccccccc-0000-0000-0000-00000000000b"

DEVICES = [
    DeviceRef("nvidia", A100_0, "0", "00000000:07:00.0"),
    DeviceRef("nvidia", A100_1, "1", "00000000:0F:00.0"),
    DeviceRef("nvidia", RTX_0, "2", "00000000:41:00.0"),
    DeviceRef("amd", "amd-0x1234", "0", "0000:c1:00.0"),
    DeviceRef("huawei", "ascend-serial-3", "3", "0000:c2:00.0"),
    DeviceRef("cambricon", "MLU-370-SERIAL-9", "0", None, serial="MLU-370-SERIAL-9"),
]
SLICES = [SliceRef(A100_0, "1/0", MIG_A), SliceRef(A100_0, "2/0", MIG_B)]

FIXTURE_ALLOCATIONS = [
    ContainerDevices("ml-team", "trainer-0", "main", "nvidia.com/gpu", (A100_1,)),
    ContainerDevices("ml-team", "jupyter-alice", "notebook", "nvidia.com/mig-3g.40gb", (MIG_A,)),
    ContainerDevices("infer", "svc-1", "server", "nvidia.com/mig-2g.20gb", (MIG_B,)),
    ContainerDevices("infer", "ts-a", "app", "nvidia.com/gpu", (f"{RTX_0}::0", f"{RTX_0}::3")),
    ContainerDevices("infer", "ts-b", "app", "nvidia.com/gpu", (f"{RTX_0}::1",)),
    ContainerDevices("rocm", "r1", "c", "amd.com/gpu", ("0000:C1:00.0",)),
    ContainerDevices("npu", "n1", "c", "huawei.com/Ascend910", ("Ascend910-3",)),
    ContainerDevices("mlu", "m1", "c", "cambricon.com/mlu", ("MLU-370-SERIAL-9",)),
    ContainerDevices("bad", "b1", "c", "nvidia.com/gpu", ("GPU-nonexistent", "")),
    ContainerDevices("cpu", "c1", "c", "example.com/fpga", ("fpga0",)),
]


@pytest.fixture
def kubelet(tmp_path: Path):
    sock = str(tmp_path / "kubelet.sock")
    srv = KubeletServer(sock, FIXTURE_ALLOCATIONS)
    srv.start()
    yield srv
    srv.stop()


def test_list_over_real_grpc_then_match_exact_holders(kubelet: KubeletServer) -> None:
    allocs = list_allocations(kubelet.socket_path, timeout=5)
    assert len(allocs) == len(FIXTURE_ALLOCATIONS)
    pm = match(allocs, DEVICES, SLICES)
    assert pm.devices[A100_1] == (HolderRef("ml-team", "trainer-0", "main", "nvidia.com/gpu"),)
    assert A100_0 not in pm.devices  # the MIG parent itself is not held; its slices are
    assert pm.slices[(A100_0, "1/0")] == (
        HolderRef("ml-team", "jupyter-alice", "notebook", "nvidia.com/mig-3g.40gb"),
    )
    assert pm.slices[(A100_0, "2/0")] == (HolderRef("infer", "svc-1", "server", "nvidia.com/mig-2g.20gb"),)
    # time-sliced replicas: two holders of one physical GPU, each once
    assert pm.devices[RTX_0] == (
        HolderRef("infer", "ts-a", "app", "nvidia.com/gpu"),
        HolderRef("infer", "ts-b", "app", "nvidia.com/gpu"),
    )
    assert pm.devices["amd-0x1234"] == (HolderRef("rocm", "r1", "c", "amd.com/gpu"),)
    assert pm.devices["ascend-serial-3"] == (HolderRef("npu", "n1", "c", "huawei.com/Ascend910"),)
    assert pm.devices["MLU-370-SERIAL-9"] == (HolderRef("mlu", "m1", "c", "cambricon.com/mlu"),)
    assert pm.unmatched_count == 2
    assert pm.unmatched == ("nvidia.com/gpu=GPU-nonexistent", "nvidia.com/gpu=")


def test_socket_absent_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeletError) as exc:
        list_allocations(str(tmp_path / "missing.sock"), timeout=1)
    assert exc.value.reason == "socket_absent"


def test_hung_list_hits_the_deadline(kubelet: KubeletServer) -> None:
    kubelet.hang = True
    with pytest.raises(KubeletError) as exc:
        list_allocations(kubelet.socket_path, timeout=0.3)
    assert exc.value.reason == "timeout"
    kubelet.release.set()


def test_unavailable_kubelet(kubelet: KubeletServer) -> None:
    kubelet.fail = True
    with pytest.raises(KubeletError) as exc:
        list_allocations(kubelet.socket_path, timeout=30)
    assert exc.value.reason == "unavailable"


def test_socket_disappears_and_returns(tmp_path: Path) -> None:
    sock = str(tmp_path / "k.sock")
    srv = KubeletServer(sock, FIXTURE_ALLOCATIONS[:1])
    srv.start()
    assert len(list_allocations(sock, timeout=30)) == 1
    srv.stop()
    if os.path.exists(sock):
        os.unlink(sock)
    with pytest.raises(KubeletError):
        list_allocations(sock, timeout=1)
    srv2 = KubeletServer(sock, FIXTURE_ALLOCATIONS[:2])
    srv2.start()
    try:
        assert len(list_allocations(sock, timeout=30)) == 2
    finally:
        srv2.stop()


def test_normalize_pci() -> None:
    assert normalize_pci("00000000:0F:00.0") == "0000:0f:00.0"
    assert normalize_pci("c1:00.0") == "0000:c1:00.0"
    assert normalize_pci("GPU-1234") is None


def test_hami_annotation() -> None:
    ann = f"{RTX_0},NVIDIA,8000,30:;{A100_1},NVIDIA,20000,50:{A100_0},NVIDIA,bad,1:;"
    assert parse_hami_allocation(ann) == (((RTX_0, 8000, 30),), ((A100_1, 20000, 50),))


def test_generated_grpc_code_is_current(tmp_path: Path) -> None:
    """Regenerating from api.proto with the pinned grpcio-tools reproduces the committed code."""
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "gen"
    (out / "xpuwatch" / "exporter" / "podresources").mkdir(parents=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-Ixpuwatch/exporter/podresources=exporter/podresources",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--pyi_out={out}",
            "exporter/podresources/api.proto",
        ],
        cwd=root,
        check=True,
    )
    for name in ("api_pb2.py", "api_pb2_grpc.py", "api_pb2.pyi"):
        assert (out / "xpuwatch/exporter/podresources" / name).read_text() == (
            root / "exporter/podresources" / name
        ).read_text(), name


def test_concurrent_lists_are_independent(kubelet: KubeletServer) -> None:
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(len(list_allocations(kubelet.socket_path, 5))))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [len(FIXTURE_ALLOCATIONS)] * 8


def test_ascend_ids_match_physical_id_then_npu_chip_index() -> None:
    chips = [
        DeviceRef("huawei", "ascend-0000:01:00.0-0", "0-0", aliases=("phy-4",)),  # 310P card 0, chip 0
        DeviceRef("huawei", "ascend-0000:01:00.0-1", "0-1", aliases=("phy-5",)),
        DeviceRef("huawei", "ascend-0000:c1:00.0-0", "3-0"),  # 910B: npu-smi prints no physical id
    ]
    allocs = [
        ContainerDevices("a", "p310", "c", "huawei.com/Ascend310P", ("Ascend310P-5",)),
        ContainerDevices("a", "p910", "c", "huawei.com/Ascend910", ("Ascend910-3",)),
    ]
    pm = match(allocs, chips)
    assert pm.devices == {
        "ascend-0000:01:00.0-1": (HolderRef("a", "p310", "c", "huawei.com/Ascend310P"),),
        "ascend-0000:c1:00.0-0": (HolderRef("a", "p910", "c", "huawei.com/Ascend910"),),
    }
    assert pm.unmatched_count == 0


def test_ids_by_index_are_never_guessed_and_counted_per_resource() -> None:
    """NVIDIA's plugin reports UUIDs, AMD's PCI addresses: "GPU-1", "nvidia1", "card2", "0" name no device."""
    allocs = [
        ContainerDevices("a", "p1", "c", "nvidia.com/gpu", ("GPU-1", "nvidia1", "1")),
        ContainerDevices("a", "p2", "c", "amd.com/gpu", ("card2", "0")),
        ContainerDevices("a", "p3", "c", "cambricon.com/mlu", ("0",)),
        ContainerDevices("a", "p4", "c", "huawei.com/Ascend910", ("Ascend910-3",)),  # Huawei's plugin: index
    ]
    pm = match(allocs, DEVICES)
    assert pm.devices == {"ascend-serial-3": (HolderRef("a", "p4", "c", "huawei.com/Ascend910"),)}
    assert pm.unmatched_by_resource == (("amd.com/gpu", 2), ("cambricon.com/mlu", 1), ("nvidia.com/gpu", 3))
    assert pm.unmatched_count == 6


# ResourceSlice devices as NVIDIA's DRA driver publishes them (resource.k8s.io/v1: attributes on the device;
# v1beta1: under "basic"), shapes from kubernetes-sigs/dra-driver-nvidia-gpu issues #563 and #719; UUIDs
# replaced by the test's own.
RESOURCE_SLICES = [
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "gpu-1",
            "pool": {"name": "gpu-1", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-1",
                    "attributes": {
                        "index": {"int": 1},
                        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
                        "type": {"string": "gpu"},
                        "uuid": {"string": A100_1},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                },
                {
                    "name": "gpu-0-mig-3g40gb-0",
                    "attributes": {
                        "parentUUID": {"string": A100_0},
                        "type": {"string": "mig"},
                        "uuid": {"string": MIG_A},
                    },
                },
                {"name": "broken", "attributes": "not a mapping"},
                {"attributes": {"uuid": {"string": RTX_0}}},  # no name: skipped
            ],
        },
    },
    {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceSlice",
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "gpu-1",
            "pool": {"name": "gpu-1"},
            "devices": [{"name": "gpu-2", "basic": {"attributes": {"uuid": {"string": RTX_0}}}}],
        },
    },
    "garbage",
]
CLAIM_UID = "0f3e2a59-6a8e-4d0a-9c8e-1c2d3e4f5a6b"
CLAIMS = [
    ContainerClaim(
        "ml",
        "dra-train",
        "main",
        "ml",
        "gpu-claim",
        "gpu.nvidia.com",
        "gpu-1",
        "gpu-1",
        ("k8s.gpu.nvidia.com/device=gpu-1", f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-1"),
    ),
    ContainerClaim(
        "ml",
        "dra-nb",
        "nb",
        "ml",
        "mig-claim",
        "gpu.nvidia.com",
        "gpu-1",
        "gpu-0-mig-3g40gb-0",
        ("k8s.gpu.nvidia.com/device=gpu-0-mig-3g40gb-0",),
    ),
    ContainerClaim(
        "ml",
        "dra-share",
        "a",
        "ml",
        "shared",
        "gpu.nvidia.com",
        "gpu-1",
        "gpu-2",
        ("k8s.gpu.nvidia.com/device=gpu-2",),
    ),
    ContainerClaim(
        "ml",
        "dra-share",
        "b",
        "ml",
        "shared",
        "gpu.nvidia.com",
        "gpu-1",
        "gpu-2",
        ("k8s.gpu.nvidia.com/device=gpu-2",),
    ),
    # A driver whose CDI device names carry the PCI address: matched without the API.
    ContainerClaim(
        "rocm",
        "r2",
        "c",
        "rocm",
        "c1",
        "gpu.example.com",
        "gpu-1",
        "card-c1",
        ("vendor.example/gpu=0000:c1:00.0",),
    ),
    ContainerClaim(
        "ml",
        "ghost",
        "c",
        "ml",
        "g",
        "gpu.nvidia.com",
        "gpu-1",
        "gpu-7",
        ("k8s.gpu.nvidia.com/device=gpu-7",),
    ),
]


def test_dra_claims_over_real_grpc_map_through_resource_slices(tmp_path: Path) -> None:
    srv = KubeletServer(str(tmp_path / "k.sock"), FIXTURE_ALLOCATIONS[:1], CLAIMS)
    srv.start()
    try:
        got = list_pod_resources(srv.socket_path, timeout=5)
    finally:
        srv.stop()
    assert got.claims == tuple(CLAIMS)
    assert len(got.devices) == 1
    dra = dra_devices_of(RESOURCE_SLICES)  # type: ignore[arg-type]
    assert [(d.name, d.uuid) for d in dra] == [
        ("gpu-1", A100_1),
        ("gpu-0-mig-3g40gb-0", MIG_A),
        ("broken", None),
        ("gpu-2", RTX_0),
    ]
    pm = match((), DEVICES, SLICES, claims=got.claims, dra_devices=dra)
    train = HolderRef("ml", "dra-train", "main", "dra:gpu.nvidia.com")
    assert pm.devices[A100_1] == (train,)
    assert pm.slices[(A100_0, "1/0")] == (HolderRef("ml", "dra-nb", "nb", "dra:gpu.nvidia.com"),)
    assert pm.devices[RTX_0] == (
        HolderRef("ml", "dra-share", "a", "dra:gpu.nvidia.com"),
        HolderRef("ml", "dra-share", "b", "dra:gpu.nvidia.com"),
    )
    assert pm.devices["amd-0x1234"] == (HolderRef("rocm", "r2", "c", "dra:gpu.example.com"),)
    assert pm.unmatched_by_resource == (("dra:gpu.nvidia.com", 1),)
    assert pm.unmatched == ("dra:gpu.nvidia.com=gpu-1/gpu-7",)
    # Without the API (no ResourceSlices) NVIDIA's "gpu-1" names an index, not an identity: counted.
    bare = match((), DEVICES, SLICES, claims=got.claims)
    assert set(bare.devices) == {"amd-0x1234"} and bare.slices == {}
    assert bare.unmatched_by_resource == (("dra:gpu.nvidia.com", 5),)
