"""deploy/kustomize: every overlay renders with kubectl's kustomize, every object round-trips through the
official client's models (no unknown or misspelt fields), and RBAC grants exactly what the code calls."""

from __future__ import annotations

import ast
import json
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
CUSTOM = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is required (Debian package kubernetes-client)"
    out = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZE / overlay)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


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
        "overlays/apply",
        "exporters/nvidia",
        "exporters/amd",
        "exporters/ascend",
        "exporters/other",
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


def test_exporters_keep_least_privilege() -> None:
    for obj in render("overlays/mixed"):
        if obj["kind"] != "DaemonSet":
            continue
        spec = obj["spec"]["template"]["spec"]
        ctr = spec["containers"][0]
        sc = ctr["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]} and not sc.get("privileged")
        assert spec["nodeSelector"], obj["metadata"]["name"]
        mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
        assert all(m.get("readOnly") for p, m in mounts.items() if p != "/tmp"), obj["metadata"]["name"]
        assert {"operator": "Exists"} in spec["tolerations"]  # keeps watching cards marked faulty


def test_one_daemonset_per_vendor_family_without_overlapping_selectors() -> None:
    sets = [o for o in render("overlays/mixed") if o["kind"] == "DaemonSet"]
    selectors = [json.dumps(o["spec"]["selector"], sort_keys=True) for o in sets]
    assert len(sets) == 4 and len(set(selectors)) == 4


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
