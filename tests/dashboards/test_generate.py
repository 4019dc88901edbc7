"""The committed dashboards are what the modules generate, and the names they use come from their owners."""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from xpuwatch.dashboards import sources
from xpuwatch.dashboards.cli import generate
from xpuwatch.dashboards.configmap import render_configmaps
from xpuwatch.dashboards.generator import DEFAULT_OUT, MODULES, READS, render_all, stale_files
from xpuwatch.dashboards.layout import Row, place
from xpuwatch.dashboards.panel import Panel, Query
from xpuwatch.exporter import catalog

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_MODULES = [ROOT / (m.replace(".", "/") + ".py") for m in MODULES]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xpuwatch", "dashboards", "generate", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_committed_dashboards_are_what_the_modules_generate() -> None:
    assert stale_files(DEFAULT_OUT, render_all()) == []


@pytest.mark.slow
def test_cli_check_passes_on_the_committed_dashboards() -> None:
    out = _cli("--check")
    assert (out.returncode, out.stderr) == (0, "")


@pytest.mark.slow
def test_generate_writes_then_check_fails_on_a_stale_and_a_stray_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configmaps = tmp_path / "component" / "dashboards.yaml"

    def run(check: bool) -> int:
        return generate(argparse.Namespace(out=tmp_path / "out", configmaps=configmaps, check=check))

    assert run(check=False) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([*render_all(), READS])
    assert configmaps.read_text("utf-8") == render_configmaps(render_all())
    assert run(check=True) == 0
    (tmp_path / "out" / "xpuwatch-fleet.json").write_text("{}\n")
    (tmp_path / "out" / "old.json").write_text("{}\n")
    configmaps.write_text(
        configmaps.read_text("utf-8").replace('"title": "xpuwatch / Fleet"', '"title": "x"')
    )
    capsys.readouterr()
    assert run(check=True) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"stale: {path} (run `xpuwatch dashboards generate`)"
        for path in (tmp_path / "out" / "xpuwatch-fleet.json", tmp_path / "out" / "old.json", configmaps)
    ]
    assert run(check=False) == 0
    assert not (tmp_path / "out" / "old.json").exists()
    assert run(check=True) == 0


def test_recording_rule_names_are_records_of_the_committed_rules() -> None:
    rules = yaml.safe_load((ROOT / "alerts" / "generated" / "rules.yml").read_text("utf-8"))
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    used = set(vars(sources.RECORDS).values())
    assert used <= recorded


def _prose(tree: ast.Module) -> set[int]:
    """ids of string constants that are prose: docstrings and Panel descriptions (4th argument)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            out.add(id(body[0].value))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Panel" and len(node.args) > 3:
            out |= {id(n) for n in ast.walk(node.args[3])}
    return out


@pytest.mark.parametrize("path", DASHBOARD_MODULES, ids=lambda p: p.stem)
def test_dashboard_modules_never_retype_a_metric_name(path: Path) -> None:
    """Outside prose, metric names come from exporter.catalog, alerts.rules.records or dashboards.sources."""
    names = {m.name for m in catalog.catalog()} | set(vars(sources.RECORDS).values())
    names |= {m.name for m in (*catalog.RELAY_METRICS, *catalog.REMEDIATION_METRICS)} | {sources.ALERTS}
    pattern = re.compile(
        r"(?<![\w:])(" + "|".join(map(re.escape, names)) + r"|accelerator_\w+|xpuwatch_\w+)(?![\w:])"
    )
    tree = ast.parse(path.read_text("utf-8"))
    prose = _prose(tree)
    literals = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose
    ]
    assert [s for s in literals if pattern.search(s)] == []


def test_any_of_refuses_a_name_outside_the_catalog() -> None:
    assert sources.any_of(catalog.UP, catalog.HEALTH) == "accelerator_up|accelerator_health"
    with pytest.raises(KeyError, match="not in the metric catalog"):
        sources.any_of("accelerator_made_up")


def test_selector_applies_the_dashboard_variables() -> None:
    assert sources.selector(catalog.UP) == (
        'accelerator_up{cluster=~"$cluster", node=~"$node", vendor=~"$vendor", model=~"$model"}'
    )
    assert sources.selector(catalog.RELAY_QUEUE_DEPTH, sources.CLUSTER, 'channel="x"') == (
        'xpuwatch_relay_queue_depth{cluster=~"$cluster", channel="x"}'
    )
    assert sources.selector(sources.ALERTS, ()) == "ALERTS"


def _panel(title: str, width: int, height: int = 4) -> Panel:
    return Panel(title, "stat", (Query("1"),), "d", width=width, height=height)


def test_layout_wraps_below_the_tallest_panel_of_the_line() -> None:
    out = place(
        [Row("r", (_panel("a", 16, 8), _panel("b", 8, 4), _panel("c", 12))), Row("s", (_panel("d", 24),))]
    )
    assert [(p["title"], p["id"], p["gridPos"]) for p in out] == [
        ("r", 1, {"h": 1, "w": 24, "x": 0, "y": 0}),
        ("a", 2, {"h": 8, "w": 16, "x": 0, "y": 1}),
        ("b", 3, {"h": 4, "w": 8, "x": 16, "y": 1}),
        ("c", 4, {"h": 4, "w": 12, "x": 0, "y": 9}),
        ("s", 5, {"h": 1, "w": 24, "x": 0, "y": 13}),
        ("d", 6, {"h": 4, "w": 24, "x": 0, "y": 14}),
    ]


def test_layout_refuses_a_panel_wider_than_the_grid() -> None:
    with pytest.raises(ValueError, match="outside the grid"):
        place([Row("r", (_panel("wide", 25),))])


def test_a_panel_without_queries_is_refused() -> None:
    with pytest.raises(ValueError, match=r"needs 1\.\.26 queries"):
        place([Row("r", (Panel("empty", "stat", (), "d"),))])
