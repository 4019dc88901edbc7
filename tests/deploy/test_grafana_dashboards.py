"""components/grafana-dashboards: the kube-prometheus-stack overlay carries one sidecar ConfigMap per generated
dashboard, holding exactly the committed JSON, small enough for `kubectl apply`, and on the datasource variable.

kube-prometheus-stack's Grafana sidecar (chart values grafana.sidecar.dashboards: label grafana_dashboard,
labelValue "1", searchNamespace ALL; prometheus-community/helm-charts charts/kube-prometheus-stack/values.yaml)
writes each ``*.json`` data key of such a ConfigMap to Grafana's dashboard folder; no Grafana runs here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.test_kustomize import KUSTOMIZE, render
from xpuwatch.dashboards.configmap import (
    CLIENT_SIDE_APPLY_LIMIT_BYTES,
    CONFIGMAP_LIMIT_BYTES,
    applied_size,
    configmap,
    render_configmaps,
)
from xpuwatch.dashboards.generator import DEFAULT_OUT, render_all

GENERATED = {p.name: p.read_text("utf-8") for p in sorted(DEFAULT_OUT.glob("*.json"))}


def _sidecar_configmaps(overlay: str) -> list[dict[str, Any]]:
    return [
        o
        for o in render(overlay)
        if o["kind"] == "ConfigMap" and o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]


def test_committed_component_is_what_generate_writes() -> None:
    committed = (KUSTOMIZE / "components" / "grafana-dashboards" / "dashboards.yaml").read_text("utf-8")
    assert committed == render_configmaps(render_all()), "stale: run `xpuwatch dashboards generate`"


def test_kube_prometheus_stack_overlay_has_one_configmap_per_dashboard_with_its_exact_json() -> None:
    cms = _sidecar_configmaps("overlays/kube-prometheus-stack")
    assert len(GENERATED) == 5
    got = {k: v for cm in cms for k, v in cm["data"].items()}
    assert [len(cm["data"]) for cm in cms] == [1] * len(GENERATED)
    assert got == GENERATED  # byte for byte, after kustomize re-serialised the YAML
    for cm in cms:
        assert cm["metadata"]["namespace"] == "xpuwatch"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "xpuwatch"}
        (key,) = cm["data"]
        assert cm["metadata"]["name"] == "xpuwatch-dashboard-" + key.removeprefix("xpuwatch-").removesuffix(
            ".json"
        )


def test_only_the_sidecar_overlay_ships_the_dashboards() -> None:
    assert _sidecar_configmaps("overlays/mixed") == []


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_each_configmap_fits_client_side_apply(name: str) -> None:
    """Client-side apply stores the object in an annotation (256 KiB for all annotations); the data limit is
    1 MiB. Over 256 KiB, docs/deploy.md says `kubectl apply --server-side`; this test says when."""
    (cm,) = [c for c in _sidecar_configmaps("overlays/kube-prometheus-stack") if name in c["data"]]
    size = applied_size(cm)
    print(f"{name}: {size} bytes applied")
    assert size < CLIENT_SIDE_APPLY_LIMIT_BYTES


def test_a_dashboard_over_a_configmaps_limit_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"big\.json: 1048576 bytes, over the 1 MiB a ConfigMap may hold"):
        configmap("big.json", "x" * CONFIGMAP_LIMIT_BYTES)


def _datasources(x: Any) -> list[dict[str, Any]]:
    if isinstance(x, dict):
        found = [x["datasource"]] if isinstance(x.get("datasource"), dict) else []
        return found + [d for v in x.values() for d in _datasources(v)]
    if isinstance(x, list):
        return [d for v in x for d in _datasources(v)]
    return []


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_dashboards_follow_the_default_datasource(name: str) -> None:
    """The sidecar loads the JSON as is: no import ``__inputs`` (``${DS_PROMETHEUS}`` stays unresolved) and no
    fixed data source uid; the ``datasource`` variable with no current value picks Grafana's default data
    source, kube-prometheus-stack's "Prometheus"."""
    text = GENERATED[name]
    board = json.loads(text)
    assert "__inputs" not in board and "${DS_" not in text
    assert {d["uid"] for d in _datasources(board)} <= {"${datasource}", "-- Grafana --"}
    (var,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert (var["name"], var["query"], var["current"]) == ("datasource", "prometheus", {})


def test_component_folder_is_listed_in_the_docs() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text("utf-8")
    assert "components/grafana-dashboards" in docs
    assert "folderAnnotation: grafana_folder" in docs
