"""deploy/kustomize: every overlay renders with kubectl's kustomize, every object round-trips through the
official client's models (no unknown or misspelt fields), and RBAC grants exactly what the code calls."""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from xpuwatch.alerts.alertmanager import scope_matchers

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
    """The overlay's objects, freshly parsed (callers may change them) by PyYAML's safe loader, as Python
    policy tools read them (a bare ``=`` would be YAML 1.1's ``!!value`` tag and fail here)."""
    return [d for d in yaml.safe_load_all(_kustomize(overlay)) if d]


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
    # an omitted matchType is "=" (prometheus-operator v0.93.0 amcfg.go convertMatchersV2)
    return f'{m["name"]}{m.get("matchType", "=")}"{m["value"]}"'


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
    route = _route_back(amc["spec"]["route"])
    # only the top route differs: in a shared Alertmanager it must not catch the cluster's other alerts
    assert route.pop("matchers") == scope_matchers()
    assert route == generated["route"]
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
    # the same rules, each side scoped to xpuwatch's alert names (they must not touch the cluster's others)
    names = scope_matchers()[1:]
    assert inhibit == [
        {
            **r,
            "source_matchers": r["source_matchers"] + names,
            "target_matchers": r["target_matchers"] + names,
        }
        for r in generated["inhibit_rules"]
    ]
    secrets = {
        r["name"]: r["webhookConfigs"][0]["httpConfig"]["authorization"]["credentials"]
        for r in amc["spec"]["receivers"]
    }
    # the relay's token for every relay channel, the controller's for the controller (docs/deploy.md)
    assert secrets == {
        name: {
            "name": "xpuwatch-alertmanager",
            "key": "remediation-token" if name == "remediate" else "relay-token",
        }
        for name in urls
    }
    assert {"oncall-wecom", "team-feishu", "remediate", "xpuwatch-meta"} <= set(secrets)
    assert amc["metadata"]["namespace"] == "xpuwatch"  # where the Secret is and the route's namespace


def test_alertmanagerconfig_is_the_generated_one() -> None:
    component = KUSTOMIZE / "components" / "alertmanagerconfig" / "alertmanagerconfig.yaml"
    generated = ROOT / "alerts" / "generated" / "alertmanagerconfig.yaml"
    assert component.read_text() == generated.read_text(), (
        f"stale: run `xpuwatch rules generate` (it writes {component.relative_to(ROOT)}, the copy kustomize reads)"
    )


