"""Relay tests import shared fakes as ``tests.relay.*``: make the repository root importable even when pytest
runs without PYTHONPATH (``--import-mode=importlib`` does not add it)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
