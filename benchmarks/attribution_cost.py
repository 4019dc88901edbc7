"""Benchmark: the per-poll cost of attribution on a busy shared node.

Run from the repository root: ``PYTHONPATH=$PWD python benchmarks/attribution_cost.py``. Prints mean times of:
resolving 64 GPU processes to containers through a /proc tree (one /proc/<pid>/cgroup read each, done per
render), reading 32 HAMi-core regions (2 MB each, 8 processes per container), and matching 512 device-plugin
IDs plus 64 DRA claims to 512 devices. Nothing is asserted (tests never time things).
"""

from __future__ import annotations

import struct
import tempfile
import timeit
from pathlib import Path

from xpuwatch.exporter.cgroup import ProcCgroups
from xpuwatch.exporter.kubelet import ContainerClaim, ContainerDevices
from xpuwatch.exporter.podmap import DeviceRef, DraDeviceRef, match
from xpuwatch.vendors.hami import REGION_SIZE, read_containers


def _proc_tree(root: Path, n: int) -> list[int]:
    pids = []
    for i in range(n):
        pid = 10000 + i
        (root / str(pid)).mkdir()
        uid = f"6f8a4d2e_1b3c_4d5e_8f9a_{i:012x}"
        (root / str(pid) / "cgroup").write_text(
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{uid}.slice/cri-containerd-{i:064x}.scope\n"
        )
        pids.append(pid)
    return pids


def _regions(root: Path, n: int) -> None:
    c = root / "containers"
    c.mkdir()
    for i in range(n):
        buf = bytearray(REGION_SIZE)
        struct.pack_into("<iiiI", buf, 0, 19920718, 1, 1, 1)
        struct.pack_into("<Q", buf, 56, 1)
        buf[64:104] = f"GPU-{i:08x}-0000-0000-0000-000000000000".encode()
        struct.pack_into("<i", buf, 2008896, 8)
        d = c / f"1a2b3c4d-0000-4000-8000-{i:012x}_main"
        d.mkdir()
        (d / "r.cache").write_bytes(bytes(buf))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "proc").mkdir()
        pids = _proc_tree(root / "proc", 64)
        cg = ProcCgroups(str(root / "proc"))
        n = 200
        t = timeit.timeit(lambda: [cg.lookup(p) for p in pids], number=n) / n
        print(f"pid -> container, 64 processes: {t * 1e3:.2f} ms per render")
        _regions(root, 32)
        n = 20
        t = timeit.timeit(lambda: read_containers(root / "containers"), number=n) / n
        print(f"HAMi regions, 32 containers x 8 processes: {t * 1e3:.2f} ms per poll")

    devices = [DeviceRef("nvidia", f"GPU-{i:08x}", str(i)) for i in range(512)]
    allocs = [
        ContainerDevices("ns", f"p{i}", "c", "nvidia.com/gpu", (f"GPU-{i:08x}::0", f"GPU-{i:08x}::1"))
        for i in range(256)
    ]
    claims = [
        ContainerClaim("ns", f"d{i}", "c", "ns", f"c{i}", "gpu.nvidia.com", "node", f"gpu-{i}")
        for i in range(64)
    ]
    dra = [DraDeviceRef("gpu.nvidia.com", "node", f"gpu-{i}", f"GPU-{256 + i:08x}") for i in range(64)]
    n = 50
    t = timeit.timeit(lambda: match(allocs, devices, (), claims=claims, dra_devices=dra), number=n) / n
    print(f"match 512 IDs + 64 DRA claims to 512 devices: {t * 1e3:.2f} ms per refresh")


if __name__ == "__main__":
    main()
