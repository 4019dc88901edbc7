"""Layering (cf. kopf's import-linter contract): only remediation/kube.py imports the Kubernetes client,
and the pure core (policy, guard, mig, progress, alert) does no I/O imports at all."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "remediation"


def imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_only_kube_imports_the_kubernetes_client() -> None:
    users = sorted(
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if any(m.split(".")[0] in ("kubernetes_asyncio", "kubernetes") for m in imports(p))
    )
    assert users == ["kube.py"]


def test_pure_core_has_no_io_imports() -> None:
    io = {"aiohttp", "kubernetes_asyncio", "socket", "subprocess", "asyncio", "prometheus_client"}
    for name in ("policy.py", "guard.py", "mig.py", "progress.py", "alert.py"):
        assert not {m.split(".")[0] for m in imports(PKG / name)} & io, name
