"""HAMi vGPU shares from HAMi-core's shared regions: binary .cache files written by the test in libvgpu's
``shared_region_t`` layout (offsets from Project-HAMi/HAMi pkg/monitor/nvidia/v1/spec_test.go
TestSharedRegionTLayoutMatchesCABI), read by the backend, overlaid onto NVML, attributed to the container."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xpuwatch.exporter.attribution import Holder, slice_key
from xpuwatch.exporter.collector import families
from xpuwatch.exporter.kubelet import ContainerDevices
from xpuwatch.exporter.podmap import DeviceRef, SliceRef
from xpuwatch.exporter.podsource import PodMappingSettings, build_attribution
from xpuwatch.exporter.poller import BackendView
from xpuwatch.exporter.workload import PodMeta
from xpuwatch.vendors.base import BackendError, Device, DeviceSample, merge_samples
from xpuwatch.vendors.hami import HamiBackend, RegionError, detect, parse_region
from xpuwatch.vendors.registry import BackendContext

# Field offsets of shared_region_t on linux/amd64 as HAMi's layout test states them (not the module's).
SIZE = 2008952
OFF = {"num": 56, "uuids": 64, "limit": 1600, "smLimit": 1728, "procs": 1856, "procnum": 2008896}
SLOT = 1960  # (procnum - procs) / 1024
GPU_A = "GPU-3e4b5c6d-7e8f-9a0b-1c2d-3e4f5a6b7c8d"
GPU_B = "GPU-9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0"
POD_1, POD_2 = "1a2b3c4d-0000-4000-8000-000000000001", "1a2b3c4d-0000-4000-8000-000000000002"
MIB = 2**20


def region(
    devices: list[tuple[str, int, int]],  # (uuid, limit bytes, sm limit %)
    procs: list[list[tuple[int, int]]],  # per process: per device (used total bytes, sm util %)
    major: int = 1,
    minor: int = 1,
    magic: int = 19920718,
) -> bytes:
    buf = bytearray(SIZE)
    struct.pack_into("<iiii", buf, 0, magic, major, minor, 1)
    struct.pack_into("<Q", buf, OFF["num"], len(devices))
    for i, (uuid, limit, sm) in enumerate(devices):
        raw = uuid.encode()
        buf[OFF["uuids"] + 96 * i : OFF["uuids"] + 96 * i + len(raw)] = raw
        struct.pack_into("<Q", buf, OFF["limit"] + 8 * i, limit)
        struct.pack_into("<Q", buf, OFF["smLimit"] + 8 * i, sm)
    for p, per_dev in enumerate(procs):
        slot = OFF["procs"] + SLOT * p
        struct.pack_into("<ii", buf, slot, 100 + p, 40000 + p)  # pid in the container, host pid
        for i, (used, util) in enumerate(per_dev):
            # deviceMemory{contextSize, moduleSize, bufferSize, offset, total, unused[3]} at slot+8+64*i
            struct.pack_into("<QQQQQ", buf, slot + 8 + 64 * i, 300 * MIB, 10 * MIB, used - 310 * MIB, 0, used)
            # deviceUtilization{decUtil, encUtil, smUtil, unused[3]} at slot+1160+48*i
            struct.pack_into("<QQQ", buf, slot + 1160 + 48 * i, 0, 0, util)
    struct.pack_into("<i", buf, OFF["procnum"], len(procs))
    return bytes(buf)


def hook_tree(root: Path) -> Path:
    c = root / "containers"
    # pod 1 / trainer: two processes on GPU A, limit 8 GiB and 30% of the cores
    d1 = c / f"{POD_1}_trainer"
    d1.mkdir(parents=True)
    (d1 / "a1b2c3.cache").write_bytes(region([(GPU_A, 8 << 30, 30)], [[(3 << 30, 20)], [(1 << 30, 5)]]))
    (d1 / "libvgpu.so").write_bytes(b"\x7fELF")
    # pod 2 / server: GPU A and GPU B, no core limit
    d2 = c / f"{POD_2}_server"
    d2.mkdir()
    (d2 / "x.cache").write_bytes(
        region([(GPU_A, 4 << 30, 0), (GPU_B, 16 << 30, 0)], [[(2 << 30, 40), (12 << 30, 90)]])
    )
    (c / f"{POD_2}_sidecar").mkdir()  # never called cuInit: no region yet, skipped
    bad = c / f"{POD_2}_old"
    bad.mkdir()
    (bad / "v0.cache").write_bytes(region([(GPU_A, 1, 1)], [], major=0)[:1197897])
    return root


def test_regions_give_each_containers_share(tmp_path: Path) -> None:
    b = HamiBackend(str(hook_tree(tmp_path)))
    assert detect(BackendContext(options={"hook_path": str(tmp_path)})).found
    b.open()
    a, gb = b.sample()
    b.close()
    assert a.device.uuid == GPU_A and gb.device.uuid == GPU_B
    by_id = {s.slice_id: s for s in a.slices}
    trainer = by_id[f"{POD_1}_trainer"]
    assert (trainer.kind, trainer.profile, trainer.parent_uuid) == ("vgpu", "vgpu", GPU_A)
    assert trainer.memory_used_bytes == 4 << 30  # 3 GiB + 1 GiB over both processes
    assert trainer.memory_total_bytes == 8 << 30
    assert trainer.compute_limit_ratio == 0.3
    assert trainer.utilization_ratio == 0.25
    server = by_id[f"{POD_2}_server"]
    assert (server.memory_used_bytes, server.memory_total_bytes) == (2 << 30, 4 << 30)
    assert server.compute_limit_ratio is None  # 0: no core limit
    (server_b,) = gb.slices
    assert (server_b.memory_used_bytes, server_b.utilization_ratio) == (12 << 30, 0.9)
    # the v0 region is reported, once, and costs only itself
    assert list(a.unread) == [f"region {POD_2}_old"] and "version 0.1" in a.unread[f"region {POD_2}_old"]
    assert gb.unread == {}


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (region([(GPU_A, 1, 1)], [], magic=7), "magic"),
        (region([(GPU_A, 1, 1)], [], major=2), "version 2.1"),
        (region([(GPU_A, 1, 1)], [])[:4096], "4096 bytes"),
        (b"\x00" * 5, "header"),
    ],
)
def test_unreadable_regions_say_why(data: bytes, why: str) -> None:
    with pytest.raises(RegionError, match=why):
        parse_region(data)


def test_minor_version_2_keeps_the_offsets() -> None:
    """HAMi-core's sem_postinit variant (1.2) changes only bytes this reader does not use."""
    (u,) = parse_region(region([(GPU_A, 8 << 30, 50)], [[(5 << 30, 10)]], minor=2))
    assert (u.uuid, u.memory_used_bytes, u.memory_limit_bytes, u.sm_limit_percent) == (
        GPU_A,
        5 << 30,
        8 << 30,
        50,
    )


