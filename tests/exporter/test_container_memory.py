"""Per-container memory on a shared card: NVML stand-in processes -> host /proc/<pid>/cgroup (v1 and v2,
containerd/CRI-O/docker forms) -> the pods' container IDs -> accelerator_container_memory_used_bytes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.vendors.fake_pynvml import FakeGpu, FakeNvml
from xpuwatch.exporter.attribution import Attribution, Holder, StaticAttributionSource
from xpuwatch.exporter.cgroup import ContainerRef, ProcCgroups, host_proc_root, parse
from xpuwatch.exporter.collector import Collector
from xpuwatch.exporter.poller import BackendView
from xpuwatch.vendors.base import ProcessMemory
from xpuwatch.vendors.nvml import NvmlBackend

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cgroup"
ID_A, ID_B, ID_C, ID_D = ("a1" * 32, "b2" * 32, "c3" * 32, "d4" * 32)
POD_A = "6f8a4d2e-1b3c-4d5e-8f9a-0b1c2d3e4f5a"
POD_B = "0c9d8e7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f"
POD_C = "11112222-3333-4444-5555-666677778888"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_cgroup_forms() -> None:
    assert parse(_fixture("v2-systemd-containerd.cgroup")) == ContainerRef(POD_A, ID_A)
    assert parse(_fixture("v1-cgroupfs-docker.cgroup")) == ContainerRef(POD_B, ID_B)
    assert parse(_fixture("v1-systemd-crio.cgroup")) == ContainerRef(POD_C, ID_C)
    assert parse(_fixture("v2-cgroupfs.cgroup")) == ContainerRef("99998888-7777-6666-5555-444433332222", ID_D)
    # CRI-O's conmon sits in the pod but is no container of it
    assert parse(_fixture("v2-crio-conmon.cgroup")) == ContainerRef(POD_C, "")
    assert parse(_fixture("v2-host-xorg.cgroup")) is None
    assert parse(_fixture("v1-host-xorg.cgroup")) is None
    assert parse("") is None
    assert parse("0::/kubepods/burstable/podnot-a-uid/" + ID_A) is None


@given(st.text(max_size=400))
def test_parse_never_raises(text: str) -> None:
    ref = parse(text)
    assert ref is None or isinstance(ref, ContainerRef)


def _proc_tree(root: Path) -> None:
    """A host /proc with the processes of the shared GPU below."""
    for pid, fixture in (
        (101, "v2-systemd-containerd.cgroup"),  # pod A's trainer, two processes
        (102, "v2-systemd-containerd.cgroup"),
        (202, "v1-cgroupfs-docker.cgroup"),  # pod B's server (cgroup v1 node)
        (303, "v2-host-xorg.cgroup"),  # Xorg on the host
        (505, "v1-systemd-crio.cgroup"),  # a container the pod list does not name
    ):
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(_fixture(fixture))
    # 404 has exited between NVML's list and the read: no /proc/404


GIB = 2**30
ALICE = Holder("ml", "train-a", "trainer", "job", "alice")
BOB = Holder("infer", "llm-b", "server", "service", "")


def _render(nvml: FakeNvml, proc: Path) -> dict[tuple[str, str, str], float]:
    b = NvmlBackend(nvml, clock=lambda: 1000.0, xid_events=False)
    b.open()
    try:
        samples = tuple(b.sample())
    finally:
        b.close()
    view = BackendView("nvml", True, samples, len(samples), 1000.0, 0.1, {}, 1, True)
    shared = samples[0].device.uuid
    att = Attribution.of({shared: [ALICE, BOB]}, {ID_A: ALICE, ID_B: BOB})
    reg = CollectorRegistry()
    reg.register(
        Collector(
            "gpu-1",
            lambda _now: [view],
            StaticAttributionSource(att, True),
            lambda: 1000.0,
            pid_lookup=ProcCgroups(str(proc)).lookup,
        )
    )
    text = generate_latest(reg).decode()
    out: dict[tuple[str, str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "accelerator_container_memory_used_bytes":
                assert s.labels["uuid"] == shared and s.labels["device"] == "0"
                out[(s.labels["namespace"], s.labels["pod"], s.labels["container"])] = s.value
            if s.name == "accelerator_up":
                assert "pod" not in s.labels  # two holders: the device itself carries no pod labels
    return out


def test_two_pods_on_a_shared_gpu_one_leaking(tmp_path: Path) -> None:
    _proc_tree(tmp_path)
    gpu = FakeGpu(
        index=0,
        uuid="GPU-shared",
        compute_processes=[(101, 10 * GIB), (102, 2 * GIB), (202, 30 * GIB), (404, GIB), (505, GIB // 2)],
        graphics_processes=[(303, 50 * 2**20)],
    )
    nvml = FakeNvml([gpu])
    first = _render(nvml, tmp_path)
    assert first == {
        ("ml", "train-a", "trainer"): 12 * GIB,
        ("infer", "llm-b", "server"): 30 * GIB,
        ("", "", ""): 50 * 2**20 + GIB + GIB // 2,  # Xorg, the exited pid, the unnamed container: kept
    }
    # pod B leaks: its share grows poll after poll while pod A's stays
    gpu.compute_processes = [(101, 10 * GIB), (102, 2 * GIB), (202, 55 * GIB)]
    gpu.graphics_processes = [(303, 50 * 2**20)]
    second = _render(nvml, tmp_path)
    assert second == {
        ("ml", "train-a", "trainer"): 12 * GIB,
        ("infer", "llm-b", "server"): 55 * GIB,
        ("", "", ""): 50 * 2**20,
    }


def test_no_process_list_no_series(tmp_path: Path) -> None:
    gpu = FakeGpu(index=0, uuid="GPU-shared", errors={"nvmlDeviceGetComputeRunningProcesses": 4})
    gpu.errors["nvmlDeviceGetGraphicsRunningProcesses"] = 4  # NO_PERMISSION
    assert _render(FakeNvml([gpu]), tmp_path) == {}


def test_host_proc_root(tmp_path: Path) -> None:
    assert host_proc_root("/custom/proc", str(tmp_path)) == "/custom/proc"
    assert host_proc_root(None, str(tmp_path)) == "/proc"  # nothing mounted there
    (tmp_path / "1").mkdir()
    assert host_proc_root(None, str(tmp_path)) == str(tmp_path)


def test_a_cgroup_file_that_is_no_file_costs_that_process_only(tmp_path: Path) -> None:
    """A proc tree others can change (a bind mount, a misconfigured host_proc): a FIFO would block the
    render, /dev/zero or a huge file would never end; each is None (no pod) at once, the real one resolves."""
    for pid in (10, 11, 12, 13, 14):
        (tmp_path / str(pid)).mkdir()
    (tmp_path / "10" / "cgroup").write_text(_fixture("v2-systemd-containerd.cgroup"))
    os.mkfifo(tmp_path / "11" / "cgroup")
    (tmp_path / "12" / "cgroup").symlink_to("/dev/zero")
    with open(tmp_path / "13" / "cgroup", "wb") as f:
        f.truncate(1 << 30)  # sparse
    (tmp_path / "14" / "cgroup").symlink_to(tmp_path / "10" / "cgroup")  # not followed
    lookup = ProcCgroups(str(tmp_path)).lookup
    got: dict[int, ContainerRef | None] = {}
    t = threading.Thread(target=lambda: got.update({pid: lookup(pid) for pid in (10, 11, 12, 13, 14)}))
    t.daemon = True
    t.start()
    t.join(60)  # a safety net for a hang, not a speed assertion (a FIFO or /dev/zero never ends)
    try:
        assert not t.is_alive(), "lookup hung on a FIFO"
    finally:
        if t.is_alive():
            os.close(os.open(tmp_path / "11" / "cgroup", os.O_WRONLY | os.O_NONBLOCK))
    assert got == {10: ContainerRef(POD_A, ID_A), 11: None, 12: None, 13: None, 14: None}


def test_ascend_process_table_feeds_the_same_series() -> None:
    """npu-smi info's process table (a real capture: one python3.11 on NPU 6 chip 1) gives the processes."""
    from xpuwatch.vendors.ascend import samples_from_info

    text = (Path(__file__).resolve().parents[1] / "fixtures" / "ascend").joinpath(
        "npu-smi_info_310P3_25.0.rc1.1_2chips_procs.txt"
    )
    chips = {s.device.index: s for s in samples_from_info(text.read_text())}
    assert chips["6-1"].processes == (ProcessMemory(293029, 6612 * 2**20),)
    assert chips["6-0"].processes == ()  # a table was printed, this chip has no process in it


