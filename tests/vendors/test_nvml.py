"""NVML backend against the pynvml stand-in: values and units, per-device/per-field errors, recovery, XIDs, MIG."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.vendors.fake_pynvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    FakeGpu,
    FakeMig,
    FakeNvml,
    NVMLError,
    fleet,
)
from xpuwatch.vendors.base import BackendError, ProcessMemory
from xpuwatch.vendors.nvml import KNOWN_XIDS, OTHER_XID, NvmlBackend, detect
from xpuwatch.vendors.registry import BackendContext, all_specs


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def backend(nvml: FakeNvml, clock: Clock | None = None, xid: bool = False) -> NvmlBackend:
    return NvmlBackend(nvml, clock=clock or Clock(), xid_events=xid, xid_wait_ms=20)


def test_stand_in_maps_codes_to_subclasses_like_pynvml() -> None:
    exc = NVMLError(NVML_ERROR_GPU_IS_LOST)
    assert type(exc).__name__ == "NVMLError_GpuIsLost"
    assert exc.value == 15


def test_every_field_in_base_units() -> None:
    gpu = FakeGpu(index=0, uuid="GPU-a", nvlinks={0: {0: 1, 1: 0, 2: 7, 3: 2}, 1: {0: 0, 1: 0, 2: 0, 3: 0}})
    b = backend(FakeNvml([gpu]))
    b.open()
    (s,) = b.sample()
    assert s.up is True
    d = s.device
    assert (d.vendor, d.model, d.index, d.uuid) == ("nvidia", "NVIDIA A100-SXM4-80GB", "0", "GPU-a")
    assert (d.pci_bus_id, d.driver_version, d.serial) == ("00000000:07:00.0", "550.54.15", "1320000000000")
    assert s.utilization_ratio == 0.87
    assert s.memory_bandwidth_utilization_ratio == 0.41
    assert s.memory_used_bytes == 21474836480.0
    assert s.memory_total_bytes == 85899345920.0
    assert s.temperatures_celsius == {"core": 61.0, "memory": 70.0}
    assert s.power_watts == 312.5
    assert s.power_limit_watts == 400.0
    assert s.energy_joules == 123456.789
    assert s.clocks_hertz == {"graphics": 1410e6, "sm": 1410e6, "memory": 1593e6}
    assert s.clock_throttled == {
        "gpu_idle": False,
        "clocks_setting": False,
        "sw_power_cap": True,
        "hw_slowdown": False,
        "sync_boost": False,
        "sw_thermal": False,
        "hw_thermal": False,
        "hw_power_brake": False,
        "display_clocks": False,
    }
    assert s.ecc_errors == {"corrected": 3, "uncorrected": 0}
    assert s.remapped_rows == {"correctable": 2, "uncorrectable": 0}
    assert (s.remap_pending, s.remap_failed) == (False, False)
    assert s.pcie_replay_errors == 5
    assert s.link_errors == {
        ("0", "replay"): 1,
        ("0", "recovery"): 0,
        ("0", "crc_flit"): 7,
        ("0", "crc_data"): 2,
        ("1", "replay"): 0,
        ("1", "recovery"): 0,
        ("1", "crc_flit"): 0,
        ("1", "crc_data"): 0,
    }
    assert s.vendor_metrics == {"accelerator_nvidia_mig_mode": 0.0}
    assert s.slices == ()
    assert s.fault_events == {code: 0 for code in (*KNOWN_XIDS, OTHER_XID)}
    b.close()


def test_gpu_is_lost_on_gpu_3_of_8_leaves_the_others_intact() -> None:
    nvml = FakeNvml(fleet(8))
    b = backend(nvml)
    b.open()
    nvml.gpus[3].errors["*"] = NVML_ERROR_GPU_IS_LOST
    samples = b.sample()
    assert [s.up for s in samples] == [True, True, True, False, True, True, True, True]
    lost = samples[3]
    assert lost.device.uuid == "GPU-00000000-0000-0000-0000-000000000003"
    assert lost.utilization_ratio is None and lost.memory_used_bytes is None
    assert "15" in (lost.error or "")
    for s in samples[:3] + samples[4:]:
        assert s.utilization_ratio == 0.87
        assert s.memory_used_bytes == 21474836480.0
        assert s.power_watts == 312.5


def test_gpu_lost_before_enumeration_is_kept_as_lost_placeholder() -> None:
    nvml = FakeNvml(fleet(3))
    nvml.gpus[1].errors["*"] = NVML_ERROR_GPU_IS_LOST
    b = backend(nvml)
    b.open()
    samples = b.sample()
    assert [s.up for s in samples] == [True, False, True]
    assert samples[1].device.uuid == "nvidia-gpu-index-1"


def test_not_supported_field_is_omitted_for_that_device_only_and_not_asked_again() -> None:
    nvml = FakeNvml(fleet(2))
    nvml.gpus[0].errors["nvmlDeviceGetTotalEnergyConsumption"] = NVML_ERROR_NOT_SUPPORTED
    nvml.gpus[1].errors["nvmlDeviceGetPcieReplayCounter"] = NVML_ERROR_NO_PERMISSION
    nvml.gpus[0].memory_temperature = None  # GeForce: no HBM temperature field (DE #460)
    b = backend(nvml)
    b.open()
    for _ in range(3):
        a, c = b.sample()
        assert a.energy_joules is None and c.energy_joules == 123456.789
        assert a.pcie_replay_errors == 5 and c.pcie_replay_errors is None
        assert a.temperatures_celsius == {"core": 61.0}
        assert c.temperatures_celsius == {"core": 61.0, "memory": 70.0}
        assert a.up and c.up
    assert nvml.calls[("nvmlDeviceGetTotalEnergyConsumption", 0)] == 1
    assert nvml.calls[("nvmlDeviceGetTotalEnergyConsumption", 1)] == 3
    assert nvml.calls[("nvmlDeviceGetPcieReplayCounter", 1)] == 1
    assert nvml.calls[("nvmlDeviceGetFieldValues", 0)] == 1
    assert nvml.calls[("nvmlDeviceGetFieldValues", 1)] == 3


def test_transient_field_error_is_asked_again_next_poll() -> None:
    nvml = FakeNvml(fleet(1))
    nvml.gpus[0].errors["nvmlDeviceGetPowerUsage"] = NVML_ERROR_TIMEOUT
    b = backend(nvml)
    b.open()
    assert b.sample()[0].power_watts is None
    del nvml.gpus[0].errors["nvmlDeviceGetPowerUsage"]
    assert b.sample()[0].power_watts == 312.5


def test_lib_rm_version_mismatch_raises_then_reinitialises_with_backoff() -> None:
    clock = Clock()
    nvml = FakeNvml(fleet(2))
    b = backend(nvml, clock)
    b.open()
    assert len(b.sample()) == 2
    nvml.library_error = NVML_ERROR_LIB_RM_VERSION_MISMATCH  # driver upgraded, not reloaded
    with pytest.raises(BackendError) as err:
        b.sample()
    assert err.value.reason == "library"
    assert nvml.initialised is False  # shut down for a clean re-init
    nvml.library_error = None
    nvml.init_error = NVML_ERROR_DRIVER_NOT_LOADED  # driver still reloading
    clock.t += 1.0
    with pytest.raises(BackendError) as err:
        b.sample()
    assert err.value.reason == "init"
    calls = nvml.init_calls
    clock.t += 1.0  # within the doubled backoff (2 s): no nvmlInit attempted
    with pytest.raises(BackendError) as err:
        b.sample()
    assert err.value.reason == "init" and nvml.init_calls == calls
    nvml.init_error = None
    clock.t += 1.5
    samples = b.sample()
    assert [s.up for s in samples] == [True, True]
    assert samples[0].power_watts == 312.5


def test_init_failure_is_a_backend_error() -> None:
    nvml = FakeNvml(fleet(1))
    nvml.init_error = NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(BackendError) as err:
        backend(nvml).open()
    assert err.value.reason == "init"


def test_sentinels_and_impossible_values_are_never_exported() -> None:
    gpu = FakeGpu(
        index=0,
        uuid="GPU-s",
        util_gpu=0xFFFFFFFF,
        util_memory=255,  # > 100 %
        temperature=644245923,  # DE #312
        memory_temperature=0xFFFFFFFF,
        power_mw=0xFFFFFFFF,
        power_limit_mw=400000,
        energy_mj=0xFFFFFFFFFFFFFFFF,
        clocks_mhz={0: 0xFFFFFFFF, 1: 1410, 2: 0xFFFFFFFF},
        ecc={0: 0xFFFFFFFFFFFFFFFF, 1: 1},
        pcie_replay=0xFFFFFFFF,
    )
    b = backend(FakeNvml([gpu]))
    b.open()
    (s,) = b.sample()
    assert s.utilization_ratio is None
    assert s.memory_bandwidth_utilization_ratio is None
    assert s.temperatures_celsius == {}
    assert s.power_watts is None and s.power_limit_watts == 400.0
    assert s.energy_joules is None
    assert s.clocks_hertz == {"sm": 1410e6}
    assert s.ecc_errors == {"uncorrected": 1}
    assert s.pcie_replay_errors is None


def test_retired_pages_when_row_remapping_is_not_supported() -> None:
    gpu = FakeGpu(
        index=0,
        uuid="GPU-v100",
        name="Tesla V100-SXM2-32GB",
        remapped_rows=None,
        retired_pages={0: [0x1000, 0x2000], 1: [0x3000]},
        retired_pending=1,
    )
    b = backend(FakeNvml([gpu]))
    b.open()
    (s,) = b.sample()
    assert s.remapped_rows == {"correctable": 2, "uncorrectable": 1}
    assert (s.remap_pending, s.remap_failed) == (True, None)


def test_mig_slices_with_profile_names_memory_and_uuids() -> None:
    gpu = FakeGpu(
        index=0,
        uuid="GPU-mig",
        mig_mode=1,
        migs=[
            FakeMig(
                1, 0, "MIG-11111111-1111-1111-1111-111111111111", 9, "MIG 3g.40gb", 42144366592, 1073741824, 3
            ),
            FakeMig(5, 0, "MIG-22222222-2222-2222-2222-222222222222", 19, "MIG 1g.10gb", 10468982784, 0),
        ],
    )
    b = backend(FakeNvml([gpu]))
    b.open()
    (s,) = b.sample()
    assert s.vendor_metrics == {"accelerator_nvidia_mig_mode": 1.0}
    assert [(x.slice_id, x.profile, x.kind, x.uuid, x.parent_uuid) for x in s.slices] == [
        ("1/0", "3g.40gb", "mig", "MIG-11111111-1111-1111-1111-111111111111", "GPU-mig"),
        ("5/0", "1g.10gb", "mig", "MIG-22222222-2222-2222-2222-222222222222", "GPU-mig"),
    ]
    assert [x.compute_limit_ratio for x in s.slices] == [3 / 7, 1 / 7]
    assert [(x.memory_used_bytes, x.memory_total_bytes) for x in s.slices] == [
        (1073741824.0, 42144366592.0),
        (0.0, 10468982784.0),
    ]


def test_xid_events_counted_per_code_on_their_own_thread() -> None:
    nvml = FakeNvml(fleet(2))
    b = backend(nvml, xid=True)
    b.open()
    assert b.xid_thread_alive()
    assert nvml.registered == [0, 1]
    for xid in (79, 79, 31):
        nvml.inject_xid(1, xid)
    nvml.inject_xid(0, 4242)  # undocumented code: counted under "other"
    deadline = time.monotonic() + 30  # a bound for a loaded machine; the loop ends when the counts are in
    while time.monotonic() < deadline:
        s0, s1 = b.sample()
        if s1.fault_events.get("79") == 2 and s1.fault_events.get("31") == 1 and s0.fault_events["other"]:
            break
        time.sleep(0.01)
    s0, s1 = b.sample()
    assert {k: v for k, v in s1.fault_events.items() if v} == {"79": 2, "31": 1}
    assert {k: v for k, v in s0.fault_events.items() if v} == {"other": 1}
    assert set(s1.fault_events) == {*KNOWN_XIDS, OTHER_XID}  # bounded, present at 0
    b.close()
    assert not b.xid_thread_alive()


def test_xid_counts_survive_reinitialisation_and_show_on_lost_device() -> None:
    clock = Clock()
    nvml = FakeNvml(fleet(2))
    b = backend(nvml, clock)
    b.open()
    b.record_xid("GPU-00000000-0000-0000-0000-000000000001", 79)
    nvml.gpus[1].errors["*"] = NVML_ERROR_GPU_IS_LOST
    lost = b.sample()[1]
    assert lost.up is False and lost.fault_events["79"] == 1
    nvml.library_error = NVML_ERROR_LIB_RM_VERSION_MISMATCH
    with pytest.raises(BackendError):
        b.sample()
    nvml.library_error = None
    del nvml.gpus[1].errors["*"]
    clock.t += 5
    assert b.sample()[1].fault_events["79"] == 1


def test_close_is_idempotent_and_never_raises() -> None:
    b = backend(FakeNvml(fleet(1)), xid=True)
    b.open()
    b.close()
    b.close()


def test_no_two_xid_threads_after_reopen() -> None:
    b = backend(FakeNvml(fleet(1)), xid=True)
    b.open()
    b.close()
    b.open()
    names = [t.name for t in threading.enumerate() if t.name == "xpuwatch-nvml-xid"]
    assert names == ["xpuwatch-nvml-xid"]
    b.close()


def test_detection() -> None:
    ctx = BackendContext()
    assert detect(ctx, FakeNvml(fleet(2))).found is True
    assert detect(ctx, FakeNvml(fleet(2))).why == "NVML driver 550.54.15, 2 GPU(s)"
    none = FakeNvml([])
    assert detect(ctx, none).found is False
    broken = FakeNvml(fleet(1))
    broken.init_error = NVML_ERROR_DRIVER_NOT_LOADED
    d = detect(ctx, broken)
    assert d.found is False and d.why.startswith("nvmlInit failed")


def test_registration() -> None:
    specs = all_specs()
    assert specs["nvml"].priority == 10
    assert specs["nvml"].supersedes == ("nvidia-smi",)
    assert specs["nvidia-smi"].priority == 20


def test_gpu_missing_after_reinitialisation_stays_visible_as_lost() -> None:
    clock = Clock()
    nvml = FakeNvml(fleet(3))
    b = backend(nvml, clock)
    b.open()
    assert [s.up for s in b.sample()] == [True, True, True]
    b.record_xid("GPU-00000000-0000-0000-0000-000000000001", 79)
    nvml.library_error = NVML_ERROR_LIB_RM_VERSION_MISMATCH
    with pytest.raises(BackendError):
        b.sample()
    nvml.library_error = None
    del nvml.gpus[1]  # fell off the bus: the driver no longer counts it
    nvml.gpus[1].index = 1
    clock.t += 5
    samples = b.sample()
    assert [(s.device.uuid[-2:], s.up) for s in samples] == [("00", True), ("02", True), ("01", False)]
    assert samples[2].error == "no longer enumerated by NVML"
    assert samples[2].device.model == "NVIDIA A100-SXM4-80GB"
    assert samples[2].fault_events["79"] == 1


_FUNCS = [
    "*",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetTemperatureV",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceById",
]
_CODES = [1, 2, 3, 4, 6, 9, 10, 13, 15, 16, 18, 21, 26, 999]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(_FUNCS), st.sampled_from(_CODES)), max_size=6))
def test_any_error_pattern_yields_samples_or_backend_error(errors: list[tuple[int, str, int]]) -> None:
    gpus = fleet(3)
    gpus[2].mig_mode = 1
    gpus[2].migs = [FakeMig(1, 0, "MIG-x", 9, "MIG 3g.40gb", 2**34, 0, 3)]
    gpus[1].nvlinks = {0: {0: 0, 1: 0, 2: 0, 3: 0}}
    nvml = FakeNvml(gpus)
    b = backend(nvml)
    b.open()
    for gpu, fn, code in errors:
        nvml.gpus[gpu].errors[fn] = code
    for _ in range(2):
        try:
            samples = b.sample()
        except BackendError as exc:
            assert exc.reason in ("library", "init")
            continue
        assert [s.device.index for s in samples] == ["0", "1", "2"]
        for s in samples:
            assert s.up or (s.utilization_ratio is None and s.error)
    b.close()


def test_running_processes_one_entry_per_pid_in_bytes() -> None:
    gpu = FakeGpu(
        index=0,
        uuid="GPU-a",
        compute_processes=[(4242, 8 * 2**30), (4343, None)],  # None: NVML_VALUE_NOT_AVAILABLE
        graphics_processes=[(1500, 120 * 2**20), (4242, 8 * 2**30)],  # 4242 computes and draws
    )
    idle = FakeGpu(index=1, uuid="GPU-b", pci_bus_id="00000000:0F:00.0")
    b = backend(FakeNvml([gpu, idle]))
    b.open()
    try:
        busy, empty = b.sample()
    finally:
        b.close()
    assert busy.processes == (
        ProcessMemory(1500, 120 * 2**20),
        ProcessMemory(4242, 8 * 2**30),  # once, not 16 GiB
        ProcessMemory(4343, None),
    )
    assert empty.processes == ()  # listed and none running: a measured nothing


def test_process_lists_without_permission_are_absent() -> None:
    gpu = FakeGpu(
        index=0,
        uuid="GPU-a",
        compute_processes=[(1, 1)],
        errors={
            "nvmlDeviceGetComputeRunningProcesses": NVML_ERROR_NO_PERMISSION,
            "nvmlDeviceGetGraphicsRunningProcesses": NVML_ERROR_NO_PERMISSION,
        },
    )
    b = backend(FakeNvml([gpu]))
    b.open()
    try:
        (s,) = b.sample()
    finally:
        b.close()
    assert s.up and s.processes is None and s.utilization_ratio == 0.87
