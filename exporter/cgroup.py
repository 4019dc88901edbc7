"""Enrichment input: which container a process on a device belongs to, from the node's cgroups.

A vendor lists the processes holding device memory by host PID (NVML running processes, npu-smi's process
table). ``/proc/<pid>/cgroup`` of the host names the kubelet's pod cgroup and the runtime's container cgroup:

- cgroup v2: one line ``0::<path>``; cgroup v1: ``<id>:<controllers>:<path>`` per hierarchy (any one that
  runs through ``kubepods`` is used).
- cgroupfs driver: ``/kubepods[/burstable|/besteffort]/pod<uid>/<container id>``.
- systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/
  <runtime>-<container id>.scope`` with ``<runtime>`` ``cri-containerd`` (containerd), ``crio`` (CRI-O) or
  ``docker`` (dockershim / cri-dockerd). CRI-O's ``crio-conmon-<id>.scope`` is its monitor, not the container.

The container ID is the runtime's 64-hex ID, the same the API shows in ``status.containerStatuses[].containerID``
after its ``containerd://`` prefix. ``parse`` is pure; ``ProcCgroups`` reads a proc tree (the host's ``/proc``,
mounted at ``pod_mapping.host_proc``) and never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from xpuwatch.vendors.untrusted import read_capped

_POD = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$"
)
_CONTAINER = re.compile(r"^(?:(?:cri-containerd|crio|docker|containerd)-)?([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True)
class ContainerRef:
    """A process's place in Kubernetes: its pod UID (dashed, as in ``metadata.uid``) and the runtime
    container ID (64 hex; "" when the process sits in the pod cgroup but in no container's)."""

    pod_uid: str
    container_id: str


def parse(text: str) -> ContainerRef | None:
    """The contents of ``/proc/<pid>/cgroup`` -> ContainerRef, or None for a process of no pod (Xorg, a
    host daemon, a container not run by the kubelet). Never raises."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or "kubepods" not in parts[2]:
            continue
        pod_uid = ""
        container_id = ""
        for comp in parts[2].strip().split("/"):
            if m := _POD.search(comp):
                pod_uid = m.group(1).replace("_", "-")
            elif pod_uid and (c := _CONTAINER.match(comp)):
                container_id = c.group(1)
        if pod_uid:
            return ContainerRef(pod_uid, container_id)
    return None


HOST_PROC_MOUNT = "/host/proc"
MAX_CGROUP_BYTES = 65536
"""Longest /proc/<pid>/cgroup read: one line on cgroup v2, about a dozen (~2 KiB) on v1; a longer file is
no kernel's and is not read."""


def host_proc_root(configured: str | None, mount: str = HOST_PROC_MOUNT) -> str:
    """The proc tree to read: the configured one, else ``mount`` where the host's /proc is mounted (a
    directory with pid 1 in it), else ``/proc`` (the exporter runs on the host or with ``hostPID``)."""
    if configured:
        return configured
    return mount if (Path(mount) / "1").is_dir() else "/proc"


class ProcCgroups:
    """Resolves host PIDs through ``<root>/<pid>/cgroup``. ``root`` is the host's proc tree: ``/proc`` when the
    exporter runs with ``hostPID: true`` or on the host, else the host's ``/proc`` mounted read-only (the
    DaemonSet mounts it at ``/host/proc``, as node_exporter does)."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = Path(root)

    def lookup(self, pid: int) -> ContainerRef | None:
        """None when the process is in no pod, has exited, or its cgroup file cannot be read. The file is
        read through ``vendors.untrusted`` (non-blocking, a regular file, at most ``MAX_CGROUP_BYTES``):
        ``root`` may be a mount others can change (a test tree, a misconfigured ``host_proc``), and the
        render that asks must never hang on it."""
        try:
            path = self.root / str(int(pid)) / "cgroup"
            text = read_capped(path, MAX_CGROUP_BYTES).decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return None
        return parse(text)
