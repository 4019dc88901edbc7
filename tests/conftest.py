"""Shared test fixtures."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]


ROOMS = frozenset(p.name for p in (ROOT / "xpuwatch").iterdir() if p.is_symlink())


class _BareRooms(importlib.abc.MetaPathFinder):
    """Refuses ``import exporter`` and the like in the test process. The room folders sit at the repository
    root, which is on sys.path here (pytest's ``pythonpath``), so a bare name would import in tests and fail
    only in an installed wheel, where the one top-level name is ``xpuwatch`` (a string such as
    ``importlib.resources.files("vendors")`` did exactly that)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in ROOMS:
            raise ModuleNotFoundError(
                f"{fullname!r}: the rooms are imported as xpuwatch.{fullname}", name=fullname
            )
        return None


sys.meta_path.insert(0, _BareRooms())


def copy_source(dst: Path) -> Path:
    """What ``pip install .`` builds from, copied to ``dst`` (the package ``xpuwatch/`` with its links, the room
    folders they point to, pyproject.toml, README.md, LICENSE), so a build in a test leaves nothing in the
    checkout (setuptools writes build/ and *.egg-info beside the sources)."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("xpuwatch", *sorted(ROOMS)):
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
