"""HAMi vGPU backend (supplement over NVML): each container's vGPU share, read from HAMi-core's shared regions.

HAMi-core (libvgpu.so, injected into every HAMi container) keeps one shared-memory region per container in a
file on the node; HAMi's own monitor reads them (Project-HAMi/HAMi ``cmd/vGPUmonitor`` and
``pkg/monitor/nvidia/cudevshr.go``, ``ContainerLister.Update`` / ``loadCache``). This module reads them the
same way:

- ``<hook path>/containers/<pod UID>_<container name>/`` per container (``HOOK_PATH`` defaults to
  ``/usr/local/vgpu``); in it the region is the file whose name contains ``.cache`` (not ``libvgpu.so``);
  more than two files is HAMi's "cache num not matched" error.
- The region is libvgpu's C ``shared_region_t`` (``multiprocess_memory_limit.h``), mirrored by HAMi's
  ``pkg/monitor/nvidia/v1/spec.go`` with the linux/amd64 offsets its ``TestSharedRegionTLayoutMatchesCABI``
  locks: ``initializedFlag`` int32 @0 (magic 19920718), ``majorVersion`` @4, ``minorVersion`` @8, ``num``
  uint64 @56 (devices), ``uuids`` 16 x char[96] @64, ``limit`` 16 x uint64 @1600 (bytes), ``smLimit``
  16 x uint64 @1728 (percent), ``procs`` 1024 slots of 1960 bytes @1856, ``procnum`` int32 @2008896; size
  2008952. A slot: ``pid``, ``hostpid`` int32, ``used`` 16 x {contextSize, moduleSize, bufferSize, offset,
  total, unused[3]} uint64 @8, ``monitorused`` @1032, ``deviceUtil`` 16 x {decUtil, encUtil, smUtil,
  unused[3]} uint64 @1160. Major version 1 (minor 1, and minor 2 "sem_postinit", which keeps these offsets)
  is read; v0 regions (HAMi before 2.4) are reported unreadable.

Per (container, device) it gives one ``Slice(kind="vgpu")``: ``memory_used_bytes`` = sum of ``used[i].total``
over the live process slots (HAMi's ``DeviceMemoryTotal``, exported by vGPUmonitor as
``vGPU_device_memory_usage_in_bytes``), ``memory_total_bytes`` = ``limit[i]`` (``vGPU_device_memory_limit_in_bytes``,
the pod's ``nvidia.com/gpumem``), ``compute_limit_ratio`` = ``smLimit[i]`` / 100 (``nvidia.com/gpucores``),
``utilization_ratio`` = sum of ``smUtil`` / 100 (``Device_utilization_desc_of_container``). The slice id is the
directory name ``<pod UID>_<container>``: the pod mapping names the holder from it (docs/pods.md).
Files are read, never mapped writable: the exporter never changes a limit.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from vendors.base import BackendError, Device, DeviceSample, Slice
from vendors.registry import BackendContext, BackendSpec, Detection, register

DEFAULT_HOOK_PATH = "/usr/local/vgpu"
MAGIC = 19920718
MAX_DEVICES = 16
MAX_PROCS = 1024
REGION_SIZE = 2008952
_NUM, _UUIDS, _UUID_LEN, _LIMIT, _SM_LIMIT = 56, 64, 96, 1600, 1728
_PROCS, _SLOT, _PROCNUM = 1856, 1960, 2008896
_USED, _USED_SIZE, _USED_TOTAL = 8, 64, 32  # used[i] at slot+8+64*i, .total at +32
_UTIL, _UTIL_SIZE, _UTIL_SM = 1160, 48, 16  # deviceUtil[i] at slot+1160+48*i, .smUtil at +16


class RegionError(ValueError):
    """A shared region that cannot be read (short, wrong magic, unknown version)."""


@dataclass(frozen=True)
class ShareUsage:
    """One device of one container's region."""

    uuid: str
    memory_used_bytes: int
    memory_limit_bytes: int
    sm_limit_percent: int
    sm_util_percent: int