def test_amd_process_list_feeds_the_same_series(tmp_path: Path) -> None:
    """Two pods on one AMD GPU through the amdsmi stand-in: amdsmi_get_gpu_process_list's vram_mem per pid
    -> the same accelerator_container_memory_used_bytes series as NVML's."""
    from tests.vendors.fake_amdsmi import make_amdsmi, mi300x_gcd
    from xpuwatch.vendors.amd import AmdBackend
    from xpuwatch.vendors.registry import BackendContext

    _proc_tree(tmp_path)
    gpu = mi300x_gcd("0x01", "0000:c1:00.0")

    def proc(pid: int, vram: int) -> dict[str, object]:
        return {
            "name": "N/A",
            "pid": pid,
            "mem": vram + 2**20,
            "engine_usage": {"gfx": 0, "enc": 0},
            "memory_usage": {"gtt_mem": 2**20, "cpu_mem": 0, "vram_mem": vram},
        }

    gpu["process"] = [proc(101, 10 * GIB), proc(102, 2 * GIB), proc(202, 30 * GIB), proc(303, 2**26)]
    b = AmdBackend(BackendContext(), amdsmi_module=make_amdsmi([gpu]))
    b.open()
    samples = tuple(b.sample())
    b.close()
    view = BackendView("amd", True, samples, len(samples), 1000.0, 0.1, {}, 1, True)
    shared = samples[0].device.uuid
    reg = CollectorRegistry()
    reg.register(
        Collector(
            "gpu-1",
            lambda _now: [view],
            StaticAttributionSource(Attribution.of({shared: [ALICE, BOB]}, {ID_A: ALICE, ID_B: BOB}), True),
            lambda: 1000.0,
            pid_lookup=ProcCgroups(str(tmp_path)).lookup,
        )
    )
    out = {
        (s.labels["namespace"], s.labels["pod"], s.labels["container"], s.labels["uuid"]): s.value
        for fam in text_string_to_metric_families(generate_latest(reg).decode())
        for s in fam.samples
        if s.name == "accelerator_container_memory_used_bytes"
    }
    assert out == {
        ("ml", "train-a", "trainer", shared): 12 * GIB,
        ("infer", "llm-b", "server", shared): 30 * GIB,
        ("", "", "", shared): 2**26,  # the host's process: kept under container=""
    }
