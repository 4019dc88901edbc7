"""DCGM backend against the pydcgm stand-in: profiling ratios, blanks, health, suspect profiling, reconnect, merge."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.vendors.fake_pydcgm import DCGM_FP64_BLANK, FakeGpuInfo, FakeHostEngine
from tests.vendors.fake_pynvml import FakeNvml, fleet
from xpuwatch.vendors.base import BackendError, merge_samples
from xpuwatch.vendors.dcgm import (
    PROFILING_SUSPECT,
    DcgmBackend,
    detect,
    is_blank,
    load_bindings,
)
from xpuwatch.vendors.nvml import NvmlBackend
from xpuwatch.vendors.registry import BackendContext, all_specs

GPU_UTIL, GR, SM, OCC, TENSOR, DRAM = 203, 1001, 1002, 1003, 1004, 1005
HEALTHY = {
    "pcie": True,
    "nvlink": True,
    "pmu": True,
    "mcu": True,
    "memory": True,
    "sm": True,
    "inforom": True,
    "thermal": True,
    "power": True,
    "driver": True,
}


class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


def engine(n: int = 2) -> FakeHostEngine:
    e = FakeHostEngine(
        gpus={i: FakeGpuInfo(uuid=f"GPU-00000000-0000-0000-0000-0000000000{i:02d}") for i in range(n)}
    )
    for i in range(n):
        e.values[i] = {GPU_UTIL: 93, GR: 0.91, SM: 0.82, OCC: 0.37, TENSOR: 0.44, DRAM: 0.29}
    return e


def test_profiling_ratios_and_health_per_gpu() -> None:
    e = engine(2)
    b = DcgmBackend(e.bindings(), clock=Clock())
    b.open()
    s0, s1 = b.sample()
    d = s0.device
    assert (d.vendor, d.model, d.index, d.uuid) == (
        "nvidia",
        "NVIDIA H100 80GB HBM3",
        "0",
        "GPU-00000000-0000-0000-0000-000000000000",
    )
    assert (d.pci_bus_id, d.serial, d.driver_version) == ("00000000:19:00.0", "1650000000000", "550.54.15")
    assert (s0.sm_active_ratio, s0.sm_occupancy_ratio, s0.tensor_active_ratio) == (0.82, 0.37, 0.44)
    assert s0.memory_bandwidth_utilization_ratio == 0.29
    assert s0.health == HEALTHY
    assert s0.vendor_metrics == {PROFILING_SUSPECT: 0.0}
    # Only what NVML lacks: no utilization/memory/power/temperature from this backend.
    assert s0.utilization_ratio is None and s0.memory_used_bytes is None and s0.power_watts is None
    assert s0.temperatures_celsius == {} and s0.fault_events == {}
    assert s1.device.index == "1"
    assert e.watches == [([1001, 1002, 1003, 1004, 1005, 203], 1_000_000, 10.0, 5)]
    assert e.health_systems == 0x3FF
    b.close()
    assert e.field_groups == set()


def test_blank_sentinels_are_never_exported() -> None:
    e = engine(1)
    e.values[0] = {
        GPU_UTIL: None,
        GR: None,
        SM: DCGM_FP64_BLANK,
        OCC: DCGM_FP64_BLANK + 2,
        TENSOR: 1.7,
        DRAM: None,
    }
    b = DcgmBackend(e.bindings(), clock=Clock())
    (s,) = b.sample()
    assert s.sm_active_ratio is None
    assert s.sm_occupancy_ratio is None
    assert s.tensor_active_ratio is None  # > 1: impossible for a ratio
    assert s.memory_bandwidth_utilization_ratio is None
    assert s.vendor_metrics == {}


def test_is_blank_follows_dcgmvalue() -> None:
    assert is_blank(0x7FFFFFF0) and is_blank(0x7FFFFFF2)  # INT32 blank, NOT_SUPPORTED
    assert is_blank(0x7FFFFFFFFFFFFFF0) and is_blank(9223372036854775794)  # DE README's memory temp
    assert is_blank(DCGM_FP64_BLANK) and is_blank(float("nan")) and is_blank(None) and is_blank("x")
    assert not is_blank(0) and not is_blank(0.5) and not is_blank(2**40)


def test_health_incidents_fail_their_subsystem_on_their_gpu_only() -> None:
    e = engine(2)
    e.incidents = [(1, 0x10, 20), (1, 0x1, 10), (0, 0x80, 0)]  # GPU1 MEM fail, PCIe warn; GPU0 thermal pass
    b = DcgmBackend(e.bindings(), clock=Clock())
    s0, s1 = b.sample()
    assert s0.health == HEALTHY
    assert s1.health == {**HEALTHY, "memory": False, "pcie": False}


def test_profiling_zero_while_busy_is_flagged_not_trusted() -> None:
    e = engine(2)
    e.values[1] = {GPU_UTIL: 98, GR: 0.0, SM: 0.0, OCC: 0.0, TENSOR: 0.0, DRAM: 0.0}  # DE #662
    b = DcgmBackend(e.bindings(), clock=Clock(), suspect_polls=3)
    for _ in range(2):
        s0, s1 = b.sample()
        assert s1.vendor_metrics == {PROFILING_SUSPECT: 0.0} and s1.sm_active_ratio == 0.0
    s0, s1 = b.sample()
    assert s1.vendor_metrics == {PROFILING_SUSPECT: 1.0}
    assert (s1.sm_active_ratio, s1.sm_occupancy_ratio, s1.tensor_active_ratio) == (None, None, None)
    assert s1.memory_bandwidth_utilization_ratio is None
    assert s0.vendor_metrics == {PROFILING_SUSPECT: 0.0} and s0.sm_active_ratio == 0.82
    e.values[1][SM] = 0.6  # counters revive
    e.values[1][GR] = 0.7
    assert b.sample()[1].vendor_metrics == {PROFILING_SUSPECT: 0.0}


def test_idle_gpu_reading_zero_is_not_suspect() -> None:
    e = engine(1)
    e.values[0] = {GPU_UTIL: 0, GR: 0.0, SM: 0.0, OCC: 0.0, TENSOR: 0.0, DRAM: 0.0}
    b = DcgmBackend(e.bindings(), clock=Clock(), suspect_polls=1)
    (s,) = b.sample()
    assert s.vendor_metrics == {PROFILING_SUSPECT: 0.0}
    assert s.sm_active_ratio == 0.0


def test_connection_loss_reconnects_with_backoff() -> None:
    clock = Clock()
    e = engine(1)
    b = DcgmBackend(e.bindings(), clock=clock, backoff_initial=1.0)
    b.open()
    assert e.connects == 1
    e.drop()  # nv-hostengine restarted
    e.down = True
    with pytest.raises(BackendError) as err:
        b.sample()
    assert err.value.reason == "connection"
    with pytest.raises(BackendError) as err:
        b.sample()  # within the 1 s backoff: no connect attempted
    assert err.value.reason == "init" and e.connects == 1
    clock.t += 1.0
    with pytest.raises(BackendError) as err:
        b.sample()  # engine still down
    assert err.value.reason == "connection"
    e.down = False
    clock.t += 1.0  # backoff doubled to 2 s
    with pytest.raises(BackendError):
        b.sample()
    clock.t += 1.0
    (s,) = b.sample()
    assert s.sm_active_ratio == 0.82 and e.connects == 2


def test_missing_bindings_are_a_library_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError) as err:
        load_bindings([str(tmp_path / "nope")])
    assert err.value.reason == "library"
    assert str(tmp_path / "nope") in str(err.value)
    ctx = BackendContext(options={"bindings_paths": [str(tmp_path)]})
    d = all_specs()["dcgm"].detect(ctx)
    assert d.found is False and "not found" in d.why


def test_bindings_load_from_an_install_directory(tmp_path: Path) -> None:
    # A minimal install tree: the loader must import the three modules from the directory it is given.
    (tmp_path / "pydcgm.py").write_text("MARK = 'pydcgm from install dir'\n")
    (tmp_path / "dcgm_structs.py").write_text("MARK = 'structs'\n")
    (tmp_path / "dcgm_fields.py").write_text("MARK = 'fields'\n")
    import sys

    saved = {k: sys.modules.pop(k) for k in ("pydcgm", "dcgm_structs", "dcgm_fields") if k in sys.modules}
    try:
        b = load_bindings([str(tmp_path / "missing"), str(tmp_path)])
        assert b.pydcgm.MARK == "pydcgm from install dir" and b.dcgm_fields.MARK == "fields"
    finally:
        for k in ("pydcgm", "dcgm_structs", "dcgm_fields"):
            sys.modules.pop(k, None)
        sys.modules.update(saved)
        sys.path.remove(str(tmp_path))


def test_detection_with_a_host_engine() -> None:
    e = engine(2)
    d = detect(BackendContext(), e.bindings())
    assert (d.found, d.why) == (True, "DCGM host engine at localhost: 2 GPU(s)")
    e.down = True
    assert detect(BackendContext(), e.bindings()).found is False


def test_registration_supplements_nvml() -> None:
    spec = all_specs()["dcgm"]
    assert spec.priority == 15 and spec.supersedes == ()
    assert "dcgm" not in all_specs()["nvml"].supersedes


def test_merge_with_nvml_samples_by_uuid() -> None:
    nvml = FakeNvml(fleet(2))
    nb = NvmlBackend(nvml, xid_events=False)
    nb.open()
    e = FakeHostEngine(gpus={i: FakeGpuInfo(uuid=g.uuid) for i, g in enumerate(nvml.gpus)})
    e.values = {0: {GPU_UTIL: 87, GR: 0.9, SM: 0.8, OCC: 0.3, TENSOR: 0.4, DRAM: 0.25}}
    e.incidents = [(0, 0x100, 20)]
    db = DcgmBackend(e.bindings(), clock=Clock())
    nvml.gpus[1].errors["*"] = 15  # GPU_IS_LOST on the NVML side
    merged = merge_samples(nb.sample(), db.sample())
    assert len(merged) == 2
    m0, m1 = merged
    assert m0.up and m0.utilization_ratio == 0.87 and m0.power_watts == 312.5
    assert (m0.sm_active_ratio, m0.sm_occupancy_ratio, m0.tensor_active_ratio) == (0.8, 0.3, 0.4)
    assert m0.memory_bandwidth_utilization_ratio == 0.25  # DRAM active preferred over utilization.memory
    assert m0.health == {**HEALTHY, "power": False}
    assert m0.vendor_metrics == {"accelerator_nvidia_mig_mode": 0.0, PROFILING_SUSPECT: 0.0}
    assert m1.up is False and m1.health == {} and m1.sm_active_ratio is None


def test_mig_gpu_instance_activity_lands_on_nvml_slices() -> None:
    from tests.vendors.fake_pynvml import FakeMig

    nvml = FakeNvml(fleet(1))
    gpu = nvml.gpus[0]
    gpu.mig_mode = 1
    gpu.migs = [
        FakeMig(1, 0, "MIG-aaaaaaaa-0000-0000-0000-000000000000", 9, "MIG 3g.40gb", 42144366592, 2**30, 3),
        FakeMig(2, 0, "MIG-bbbbbbbb-0000-0000-0000-000000000000", 9, "MIG 3g.40gb", 42144366592, 0, 3),
    ]
    nb = NvmlBackend(nvml, xid_events=False)
    e = FakeHostEngine(gpus={0: FakeGpuInfo(uuid=gpu.uuid)}, gpu_instances={7: (0, 1), 8: (0, 2)})
    e.values = {0: {GPU_UTIL: None, GR: 0.5, SM: 0.4, OCC: 0.2, TENSOR: 0.1, DRAM: 0.3}}
    e.gi_values = {7: {GR: 0.93, SM: 0.81, OCC: 0.33}, 8: {GR: 0.0, SM: DCGM_FP64_BLANK, OCC: None}}
    db = DcgmBackend(e.bindings(), clock=Clock())
    (d,) = db.sample()
    assert [(x.slice_id, x.utilization_ratio, x.sm_active_ratio, x.sm_occupancy_ratio) for x in d.slices] == [
        ("1", 0.93, 0.81, 0.33),
        ("2", 0.0, None, None),
    ]
    ((m,),) = [merge_samples(nb.sample(), [d])]
    assert [
        (x.slice_id, x.profile, x.uuid, x.utilization_ratio, x.sm_active_ratio, x.sm_occupancy_ratio)
        for x in m.slices
    ] == [
        ("1/0", "3g.40gb", "MIG-aaaaaaaa-0000-0000-0000-000000000000", 0.93, 0.81, 0.33),
        ("2/0", "3g.40gb", "MIG-bbbbbbbb-0000-0000-0000-000000000000", 0.0, None, None),
    ]
    assert [x.memory_used_bytes for x in m.slices] == [2.0**30, 0.0]
    assert e.groups == {f"xpuwatch_mig_{os.getpid()}"}
    db.close()
    assert e.groups == set()
