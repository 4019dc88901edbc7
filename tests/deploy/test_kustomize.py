"""deploy/kustomize: every overlay renders with kubectl's kustomize, every object round-trips through the
official client's models (no unknown or misspelt fields), and RBAC grants exactly what the code calls."""

from __future__ import annotations

import ast
import functools
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = ROOT / "deploy" / "kustomize"
OVERLAYS = sorted(
    p.parent.relative_to(KUSTOMIZE).as_posix() for p in KUSTOMIZE.glob("*/*/kustomization.yaml")
)

# prometheus-operator custom resources have no model in the Kubernetes client: checked structurally.
CUSTOM = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("monitoring.coreos.com/v1alpha1", "AlertmanagerConfig"),
}
VENDORS = (
    "nvidia",
    "amd",
    "ascend",
    "cambricon",
    "hygon",
    "kunlunxin",
    "metax",
    "mthreads",
    "iluvatar",
    "enflame",
)


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML reads a bare ``=`` (AlertmanagerConfig ``matchType: =``, as kustomize prints it) as YAML 1.1's
    ``!!value`` tag; Kubernetes' YAML 1.2 reader takes it as the string "="."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))  # type: ignore[arg-type]


@functools.cache
def _kustomize(overlay: str) -> str:
    """kubectl's kustomize output, once per overlay and test session (the tree does not change meanwhile)."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is required (Debian package kubernetes-client)"
    out = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZE / overlay)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def render(overlay: str) -> list[dict[str, Any]]:
    """The overlay's objects, freshly parsed (callers may change them)."""
    return [d for d in yaml.load_all(_kustomize(overlay), Loader=_Loader) if d]


class _Response:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.data = json.dumps(obj)


def _model_name(api_version: str, kind: str) -> str:
    version = api_version.rsplit("/", 1)[-1]
    return f"{version[0].upper()}{version[1:]}{kind}"


def _prune(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _prune(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_prune(v) for v in x]
    return x


def test_overlays_exist() -> None:
    assert {
        "overlays/mixed",
        "overlays/nvidia",
        "overlays/nvidia-hostengine",
        "overlays/apply",
        "overlays/kube-prometheus-stack",
        *(f"exporters/{v}" for v in VENDORS),
    } <= set(OVERLAYS)


@pytest.mark.parametrize("overlay", OVERLAYS)
async def test_every_object_parses_as_its_kind(overlay: str) -> None:
    async with ApiClient() as api:
        _round_trip(api, overlay)


def _round_trip(api: ApiClient, overlay: str) -> None:
    for obj in render(overlay):
        key = (obj["apiVersion"], obj["kind"])
        if key in CUSTOM:
            assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}, key
            continue
        model = api.deserialize(_Response(obj), _model_name(*key))
        back = _prune(api.sanitize_for_serialization(model))
        # Whatever the model dropped was not a field of that kind (a typo or a wrong nesting).
        assert back == _prune(obj), (
            f"{overlay}: {key} {obj['metadata']['name']} has fields the API does not know"
        )


# Vendors whose tools open device nodes the kubelet does not put in the container's device cgroup (no
# device-plugin allocation for a monitor): privileged, as AMD's and Huawei's own exporters run
# (docs/deploy.md). NVIDIA's runtime injects the devices; it adds only SYS_ADMIN for embedded DCGM profiling.
PRIVILEGED = set(VENDORS) - {"nvidia"}


