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
Files are read, never mapped: the exporter never changes a limit, and the region files are written from inside
tenant containers, so each is opened through ``vendors.untrusted`` (non-blocking, no symlink, regular files
only) and only the parts used are read (header, ``procnum``, live slots: a few KiB, bounded by
``REGION_SIZE``): a FIFO, a link to /dev/zero or a huge file costs its container only.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from xpuwatch.vendors.base import BackendError, Device, DeviceSample, Slice
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, register
from xpuwatch.vendors.untrusted import opened

log = logging.getLogger(__name__)

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


ReadAt = Callable[[int, int], bytes]
"""``read_at(offset, size)`` -> exactly ``size`` bytes of a region at ``offset``, else RegionError."""


def parse_region(data: bytes) -> tuple[ShareUsage, ...]:
    """A ``shared_region_t`` (as bytes) -> its devices' usage. Raises RegionError; never reads past ``data``."""

    def read_at(offset: int, size: int) -> bytes:
        return data[offset : offset + size]  # within len(data): checked before each read

    return parse_region_at(len(data), read_at)


def parse_region_at(size: int, read_at: ReadAt) -> tuple[ShareUsage, ...]:
    """A region of ``size`` bytes, read through ``read_at`` only where this reader looks: the header,
    ``procnum`` and the live process slots (a few KiB, not the whole 2 MB). Raises RegionError."""
    if size < 12:
        raise RegionError(f"region of {size} bytes is shorter than its header")
    flag, major, minor = struct.unpack("<iii", read_at(0, 12))
    if flag != MAGIC:
        raise RegionError(f"magic {flag} is not HAMi-core's {MAGIC}")
    if major != 1:
        raise RegionError(f"shared region version {major}.{minor} is not supported (1.x is)")
    if size < REGION_SIZE:
        raise RegionError(f"version {major}.{minor} region of {size} bytes, {REGION_SIZE} expected")
    head = read_at(0, _PROCS)
    (num,) = struct.unpack_from("<Q", head, _NUM)
    (procnum,) = struct.unpack("<i", read_at(_PROCNUM, 4))
    procs = max(0, min(procnum, MAX_PROCS))
    slots = read_at(_PROCS, procs * _SLOT)
    out: list[ShareUsage] = []
    for i in range(min(num, MAX_DEVICES)):
        raw = head[_UUIDS + i * _UUID_LEN : _UUIDS + (i + 1) * _UUID_LEN].split(b"\0", 1)[0].strip()
        if not raw:  # HAMi's IsValidUUID: not yet initialised
            continue
        if not all(0x21 <= b <= 0x7E for b in raw):  # a UUID is printable ASCII; else no parent to name
            raise RegionError(f"device {i}: uuid {raw[:40]!r} is not printable ASCII")
        uuid = raw.decode("ascii")
        (limit,) = struct.unpack_from("<Q", head, _LIMIT + 8 * i)
        (sm_limit,) = struct.unpack_from("<Q", head, _SM_LIMIT + 8 * i)
        used = util = 0
        for p in range(procs):
            slot = p * _SLOT
            used += struct.unpack_from("<Q", slots, slot + _USED + _USED_SIZE * i + _USED_TOTAL)[0]
            util += struct.unpack_from("<Q", slots, slot + _UTIL + _UTIL_SIZE * i + _UTIL_SM)[0]
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
    # Listed with scandir, stopping at the third entry: a tenant who fills its directory costs one listing
    # of three names. No entry is followed or opened here (read_head refuses symlinks and non-files).
    names: list[str] = []
    with os.scandir(container_dir) as it:
        for entry in it:
            names.append(entry.name)
            if len(names) > 2:  # HAMi's loadCache: "cache num not matched"
                raise RegionError(f"more than 2 files in {container_dir}, at most 2 expected")
    for name in sorted(names):
        if "libvgpu.so" not in name and ".cache" in name:
            return container_dir / name
    return None  # no cuInit in that container yet


def read_region(path: Path) -> tuple[ShareUsage, ...]:
    """One container's region file -> its devices' usage. The file is written from inside the tenant's
    container, so it is opened as untrusted (``vendors.untrusted``: no FIFO, device or symlink) and read
    with bounded ``pread`` calls of the parts used, never mapped (a file truncated while mapped would kill
    the exporter with SIGBUS). Raises OSError or RegionError (also when it shrinks while read)."""
    with opened(path) as (fd, size):

        def read_at(offset: int, n: int) -> bytes:
            data = os.pread(fd, n, offset)
            if len(data) != n:
                raise RegionError(f"{path}: shorter than {offset + n} bytes when read (truncated meanwhile?)")
            return data

        return parse_region_at(size, read_at)


def read_containers(root: Path) -> tuple[list[Slice], dict[str, str]]:
    """Every container's shares under ``root`` (``<hook path>/containers``): (slices, unreadable dir -> reason).
    One container's directory or region that cannot be read (missing, a FIFO, a symlink, a device, too
    short, not a region, a uuid that is not ASCII) costs that container only."""
    slices: list[Slice] = []
    bad: dict[str, str] = {}
    with os.scandir(root) as it:
        dirs = sorted(e.name for e in it if e.is_dir(follow_symlinks=False) and "_" in e.name)
    for name in dirs:
        try:
            f = _cache_file(root / name)
            if f is None:
                continue
            usage = read_region(f)
        except (OSError, ValueError) as exc:  # one container's region never costs the others
            bad[name] = str(exc)
            continue
        slices.extend(share_slice(name, u) for u in usage)
    return slices, bad


class HamiBackend:
    """Supplement backend: vGPU slices by parent GPU UUID, overlaid onto NVML's samples of those GPUs."""

    name = "hami"

    def __init__(self, hook_path: str = DEFAULT_HOOK_PATH) -> None:
        self.root = Path(hook_path) / "containers"
        self._bad: dict[str, str] = {}  # logged once per container and reason, not once per poll

    def open(self) -> None:
        """Nothing to acquire: each poll reads the files."""

    def sample(self) -> Sequence[DeviceSample]:
        try:
            slices, bad = read_containers(self.root)
        except OSError as exc:
            raise BackendError(f"{self.root}: {exc}", "read") from exc
        for name, why in sorted(bad.items()):
            if self._bad.get(name) != why:
                log.warning("hami: container %s: region not read: %s", name, why)
        self._bad = bad
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
