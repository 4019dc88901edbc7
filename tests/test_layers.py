"""The rooms of xpuwatch lean downward and no module imports itself in a circle (issue 31).

Every ``import`` and ``from ... import`` in the package, at module level or inside a function (a local import
hides a circle, it does not remove it), read with ``ast``. Rooms, lowest first; a module may import its own
room and any room of a lower rank, never one of its own rank or higher:

    0  vendors                       device model, backends, simulator
    1  exporter                      the exporter, the catalog, and what every service shares
    2  alerts                        spec, rule and Alertmanager builders, the Prometheus client
    3  alerts.relay, dashboards,     the services and generators built on the rules
       report, remediation
    4  deploy                        the demo and deployment helpers, which start the services
    5  xpuwatch (entry, __main__)    the command line, which hooks every room's subcommands in

The README's "Layout" shows the same table; ``test_a_violation_is_caught`` proves the check can fail.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "xpuwatch"

RANKS: Mapping[str, int] = {
    "xpuwatch.vendors": 0,
    "xpuwatch.exporter": 1,
    "xpuwatch.alerts": 2,
    "xpuwatch.alerts.relay": 3,
    "xpuwatch.dashboards": 3,
    "xpuwatch.report": 3,
    "xpuwatch.remediation": 3,
    "xpuwatch.deploy": 4,
    "xpuwatch": 5,
}


def room(module: str) -> str:
    """The most specific room holding ``module`` (``xpuwatch.alerts.relay.server`` -> ``xpuwatch.alerts.relay``)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANKS:
            return ".".join(parts[:n])
    raise KeyError(module)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted name -> file of every module under ``package`` (following its links to the room folders)."""
    out = {}
    files = [Path(d, f) for d, _, fs in os.walk(package, followlinks=True) for f in fs if f.endswith(".py")]
    for path in sorted(files):
        rel = path.relative_to(package.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: Mapping[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported xpuwatch module, line) for every import in ``path``; ``from pkg import mod`` names the
    module ``pkg.mod`` when that is a module, else ``pkg``."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in known else target), node.lineno


def graph(package: Path = PACKAGE) -> dict[str, set[tuple[str, int]]]:
    known = modules(package)
    return {
        name: {(t, line) for t, line in imports(name, path, known) if t in known and t != name}
        for name, path in known.items()
    }


def upward(edges: Mapping[str, set[tuple[str, int]]]) -> list[str]:
    """Imports of a room of the same rank or higher than the importer's own room."""
    out = []
    for src, targets in edges.items():
        for dst, line in sorted(targets):
            a, b = room(src), room(dst)
            if a != b and RANKS[b] >= RANKS[a]:
                out.append(f"{src}:{line} imports {dst} ({a} rank {RANKS[a]} -> {b} rank {RANKS[b]})")
    return out


def circles(edges: Mapping[str, set[tuple[str, int]]]) -> list[list[str]]:
    """Every strongly connected set of modules larger than one (Tarjan), as sorted lists."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w, _ in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_is_in_a_room() -> None:
    names = modules()
    assert {room(n) for n in names} == set(RANKS)
    assert len(names) > 150  # the links were followed into every room


def test_no_room_imports_its_own_rank_or_higher() -> None:
    assert upward(graph()) == []


def test_no_import_circles() -> None:
    assert circles(graph()) == []


def test_a_violation_is_caught(tmp_path: Path) -> None:
    """A lower room importing a higher one, and two modules importing each other (one from inside a function),
    in a copy of the layout: both are reported."""
    pkg = tmp_path / "xpuwatch"
    for rel, text in {
        "__init__.py": "",
        "vendors/__init__.py": "",
        "vendors/base.py": "from xpuwatch.remediation import policy\n",
        "remediation/__init__.py": "",
        "remediation/policy.py": "from . import guard\n",
        "remediation/guard.py": "def f():\n    from xpuwatch.remediation.policy import x\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    edges = graph(pkg)
    assert upward(edges) == [
        "xpuwatch.vendors.base:1 imports xpuwatch.remediation.policy "
        "(xpuwatch.vendors rank 0 -> xpuwatch.remediation rank 3)"
    ]
    assert circles(edges) == [["xpuwatch.remediation.guard", "xpuwatch.remediation.policy"]]


@pytest.mark.parametrize("room_name", sorted(RANKS))
def test_the_readme_names_each_room(room_name: str) -> None:
    assert f"`{room_name}`" in (ROOT / "README.md").read_text("utf-8")
