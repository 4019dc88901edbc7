"""The `xpuwatch` console command: each package contributes its own subcommands through its `cli` module.

A package's ``cli`` module defines ``add_commands(subparsers)`` and sets ``func`` (returning an exit code)
on each subparser. This is the only place that exits the process.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# Packages that own subcommands, in help order. A package not yet present is skipped.
COMMAND_MODULES = (
    "exporter.cli",
    "alerts.cli",
    "alerts.relay.cli",
    "dashboards.cli",
    "remediation.cli",
    "deploy.cli",
    "report.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xpuwatch",
        description="Observability and self-healing for mixed-vendor GPU/NPU clusters.",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for modname in COMMAND_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name != modname:
                raise
            continue
        mod.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        sys.exit(2)
    try:
        code = args.func(args)
    except KeyboardInterrupt:
        code = 130
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
