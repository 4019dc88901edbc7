"""Grid layout: rows of panels -> Grafana gridPos (24 columns), panel ids, and row headers.

Panels flow left to right in their row and wrap when the next one would pass column 24; a wrapped line
starts below the tallest panel of the line before, so panels never overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xpuwatch.dashboards.panel import Panel, render

COLUMNS = 24
ROW_HEIGHT = 1


@dataclass(frozen=True)
class Row:
    """A titled group of panels (a Grafana row, expanded)."""

    title: str
    panels: tuple[Panel, ...]


def place(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Panels as Grafana JSON with ids 1..n in reading order. Raises ValueError for a panel wider than the
    grid or not at least 1x1."""
    out: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for row in rows:
        out.append(
            {
                "collapsed": False,
                "gridPos": {"h": ROW_HEIGHT, "w": COLUMNS, "x": 0, "y": y},
                "id": next_id,
                "panels": [],
                "title": row.title,
                "type": "row",
            }
        )
        next_id += 1
        y += ROW_HEIGHT
        x, line_height = 0, 0
        for panel in row.panels:
            if not (1 <= panel.width <= COLUMNS and panel.height >= 1):
                raise ValueError(f"panel {panel.title!r}: size {panel.width}x{panel.height} outside the grid")
            if x + panel.width > COLUMNS:
                y += line_height
                x, line_height = 0, 0
            out.append(render(panel, next_id, x, y))
            next_id += 1
            x += panel.width
            line_height = max(line_height, panel.height)
        y += line_height
    return out
