"""Slurm job attribution: the job mapping directory a prolog/epilog writes -> which job holds which device.

The directory has dcgm-exporter's ``--hpc-job-mapping-dir`` format, so a site whose prolog already writes it
for dcgm-exporter needs nothing new (NVIDIA/dcgm-exporter ``internal/pkg/transformation/hpc.go``: file names
matching ``^\\d+(\\.\\d+)?$``, one job id per line read with ``bufio.Scanner``; README "How to include HPC jobs
in metric labels"):

- one regular file per device, named by its index (``0``, ``1``, ...), or ``<index>.<GPU instance id>``
  for one MIG instance (``2.0``); one job id per line (blank lines skipped; several lines: jobs sharing it);
- every other name is ignored, as dcgm-exporter does, so xpuwatch's own additions live beside the files:
  ``jobs/<job id>``, ``key=value`` lines with the job's ``user`` and ``partition`` (written by
  ``deploy/slurm/xpuwatch-jobmap.sh``; without it ``job_user`` and ``job_partition`` are empty), and the
  prolog's ``.lock``.

A file names a device by index: the device whose ``Device.index`` is that index, else the chip with that
physical id (Ascend ``phy-<n>`` alias: 310/310P, where Slurm's ``/dev/davinci<n>`` is the physical id), else
Ascend's NPU ``<n>`` chip 0 (``<n>-0``: 910A/910B, one chip per NPU). A name that matches no device, or
several (two vendors on one node, both with a device 0), is counted
(``xpuwatch_job_mapping_unmatched_files``), never guessed. ``<index>.<gi>`` names the MIG slices of that
GPU whose ``slice_id`` is ``<gi>/<ci>`` (every compute instance of the GPU instance).

Files are read as files others may write (``vendors.untrusted``: no symlinks, FIFOs or devices, at most
``MAX_FILE_BYTES``); a file or line that cannot be read costs that file or line (logged once), never the
mapping. ``read_dir`` is the I/O, ``resolve`` is pure; ``JobMappingSource`` refreshes on its own thread with
the pod mapping's rules: a failed read (directory missing or unreadable) sets ``up() == False`` and keeps
the last good mapping for ``grace`` seconds, then drops it.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from xpuwatch.exporter.attribution import EMPTY, Attribution, Holder, MappingStatus, slice_key
from xpuwatch.exporter.podmap import DeviceRef, SliceRef
from xpuwatch.vendors.untrusted import read_capped

log = logging.getLogger(__name__)

DEFAULT_DIR = "/run/xpuwatch/jobs"
"""Where ``deploy/slurm/xpuwatch-jobmap.sh`` writes (a tmpfs: a reboot clears what a crashed epilog left)."""
MAX_FILE_BYTES = 65536
"""Longest mapping or job file read: a device file holds a few job ids, a job file two short lines."""
MAX_JOBS_PER_DEVICE = 64
"""Most job ids read from one device file (sharded or oversubscribed GPUs hold a handful); the rest are
counted as skipped lines."""
MAX_VALUE = 128
"""Longest user or partition name taken as a label value."""
DEVICE_FILE = re.compile(r"^(\d+)(?:\.(\d+))?$")  # dcgm-exporter's validGPUFile
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}$")
"""A job id as a label value and a file name: Slurm's ids are numbers (``1234``); sites writing the
dcgm-exporter format may add suffixes (``1234_7`` for an array task, ``job1-0``). No ``/``, no spaces."""
JOBS_DIR = "jobs"


@dataclass(frozen=True)
class JobInfo:
    """What the prolog recorded of one job: its Slurm user and partition ("" when not recorded)."""

    user: str = ""
    partition: str = ""


NO_INFO = JobInfo()


@dataclass(frozen=True)
class JobMap:
    """One read of the directory. ``devices``: file name -> job ids, in file order, de-duplicated;
    ``jobs``: job id -> JobInfo for the jobs with a ``jobs/<id>`` file; ``skipped``: (what, why) of each
    file or line not read (an unreadable file, a line that is no job id)."""

    devices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    jobs: tuple[tuple[str, JobInfo], ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()


def _value(raw: str) -> str | None:
    v = raw.strip()
    if len(v) > MAX_VALUE or any(not c.isprintable() or c.isspace() for c in v):
        return None
    return v


def parse_job_file(text: str) -> tuple[JobInfo, list[str]]:
    """``key=value`` lines -> (JobInfo, problems). Unknown keys are ignored (later versions may add some);
    a user or partition that is not one printable word of at most ``MAX_VALUE`` characters is left empty."""
    user = partition = ""
    problems: list[str] = []
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        key = key.strip()
        if not sep or key not in ("user", "partition"):
            continue
        v = _value(raw)
        if v is None:
            problems.append(f"{key}: not one printable word of at most {MAX_VALUE} characters")
            continue
        if key == "user":
            user = v
        else:
            partition = v
    return JobInfo(user, partition), problems


def parse_device_file(text: str) -> tuple[tuple[str, ...], list[str]]:
    """One job id per line -> (job ids in file order without repeats, problems). Blank lines are skipped;
    a line that is no job id (``JOB_ID``) is a problem; at most ``MAX_JOBS_PER_DEVICE`` ids."""
    ids: list[str] = []
    problems: list[str] = []
    for line in text.splitlines():
        jid = line.strip()
        if not jid:
            continue
        if not JOB_ID.match(jid):
            problems.append(f"line {jid[:40]!r} is not a job id")
        elif jid not in ids:
            if len(ids) >= MAX_JOBS_PER_DEVICE:
                problems.append(f"more than {MAX_JOBS_PER_DEVICE} job ids")
                break
            ids.append(jid)
    return tuple(ids), problems


def read_dir(path: str) -> JobMap:
    """Read the mapping directory. Raises OSError only when the directory itself cannot be listed (missing,
    not a directory, no permission); every file inside that cannot be read is in ``skipped``."""
    root = Path(path)
    names = sorted(os.listdir(root))
    devices: list[tuple[str, tuple[str, ...]]] = []
    skipped: list[tuple[str, str]] = []
    wanted: set[str] = set()
    for name in names:
        if not DEVICE_FILE.match(name):
            continue
        try:
            text = read_capped(root / name, MAX_FILE_BYTES).decode("utf-8", errors="replace")
        except FileNotFoundError:  # removed by an epilog between the listing and the read
            continue
        except OSError as exc:
            if exc.errno == errno.EISDIR or (root / name).is_dir():
                continue  # dcgm-exporter skips directories too
            skipped.append((name, str(exc)))
            continue
        ids, problems = parse_device_file(text)
        skipped.extend((name, p) for p in problems)
        if ids:
            devices.append((name, ids))
            wanted.update(ids)
    jobs: list[tuple[str, JobInfo]] = []
    for jid in sorted(wanted):
        try:
            text = read_capped(root / JOBS_DIR / jid, MAX_FILE_BYTES).decode("utf-8", errors="replace")
        except FileNotFoundError:  # a dcgm-exporter-only prolog writes no job files: ids only
            continue
        except OSError as exc:
            skipped.append((f"{JOBS_DIR}/{jid}", str(exc)))
            continue
        info, problems = parse_job_file(text)
        skipped.extend((f"{JOBS_DIR}/{jid}", p) for p in problems)
        jobs.append((jid, info))
    return JobMap(tuple(devices), tuple(jobs), tuple(skipped))


def _device_for(index: str, devices: Sequence[DeviceRef]) -> tuple[DeviceRef | None, bool]:
    """(the device a file's index names, whether it named several): by ``Device.index``, else the Ascend
    physical-id alias ``phy-<index>``, else Ascend's ``<index>-0`` (NPU n chip 0)."""
    for pick in (
        lambda d: d.index == index,
        lambda d: f"phy-{index}" in d.aliases,
        lambda d: d.index == f"{index}-0",
    ):
        hits = [d for d in devices if pick(d)]
        if len(hits) == 1:
            return hits[0], False
        if hits:
            return None, True
    return None, False


def resolve(
    jobmap: JobMap, devices: Sequence[DeviceRef], slices: Sequence[SliceRef] = ()
) -> tuple[Attribution, tuple[str, ...]]:
    """Pure: a read of the directory + the devices and slices served -> (Attribution of every matched file's
    jobs, the file names that matched no device or slice, or several devices)."""
    unique = tuple({d.uuid: d for d in devices}.values())  # a supplementing backend lists a device again
    info = dict(jobmap.jobs)
    table: dict[str, list[Holder]] = {}
    unmatched: list[str] = []
    for name, ids in jobmap.devices:
        m = DEVICE_FILE.match(name)
        if m is None:
            continue
        device, _ = _device_for(str(int(m.group(1))), unique)
        if device is None:
            unmatched.append(name)
            continue
        holders = [
            Holder.batch_job(j, info.get(j, NO_INFO).user, info.get(j, NO_INFO).partition) for j in ids
        ]
        if m.group(2) is None:
            table.setdefault(device.uuid, []).extend(holders)
            continue
        gi = str(int(m.group(2)))
        hit = [s for s in slices if s.parent_uuid == device.uuid and s.slice_id.partition("/")[0] == gi]
        if not hit or not all("/" in s.slice_id for s in hit):
            unmatched.append(name)
            continue
        for s in hit:
            table.setdefault(slice_key(s.parent_uuid, s.slice_id), []).extend(holders)
    return Attribution.of(table), tuple(unmatched)


@dataclass(frozen=True)
class JobMappingSettings:
    """Slurm job attribution (config file section ``job_mapping``; off unless ``dir`` is set)."""

    dir: str | None = None
    """The mapping directory (dcgm-exporter's ``--hpc-job-mapping-dir`` format); None: no job mapping.
    ``deploy/slurm/xpuwatch-jobmap.sh`` writes ``/run/xpuwatch/jobs``."""
    interval_seconds: float = 5.0
    """Seconds between reads: the most a job's labels lag its prolog (a read is a listing and a few small
    files on a tmpfs)."""
    grace_seconds: float = 300.0
    """How long the last good mapping outlives failing reads (the directory gone or unreadable), as
    ``pod_mapping.grace``; 0 drops the job labels at the first failure."""


DevicesFn = Callable[[], tuple[Sequence[DeviceRef], Sequence[SliceRef]]]


class JobMappingSource:
    """AttributionSource read from the job mapping directory on its own thread, every ``interval`` seconds.

    ``current()`` never touches the disk: it returns the last good mapping while reads succeed or for
    ``grace`` seconds after the last success, else nothing. ``clock`` is monotonic (grace), ``wall`` gives
    Unix time for ``status().last_success``."""

    def __init__(
        self,
        settings: JobMappingSettings,
        devices_fn: DevicesFn,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not settings.dir:
            raise ValueError("job_mapping.dir is not set")
        self.settings = settings
        self._dir: str = settings.dir
        self._devices_fn = devices_fn
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._attribution = EMPTY
        self._up: bool | None = None
        self._good_at: float | None = None
        self._good_wall: float | None = None
        self._unmatched: tuple[str, ...] = ()
        self._failing = False
        self._told: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.refreshes = 0

    def current(self) -> Attribution:
        with self._lock:
            grace = self.settings.grace_seconds
            if self._up is False and (
                self._good_at is None or not grace or self._clock() - self._good_at > grace
            ):
                return EMPTY
            return self._attribution

    def up(self) -> bool | None:
        with self._lock:
            return self._up

    def status(self) -> MappingStatus | None:
        """Health for ``xpuwatch_job_mapping_*``: None before the first read; ``unmatched`` holds
        ``("files", n)`` of the last successful read."""
        with self._lock:
            if self._up is None:
                return None
            return MappingStatus(self._up, self._good_wall, (("files", len(self._unmatched)),))

    def refresh(self) -> bool:
        """One read of the directory; returns success. Never raises."""
        self.refreshes += 1
        started = self._wall()  # the mapping shows the directory as it was at this time or later
        try:
            jobmap = read_dir(self._dir)
            devices, slices = self._devices_fn()
            attribution, unmatched = resolve(jobmap, devices, slices)
        except OSError as exc:
            if not self._failing:
                log.warning(
                    "job mapping unavailable: %s: %s; keeping the last mapping for %gs, device metrics continue",
                    self._dir,
                    exc.strerror or exc,
                    self.settings.grace_seconds,
                )
            self._failing = True
            with self._lock:
                self._up = False
            return False
        except Exception:  # a bug here must never stop the exporter
            log.exception("job mapping refresh failed unexpectedly")
            self._failing = True
            with self._lock:
                self._up = False
            return False
        if self._failing:
            log.info("job mapping recovered: %s", self._dir)
        self._failing = False
        for what, why in jobmap.skipped:
            if (what, why) not in self._told and len(self._told) < 1000:
                self._told.add((what, why))
                log.warning("job mapping: %s/%s not read: %s", self._dir, what, why)
        # Before the first poll no device is known and every file is unmatched: nothing to tell yet.
        if unmatched and unmatched != self._unmatched and devices:
            log.warning(
                "job mapping: files naming no exported device (or several): %s", ", ".join(unmatched[:20])
            )
        with self._lock:
            if attribution != self._attribution:
                self._attribution = attribution
            self._up, self._unmatched = True, unmatched
            self._good_at, self._good_wall = self._clock(), started
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="job-mapping", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.settings.interval_seconds)
