"""Every rendered kustomization is valid offline: it loads with PyYAML, every object validates against the
Kubernetes OpenAPI schemas (the `kubernetes-validate` package, strict: unknown fields rejected) or the
vendored prometheus-operator CRD schemas (tests/deploy/schemas/, README there), and in every overlay each
namespaced object names its namespace and no cluster-scoped one does (`kubectl apply -k` would otherwise put
it in the context's namespace)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.test_kustomize import OVERLAYS, _kustomize, render

SCHEMAS = Path(__file__).resolve().parent / "schemas"
RENDERED = ["base", *OVERLAYS]
USER_OVERLAYS = sorted(o for o in OVERLAYS if o.startswith("overlays/"))
# The oldest Kubernetes minor still in common support, and the newest the package knows.
K8S_VERSIONS = ("1.30", kubernetes_validate.utils.latest_version())

# Built-in kinds served cluster-wide (`kubectl api-resources --namespaced=false`, Kubernetes 1.30-1.34); every
# other built-in kind is namespaced. Custom resources take their scope from their CRD (SCHEMAS).
CLUSTER_SCOPED = {
    "APIService",
    "CertificateSigningRequest",
    "ClusterRole",
    "ClusterRoleBinding",
    "ClusterTrustBundle",
    "ComponentStatus",
    "CSIDriver",
    "CSINode",
    "CustomResourceDefinition",
    "DeviceClass",
    "FlowSchema",
    "IngressClass",
    "IPAddress",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "PriorityLevelConfiguration",
    "ResourceSlice",
    "RuntimeClass",
    "SelfSubjectAccessReview",
    "SelfSubjectReview",
    "SelfSubjectRulesReview",
    "ServiceCIDR",
    "StorageClass",
    "StorageVersionMigration",
    "SubjectAccessReview",
    "TokenReview",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
    "VolumeAttributesClass",
}


def _strict(schema: Any) -> Any:
    """The CRD schema as the API server applies it with strict field validation (kubectl's default since
    1.27): an object schema that lists properties, and neither preserves unknown fields nor gives
    additionalProperties, rejects any other field (structural-schema pruning would silently drop it).
    A ``pattern`` Python's re cannot compile (RE2 flags mid-expression, as in the time-interval fields
    xpuwatch does not use) is left out rather than failing every validation."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items() if k != "pattern" or _compiles(v)}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _compiles(pattern: Any) -> bool:
    try:
        re.compile(pattern)
    except (re.error, TypeError):
        return False
    return True


@functools.cache
def _crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> {scope, validator} for every vendored CRD version."""
    out = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        crd = json.loads(path.read_text())
        schema = _strict(crd["openAPIV3Schema"])
        jsonschema.Draft7Validator.check_schema(schema)
        out[(f"{crd['group']}/{crd['version']}", crd["kind"])] = {
            "scope": crd["scope"],
            "validator": jsonschema.Draft7Validator(schema),
        }
    return out


def _errors(obj: dict[str, Any], version: str) -> list[str]:
    """Schema violations of one object, each as ``path: message``; empty when valid."""
    crd = _crds().get((obj["apiVersion"], obj["kind"]))
    if crd is None:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.utils.SchemaNotFoundError:
            return [f"{obj['apiVersion']} {obj['kind']}: neither a Kubernetes kind nor a vendored CRD"]
        except kubernetes_validate.utils.ValidationError as e:
            return [f"{'.'.join(map(str, e.path))}: {e.message}"]
        return []
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in crd["validator"].iter_errors(obj)]
    # the CRD schema leaves metadata open: check it as any object's ObjectMeta
    holder = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
    try:
        kubernetes_validate.validate(holder, version, strict=True)
    except kubernetes_validate.utils.ValidationError as e:
        errors.append(f"{'.'.join(map(str, e.path))}: {e.message}")
    return errors


@pytest.mark.parametrize("rendered", RENDERED)
def test_renders_load_with_pyyaml(rendered: str) -> None:
    """Python policy tools read manifests with PyYAML (YAML 1.1): e.g. a bare ``=`` is its ``!!value`` tag."""
    docs = [d for d in yaml.safe_load_all(_kustomize(rendered)) if d]
    assert all(isinstance(d, dict) and d.get("kind") for d in docs)  # patch-only components render none


@pytest.mark.slow
@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("rendered", USER_OVERLAYS)  # together they hold every base, exporter and component
def test_every_object_validates_against_its_schema(rendered: str, version: str) -> None:
    bad = {
        f"{o['kind']}/{o['metadata'].get('name')}": errs
        for o in render(rendered)
        if (errs := _errors(o, version))
    }
    assert not bad, f"{rendered} (Kubernetes {version}): {bad}"


def _namespaced(obj: dict[str, Any]) -> bool:
    crd = _crds().get((obj["apiVersion"], obj["kind"]))
    return crd["scope"] == "Namespaced" if crd else obj["kind"] not in CLUSTER_SCOPED


@pytest.mark.parametrize("overlay", USER_OVERLAYS)
def test_every_namespaced_object_names_its_namespace(overlay: str) -> None:
    objs = render(overlay)
    missing = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in objs
        if _namespaced(o) and "namespace" not in o["metadata"]
    ]
    assert not missing, f"{overlay}: `kubectl apply -k` puts these in the context's namespace: {missing}"
    stray = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in objs
        if not _namespaced(o) and "namespace" in o["metadata"]
    ]
    assert not stray, f"{overlay}: cluster-scoped objects with a namespace: {stray}"


@pytest.mark.parametrize("overlay", USER_OVERLAYS)
def test_every_object_says_it_is_part_of_xpuwatch(overlay: str) -> None:
    """`kubectl get all -l app.kubernetes.io/part-of=xpuwatch -A` lists everything an overlay applied (the
    exporter DaemonSets and the AlertmanagerConfig lacked the label)."""
    missing = [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in render(overlay)
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") != "xpuwatch"
    ]
    assert not missing, f"{overlay}: no app.kubernetes.io/part-of=xpuwatch on {missing}"


def test_the_checks_see_both_scopes() -> None:
    objs = render("overlays/kube-prometheus-stack")
    cluster = {o["kind"] for o in objs if not _namespaced(o)}
    namespaced = {o["kind"] for o in objs if _namespaced(o)}
    assert {"Namespace", "ClusterRole", "ClusterRoleBinding"} <= cluster
    assert {"AlertmanagerConfig", "ServiceMonitor", "PrometheusRule", "DaemonSet", "Deployment"} <= namespaced
    assert {o["metadata"]["namespace"] for o in objs if o["kind"] == "AlertmanagerConfig"} == {"xpuwatch"}


def test_strict_crd_schemas_reject_a_misspelt_field() -> None:
    (amc,) = [o for o in render("overlays/kube-prometheus-stack") if o["kind"] == "AlertmanagerConfig"]
    assert _errors(amc, K8S_VERSIONS[0]) == []
    amc["spec"]["route"]["group_by"] = ["alertname"]  # Alertmanager's spelling, not the CRD's
    amc["spec"]["route"]["matchers"][0]["matchType"] = "=="
    errors = _errors(amc, K8S_VERSIONS[0])
    assert any("group_by" in e for e in errors) and any("'=='" in e for e in errors), errors
    (deploy,) = [
        o for o in render("overlays/mixed") if o["kind"] == "Deployment" and "relay" in o["metadata"]["name"]
    ]
    assert _errors(deploy, K8S_VERSIONS[0]) == []
    deploy["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert any("imagePullPolicyy" in e for e in _errors(deploy, K8S_VERSIONS[0]))
