"""The simulated fleet: default scenario, determinism, faults, pods, and scenario parsing errors."""

from __future__ import annotations

import math
import threading
import time

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from xpuwatch.vendors import sim
from xpuwatch.vendors.base import BackendError, Partition
from xpuwatch.vendors.registry import BackendContext, all_specs

DEFAULT = sim.parse_scenario("")


def by_key(samples: list) -> dict[str, object]:
    return {f"{s.device.vendor}/{s.device.index}": s for s in samples}


def test_default_fleet_is_eighteen_devices_of_eleven_models() -> None:
    samples = sim.simulate(DEFAULT, 0)
    assert [(s.device.vendor, s.device.index, s.device.model) for s in samples] == [
        ("nvidia", "0", "NVIDIA A100-SXM4-80GB"),
        ("nvidia", "1", "NVIDIA A100-SXM4-80GB"),
        ("nvidia", "2", "NVIDIA GeForce RTX 4090"),
        ("nvidia", "3", "NVIDIA GeForce RTX 4090"),
        ("amd", "0", "AMD Instinct MI250X"),
        ("amd", "1", "AMD Instinct MI250X"),
        ("amd", "2", "AMD Instinct MI300X"),
        ("amd", "3", "AMD Instinct MI300X"),
        ("huawei", "0-0", "Ascend910B"),
        ("huawei", "1-0", "Ascend910B"),
        ("huawei", "2-0", "Ascend910B"),
        ("huawei", "3-0", "Ascend910B"),
        ("huawei", "4-0", "Ascend310P3"),
        ("hygon", "0", "K100_AI"),
        ("cambricon", "0", "MLU370-X8"),
        ("enflame", "0", "S60"),
        ("kunlunxin", "0", "R200"),
        ("mthreads", "0", "MTT S4000"),
    ]
    assert all(s.up for s in samples)
    assert DEFAULT.node == "sim-node-1" and DEFAULT.seed == 42


def test_default_scenario_shows_every_profile_and_no_fault() -> None:
    profiles = {ev.profile for ev in DEFAULT.timeline if ev.profile}
    assert profiles == set(sim.PROFILES)
    assert all(ev.fault is None for ev in DEFAULT.timeline)
    samples = sim.simulate(DEFAULT, 0)
    assert all(n == 0 for s in samples for n in s.fault_events.values())
    assert all(s.ecc_errors.get("uncorrected", 0) == 0 for s in samples)


def test_mig_slices_on_a100_and_hami_shares_on_4090() -> None:
    s = by_key(sim.simulate(DEFAULT, 0))
    a100 = s["nvidia/0"]
    assert [(x.slice_id, x.profile, x.kind) for x in a100.slices] == [
        ("2/0", "3g.40gb", "mig"),
        ("3/0", "2g.20gb", "mig"),
        ("9/0", "1g.10gb", "mig"),
    ]
    assert [x.memory_total_bytes for x in a100.slices] == [40 * 2**30, 20 * 2**30, 10 * 2**30]
    assert [x.compute_limit_ratio for x in a100.slices] == [3 / 7, 2 / 7, 1 / 7]
    assert all(x.parent_uuid == a100.device.uuid and x.uuid.startswith("MIG-") for x in a100.slices)
    # NVML reports no device-level GPU-Util in MIG mode; memory used is the instances' sum.
    assert a100.utilization_ratio is None
    assert a100.memory_used_bytes == sum(x.memory_used_bytes for x in a100.slices)
    rtx = s["nvidia/3"]
    assert [(x.slice_id, x.profile, x.kind, x.uuid) for x in rtx.slices] == [
        ("0", "vgpu", "vgpu", None),
        ("1", "vgpu", "vgpu", None),
    ]
    assert [x.compute_limit_ratio for x in rtx.slices] == [0.5, 0.5]
    assert s["nvidia/1"].slices == () and s["nvidia/2"].slices == ()
    # slices take their own profile: the notebook's MIG instance idles while the serving one works
    util = {x.slice_id: x.utilization_ratio for x in a100.slices}
    assert util["3/0"] < 0.05 and util["9/0"] == 0.0 and util["2/0"] > 0.05


