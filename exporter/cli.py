"""Exporter subcommands: `serve`, `capture`, `inspect`."""

from __future__ import annotations

import argparse
from typing import Any


def add_commands(sub: Any) -> None:
    serve = sub.add_parser("serve", help="run the exporter")
    serve.add_argument("--simulate", action="store_true", help="serve the built-in simulated fleet")
    serve.set_defaults(func=_not_yet)


def _not_yet(args: argparse.Namespace) -> int:
    raise SystemExit("not implemented yet")
