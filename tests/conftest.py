"""Shared test fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]


def copy_source(dst: Path) -> Path:
    """What ``pip install .`` builds from, copied to ``dst`` (the package ``xpuwatch/`` with its links, the room
    folders they point to, pyproject.toml, README.md, LICENSE), so a build in a test leaves nothing in the
    checkout (setuptools writes build/ and *.egg-info beside the sources)."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    rooms = [p.resolve().name for p in (ROOT / "xpuwatch").iterdir() if p.is_symlink()]
    for name in ("xpuwatch", *rooms):
        shutil.copytree(ROOT / name, dst / name, symlinks=True, ignore=skip)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, dst / name)
    return dst


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden files (tests/golden/) from the current output instead of comparing",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))