def test_capabilities_follow_the_vendor_interfaces() -> None:
    s = by_key(sim.simulate(DEFAULT, 0))
    assert s["nvidia/1"].sm_active_ratio is not None and s["nvidia/2"].sm_active_ratio is None
    assert s["nvidia/2"].ecc_errors == {}  # RTX 4090: no ECC
    assert s["huawei/0-0"].power_limit_watts is None  # npu-smi reports no cap
    assert s["amd/0"].power_watts is not None and s["amd/1"].power_watts is None  # MI250X: GCD 0 of package
    assert s["nvidia/1"].memory_total_bytes == 81920 * 2**20
    assert set(s["nvidia/1"].fault_events) == set(sim.NVIDIA_XIDS)
    assert len(s["nvidia/1"].link_errors) == 12 * 4


def test_profiles_shape_the_readings() -> None:
    s = by_key(sim.simulate(DEFAULT, 0))
    train, notebook, starved = s["nvidia/1"], s["nvidia/2"], s["amd/0"]
    assert train.utilization_ratio > 0.9
    assert notebook.utilization_ratio < 0.05
    assert notebook.memory_used_bytes / notebook.memory_total_bytes > 0.7  # memory held, SM idle
    assert starved.power_watts / starved.power_limit_watts < 0.3
    assert s["amd/1"].memory_bandwidth_utilization_ratio > 0.85  # memory-bound


def test_deterministic_for_seed_and_clock() -> None:
    assert sim.simulate(DEFAULT, 12.5) == sim.simulate(DEFAULT, 12.5)
    other = sim.parse_scenario("seed: 7")
    a, b = sim.simulate(DEFAULT, 3), sim.simulate(other, 3)
    assert a[0].device.uuid != b[0].device.uuid
    assert [x.utilization_ratio for x in sim.simulate(DEFAULT, 3)] != [
        x.utilization_ratio for x in sim.simulate(DEFAULT, 4)
    ]


def test_pods_from_the_default_timeline() -> None:
    pods = sim.pods_at(DEFAULT, 0)
    s = by_key(sim.simulate(DEFAULT, 0))
    alice = pods[s["nvidia/2"].device.uuid]
    assert alice == (sim.SimPod("ml-team", "jupyter-alice", "notebook", "notebook", "alice"),)
    mig = s["nvidia/0"].slices
    assert pods[mig[1].uuid] == (sim.SimPod("ml-team", "jupyter-bob", "notebook", "notebook", "bob"),)
    assert mig[2].uuid not in pods  # a free MIG instance
    rtx = s["nvidia/3"].device.uuid
    assert pods[f"{rtx}/0"][0].pod == "ocr-api-5d8f7-9qz2m"
    assert len(pods[s["huawei/1-0"].device.uuid]) == 2  # two containers share one NPU
    assert s["amd/3"].device.uuid not in pods


SCENARIO = """
seed: 1
devices:
  - {vendor: nvidia, model: "NVIDIA A100-SXM4-80GB", count: 2}
timeline:
  - {at: 0, device: "0", profile: training, pod: {namespace: a, pod: p, container: c, workload_kind: job}}
  - {at: 10, device: "0", fault: ecc_uncorrectable}
  - {at: 10, device: "1", fault: ecc_correctable_storm}
  - {at: 15, device: "1", fault: clear}
  - {at: 20, device: "0", fault: "xid:31"}
  - {at: 20, device: "0", fault: "xid:31"}
  - {at: 30, device: "1", fault: "xid:79"}
  - {at: 40, device: "1", fault: clear}
  - {at: 50, device: "0", fault: overheat}
  - {at: 60, device: "0", fault: health_fail}
  - {at: 70, device: "0", pod: null}
"""