@given(st.binary(max_size=256), st.integers(0, 2))
def test_parse_region_never_raises_anything_else(head: bytes, major: int) -> None:
    data = struct.pack("<iii", 19920718, major, 1) + head
    try:
        out = parse_region(data + b"\x00" * (SIZE - len(data)) if major == 1 else data)
    except RegionError as exc:
        # a full-size 1.x region always reads, unless a device's uuid is not printable ASCII
        assert major != 1 or "not printable ASCII" in str(exc)
        return
    assert len(out) <= 16 and all(len(u.uuid) <= 40 and u.memory_used_bytes == 0 for u in out)
    assert all(u.uuid.isascii() and u.uuid.isprintable() and " " not in u.uuid for u in out)


def with_uuid_bytes(data: bytes, raw: bytes) -> bytes:
    """``data`` (a region) with device 0's uuid replaced by the bytes ``raw``."""
    buf = bytearray(data)
    buf[OFF["uuids"] : OFF["uuids"] + 96] = raw.ljust(96, b"\0")
    return bytes(buf)


def test_a_uuid_that_is_not_ascii_is_refused_not_turned_into_replacement_characters() -> None:
    """Before, b"GPU-\\xff\\xfe" became the slice parent "GPU-\ufffd\ufffd" (a series under a GPU that is
    no GPU); now the region is unread, with the bytes named."""
    data = with_uuid_bytes(region([(GPU_A, 8 << 30, 30)], [[(1 << 30, 5)]]), b"GPU-\xff\xfe")
    with pytest.raises(RegionError, match=r"device 0: uuid b'GPU-\\xff\\xfe' is not printable ASCII"):
        parse_region(data)


