"""Collector: samples + attribution -> exact series, per the labelling contract; exposition cache."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from xpuwatch.exporter import catalog as C
from xpuwatch.exporter.attribution import Attribution, Holder, StaticAttributionSource, slice_key
from xpuwatch.exporter.collector import Collector, families
from xpuwatch.exporter.exposition import Cached, ExpositionCache
from xpuwatch.exporter.poller import BackendView
from xpuwatch.exporter.selection import Selection
from xpuwatch.vendors.base import Device, DeviceSample, Slice, VendorMetric

DEV = Device("nvidia", "NVIDIA A100-SXM4-80GB", "0", "GPU-a", "0000:01:00.0", "550.54.15", "1320")
DEV2 = Device("nvidia", "NVIDIA A100-SXM4-80GB", "1", "GPU-b")
ID = {"node": "n1", "vendor": "nvidia", "model": "NVIDIA A100-SXM4-80GB", "device": "0", "uuid": "GPU-a"}
ALICE = Holder("ml", "jupyter-alice", "notebook", "notebook", "alice")
BOB = Holder("ml", "train-0", "trainer", "job", "")


def view(*samples: DeviceSample, **kw: object) -> BackendView:
    args = {
        "backend": "nvml",
        "up": True,
        "samples": samples,
        "devices": len(samples),
        "last_success": 1e9,
        "poll_duration": 0.25,
        "errors": {},
        "generation": 1,
        "fresh": True,
        **kw,
    }
    return BackendView(**args)  # type: ignore[arg-type]


def series(fams: list, name: str) -> dict[tuple, float]:
    out = {}
    for f in fams:
        for s in f.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def one(fams: list, name: str) -> tuple[dict[str, str], float]:
    got = series(fams, name)
    assert len(got) == 1, got
    labels, value = next(iter(got.items()))
    return dict(labels), value


def lab(**kw: str) -> tuple:
    return tuple(sorted({**ID, **kw}.items()))


def test_every_field_maps_to_its_catalog_series() -> None:
    s = DeviceSample(
        DEV,
        utilization_ratio=0.97,
        sm_active_ratio=0.8,
        sm_occupancy_ratio=0.4,
        tensor_active_ratio=0.3,
        memory_bandwidth_utilization_ratio=0.6,
        memory_used_bytes=1024.0,
        memory_total_bytes=2048.0,
        temperatures_celsius={"core": 60, "memory": 70},
        power_watts=300.5,
        power_limit_watts=400,
        energy_joules=12345.5,
        clocks_hertz={"sm": 1.41e9},
        clock_throttled={"hw_thermal": True, "gpu_idle": False},
        ecc_errors={"corrected": 3, "uncorrected": 1},
        remapped_rows={"correctable": 0, "uncorrectable": 2},
        remap_pending=True,
        remap_failed=False,
        fault_events={"79": 0, "48": 1},
        pcie_replay_errors=7,
        link_errors={("0", "crc_flit"): 5},
        health={"memory": False},
    )
    fams = families("n1", [view(s)], Attribution(), None, selection=Selection())  # every breakdown on
    assert series(fams, C.UTILIZATION) == {lab(): 0.97}
    assert series(fams, C.MEMORY_USED) == {lab(): 1024.0}
    assert series(fams, C.ENERGY) == {lab(): 12345.5}
    assert series(fams, C.TEMPERATURE) == {lab(sensor="core"): 60.0, lab(sensor="memory"): 70.0}
    assert series(fams, C.CLOCK) == {lab(clock="sm"): 1.41e9}
    assert series(fams, C.CLOCK_THROTTLED) == {lab(reason="hw_thermal"): 1.0, lab(reason="gpu_idle"): 0.0}
    assert series(fams, C.ECC_ERRORS) == {lab(type="corrected"): 3.0, lab(type="uncorrected"): 1.0}
    assert series(fams, C.REMAPPED_ROWS) == {lab(type="correctable"): 0.0, lab(type="uncorrectable"): 2.0}
    assert series(fams, C.REMAP_PENDING) == {lab(): 1.0} and series(fams, C.REMAP_FAILED) == {lab(): 0.0}
    assert series(fams, C.FAULT_EVENTS) == {lab(code="79"): 0.0, lab(code="48"): 1.0}
    assert series(fams, C.PCIE_REPLAY) == {lab(): 7.0}
    assert series(fams, C.LINK_ERRORS) == {lab(link="0", type="crc_flit"): 5.0}
    assert series(fams, C.HEALTH) == {lab(subsystem="memory"): 0.0}
    assert series(fams, C.UP) == {lab(): 1.0}
    assert series(fams, C.INFO) == {
        lab(driver_version="550.54.15", pci_bus_id="0000:01:00.0", serial="1320"): 1.0
    }
    assert series(fams, C.POWER_LIMIT) == {lab(): 400.0}


def test_none_means_no_series_never_zero() -> None:
    fams = families("n1", [view(DeviceSample(DEV))], Attribution(), None)
    names = {s.name for f in fams for s in f.samples}
    assert names == {
        C.UP,
        C.INFO,
        C.BACKEND_UP,
        C.BACKEND_POLL_DURATION,
        C.BACKEND_LAST_SUCCESS,
        C.BACKEND_DEVICES,
        C.RENDER_SERIES,
    }


def test_lost_device_exports_only_up_zero_info_and_allocation() -> None:
    att = Attribution.of({"GPU-a": [BOB]})
    lost = DeviceSample.lost(DEV, "GPU is lost")
    fams = families("n1", [view(lost, DeviceSample(DEV2, utilization_ratio=0.5))], att, None)
    pod = {"namespace": "ml", "pod": "train-0", "container": "trainer"}
    assert series(fams, C.UP)[lab(**pod)] == 0.0
    assert series(fams, C.UTILIZATION) == {lab(device="1", uuid="GPU-b"): 0.5}
    assert len(series(fams, C.ALLOCATED)) == 1


def test_pod_labels_only_with_exactly_one_holder_and_allocated_per_holder() -> None:
    s = DeviceSample(DEV, utilization_ratio=0.1)
    fams = families("n1", [view(s)], Attribution.of({"GPU-a": [ALICE]}), True)
    labels, _ = one(fams, C.UTILIZATION)
    assert (labels["namespace"], labels["pod"], labels["container"]) == ("ml", "jupyter-alice", "notebook")
    assert "workload_kind" not in labels
    labels, value = one(fams, C.ALLOCATED)
    assert value == 1 and labels == {
        **ID,
        "namespace": "ml",
        "pod": "jupyter-alice",
        "container": "notebook",
        "workload_kind": "notebook",
        "owner": "alice",
    }
    assert one(fams, C.POD_MAPPING_UP) == ({}, 1.0)

    fams = families("n1", [view(s)], Attribution.of({"GPU-a": [ALICE, BOB]}), False)
    labels, _ = one(fams, C.UTILIZATION)
    assert "pod" not in labels
    assert sorted(dict(k)["pod"] for k in series(fams, C.ALLOCATED)) == ["jupyter-alice", "train-0"]
    assert one(fams, C.POD_MAPPING_UP) == ({}, 0.0)


def test_slices_labelled_by_parent_and_their_holder() -> None:
    mig = Slice("GPU-a", "2/0", "3g.40gb", "mig", "MIG-x", 1.0, 40.0, 3 / 7, 0.5, 0.4, 0.2)
    share = Slice("GPU-a", "1", "vgpu", "vgpu", None, 2.0, 12.0, 0.5)
    s = DeviceSample(DEV, slices=(mig, share))
    att = Attribution.of({"MIG-x": [ALICE], slice_key("GPU-a", "1"): [BOB]})
    fams = families("n1", [view(s)], att, None)
    info = series(fams, C.SLICE_INFO)
    assert info == {
        tuple(
            sorted(
                {
                    **ID,
                    "slice_id": "2/0",
                    "profile": "3g.40gb",
                    "slice_kind": "mig",
                    "slice_uuid": "MIG-x",
                    "namespace": "ml",
                    "pod": "jupyter-alice",
                    "container": "notebook",
                }.items()
            )
        ): 1.0,
        tuple(
            sorted(
                {
                    **ID,
                    "slice_id": "1",
                    "profile": "vgpu",
                    "slice_kind": "vgpu",
                    "slice_uuid": "",
                    "namespace": "ml",
                    "pod": "train-0",
                    "container": "trainer",
                }.items()
            )
        ): 1.0,
    }
    assert sorted(series(fams, C.SLICE_MEMORY_LIMIT).values()) == [12.0, 40.0]
    assert list(series(fams, C.SLICE_SM_ACTIVE).values()) == [0.4]  # the vGPU share has none
    # device series carry no pod: no container holds the whole device; both slice holders are allocated
    assert "pod" not in one(fams, C.UP)[0]
    assert len(series(fams, C.ALLOCATED)) == 2


def test_stale_backend_serves_no_device_series_and_self_metrics_by_reason() -> None:
    v = view(samples=(), up=False, fresh=False, devices=4, errors={"timeout": 2, "parse": 1})
    fams = families("n1", [v], Attribution(), None)
    assert series(fams, C.UP) == {}
    assert series(fams, C.BACKEND_UP) == {(("backend", "nvml"),): 0.0}
    assert series(fams, C.BACKEND_DEVICES) == {(("backend", "nvml"),): 4.0}
    assert series(fams, C.BACKEND_ERRORS) == {
        (("backend", "nvml"), ("reason", "parse")): 1.0,
        (("backend", "nvml"), ("reason", "timeout")): 2.0,
    }


def test_same_device_from_two_backends_is_served_once() -> None:
    a = view(DeviceSample(DEV, utilization_ratio=0.1))
    b = view(DeviceSample(DEV, utilization_ratio=0.9), backend="nvidia-smi")
    fams = families("n1", [a, b], Attribution(), None)
    assert series(fams, C.UTILIZATION) == {lab(): 0.1}


def test_supplement_overlays_readings_but_never_up_or_identity() -> None:
    nvml = view(
        DeviceSample(
            DEV, utilization_ratio=0.9, memory_bandwidth_utilization_ratio=0.2, health={"pcie": True}
        ),
        DeviceSample.lost(DEV2, "GPU is lost"),
    )
    dcgm = view(
        DeviceSample(
            Device("nvidia", "x", "0", "GPU-a"),
            sm_occupancy_ratio=0.25,
            memory_bandwidth_utilization_ratio=0.6,
            health={"memory": False},
        ),
        DeviceSample(Device("nvidia", "x", "1", "GPU-b"), sm_occupancy_ratio=0.5),
        backend="dcgm",
        supplement=True,
    )
    fams = families("n1", [nvml, dcgm], Attribution(), None)
    assert series(fams, C.UP) == {lab(): 1.0, lab(device="1", uuid="GPU-b"): 0.0}
    assert series(fams, C.UTILIZATION) == {lab(): 0.9}
    assert series(fams, C.SM_OCCUPANCY) == {lab(): 0.25}  # the lost GPU-b gets nothing overlaid
    assert series(fams, C.MEMORY_BANDWIDTH) == {lab(): 0.6}  # DRAM active beats NVML's memory utilization
    assert series(fams, C.HEALTH) == {lab(subsystem="memory"): 0.0, lab(subsystem="pcie"): 1.0}


def test_lost_device_keeps_its_fault_counters() -> None:
    lost = DeviceSample(DEV, up=False, error="fallen off the bus", fault_events={"79": 1, "31": 0})
    fams = families("n1", [view(lost)], Attribution(), None)
    assert series(fams, C.FAULT_EVENTS) == {lab(code="31"): 0.0, lab(code="79"): 1.0}


def test_vendor_metrics_from_declarations_only() -> None:
    vm = VendorMetric(
        "accelerator_huawei_aicpu_utilization_ratio", "gauge", "ratio", "AI CPU busy.", "npu-smi"
    )
    defs = {**C.by_name(), vm.name: C.MetricDef(vm.name, vm.type, vm.unit, vm.help, vm.source)}
    s = DeviceSample(DEV, vendor_metrics={vm.name: 0.25, "accelerator_huawei_undeclared": 1.0})
    unknown: set[str] = set()
    fams = families("n1", [view(s)], Attribution(), None, defs, unknown)
    assert series(fams, vm.name) == {lab(): 0.25}
    assert unknown == {"accelerator_huawei_undeclared"}


def test_exposition_parses_with_catalog_types_and_help() -> None:
    s = DeviceSample(DEV, energy_joules=5.0, utilization_ratio=0.5, ecc_errors={"corrected": 1})
    reg = CollectorRegistry()
    reg.register(Collector("n1", lambda now: [view(s)], StaticAttributionSource(), lambda: 0.0))
    text = generate_latest(reg).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    defs = C.by_name()
    assert parsed["accelerator_energy_joules"].type == "counter"
    assert parsed["accelerator_energy_joules"].documentation == defs[C.ENERGY].help
    assert parsed["accelerator_utilization_ratio"].type == "gauge"
    assert 'accelerator_info{device="0"' in text and "# TYPE accelerator_info gauge" in text


def test_cache_renders_once_per_state_and_negotiates_formats() -> None:
    state = {"gen": 1}
    s = DeviceSample(DEV, utilization_ratio=0.5)
    col = Collector(
        "n1", lambda now: [view(s, generation=state["gen"])], StaticAttributionSource(), lambda: 0.0
    )
    cache = ExpositionCache(col)
    a = cache.get("", "")
    assert cache.get("text/plain", "").body is a.body and cache.renders == 1
    gz = cache.get("", "gzip")
    assert gz.gzipped and cache.renders == 1
    om = cache.get("application/openmetrics-text; version=1.0.0", "")
    assert om.content_type.startswith("application/openmetrics-text") and om.body.endswith(b"# EOF\n")
    assert cache.renders == 2
    state["gen"] = 2
    cache.get("", "")
    assert cache.renders == 3


def test_warm_prerenders_every_requested_variant() -> None:
    state = {"gen": 1}
    s = DeviceSample(DEV, utilization_ratio=0.5)
    col = Collector(
        "n1", lambda now: [view(s, generation=state["gen"])], StaticAttributionSource(), lambda: 0.0
    )
    cache = ExpositionCache(col)
    om = "application/openmetrics-text; version=1.0.0"
    assert cache.peek(om, "gzip") is None
    first = cache.get(om, "gzip")
    assert cache.peek(om, "gzip") == Cached(first, False) and cache.renders == 1
    state["gen"] = 2  # one poll: the previous body is served (behind) until one of the new state exists
    assert cache.peek(om, "gzip") == Cached(first, True) and cache.renders == 1
    cache.warm()
    assert cache.renders == 2
    again = cache.peek(om, "gzip")
    assert again is not None and not again.behind
    assert again.rendered.gzipped and again.rendered is not first
    cache.warm()  # same state: no render
    assert cache.renders == 2


_txt = st.text(max_size=12)
_num = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**40), 2**40)
_samples = st.builds(
    DeviceSample,
    device=st.builds(
        Device,
        vendor=_txt,
        model=_txt,
        index=_txt,
        uuid=_txt,
        pci_bus_id=st.none() | _txt,
        driver_version=st.none() | _txt,
        serial=st.none() | _txt,
    ),
    up=st.booleans(),
    utilization_ratio=st.none() | _num,
    memory_used_bytes=st.none() | _num,
    temperatures_celsius=st.dictionaries(_txt, _num, max_size=3),
    fault_events=st.dictionaries(_txt, st.integers(0, 10**9), max_size=3),
    link_errors=st.dictionaries(st.tuples(_txt, _txt), st.integers(0, 10), max_size=2),
    health=st.dictionaries(_txt, st.booleans(), max_size=2),
    slices=st.lists(
        st.builds(
            Slice,
            parent_uuid=_txt,
            slice_id=_txt,
            profile=_txt,
            kind=st.sampled_from(["mig", "vgpu"]),
            uuid=st.none() | _txt,
            memory_used_bytes=st.none() | _num,
        ),
        max_size=2,
    ).map(tuple),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(_samples, max_size=4), _txt)
def test_fuzz_any_samples_render_to_parseable_exposition(samples: list[DeviceSample], node: str) -> None:
    reg = CollectorRegistry()
    reg.register(Collector(node, lambda now: [view(*samples)], StaticAttributionSource(), lambda: 0.0))
    text = generate_latest(reg).decode()
    parsed = list(text_string_to_metric_families(text))
    ups = [s for f in parsed for s in f.samples if s.name == C.UP]
    assert len(ups) == len({(s.device.vendor, s.device.uuid) for s in samples})