def test_faults_over_the_timeline() -> None:
    sc = sim.parse_scenario(SCENARIO)
    at = lambda t: sim.simulate(sc, t)  # noqa: E731
    d0, d1 = at(9)
    assert d0.ecc_errors == {"corrected": 3, "uncorrected": 0} and d0.remap_pending is False
    d0, d1 = at(12)
    assert d0.ecc_errors["uncorrected"] == 1
    assert d0.fault_events["48"] == 1 and d0.remapped_rows == {"correctable": 0, "uncorrectable": 1}
    assert d0.remap_pending is True and d0.health["memory"] is False
    assert d1.ecc_errors["corrected"] == 3 + 2 * sim.STORM_ERRORS_PER_SECOND
    d0, d1 = at(25)
    assert d1.ecc_errors["corrected"] == 3 + 5 * sim.STORM_ERRORS_PER_SECOND  # storm ended at 15
    assert d0.fault_events["31"] == 2
    d0, d1 = at(30)
    assert d1.up is False and d1.utilization_ratio is None and "79" in (d1.error or "")
    assert d0.up is True
    d0, d1 = at(40)
    assert d1.up is True and d1.fault_events["79"] == 1  # counters survive the clear
    d0, _ = at(50)
    assert d0.temperatures_celsius["core"] >= 94 and d0.clock_throttled["hw_thermal"] is True
    d0, _ = at(60)
    assert set(d0.health.values()) == {False}
    assert sim.pods_at(sc, 69) == {d0.device.uuid: (sim.SimPod("a", "p", "c", "job", ""),)}
    assert sim.pods_at(sc, 70) == {}


def test_energy_counter_is_monotonic() -> None:
    e = [by_key(sim.simulate(DEFAULT, t))["nvidia/1"].energy_joules for t in (0, 1, 5, 100)]
    assert e == sorted(e) and len(set(e)) == 4


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_timeline_held_for_the_first_scrape_starts_when_begun() -> None:
    """``timeline_start: first_scrape``: the fleet stays at its state at 0 however long the exporter waits
    for its first scrape, so Prometheus's first sample shows the ECC counter at 0 and the fault as a step."""
    doc = (
        "timeline_start: first_scrape\ndevices: [{model: NVIDIA A100-SXM4-80GB, count: 1}]\n"
        "timeline: [{at: 10, device: '0', fault: ecc_uncorrectable}]\n"
    )
    clock = Clock(1000.0)
    b = sim.SimBackend(sim.parse_scenario(doc), clock)
    b.open()
    clock.t = 1600.0  # ten minutes without a scrape
    assert b.elapsed() == 0.0 and b.sample()[0].ecc_errors["uncorrected"] == 0
    b.begin()  # the first scrape
    clock.t = 1609.0
    assert b.elapsed() == 9.0 and b.sample()[0].ecc_errors["uncorrected"] == 0
    b.begin()  # every later scrape: nothing moves
    clock.t = 1611.0
    assert b.elapsed() == 11.0 and b.sample()[0].ecc_errors["uncorrected"] == 1
    # The default starts the timeline with the backend, and begin() leaves it there.
    plain = sim.SimBackend(sim.parse_scenario(doc.replace("first_scrape", "start")), Clock(1000.0))
    plain._clock = lambda: 1011.0  # type: ignore[method-assign]
    plain.begin()
    assert plain.elapsed() == 11.0


def test_hung_backend_blocks_sample_until_cleared_or_closed() -> None:
    sc = sim.parse_scenario(
        """
devices: [{vendor: huawei, model: Ascend910B}]
timeline:
  - {at: 5, device: "0-0", fault: hung_backend}
  - {at: 9, device: "0-0", fault: clear}
"""
    )
    clock = Clock(1000.0)
    b = sim.SimBackend(sc, clock)
    b.open()
    assert len(b.sample()) == 1
    clock.t = 1006.0
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(len(b.sample())))
    t.start()
    time.sleep(0.5)
    assert t.is_alive()  # blocked while hung
    clock.t = 1010.0
    t.join(30)  # it re-checks every 0.2 s; a safety net, not a speed assertion
    assert result == [1]
    clock.t = 1006.0
    errs: list[BaseException] = []

    def call() -> None:
        try:
            b.sample()
        except BackendError as exc:
            errs.append(exc)

    t = threading.Thread(target=call)
    t.start()
    b.close()
    t.join(30)  # a safety net, not a speed assertion
    assert [getattr(e, "reason", None) for e in errs] == ["closed"]


