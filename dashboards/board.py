"""Dashboard model: a titled set of rows plus template variables -> one Grafana dashboard JSON document.

Every dashboard gets the ``datasource`` variable (type datasource, plugin prometheus) and the query
variables it names, chained in the order cluster -> node -> vendor -> model (each filtered by the ones
before), then namespace and any dashboard-specific ones. Variable values come from ``label_values`` on
catalog metrics, so they list what the exporters actually report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xpuwatch.dashboards.layout import Row, place
from xpuwatch.dashboards.panel import DATASOURCE
from xpuwatch.dashboards.sources import selector
from xpuwatch.exporter import catalog as c

# Grafana 10.4 writes schemaVersion 39; Grafana 11 migrates it on load.
SCHEMA_VERSION = 39
TAG = "xpuwatch"


@dataclass(frozen=True)
class Variable:
    """A query variable: ``label_values(<metric filtered by the variables in depends_on>, <label>)``.

    ``multi`` variables offer "All" as the regex ``.*`` (matching a missing label too); single-value ones
    (``multi=False``) pick one value, the first by default."""

    name: str
    label: str
    metric: str
    depends_on: tuple[str, ...]
    multi: bool = True

    @property
    def query(self) -> str:
        return f"label_values({selector(self.metric, self.depends_on)}, {self.name})"


CLUSTER = Variable("cluster", "Cluster", c.UP, ())
NODE = Variable("node", "Node", c.UP, ("cluster",))
VENDOR = Variable("vendor", "Vendor", c.UP, ("cluster", "node"))
MODEL = Variable("model", "Model", c.UP, ("cluster", "node", "vendor"))
NAMESPACE = Variable("namespace", "Namespace", c.ALLOCATED, ("cluster", "node", "vendor", "model"))
STANDARD: tuple[Variable, ...] = (CLUSTER, NODE, VENDOR, MODEL, NAMESPACE)


@dataclass(frozen=True)
class Board:
    """One dashboard. ``uid`` is stable (links and provisioning refer to it); ``variables`` beyond the
    standard five are appended in order."""

    uid: str
    title: str
    description: str
    rows: tuple[Row, ...]
    variables: tuple[Variable, ...] = STANDARD
    time_from: str = "now-6h"


def _datasource_variable() -> dict[str, Any]:
    return {
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


def _query_variable(v: Variable) -> dict[str, Any]:
    out: dict[str, Any] = {
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]} if v.multi else {},
        "datasource": dict(DATASOURCE),
        "definition": v.query,
        "hide": 0,
        "includeAll": v.multi,
        "label": v.label,
        "multi": v.multi,
        "name": v.name,
        "options": [],
        "query": {"qryType": 1, "query": v.query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
        "type": "query",
    }
    if v.multi:
        out["allValue"] = ".*"
    return out


def render_board(board: Board) -> dict[str, Any]:
    """The dashboard JSON (Grafana dashboard model, schemaVersion 39); ``id`` is null so imports and
    provisioning create or update by uid."""
    variables: list[Mapping[str, Any]] = [_datasource_variable()]
    variables += [_query_variable(v) for v in board.variables]
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": board.description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [
            {
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
                "tags": [TAG],
                "title": "xpuwatch",
                "type": "dashboards",
            }
        ],
        "panels": place(board.rows),
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": [TAG],
        "templating": {"list": variables},
        "time": {"from": board.time_from, "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": board.title,
        "uid": board.uid,
        "version": 1,
        "weekStart": "",
    }