def test_prometheusrule_is_the_generated_one() -> None:
    rule = next(o for o in render("base") if o["kind"] == "PrometheusRule")
    generated = yaml.safe_load((ROOT / "alerts" / "generated" / "prometheusrule.yaml").read_text())
    assert rule["spec"] == generated["spec"], (
        "stale: run `xpuwatch rules generate` (it writes the copy kustomize reads, base/prometheusrule.yaml)"
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


def _granted_to(objs: list[dict[str, Any]], account: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the ServiceAccount ``account`` gets through the bindings in ``objs``."""
    roles = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in objs
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s["kind"] == "ServiceAccount" and s["name"] == account for s in b.get("subjects") or [])
    }
    granted = {o["metadata"]["name"] for o in objs if (o["kind"], o["metadata"]["name"]) in roles}
    return _granted(objs, granted)


WRITES = {"create", "update", "patch", "delete", "deletecollection"}
# What a dry run writes: Events saying what it would do, and its leader-election Lease.
DRY_RUN_WRITES = {
    ("", "events", "create"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
}


def test_exporter_rbac_grants_exactly_what_the_code_calls() -> None:
    assert _granted_to(render("base"), "xpuwatch-exporter") == _called(ROOT / "exporter" / "kubeapi.py")


@pytest.mark.parametrize("overlay", ["base", *(o for o in OVERLAYS if o.startswith("overlays/"))])
def test_remediation_rbac_writes_only_where_it_acts(overlay: str) -> None:
    """Dry-run installs (base and every overlay but apply) grant the reads the controller makes and no
    write but Events and its Lease; overlays/apply (components/remediation-apply) grants exactly the verbs
    remediation/kube.py calls. Before, the dry-run Deployment had apply's write access."""
    objs = render(overlay)
    granted = _granted_to(objs, "xpuwatch-remediation")
    called = _called(ROOT / "remediation" / "kube.py")
    args = next(
        o for o in objs if o["metadata"]["name"] == "xpuwatch-remediation" and o["kind"] == "Deployment"
    )["spec"]["template"]["spec"]["containers"][0]["args"]
    if overlay == "overlays/apply":
        assert "--apply" in args
        assert granted == called
    else:
        assert "--apply" not in args
        assert granted == {c for c in called if c[2] not in WRITES or c in DRY_RUN_WRITES}
        assert {g for g in granted if g[2] in WRITES} == DRY_RUN_WRITES


def test_remediation_keeps_one_replica_through_voluntary_disruptions() -> None:
    objs = render("base")
    (pdb,) = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    deploy = next(
        o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "xpuwatch-remediation"
    )
    assert deploy["spec"]["replicas"] == 2 and pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deploy["spec"]["selector"]


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
    from xpuwatch.exporter.settings import parse

    s = parse(yaml.safe_load(_configmap("xpuwatch-exporter")["exporter.yaml"]))
    assert s.pod_mapping.enabled and s.pod_mapping.kube_api


def test_remediation_configmap_is_valid_and_dry_run(tmp_path: Path) -> None:
    from xpuwatch.remediation.settings import parse

    text = _localise(
        _configmap("xpuwatch-remediation")["remediation.yaml"], "/etc/xpuwatch-remediation/secrets", tmp_path
    )
    s = parse(yaml.safe_load(text), tmp_path)
    assert s.guard.dry_run is True
    assert s.notify_token == "s3cret"  # notices carry the relay's bearer token
    # a notice goes to the channel its alert's category went to (was: every notice to team-feishu)
    relay = yaml.safe_load(_configmap("xpuwatch-relay")["relay.yaml"])
    assert {c: u.rsplit("/", 1)[1] for c, u in s.notify.items()} == {
        "hardware": "oncall-wecom",
        "performance": "team-feishu",
    }
    assert set(s.notify.values()) <= {
        f"http://xpuwatch-relay:9852/alertmanager/{c}" for c in relay["channels"]
    }
    generated = yaml.safe_load((ROOT / "alerts" / "generated" / "alertmanager.yml").read_text())
    by_category = {
        m.split("=")[1].strip('"'): r["receiver"]
        for r in generated["route"]["routes"]
        for m in r.get("matchers", [])
        if m.startswith("category=")
    }
    # remediation notices are hardware or performance; meta (the paging path's own alerts) has its own receiver
    assert by_category == {"hardware": "oncall-wecom", "performance": "team-feishu", "meta": "xpuwatch-meta"}
    assert s.notify_url is None
    assert {r.action for r in s.rules} == {"drain", "reclaim", "resize"}


def test_relay_configmap_is_valid(tmp_path: Path) -> None:
    from xpuwatch.alerts.relay.config import parse_settings

    text = _localise(_configmap("xpuwatch-relay")["relay.yaml"], "/etc/xpuwatch-relay/secrets", tmp_path)
    s = parse_settings(yaml.safe_load(text), base=tmp_path, env={})
    assert set(s.channels) == {
        "oncall-wecom",
        "team-feishu",
    }  # the receivers alerts/generated/alertmanager.yml posts to
    assert s.channels["team-feishu"].secret == "s3cret" and s.auth.bearer_token == "s3cret"


# --- optional components, rendered into an overlay of their own --------------------------------------------


def render_with(
    tmp: Path,
    resources: list[str],
    components: list[str],
    patches: list[dict[str, Any]] | None = None,
    **more: Any,
) -> list[dict[str, Any]]:
    """Render a kustomization in ``tmp`` made of tree paths (relative to deploy/kustomize), as a user's
    overlay would be (kustomize refuses absolute paths); ``more``: other kustomization fields."""
    up = Path(os.path.relpath(KUSTOMIZE, tmp))
    doc: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [str(up / r) for r in resources],
        "components": [str(up / c) for c in components],
    }
    if patches:
        doc["patches"] = patches
    doc.update(more)
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    kubectl = shutil.which("kubectl")
    assert kubectl
    out = subprocess.run([kubectl, "kustomize", str(tmp)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_runtimeclass_is_optional_and_its_component_sets_it(tmp_path: Path) -> None:
    """runtimeClassName: nvidia was hard-coded: a node whose default runtime is NVIDIA's (the GPU Operator's
    default) but that has no RuntimeClass `nvidia` could not run the exporter."""

    def runtime(objs: list[dict[str, Any]]) -> dict[str, str | None]:
        return {
            o["metadata"]["name"]: o["spec"]["template"]["spec"].get("runtimeClassName")
            for o in objs
            if o["kind"] == "DaemonSet"
        }

    assert set(runtime(render("overlays/mixed")).values()) == {None}
    with_component = runtime(render_with(tmp_path, ["overlays/mixed"], ["components/nvidia-runtimeclass"]))
    assert {k: v for k, v in with_component.items() if v} == {"xpuwatch-exporter-nvidia": "nvidia"}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_matches(peer: dict[str, Any], policy_ns: str, ns: str, labels: dict[str, str]) -> bool:
    """One NetworkPolicyPeer (matchLabels selectors; no ipBlock here): a podSelector alone means the
    policy's namespace, a namespaceSelector alone every pod there (kubernetes.io/docs/concepts/services-
    networking/network-policies). Namespaces carry kubernetes.io/metadata.name."""
    ns_ok = (
        _selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": ns})
        if "namespaceSelector" in peer
        else ns == policy_ns
    )
    return ns_ok and _selects(peer.get("podSelector") or {}, labels)


def _allowed(
    policies: list[dict[str, Any]],
    direction: str,
    pod: tuple[str, dict[str, str]],
    peer: tuple[str, dict[str, str]],
    port: int,
) -> bool:
    """Is TCP ``port`` traffic allowed for ``pod`` (namespace, labels) from (ingress) or to (egress)
    ``peer``? A pod no policy of that direction selects is not isolated; else one rule must allow it."""
    key, peers = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    mine = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod[0]
        and _selects(p["spec"]["podSelector"], pod[1])
        and direction in p["spec"]["policyTypes"]
    ]
    if not mine:
        return True
    return any(
        any(pt.get("protocol", "TCP") == "TCP" and pt["port"] == port for pt in rule.get("ports") or [])
        and (
            not rule.get(peers)
            or any(_peer_matches(x, p["metadata"]["namespace"], *peer) for x in rule[peers])
        )
        for p in mine
        for rule in p["spec"].get(key) or []
    )


@pytest.mark.slow
def test_networkpolicy_admits_only_monitoring_and_the_controllers_notices(tmp_path: Path) -> None:
    objs = render_with(tmp_path, ["overlays/mixed"], ["components/networkpolicy"])
    policies = [o for o in objs if o["kind"] == "NetworkPolicy"]
    pods = {
        o["metadata"]["name"]: ("xpuwatch", o["spec"]["template"]["metadata"]["labels"])
        for o in objs
        if o["kind"] in ("Deployment", "DaemonSet")
    }
    assert {o["metadata"]["namespace"] for o in objs if o["kind"] in ("Deployment", "DaemonSet")} == {
        "xpuwatch"
    }
    relay, remediation = pods.pop("xpuwatch-relay"), pods.pop("xpuwatch-remediation")
    exporters = list(pods.values())
    assert len(exporters) == len(VENDORS)
    prometheus, stranger = ("monitoring", {"app.kubernetes.io/name": "prometheus"}), ("default", {})
    for exporter in exporters:
        assert _allowed(policies, "Ingress", exporter, prometheus, 9851)
        assert not _allowed(policies, "Ingress", exporter, stranger, 9851)
        assert not _allowed(policies, "Ingress", exporter, remediation, 9851)
        assert _allowed(policies, "Egress", exporter, ("default", {}), 443)  # API server
        assert not _allowed(policies, "Egress", exporter, prometheus, 9090)
    assert _allowed(policies, "Ingress", relay, prometheus, 9852)
    assert _allowed(policies, "Ingress", relay, remediation, 9852)  # notices
    assert not _allowed(policies, "Ingress", relay, stranger, 9852)
    assert not _allowed(policies, "Ingress", relay, exporters[0], 9852)
    assert _allowed(policies, "Ingress", remediation, prometheus, 9853)
    assert not _allowed(policies, "Ingress", remediation, relay, 9853)
    assert not _allowed(policies, "Ingress", remediation, stranger, 9853)
    assert _allowed(policies, "Egress", remediation, relay, 9852)
    assert _allowed(policies, "Egress", remediation, prometheus, 9090)  # drain.prometheus_url
    assert not _allowed(policies, "Egress", relay, remediation, 9853)
    # every port a container serves is reachable from the monitoring namespace, and none other
    for obj in objs:
        if obj["kind"] in ("Deployment", "DaemonSet"):
            pod = ("xpuwatch", obj["spec"]["template"]["metadata"]["labels"])
            for port in obj["spec"]["template"]["spec"]["containers"][0]["ports"]:
                assert _allowed(policies, "Ingress", pod, prometheus, port["containerPort"])

    # the namespace patch docs/deploy.md gives (and the component's comment) moves every ingress rule
    (tmp_path / "p").mkdir()
    section = (ROOT / "docs" / "deploy.md").read_text().split("## NetworkPolicy\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block
    patch = yaml.safe_load(block.group(1))
    assert patch["components"] == ["../../components/networkpolicy"]
    comment = (KUSTOMIZE / "components" / "networkpolicy" / "kustomization.yaml").read_text()
    assert patch["patches"][0]["patch"] in comment
    moved = [
        o
        for o in render_with(
            tmp_path / "p", ["overlays/mixed"], ["components/networkpolicy"], patch["patches"]
        )
        if o["kind"] == "NetworkPolicy"
    ]
    elsewhere = ("prometheus", {})
    assert _allowed(moved, "Ingress", relay, elsewhere, 9852)
    assert _allowed(moved, "Ingress", relay, remediation, 9852)
    assert all(_allowed(moved, "Ingress", e, elsewhere, 9851) for e in exporters)
    assert not _allowed(moved, "Ingress", remediation, prometheus, 9853)


def test_relay_silence_links_need_the_users_alertmanager_address(tmp_path: Path) -> None:
    """base pointed silence links at http://alertmanager-operated.monitoring:9093, which no phone opens: now a
    placeholder docs/relay.md names, and the overlay recipe there replaces it."""
    text = _configmap("xpuwatch-relay")["relay.yaml"]
    placeholder = yaml.safe_load(text)["alertmanager_url"]
    assert placeholder == "https://alertmanager.example.com"
    assert "PLACEHOLDER, set yours" in text
    docs = (ROOT / "docs" / "relay.md").read_text()
    assert f"ships the placeholder `{placeholder}`" in docs
    recipe = re.search(r"```yaml\n  # kustomization.yaml of your overlay.*?\n(.*?)  ```", docs, re.S)
    assert recipe
    mine = text.replace(placeholder, "https://am.gpu.example.org")
    (tmp_path / "relay.yaml").write_text(mine)
    objs = render_with(tmp_path, ["overlays/mixed"], [], **yaml.safe_load(textwrap.dedent(recipe.group(1))))
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "xpuwatch-relay"]
    assert yaml.safe_load(cm["data"]["relay.yaml"])["alertmanager_url"] == "https://am.gpu.example.org"


# --- images: what the overlays name is what docs/deploy.md tells the user to build -----------------------

PLACEHOLDER_REGISTRY = "registry.example.com/xpuwatch"
IMAGE_TARGETS = {"xpuwatch": "core", "xpuwatch-nvidia": "nvidia", "xpuwatch-amd": "amd"}
# ROCm's apt repository publishes amd64 packages only; the other base images are multi-arch.
PLATFORMS = {"core": "linux/amd64,linux/arm64", "nvidia": "linux/amd64,linux/arm64", "amd": "linux/amd64"}


def test_every_deployed_image_is_a_documented_build_of_a_dockerfile_target() -> None:
    """The overlays named ghcr.io/xpuwatch/*:0.1.0, which nobody publishes, and the docs said nothing of
    building them or of arm64 (Kunpeng Ascend servers)."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    targets = set(re.findall(r"^FROM (?:--platform=\S+ )?\S+ AS (\w+)$", dockerfile, re.M)) - {"wheel"}
    assert targets == set(IMAGE_TARGETS.values())
    named = set()
    for overlay in (o for o in OVERLAYS if o.startswith("overlays/")):
        for obj in render(overlay):
            pod = obj.get("spec", {}).get("template", {}).get("spec", {})
            for c in pod.get("containers", []) + pod.get("initContainers", []):
                m = re.fullmatch(rf"{re.escape(PLACEHOLDER_REGISTRY)}/([\w-]+):0\.1\.0", c["image"])
                assert m and m.group(1) in IMAGE_TARGETS, (overlay, obj["metadata"]["name"], c["image"])
                named.add(m.group(1))
    assert named == set(IMAGE_TARGETS)

    build = (
        r"docker buildx build -f deploy/Dockerfile --target (\w+) +--platform (\S+) \\\n#? *"
        r"--build-arg REVISION=\$\(git rev-parse HEAD\) -t \$REGISTRY/([\w-]+):0\.1\.0 --push \."
    )
    expected = {(t, PLATFORMS[t], image) for image, t in IMAGE_TARGETS.items()}
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert set(re.findall(build, docs)) == expected
    assert set(re.findall(build, dockerfile)) == expected  # the Dockerfile's own header says the same
    assert f"REGISTRY={PLACEHOLDER_REGISTRY} " in docs
    assert "xpuwatch publishes no images" in docs
    amd = dockerfile.split(" AS amd\n", 1)[1].split("\nFROM ", 1)[0]
    assert '"${TARGETARCH}" != amd64' in amd and "deb [arch=amd64 " in amd


# ------------------------------------------------------------------------------ host paths as settings

KUBELET_ROOTS = {
    "overlays/mixed": "/var/lib/kubelet",
    "overlays/microk8s": "/var/snap/microk8s/common/var/lib/kubelet",
    "overlays/k0s": "/var/lib/k0s/kubelet",
}


def _exporters(overlay: str) -> list[dict[str, Any]]:
    return [
        o
        for o in render(overlay)
        if o["kind"] == "DaemonSet"
        and o["metadata"]["labels"].get("app.kubernetes.io/component") == "exporter"
    ]


@pytest.mark.parametrize("overlay", sorted(KUBELET_ROOTS))
def test_the_kubelet_root_is_one_setting_and_every_exporter_mounts_it(overlay: str) -> None:
    """components/kubelet-root-<distribution> moves the pod-resources hostPath of every vendor's exporter; the
    container keeps its mount point, where the config's pod_mapping.socket points."""
    exporters = _exporters(overlay)
    assert len(exporters) == len(VENDORS)
    from xpuwatch.exporter.settings import parse

    socket = parse(yaml.safe_load(_configmap("xpuwatch-exporter")["exporter.yaml"])).pod_mapping.socket
    for ds in exporters:
        spec = ds["spec"]["template"]["spec"]
        volume = next(v for v in spec["volumes"] if v["name"] == "pod-resources")
        assert volume["hostPath"] == {"path": f"{KUBELET_ROOTS[overlay]}/pod-resources", "type": "Directory"}
        mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert mounts["pod-resources"] == {
            "name": "pod-resources",
            "mountPath": "/var/lib/kubelet/pod-resources",
            "readOnly": True,
        }
        assert socket == "/var/lib/kubelet/pod-resources/kubelet.sock"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_host_file_is_required_to_exist(overlay: str) -> None:
    """A hostPath of type File (or CharDevice, Socket) keeps the pod from starting wherever the file is
    elsewhere: host tools are found through mounted folders on PATH instead."""
    for obj in render(overlay):
        if obj["kind"] != "DaemonSet":
            continue
        for v in obj["spec"]["template"]["spec"].get("volumes", []):
            if "hostPath" in v:
                assert v["hostPath"].get("type") in ("Directory", "DirectoryOrCreate"), (overlay, v)


def test_ascend_finds_npu_smi_where_the_device_plugins_look() -> None:
    """driver/tools, /usr/local/sbin and /usr/local/bin of the host, in the order of the Ascend device
    plugins (HAMi's ascend-device-plugin npuSmiCandidates), each mounted read-only and on PATH."""
    (ds,) = _exporters("exporters/ascend")
    spec = ds["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {
        m["mountPath"]: (host.get(m["name"]), m.get("readOnly"))
        for m in spec["containers"][0]["volumeMounts"]
    }
    assert mounts["/usr/local/Ascend/driver"] == ("/usr/local/Ascend/driver", True)
    assert mounts["/host/usr/local/sbin"] == ("/usr/local/sbin", True)
    assert mounts["/host/usr/local/bin"] == ("/usr/local/bin", True)
    path = next(e["value"] for e in spec["containers"][0]["env"] if e["name"] == "PATH").split(":")
    places = ["/usr/local/Ascend/driver/tools", "/host/usr/local/sbin", "/host/usr/local/bin"]
    assert [d for d in path if d in places] == places