def test_registered_as_sim_not_auto_detected() -> None:
    spec = all_specs()["sim"]
    assert spec.auto is False
    b = spec.create(BackendContext(options={"seed": 3, "node": "n1"}, clock=lambda: 0.0))
    assert b.scenario.seed == 3 and b.scenario.node == "n1"


def test_mi300x_in_dpx_lists_two_partitions_of_one_card_as_amd_smi_does() -> None:
    s = by_key(sim.simulate(DEFAULT, 0))
    p0, p1 = s["amd/2"], s["amd/3"]
    card = p0.device.uuid
    assert p0.device.partition == Partition(card, "0", "DPX", "NPS1")
    assert p1.device.partition == Partition(card, "1", "DPX", "NPS1")
    # vendors.amd.partitions: "<partition 0's uuid>:p<id>", one PCI function per partition, one ASIC serial
    assert p1.device.uuid == f"{card}:p1"
    assert p0.device.pci_bus_id == "00000000:16:00.0" and p1.device.pci_bus_id == "00000000:16:00.1"
    assert p0.device.serial == p1.device.serial
    # ROCm/amdsmi#132 (DPX/NPS1): the card's power and cap on partition 0 only; the whole card's memory
    # total (196592 MiB) on partition 0, half of it on partition 1.
    assert p0.power_watts is not None and p0.power_limit_watts == 750.0
    assert p1.power_watts is None and p1.power_limit_watts is None and p1.energy_joules is None
    assert p0.memory_total_bytes == 196592 * 2**20 and p1.memory_total_bytes == 98296 * 2**20


def test_s4000_reports_used_above_the_total_as_mthreads_gmi_does_on_a_misconfigured_iommu() -> None:
    from xpuwatch.exporter.plausibility import implausible

    s = by_key(sim.simulate(DEFAULT, 0))["mthreads/0"]
    assert s.memory_total_bytes == 32768 * 2**20
    assert s.memory_used_bytes is not None and 32768 * 2**20 < s.memory_used_bytes <= 48 * 2**30
    assert s.power_watts is None and s.ecc_errors == {} and s.clocks_hertz == {}
    assert implausible(s) == (("used_above_total", 1),)
    # the only implausible reading of the default fleet
    assert [x.device.vendor for x in sim.simulate(DEFAULT, 0) if implausible(x)] == ["mthreads"]


def test_hygon_and_pod_mapping_extras() -> None:
    s = by_key(sim.simulate(DEFAULT, 0))
    assert s["hygon/0"].vendor_metrics["accelerator_hygon_memory_available_bytes"] == 65438 * 2**20
    backend = sim.SimBackend(DEFAULT, clock=lambda: 0.0)
    assert dict(backend.resources_reassigned()) == {"huawei.com/Ascend910": 0, "huawei.com/Ascend310P": 0}
    unmatched = dict(backend.resources_unmatched())
    assert unmatched["huawei.com/Ascend310P"] == 0 and unmatched["mthreads.com/vgpu"] == 0
    # without a pod on an Ascend chip, the reassigning plugin holds nothing: no series
    idle = sim.parse_scenario("devices: [{model: Ascend910B}]")
    assert sim.SimBackend(idle, clock=lambda: 0.0).resources_reassigned() == ()