def test_exporters_keep_least_privilege() -> None:
    for obj in render("overlays/mixed"):
        if obj["kind"] != "DaemonSet":
            continue
        vendor = obj["metadata"]["name"].removeprefix("xpuwatch-exporter-")
        spec = obj["spec"]["template"]["spec"]
        ctr = spec["containers"][0]
        sc = ctr["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        if vendor in PRIVILEGED:
            # the API rejects privileged with allowPrivilegeEscalation false
            assert sc["privileged"] is True and sc["allowPrivilegeEscalation"] is True, vendor
        else:
            assert not sc.get("privileged") and sc["allowPrivilegeEscalation"] is False, vendor
            assert sc["capabilities"].get("add") == ["SYS_ADMIN"], vendor
        assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"], vendor
        mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
        assert all(m.get("readOnly") for p, m in mounts.items() if p != "/tmp"), vendor
        assert {"operator": "Exists"} in spec["tolerations"]  # keeps watching cards marked faulty
        # Only amdsmi needs the host's PID namespace for its process list (docs/vendors/amd.md); the others
        # read host PIDs from the vendor and their cgroups from /host/proc.
        assert spec.get("hostPID", False) is (vendor == "amd"), vendor


def test_one_daemonset_per_vendor_without_overlapping_selectors() -> None:
    sets = [o for o in render("overlays/mixed") if o["kind"] == "DaemonSet"]
    selectors = [json.dumps(o["spec"]["selector"], sort_keys=True) for o in sets]
    assert sorted(o["metadata"]["name"] for o in sets) == sorted(f"xpuwatch-exporter-{v}" for v in VENDORS)
    assert len(set(selectors)) == len(VENDORS)


# PCI vendor IDs (pci.ids) and operator/device-plugin labels each DaemonSet must accept (docs/deploy.md).
PCI_VENDOR = {
    "nvidia": "10de",
    "amd": "1002",
    "ascend": "19e5",
    "cambricon": "cabc",
    "hygon": "1d94",
    "kunlunxin": "1d22",
    "metax": "9999",
    "mthreads": "1ed5",
    "iluvatar": "1e3e",
    "enflame": "1e36",
}
OPERATOR_LABELS = {
    "nvidia": {("nvidia.com/gpu.present", "true")},  # GPU Feature Discovery / GPU Operator
    "amd": {("feature.node.kubernetes.io/amd-gpu", "true")},  # AMD GPU Operator's NFD rule
    "ascend": {  # Huawei device plugin (Ascend/mind-cluster ascendplugin-*.yaml)
        ("accelerator", "huawei-Ascend910"),
        ("accelerator", "huawei-Ascend310P"),
        ("accelerator", "huawei-Ascend310"),
    },
}


def _accepted(daemonset: dict[str, Any]) -> set[tuple[str, str]]:
    """(label, value) pairs any one of which schedules the DaemonSet on a node."""
    terms = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    out = set()
    for term in terms:
        (expr,) = term["matchExpressions"]  # one label per term: terms are ORed
        assert expr["operator"] == "In"
        out |= {(expr["key"], v) for v in expr["values"]}
    return out


@pytest.mark.parametrize("vendor", VENDORS)
def test_node_affinity_matches_stock_nfd_and_operator_labels(vendor: str) -> None:
    ds = next(o for o in render(f"exporters/{vendor}") if o["kind"] == "DaemonSet")
    accepted = _accepted(ds)
    nfd = {
        k
        for k, v in accepted
        if k.startswith("feature.node.kubernetes.io/pci-") and k.endswith(f"_{PCI_VENDOR[vendor]}.present")
    }
    # stock NFD: pci-<class><subclass>_<vendor>.present, classes 03 (display) and 12 (accelerators)
    assert nfd and all(
        re.fullmatch(r"feature\.node\.kubernetes\.io/pci-(03|12)[0-9a-f]{2}_[0-9a-f]{4}\.present", k)
        for k in nfd
    )
    assert OPERATOR_LABELS.get(vendor, set()) <= accepted
    others = {k for k, _ in accepted if k.startswith("feature.node.kubernetes.io/pci-")} - nfd
    assert not others, f"{vendor} also schedules on {others}"


def test_monitoring_objects_carry_the_release_label() -> None:
    for overlay in ("base", "overlays/mixed", "overlays/kube-prometheus-stack"):
        objs = [o for o in render(overlay) if o["apiVersion"].startswith("monitoring.coreos.com/")]
        assert objs and all(o["metadata"]["labels"]["release"] == "kube-prometheus-stack" for o in objs)
    kinds = {
        o["kind"] for o in render("overlays/kube-prometheus-stack") if "release" in o["metadata"]["labels"]
    }
    assert kinds == {"ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"}


def _matcher(m: dict[str, str]) -> str:
    return f'{m["name"]}{m["matchType"]}"{m["value"]}"'


def _route_back(r: dict[str, Any]) -> dict[str, Any]:
    """An AlertmanagerConfig route -> the Alertmanager config route it stands for."""
    names = {"groupBy": "group_by", "groupWait": "group_wait", "groupInterval": "group_interval"}
    names |= {"repeatInterval": "repeat_interval"}
    out: dict[str, Any] = {}
    for k, v in r.items():
        if k == "matchers":
            out["matchers"] = [_matcher(m) for m in v]
        elif k == "routes":
            out["routes"] = [_route_back(x) for x in v]
        else:
            out[names.get(k, k)] = v
    return out


def test_alertmanagerconfig_routes_like_the_generated_alertmanager_config() -> None:
    (amc,) = [o for o in render("overlays/kube-prometheus-stack") if o["kind"] == "AlertmanagerConfig"]
    generated = yaml.safe_load((ROOT / "alerts" / "generated" / "alertmanager.yml").read_text())
    assert _route_back(amc["spec"]["route"]) == generated["route"]
    urls = {r["name"]: r["webhookConfigs"][0]["url"] for r in amc["spec"]["receivers"]}
    assert urls == {r["name"]: r["webhook_configs"][0]["url"] for r in generated["receivers"]}
    inhibit = [
        {
            "source_matchers": [_matcher(m) for m in i["sourceMatch"]],
            "target_matchers": [_matcher(m) for m in i["targetMatch"]],
            "equal": i["equal"],
        }
        for i in amc["spec"]["inhibitRules"]
    ]
    assert inhibit == generated["inhibit_rules"]
    secrets = {
        r["name"]: r["webhookConfigs"][0]["httpConfig"]["authorization"]["credentials"]["key"]
        for r in amc["spec"]["receivers"]
    }
    assert secrets == {
        "oncall-wecom": "relay-token",
        "team-feishu": "relay-token",
        "remediate": "remediation-token",
        "xpuwatch-meta": "relay-token",
    }


def test_prometheusrule_is_the_generated_one() -> None:
    rule = next(o for o in render("base") if o["kind"] == "PrometheusRule")
    generated = yaml.safe_load((ROOT / "alerts" / "generated" / "prometheusrule.yaml").read_text())
    assert rule["spec"] == generated["spec"], (
        "stale: cp alerts/generated/prometheusrule.yaml deploy/kustomize/base/ (kustomize reads only its own tree)"
    )


# --- RBAC grants exactly the verbs the code calls --------------------------------------------------------

# kubernetes_asyncio method -> (apiGroup, resource, verb), per the API reference of each operation.
OPERATIONS = {
    "read_node": ("", "nodes", "get"),
    "list_node": ("", "nodes", "list"),
    "patch_node": ("", "nodes", "patch"),
    "list_pod_for_all_namespaces": ("", "pods", "list"),
    "list_resource_slice": ("resource.k8s.io", "resourceslices", "list"),
    "read_namespaced_pod": ("", "pods", "get"),
    "patch_namespaced_pod": ("", "pods", "patch"),
    "create_namespaced_pod_eviction": ("", "pods/eviction", "create"),
    "create_namespaced_event": ("", "events", "create"),
    "get_namespaced_custom_object": ("kubeflow.org", "notebooks", "get"),
    "patch_namespaced_custom_object": ("kubeflow.org", "notebooks", "patch"),
    "list_cluster_custom_object": ("kubeflow.org", "notebooks", "list"),
    "list_namespaced_custom_object": ("kubeflow.org", "notebooks", "list"),
    "read_namespaced_lease": ("coordination.k8s.io", "leases", "get"),
    "create_namespaced_lease": ("coordination.k8s.io", "leases", "create"),
    "replace_namespaced_lease": ("coordination.k8s.io", "leases", "update"),
}


def _called(module: Path) -> set[tuple[str, str, str]]:
    """Client operations a module calls (attribute names that are known API operations)."""
    names = {n.attr for n in ast.walk(ast.parse(module.read_text())) if isinstance(n, ast.Attribute)}
    unknown = {
        n
        for n in names
        if n.endswith(("_namespaced_custom_object", "_node", "_lease"))
        and n not in OPERATIONS
        and n.startswith(("read_", "list_", "patch_", "create_", "replace_", "delete_"))
    }
    assert not unknown, f"add these operations to OPERATIONS: {unknown}"
    return {OPERATIONS[n] for n in names if n in OPERATIONS}


def _granted(objs: list[dict[str, Any]], role_names: set[str]) -> set[tuple[str, str, str]]:
    out = set()
    for o in objs:
        if o["kind"] in ("ClusterRole", "Role") and o["metadata"]["name"] in role_names:
            for r in o["rules"]:
                for g in r["apiGroups"]:
                    for res in r["resources"]:
                        for v in r["verbs"]:
                            out.add((g, res, v))
    return out


@pytest.mark.parametrize(
    ("module", "roles"),
    [
        ("remediation/kube.py", {"xpuwatch-remediation", "xpuwatch-remediation-leader"}),
        ("exporter/kubeapi.py", {"xpuwatch-exporter"}),
    ],
)
def test_rbac_grants_exactly_what_the_code_calls(module: str, roles: set[str]) -> None:
    objs = render("base")
    assert _granted(objs, roles) == _called(ROOT / module)


# --- the ConfigMaps hold configs the components accept ---------------------------------------------------


def _configmap(name: str) -> dict[str, str]:
    return next(o for o in render("base") if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name)[
        "data"
    ]


def _localise(text: str, mount: str, tmp: Path) -> str:
    """Point the secret mount at a temp dir holding dummy secrets, as the Secret volume would."""
    secrets = tmp / "secrets"
    secrets.mkdir(exist_ok=True)
    for key in ("inbound-token", "relay-token", "oncall-wecom-url", "team-feishu-url", "team-feishu-secret"):
        (secrets / key).write_text("https://example.invalid/hook" if key.endswith("url") else "s3cret")
    return text.replace(mount, str(secrets))


def test_exporter_configmap_is_valid() -> None:
    from exporter.settings import parse

    s = parse(yaml.safe_load(_configmap("xpuwatch-exporter")["exporter.yaml"]))
    assert s.pod_mapping.enabled and s.pod_mapping.kube_api


def test_remediation_configmap_is_valid_and_dry_run(tmp_path: Path) -> None:
    from remediation.settings import parse

    text = _localise(
        _configmap("xpuwatch-remediation")["remediation.yaml"], "/etc/xpuwatch-remediation/secrets", tmp_path
    )
    s = parse(yaml.safe_load(text), tmp_path)
    assert s.guard.dry_run is True
    assert s.notify_token == "s3cret"  # notices carry the relay's bearer token
    assert {r.action for r in s.rules} == {"drain", "reclaim", "resize"}


def test_relay_configmap_is_valid(tmp_path: Path) -> None:
    from alerts.relay.config import parse_settings

    text = _localise(_configmap("xpuwatch-relay")["relay.yaml"], "/etc/xpuwatch-relay/secrets", tmp_path)
    s = parse_settings(yaml.safe_load(text), base=tmp_path, env={})
    assert set(s.channels) == {
        "oncall-wecom",
        "team-feishu",
    }  # the receivers alerts/generated/alertmanager.yml posts to
    assert s.channels["team-feishu"].secret == "s3cret" and s.auth.bearer_token == "s3cret"
