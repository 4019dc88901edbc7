"""Panel model: frozen descriptions of Grafana panels and their PromQL queries, rendered to dashboard JSON.

A dashboard module lists ``Panel`` values; ``layout.place`` gives each its grid position and id and calls
``render``. Everything a panel queries goes through the dashboard's ``datasource`` variable, so the rendered
JSON works with any Prometheus-compatible data source (Prometheus, Thanos, Mimir, VictoriaMetrics).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

# Every panel and query points at the dashboard's `datasource` variable (a Grafana template variable of
# type datasource, plugin "prometheus").
DATASOURCE: Mapping[str, str] = MappingProxyType({"type": "prometheus", "uid": "${datasource}"})

Kind = Literal["timeseries", "stat", "table", "bargauge", "xychart", "piechart", "state-timeline"]
Empty: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Query:
    """One PromQL target. ``instant`` queries evaluate once at the end of the range (tables, stats);
    ``table`` asks Grafana for a table frame (one row per series, labels as columns)."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass(frozen=True)
class Threshold:
    """A threshold step: from ``value`` upwards the colour is ``color`` (``value=None`` is the base)."""

    value: float | None
    color: str


@dataclass(frozen=True)
class Panel:
    """A Grafana panel. ``unit`` is a Grafana unit id (``percentunit`` for 0..1 ratios, ``bytes``,
    ``celsius``, ``watt``, ``hertz``, ``s``, ``short``); ``width``/``height`` in grid units (24 columns)."""

    title: str
    kind: Kind
    queries: tuple[Query, ...]
    description: str
    unit: str = "short"
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    decimals: int | None = None
    no_value: str | None = None  # shown instead of "No data", e.g. "0" for a count of matching devices
    thresholds: tuple[Threshold, ...] = (Threshold(None, "green"),)
    thresholds_style: str | None = None  # timeseries: "line", "area", "line+area"
    stack: bool = False
    options: Mapping[str, Any] = field(default_factory=lambda: Empty)
    custom: Mapping[str, Any] = field(default_factory=lambda: Empty)
    transformations: tuple[Mapping[str, Any], ...] = ()
    overrides: tuple[Mapping[str, Any], ...] = ()


_REF_IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def target(query: Query, ref_id: str) -> dict[str, Any]:
    """A Grafana Prometheus target for ``query``."""
    out: dict[str, Any] = {
        "datasource": dict(DATASOURCE),
        "editorMode": "code",
        "expr": query.expr,
        "instant": query.instant,
        "legendFormat": query.legend or "__auto",
        "range": not query.instant,
        "refId": ref_id,
    }
    if query.table:
        out["format"] = "table"
    return out


def _custom(panel: Panel) -> dict[str, Any]:
    custom: dict[str, Any] = {}
    if panel.kind == "timeseries":
        custom = {
            "drawStyle": "line",
            "fillOpacity": 10,
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"group": "A", "mode": "normal" if panel.stack else "none"},
        }
        if panel.thresholds_style:
            custom["thresholdsStyle"] = {"mode": panel.thresholds_style}
    elif panel.kind == "table":
        custom = {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True}
    custom.update(panel.custom)
    return custom


_OPTIONS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "timeseries": {
            "legend": {"calcs": ["lastNotNull", "max"], "displayMode": "table", "placement": "bottom"},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "stat": {
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "auto",
        },
        "bargauge": {
            "displayMode": "gradient",
            "orientation": "horizontal",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showUnfilled": True,
        },
        "table": {"cellHeight": "sm", "footer": {"show": False}, "showHeader": True},
        "piechart": {
            "legend": {"displayMode": "table", "placement": "right", "values": ["value"]},
            "pieType": "donut",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        },
        "xychart": {},
        "state-timeline": {"mergeValues": True, "showValue": "never", "rowHeight": 0.9},
    }
)


def _options(panel: Panel) -> dict[str, Any]:
    """Grafana's options for the panel type, with the panel's own settings on top (a fresh copy)."""
    base: dict[str, Any] = json.loads(json.dumps(_OPTIONS[panel.kind]))
    base.update(panel.options)
    return base


def render(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    """The panel as Grafana JSON at grid position (x, y). Raises ValueError for a panel without queries or
    with more queries than ref ids."""
    if not panel.queries or len(panel.queries) > len(_REF_IDS):
        raise ValueError(f"panel {panel.title!r}: needs 1..{len(_REF_IDS)} queries")
    defaults: dict[str, Any] = {
        "color": {"mode": "thresholds" if panel.kind in ("stat", "bargauge") else "palette-classic"},
        "custom": _custom(panel),
        "mappings": [],
        "thresholds": {
            "mode": "absolute",
            "steps": [{"color": t.color, "value": t.value} for t in panel.thresholds],
        },
        "unit": panel.unit,
    }
    settings = (
        ("min", panel.min),
        ("max", panel.max),
        ("decimals", panel.decimals),
        ("noValue", panel.no_value),
    )
    for key, value in settings:
        if value is not None:
            defaults[key] = value
    return {
        "datasource": dict(DATASOURCE),
        "description": panel.description,
        "fieldConfig": {"defaults": defaults, "overrides": [dict(o) for o in panel.overrides]},
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "id": panel_id,
        "options": _options(panel),
        "targets": [target(q, _REF_IDS[i]) for i, q in enumerate(panel.queries)],
        "title": panel.title,
        "transformations": [dict(t) for t in panel.transformations],
        "type": panel.kind,
    }
