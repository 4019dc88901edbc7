"""Dashboard generation: every dashboard module's Board -> dashboards/generated/<uid>.json (committed).

One module per dashboard (``fleet``, ``device``, ``health``, ``waste``, ``operations``), each exposing
``BOARD``; a new dashboard is one new module added to ``MODULES``. Output is deterministic (sorted keys,
two-space indent, trailing newline) so the committed files diff cleanly and a test can regenerate them.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from xpuwatch.dashboards.board import Board, render_board
from xpuwatch.exporter import readers

DEFAULT_OUT = Path(__file__).parent / "generated"
READS = "reads.yaml"
"""The reads index next to the dashboards: the catalog families each panel reads (exporter.readers)."""
MODULES = (
    "xpuwatch.dashboards.fleet",
    "xpuwatch.dashboards.device",
    "xpuwatch.dashboards.health",
    "xpuwatch.dashboards.waste",
    "xpuwatch.dashboards.operations",
)


def boards() -> tuple[Board, ...]:
    """The Board of every dashboard module, in MODULES order. Raises ValueError on duplicate uids."""
    out = tuple(importlib.import_module(m).BOARD for m in MODULES)
    uids = [b.uid for b in out]
    if len(set(uids)) != len(uids):
        raise ValueError(f"duplicate dashboard uids: {sorted(uids)}")
    return out


def dump(dashboard: dict[str, Any]) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render_all() -> dict[str, str]:
    """File name (``<uid>.json``) -> JSON text of every dashboard."""
    return {f"{b.uid}.json": dump(render_board(b)) for b in boards()}


def render_reads(files: dict[str, str]) -> str:
    """reads.yaml for the rendered dashboards ``files``: per panel, the catalog families it reads (also
    through recording rules of the packaged spec)."""
    import yaml

    from xpuwatch.alerts.rules import render_rules
    from xpuwatch.alerts.spec import load_spec

    recorded = readers.rule_readers(yaml.safe_load(render_rules(load_spec())))
    out = []
    for name in sorted(files):
        out += readers.panel_readers(json.loads(files[name]), recorded)
    return readers.dump(out, "dashboards generate", "dashboard panel")


def stale_files(out: Path, files: dict[str, str]) -> list[str]:
    """Names under ``out`` that differ from ``files`` (missing counts), plus stray ``*.json`` files no
    dashboard generates any more."""
    stale = [
        n for n, text in files.items() if not (out / n).is_file() or (out / n).read_text("utf-8") != text
    ]
    stray = sorted(p.name for p in out.glob("*.json") if p.name not in files) if out.is_dir() else []
    return stale + stray