def parse_region(data: bytes | mmap.mmap) -> tuple[ShareUsage, ...]:
    """A ``shared_region_t`` (as bytes) -> its devices' usage. Raises RegionError; never reads past ``data``."""
    if len(data) < 12:
        raise RegionError(f"region of {len(data)} bytes is shorter than its header")
    flag, major, minor = struct.unpack_from("<iii", data, 0)
    if flag != MAGIC:
        raise RegionError(f"magic {flag} is not HAMi-core's {MAGIC}")
    if major != 1:
        raise RegionError(f"shared region version {major}.{minor} is not supported (1.x is)")
    if len(data) < REGION_SIZE:
        raise RegionError(f"version {major}.{minor} region of {len(data)} bytes, {REGION_SIZE} expected")
    (num,) = struct.unpack_from("<Q", data, _NUM)
    (procnum,) = struct.unpack_from("<i", data, _PROCNUM)
    procs = max(0, min(procnum, MAX_PROCS))
    out: list[ShareUsage] = []
    for i in range(min(num, MAX_DEVICES)):
        raw = bytes(data[_UUIDS + i * _UUID_LEN : _UUIDS + (i + 1) * _UUID_LEN])
        uuid = raw.split(b"\0", 1)[0].decode("ascii", errors="replace").strip()
        if not uuid:  # HAMi's IsValidUUID: not yet initialised
            continue
        (limit,) = struct.unpack_from("<Q", data, _LIMIT + 8 * i)
        (sm_limit,) = struct.unpack_from("<Q", data, _SM_LIMIT + 8 * i)
        used = util = 0
        for p in range(procs):
            slot = _PROCS + p * _SLOT
            used += struct.unpack_from("<Q", data, slot + _USED + _USED_SIZE * i + _USED_TOTAL)[0]
            util += struct.unpack_from("<Q", data, slot + _UTIL + _UTIL_SIZE * i + _UTIL_SM)[0]
        out.append(ShareUsage(uuid[:40], used, limit, sm_limit, util))
    return tuple(out)


def share_slice(slice_id: str, u: ShareUsage) -> Slice:
    """One container's share of one device as a vGPU slice (units: bytes, ratios 0..1)."""
    return Slice(
        parent_uuid=u.uuid,
        slice_id=slice_id,
        profile="vgpu",
        kind="vgpu",
        memory_used_bytes=float(u.memory_used_bytes),
        memory_total_bytes=float(u.memory_limit_bytes) if u.memory_limit_bytes else None,
        compute_limit_ratio=u.sm_limit_percent / 100 if 0 < u.sm_limit_percent <= 100 else None,
        utilization_ratio=min(u.sm_util_percent, 100) / 100,
    )


def _cache_file(container_dir: Path) -> Path | None:
    files = sorted(container_dir.iterdir())
    if len(files) > 2:  # HAMi's loadCache: "cache num not matched"
        raise RegionError(f"{len(files)} files in {container_dir}, at most 2 expected")
    for f in files:
        if "libvgpu.so" not in f.name and ".cache" in f.name:
            return f
    return None  # no cuInit in that container yet


def read_containers(root: Path) -> tuple[list[Slice], dict[str, str]]:
    """Every container's shares under ``root`` (``<hook path>/containers``): (slices, unreadable dir -> reason)."""
    slices: list[Slice] = []
    bad: dict[str, str] = {}
    for d in sorted(root.iterdir()):
        if not d.is_dir() or "_" not in d.name:
            continue
        try:
            f = _cache_file(d)
            if f is None:
                continue
            with f.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                usage = parse_region(m)
        except (OSError, ValueError) as exc:  # one container's region never costs the others
            bad[d.name] = str(exc)
            continue
        slices.extend(share_slice(d.name, u) for u in usage)
    return slices, bad


class HamiBackend:
    """Supplement backend: vGPU slices by parent GPU UUID, overlaid onto NVML's samples of those GPUs."""

    name = "hami"

    def __init__(self, hook_path: str = DEFAULT_HOOK_PATH) -> None:
        self.root = Path(hook_path) / "containers"

    def open(self) -> None:
        """Nothing to acquire: each poll reads the files."""

    def sample(self) -> Sequence[DeviceSample]:
        try:
            slices, bad = read_containers(self.root)
        except OSError as exc:
            raise BackendError(f"{self.root}: {exc}", "read") from exc
        by_gpu: dict[str, list[Slice]] = {}
        for s in slices:
            by_gpu.setdefault(s.parent_uuid, []).append(s)
        if bad and not by_gpu:
            raise BackendError(
                "no HAMi region readable: " + "; ".join(f"{k}: {v}" for k, v in sorted(bad.items())), "parse"
            )
        out = [
            DeviceSample(device=Device("nvidia", "", "", uuid), slices=tuple(ss))
            for uuid, ss in sorted(by_gpu.items())
        ]
        if bad:  # counted once per poll (xpuwatch_backend_errors_total{reason="field"}), on the first sample
            out[0] = replace(out[0], unread={f"region {k}": v for k, v in sorted(bad.items())})
        return out

    def close(self) -> None:
        """Nothing held between polls."""


def _create(ctx: BackendContext) -> HamiBackend:
    hook = ctx.options.get("hook_path", DEFAULT_HOOK_PATH)
    if not isinstance(hook, str) or not hook:
        raise ValueError(f"hook_path: must be a directory path, got {hook!r}")
    return HamiBackend(hook)


def detect(ctx: BackendContext) -> Detection:
    root = Path(str(ctx.options.get("hook_path", DEFAULT_HOOK_PATH))) / "containers"
    if root.is_dir():
        return Detection(True, f"HAMi-core regions under {root}")
    return Detection(False, f"{root} not present (no HAMi vGPU on this node, or not mounted)")


SPEC = register(
    BackendSpec(
        name="hami",
        vendor="nvidia",
        create=_create,
        detect=detect,
        priority=16,
        supplement=True,
        options={"hook_path": "string"},
    )
)