def test_reassigned_resources_follow_the_timeline_though_computed_once_per_event() -> None:
    """The status is read by every scrape, so it is kept per timeline event: a pod leaving an Ascend chip
    takes the resource's series away at that event, and an earlier time gives it back."""
    doc = (
        "devices: [{model: Ascend910B, count: 2}]\n"
        "timeline:\n"
        "  - {at: 0, device: '0-0', pod: {namespace: ml, pod: p, container: c}}\n"
        "  - {at: 60, device: '0-0', pod: null}\n"
    )
    now = [10.0]
    backend = sim.SimBackend(sim.parse_scenario(doc), clock=lambda: now[0])
    now[0] = 20.0  # elapsed 10 s
    held = (("huawei.com/Ascend910", 0),)
    assert backend.resources_reassigned() == held
    assert backend.resources_reassigned() is backend.resources_reassigned()  # kept, not recomputed
    now[0] = 80.0  # elapsed 70 s: the pod has gone
    assert backend.resources_reassigned() == ()
    assert backend.resources_reassigned(30.0) == held
    assert backend.resources_unmatched() == (("huawei.com/Ascend910", 0),)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("seed: x", "seed: must be an integer"),
        ("poll_interval: 0", "poll_interval: must be > 0"),
        ("colour: red", "unknown scenario key(s): colour"),
        ("devices: []", "devices: must be a non-empty list"),
        ("devices: [{model: TPUv9}]", "devices[0].model: 'TPUv9' is not simulated"),
        ("devices: [{vendor: amd, model: Ascend910B}]", "devices[0].vendor: Ascend910B is made by huawei"),
        (
            "devices: [{model: Ascend910B, mig: [1g.10gb]}]",
            "devices[0].mig: MIG is simulated on the A100 only",
        ),
        ("timeline: [{at: 0, device: '0', profile: sleepy}]", "timeline[0].profile: 'sleepy' is not one of"),
        ("timeline: [{at: 0, device: '0', fault: meltdown}]", "timeline[0].fault: 'meltdown' is not one of"),
        (
            "timeline: [{at: 0, device: '0', fault: 'xid:abc'}]",
            "timeline[0].fault: xid code must be a number",
        ),
        ("timeline: [{at: 0, device: '9', profile: idle}]", "timeline[0].device: no simulated device '9'"),
        ("timeline: [{at: -1, device: '0', profile: idle}]", "timeline[0].at: must be >= 0"),
        ("timeline: [{at: 0, device: '0'}]", "timeline[0]: needs profile, fault or pod"),
        ("timeline: [{at: 0, device: '0', pod: {namespace: a}}]", "timeline[0].pod.pod: required string"),
        (
            "timeline: [{at: 0, device: '0', pod: {namespace: a, pod: b, workload_kind: cron}}]",
            "timeline[0].pod.workload_kind: must be one of",
        ),
        (
            "timeline: [{at: 0, device: 'nvidia/1', slice: '7/0', pod: null}]",
            "timeline[0].slice: device nvidia/1 has no slice",
        ),
        (
            "timeline: [{at: 0, device: 'nvidia/0', slice: '2/0', fault: lost}]",
            "timeline[0].slice: faults apply to a whole device",
        ),
        (
            "devices: [{model: AMD Instinct MI300X, count: 3}]",
            "devices[0].count: AMD Instinct MI300X is listed as 2 logical GPUs per card",
        ),
        ("timeline_start: boot", "timeline_start: one of start, first_scrape, got 'boot'"),
        ("[1, 2]", "scenario must be a mapping"),
        ("a: [", "scenario is not valid YAML"),
    ],
)
def test_scenario_errors_name_the_key(doc: str, message: str) -> None:
    with pytest.raises(sim.ScenarioError) as exc:
        sim.parse_scenario(doc)
    assert message in str(exc.value)


def test_device_selectors() -> None:
    sc = sim.parse_scenario(
        """
timeline:
  - {at: 0, device: "1", vendor: amd, profile: compute_bound}
  - {at: 0, device: "huawei/3-0", profile: training}
"""
    )
    s = by_key(sim.simulate(sc, 0))
    assert s["amd/1"].utilization_ratio > 0.95 and s["huawei/3-0"].utilization_ratio > 0.9
    assert s["nvidia/1"].utilization_ratio == 0.0  # the default timeline was replaced: idle


_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 12) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(
    [
        "seed",
        "node",
        "poll_interval",
        "devices",
        "timeline",
        "at",
        "device",
        "fault",
        "profile",
        "pod",
        "model",
        "count",
        "vendor",
        "mig",
        "vgpu",
    ]
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=5))
def test_fuzz_parse_raises_only_scenario_error(doc: dict) -> None:
    try:
        sc = sim.parse_scenario(yaml.safe_dump(doc))
    except sim.ScenarioError:
        return
    for s in sim.simulate(sc, 1.0):
        assert s.utilization_ratio is None or 0 <= s.utilization_ratio <= 1
        assert all(math.isfinite(v) for v in s.temperatures_celsius.values())
