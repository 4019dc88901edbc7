"""Label allow-list: pod labels and annotations promoted to accelerator_allocated, empty by default,
bounded in count and value length."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from tests.exporter.test_exposition import Node
from xpuwatch.exporter import catalog as C
from xpuwatch.exporter.attribution import Attribution, Holder
from xpuwatch.exporter.collector import families
from xpuwatch.exporter.exposition import FastEncoder, fast_encoder
from xpuwatch.exporter.kubelet import ContainerDevices
from xpuwatch.exporter.podmap import DeviceRef
from xpuwatch.exporter.podsource import PodMappingSettings, build_attribution
from xpuwatch.exporter.poller import BackendView
from xpuwatch.exporter.settings import ConfigError, load
from xpuwatch.exporter.workload import MAX_PROMOTED, MAX_PROMOTED_VALUE, PodMeta, promote
from xpuwatch.vendors.base import Device, DeviceSample

POD = PodMeta(
    "ml",
    "train-0",
    {"team": "vision", "app.kubernetes.io/name": "trainer", "empty": ""},
    {"example.com/cost-center": "x" * 300, "note": "hi"},
)


def _load(tmp_path: Path, pod_mapping: str) -> PodMappingSettings:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"pod_mapping: {pod_mapping}\n")
    return load(str(cfg), {}, {}).pod_mapping


def test_empty_by_default_and_nothing_promoted(tmp_path: Path) -> None:
    s = _load(tmp_path, "{enabled: true, kube_api: true}")
    assert (s.label_allowlist, s.annotation_allowlist) == ((), ())
    assert promote(POD, s.label_allowlist, s.annotation_allowlist) == ()


def test_allow_listed_keys_become_kube_state_metrics_style_labels_values_cut() -> None:
    got = promote(POD, ("team", "app.kubernetes.io/name", "empty", "absent"), ("example.com/cost-center",))
    cut = "x" * (MAX_PROMOTED_VALUE - 1) + "~"
    assert got == (
        ("label_team", "vision"),
        ("label_app_kubernetes_io_name", "trainer"),
        ("annotation_example_com_cost_center", cut),
    )
    assert len(cut) == MAX_PROMOTED_VALUE


@pytest.mark.parametrize(
    ("pod_mapping", "message"),
    [
        (
            "{kube_api: true, label_allowlist: [a, b, c, d, e], annotation_allowlist: [f, g, h, i]}",
            f"at most {MAX_PROMOTED} pod labels and annotations together (owner_kind counts as one), got 9",
        ),
        ("{kube_api: true, label_allowlist: ['bad key!']}", "is not a Kubernetes label/annotation key"),
        (
            "{kube_api: true, label_allowlist: ['" + "n" * 64 + "']}",
            "is not a Kubernetes label/annotation key",
        ),
        ("{kube_api: true, label_allowlist: [a.b, a_b]}", "both become series label label_a_b"),
        ("{kube_api: false, label_allowlist: [team]}", "need kube_api: true"),
        ("{owner_kind: true}", "need kube_api: true"),
        ("{kube_api: true, owner_kind: 1}", "pod_mapping.owner_kind: must be true or false"),
        (
            "{kube_api: true, owner_kind: true, label_allowlist: [a, b, c, d, e, f, g, h]}",
            "(owner_kind counts as one), got 9",
        ),
        ("{kube_api: true, label_allowlist: team}", ""),  # a comma-separated string is a list of one
        ("{owner_labels: [a, b, c, d, e, f, g, h, i]}", "pod_mapping.owner_labels: at most 8 keys, got 9"),
    ],
)
def test_allowlists_are_bounded(tmp_path: Path, pod_mapping: str, message: str) -> None:
    if not message:
        assert _load(tmp_path, pod_mapping).label_allowlist == ("team",)
        return
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, pod_mapping)
    assert message in str(err.value)
    assert str(err.value).startswith("pod_mapping.")


def test_promoted_labels_reach_accelerator_allocated_only_and_both_render_paths() -> None:
    settings = PodMappingSettings(enabled=True, kube_api=True, label_allowlist=("team",))
    pods = [PodMeta("ml", "train-0", {"team": "vision"}, {}, containers=("main",))]
    allocs = [ContainerDevices("ml", "train-0", "main", "nvidia.com/gpu", ("GPU-a",))]
    att, _ = build_attribution(allocs, [DeviceRef("nvidia", "GPU-a", "0")], [], pods, settings)
    assert att.for_device("GPU-a") == (
        Holder("ml", "train-0", "main", "unknown", "", (("label_team", "vision"),)),
    )
    dev = Device("nvidia", "A100", "0", "GPU-a")
    view = BackendView("nvml", True, (DeviceSample(dev, power_watts=1.0),), 1, 1.0, 0.1, {}, 1, True)
    fams = {f.name: f for f in families("n", [view], att, True)}
    (allocated,) = fams[C.ALLOCATED].samples
    assert allocated.labels["label_team"] == "vision"
    assert all(
        "label_team" not in s.labels for f in fams.values() if f.name != C.ALLOCATED for s in f.samples
    )
    node = Node(kube=False)
    node.set(node.inp.__class__("n", (view,), att, True))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node.collector)
    encoder, _ = choose_encoder("text/plain")
    fast = fast_encoder(encoder)
    assert isinstance(fast, FastEncoder)
    body = fast.render(node.collector)
    assert body == encoder(registry) and b'label_team="vision"' in body


def test_owner_kind_is_promoted_when_asked() -> None:
    pod = PodMeta("ml", "train-0", {}, {}, owner_kinds=("Job",))
    assert promote(pod, (), (), owner_kind=True) == (("owner_kind", "Job"),)
    assert promote(pod, (), ()) == ()
    assert promote(PodMeta("ml", "bare", {}, {}), (), (), owner_kind=True) == ()


def test_without_allowlists_holders_carry_nothing_extra() -> None:
    pods = [PodMeta("ml", "train-0", {"team": "vision"}, {}, containers=("main",))]
    allocs = [ContainerDevices("ml", "train-0", "main", "nvidia.com/gpu", ("GPU-a",))]
    att, _ = build_attribution(
        allocs, [DeviceRef("nvidia", "GPU-a", "0")], [], pods, PodMappingSettings(enabled=True, kube_api=True)
    )
    assert att.for_device("GPU-a")[0].promoted == ()
    assert Attribution().for_device("GPU-a") == ()


def test_a_lone_surrogate_in_an_allow_listed_annotation_never_breaks_metrics() -> None:
    """Fails on main: a JSON ``"\\ud800"`` in an annotation (decoded as a lone surrogate) made every /metrics
    answer 500 (UnicodeEncodeError). Now written as U+FFFD, the rest of the body intact, in both formats."""
    settings = PodMappingSettings(enabled=True, kube_api=True, annotation_allowlist=("note",))
    pods = [PodMeta("ml", "train-0", {}, {"note": "a\ud800b"}, containers=("main",))]
    allocs = [ContainerDevices("ml", "train-0", "main", "nvidia.com/gpu", ("GPU-a",))]
    att, _ = build_attribution(allocs, [DeviceRef("nvidia", "GPU-a", "0")], [], pods, settings)
    dev = Device("nvidia", "A100", "0", "GPU-a")
    view = BackendView("nvml", True, (DeviceSample(dev, power_watts=1.0),), 1, 1.0, 0.1, {}, 1, True)
    node = Node(kube=False)
    node.set(node.inp.__class__("n", (view,), att, True))
    for accept in ("text/plain", "application/openmetrics-text; version=1.0.0"):
        fast = fast_encoder(choose_encoder(accept)[0])
        assert isinstance(fast, FastEncoder)
        body = fast.render(node.collector).decode("utf-8")
        assert 'annotation_note="a\ufffdb"' in body and "accelerator_power_watts{" in body