def test_hostile_files_in_one_container_cost_that_container_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Files written from inside tenants' containers: a FIFO (opening it for reading would wait for a writer
    forever), a symlink to /dev/zero, a symlink to another tenant's region, a huge sparse file, a region
    with a non-ASCII uuid, a directory filled with files. The sample returns at once; the others read."""
    root = hook_tree(tmp_path)
    c = root / "containers"
    hostile = {
        "fifo": "is a FIFO, not a regular file",
        "zero": "is a symbolic link, not followed",
        "peer": "is a symbolic link, not followed",
        "huge": "magic 0 is not HAMi-core's",
        "ascii": "is not printable ASCII",
        "crowd": "more than 2 files",
    }
    dirs = {name: c / f"{POD_2}_{name}" for name in hostile}
    for d in dirs.values():
        d.mkdir()
    fifo = dirs["fifo"] / "f.cache"
    os.mkfifo(fifo)
    (dirs["zero"] / "z.cache").symlink_to("/dev/zero")
    (dirs["peer"] / "p.cache").symlink_to(c / f"{POD_1}_trainer" / "a1b2c3.cache")
    with open(dirs["huge"] / "h.cache", "wb") as f:
        f.truncate(64 << 30)  # 64 GiB, sparse: no disk used, but never to be read whole
    (dirs["ascii"] / "u.cache").write_bytes(with_uuid_bytes(region([(GPU_B, 1 << 30, 0)], []), b"\xff\xfe"))
    for i in range(2000):
        (dirs["crowd"] / f"{i}.cache").write_bytes(b"")
    got: list[DeviceSample] = []
    t = threading.Thread(target=lambda: got.extend(HamiBackend(str(root)).sample()), daemon=True)
    t.start()
    t.join(60)  # a safety net for a hang, not a speed assertion (a FIFO or /dev/zero never ends)
    try:
        assert not t.is_alive(), "sample() hung on a tenant's file"
    finally:
        if t.is_alive():  # unblock the reader stuck in open() so that the test process can exit
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    a, gb = got
    assert {s.slice_id for s in a.slices} == {f"{POD_1}_trainer", f"{POD_2}_server"}
    assert [s.slice_id for s in gb.slices] == [f"{POD_2}_server"]
    unread = {k.removeprefix(f"region {POD_2}_"): v for k, v in a.unread.items()}
    assert unread.keys() == {*hostile, "old"}
    for name, why in hostile.items():
        assert why in unread[name], (name, unread[name])
    logged = [r.getMessage() for r in caplog.records if r.name == "xpuwatch.vendors.hami"]
    assert len(logged) == 7 and all(" region not read: " in m for m in logged)


def test_every_region_unreadable_is_a_backend_error(tmp_path: Path) -> None:
    d = tmp_path / "containers" / f"{POD_1}_c"
    d.mkdir(parents=True)
    for name in ("a.cache", "b.cache", "libvgpu.so"):
        (d / name).write_bytes(b"")
    with pytest.raises(BackendError) as exc:
        HamiBackend(str(tmp_path)).sample()
    assert exc.value.reason == "parse" and "more than 2 files" in str(exc.value)


def test_shares_attributed_to_their_container_not_the_card(tmp_path: Path) -> None:
    """NVML's sample + HAMi's regions -> vGPU slices held by their container; the kubelet's HAMi split ID of
    an unplaced pod is counted, not attributed."""
    nvml = DeviceSample(Device("nvidia", "NVIDIA A100-SXM4-80GB", "0", GPU_A), memory_used_bytes=9 << 30)
    hami = HamiBackend(str(hook_tree(tmp_path))).sample()
    merged = merge_samples([nvml], hami)
    assert len(merged) == 1  # GPU B is unknown to NVML here: HAMi never makes a device up
    (s,) = merged
    assert s.memory_used_bytes == 9 << 30 and len(s.slices) == 2
    pods = [
        PodMeta("ml", "train-0", {"owner": "erin"}, {}, ("Job",), ("trainer",), uid=POD_1),
        PodMeta(
            "infer",
            "llm-0",
            {},
            {"hami.io/vgpu-devices-allocated": f"{GPU_A},NVIDIA,4096,0:{GPU_B},NVIDIA,16384,0:;"},
            ("ReplicaSet",),
            ("server",),
            uid=POD_2,
        ),
    ]
    allocs = [
        ContainerDevices("ml", "train-0", "trainer", "nvidia.com/gpu", (f"{GPU_B}-3",)),  # kubelet's pick: B
        ContainerDevices("infer", "llm-0", "server", "nvidia.com/gpu", (f"{GPU_A}-1", f"{GPU_A}-2")),
        ContainerDevices("x", "no-api", "c", "nvidia.com/gpu", (f"{GPU_A}-5", f"{GPU_A}-6")),
    ]
    devices = [DeviceRef("nvidia", GPU_A, "0"), DeviceRef("nvidia", GPU_B, "1")]
    slices = [SliceRef(sl.parent_uuid, sl.slice_id, None) for sl in s.slices]
    att, unmatched = build_attribution(allocs, devices, slices, pods, PodMappingSettings(enabled=True))
    erin = Holder("ml", "train-0", "trainer", "job", "erin")
    llm = Holder("infer", "llm-0", "server", "service", "")
    assert att.for_device(GPU_B) == (llm,)  # the annotation places llm-0 on B too; no region read for B here
    assert att.for_device(GPU_A) == ()  # both holders of A hold their shares, not the card
    assert att.for_slice(s.slices[0]) in ((erin,), (llm,))
    assert dict(att.entries)[slice_key(GPU_A, f"{POD_1}_trainer")] == (erin,)
    assert dict(att.entries)[slice_key(GPU_A, f"{POD_2}_server")] == (llm,)
    assert unmatched == (
        ("nvidia.com/gpu", 2),
    )  # x/no-api's two IDs: neither annotation nor region places it

    view = BackendView("nvml", True, (s,), 1, 1000.0, 0.1, {}, 1, True)
    got = {
        (x.labels["slice_id"], x.labels.get("pod", "")): x.value
        for fam in families("gpu-1", [view], att, True)
        for x in fam.samples
        if x.name == "accelerator_slice_memory_used_bytes"
    }
    assert got == {(f"{POD_1}_trainer", "train-0"): 4 << 30, (f"{POD_2}_server", "llm-0"): 2 << 30}
