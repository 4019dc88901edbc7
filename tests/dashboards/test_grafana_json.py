"""The committed dashboards are valid Grafana dashboard JSON: schema version, unique ids and uids, every
panel on the `datasource` variable, a non-overlapping 24-column grid, and every variable used defined."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from xpuwatch.dashboards.board import SCHEMA_VERSION
from xpuwatch.dashboards.generator import DEFAULT_OUT

DASHBOARDS = sorted(DEFAULT_OUT.glob("*.json"))
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
BUILTINS = {"__rate_interval", "__interval", "__range", "__range_s"}
_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text("utf-8"))  # type: ignore[no-any-return]


def _used(text: str) -> set[str]:
    return {a or b for a, b in _VAR.findall(text)}


def test_five_dashboards_with_unique_uids_and_titles() -> None:
    boards = [_load(p) for p in DASHBOARDS]
    assert [b["uid"] for b in boards] == [
        "xpuwatch-device",
        "xpuwatch-fleet",
        "xpuwatch-health",
        "xpuwatch-operations",
        "xpuwatch-waste",
    ]
    assert [p.stem for p in DASHBOARDS] == [b["uid"] for b in boards]
    assert len({b["title"] for b in boards}) == 5
    assert all(len(b["uid"]) <= 40 for b in boards)  # Grafana's uid limit


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_model(path: Path) -> None:
    board = _load(path)
    assert board["schemaVersion"] == SCHEMA_VERSION == 39
    assert board["id"] is None
    assert board["tags"] == ["xpuwatch"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    assert all(isinstance(i, int) and i > 0 for i in ids)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_panel_queries_through_the_datasource_variable(path: Path) -> None:
    for panel in _load(path)["panels"]:
        if panel["type"] == "row":
            assert "targets" not in panel
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for t in panel["targets"]:
            assert t["datasource"] == DATASOURCE, panel["title"]
            assert t["expr"].strip(), panel["title"]
        assert panel["description"], panel["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_grid_fits_24_columns_without_overlap(path: Path) -> None:
    boxes = []
    for panel in _load(path)["panels"]:
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["y"] >= 0 and g["w"] >= 1 and g["h"] >= 1, panel["title"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        boxes.append((panel["title"], g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"]))
    for a, b in itertools.combinations(boxes, 2):
        overlap = a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]
        assert not overlap, f"{a[0]!r} overlaps {b[0]!r}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_variables_are_defined_before_use(path: Path) -> None:
    board = _load(path)
    variables = board["templating"]["list"]
    assert variables[0] == {
        "current": {},
        "hide": 0,
        "includeAll": False,
        "label": "Data source",
        "multi": False,
        "name": "datasource",
        "options": [],
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "type": "datasource",
    }
    names = [v["name"] for v in variables]
    assert names[:6] == ["datasource", "cluster", "node", "vendor", "model", "namespace"]
    defined = {"datasource"}
    for v in variables[1:]:
        assert v["type"] == "query"
        assert v["datasource"] == DATASOURCE
        assert v["query"]["query"] == v["definition"]
        assert re.fullmatch(r"label_values\(.+, " + v["name"] + r"\)", v["definition"]), v["definition"]
        assert _used(v["definition"]) <= defined, f"{v['name']} uses a later variable"
        defined.add(v["name"])
    used = set().union(*(_used(t["expr"]) for p in board["panels"] for t in p.get("targets", [])))
    assert used - BUILTINS <= defined
    assert "datasource" not in used  # the data source is chosen per panel, not inside PromQL


def test_multi_value_variables_match_missing_labels() -> None:
    """All = ".*": a single-cluster install without a `cluster` label still sees its series."""
    for path in DASHBOARDS:
        for v in _load(path)["templating"]["list"][1:]:
            if v["multi"]:
                assert (v["includeAll"], v["allValue"]) == (True, ".*"), v["name"]
            else:
                assert v["name"] == "uuid" and path.stem == "xpuwatch-device"


def test_scatter_plots_map_the_renamed_value_columns() -> None:
    """XY chart (Grafana 10 schema): x and y name the columns the merge + organize transformations make."""
    fleet = _load(DEFAULT_OUT / "xpuwatch-fleet.json")
    charts = [p for p in fleet["panels"] if p["type"] == "xychart"]
    assert len(charts) == 2
    for chart in charts:
        renamed = chart["transformations"][1]["options"]["renameByName"]
        assert renamed == {"Value #A": "memory used", "Value #B": "SM activity"}
        (series,) = chart["options"]["series"]
        assert (series["x"], series["y"]) == ("SM activity", "memory used")
        assert chart["options"]["seriesMapping"] == "manual"
        assert {"dims", "legend", "series", "tooltip"} <= set(chart["options"])
        assert [t["format"] for t in chart["targets"]] == ["table", "table"]


# A series selector in PromQL: its name (catalog metric, recording rule, ALERTS, up; empty for {__name__=~...})
# and its braces.
_SERIES = re.compile(
    r"(?<![\w:\"$])((?:[a-zA-Z_][a-zA-Z0-9_]*(?::[a-zA-Z0-9_]+)+|[a-zA-Z_][a-zA-Z0-9_]*)?)(\{[^}]*\})"
)


def test_the_cluster_variable_drives_every_panel() -> None:
    """Every series a panel reads is filtered by the cluster variable (two clusters never mix on a panel)."""
    unfiltered = []
    for path in DASHBOARDS:
        for panel in _load(path)["panels"]:
            for t in panel.get("targets", []):
                found = _SERIES.findall(t["expr"])
                assert found, t["expr"]
                unfiltered += [
                    f"{path.stem}: {panel['title']}: {name}"
                    for name, braces in found
                    if 'cluster=~"$cluster"' not in braces
                ]
    assert unfiltered == []


def test_only_the_device_dashboard_draws_raw_device_series_over_time() -> None:
    """Time-series panels of the fleet-wide dashboards read recorded, pre-aggregated series (per pool, node
    or namespace), so a refresh costs the same at 2,000 cards as at 200; per-device series over time are
    drawn only on the device dashboard (one card)."""
    from xpuwatch.exporter import catalog as c

    per_device = {m.name for m in c.catalog() if m.scope in ("device", "slice")}
    raw = []
    for path in DASHBOARDS:
        if path.stem == "xpuwatch-device":
            continue
        for panel in _load(path)["panels"]:
            for t in panel.get("targets", []):
                if not t["instant"]:
                    raw += [
                        f"{path.stem}: {panel['title']}: {n}"
                        for n, _ in _SERIES.findall(t["expr"])
                        if n in per_device
                    ]
    assert raw == []
