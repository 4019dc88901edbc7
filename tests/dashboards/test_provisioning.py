"""Grafana provisioning files: a Prometheus data source and a file provider for dashboards/generated/."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"


def test_datasource_is_a_default_prometheus() -> None:
    doc = yaml.safe_load((PROVISIONING / "datasources" / "xpuwatch.yaml").read_text("utf-8"))
    assert doc["apiVersion"] == 1
    (ds,) = doc["datasources"]
    assert (ds["type"], ds["access"], ds["isDefault"], ds["url"]) == (
        "prometheus",
        "proxy",
        True,
        "http://localhost:9090",
    )


def test_dashboard_provider_loads_the_path_the_docs_mount_generated_at() -> None:
    doc = yaml.safe_load((PROVISIONING / "dashboards" / "xpuwatch.yaml").read_text("utf-8"))
    assert doc["apiVersion"] == 1
    (provider,) = doc["providers"]
    assert (provider["type"], provider["folder"], provider["allowUiUpdates"]) == ("file", "xpuwatch", False)
    path = provider["options"]["path"]
    docs = (ROOT / "docs" / "dashboards.md").read_text("utf-8")
    assert f'"$PWD/dashboards/generated:{path}:ro"' in docs
    assert '"$PWD/deploy/grafana/provisioning:/etc/grafana/provisioning:ro"' in docs
