"""The `xpuwatch` console command: each package contributes its own subcommands through its `cli` module.

A package's ``cli`` module defines ``add_commands(subparsers)`` and sets ``func`` (returning an exit code)
on each subparser. This is the only place that exits the process.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from xpuwatch.exporter import build, logs
from xpuwatch.exporter.selection import Layer, split_flags

# Packages that own subcommands, in help order. A package not yet present is skipped.
COMMAND_MODULES = (
    "xpuwatch.exporter.cli",
    "xpuwatch.alerts.cli",
    "xpuwatch.alerts.relay.cli",
    "xpuwatch.dashboards.cli",
    "xpuwatch.remediation.cli",
    "xpuwatch.deploy.cli",
    "xpuwatch.report.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xpuwatch",
        description="Observability and self-healing for mixed-vendor GPU/NPU clusters.",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keeps --version's two lines
    )
    parser.add_argument("--version", action="version", version=build.describe())
    _log_flags(parser, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for modname in COMMAND_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name != modname:
                raise
            continue
        mod.add_commands(sub)
    for command in sub.choices.values():
        # Also after the subcommand (`xpuwatch relay --log.level=debug`); SUPPRESS keeps a value given
        # before the subcommand from being overwritten by the subparser's default.
        _log_flags(command, default=argparse.SUPPRESS)
    return parser


def _log_flags(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--log.level",
        "--log-level",
        dest="log_level",
        default=default,
        metavar="LEVEL",
        help=f"one of {', '.join(logs.LEVELS)} (default: ${logs.LEVEL_ENV}, else info)",
    )
    parser.add_argument(
        "--log.format",
        dest="log_format",
        default=default,
        metavar="FORMAT",
        help=f"one of {', '.join(logs.FORMATS)} (default: ${logs.FORMAT_ENV}, else logfmt)",
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    # node_exporter's --collector.<name> / --no-collector.<name>: names come from the catalog, so they are
    # taken out before argparse (which knows no flag families) and checked by `serve` (exporter.selection).
    rest, collectors = split_flags(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(rest)
    if collectors != Layer() and getattr(args, "command", None) != "serve":
        parser.error("--collector.<name> / --no-collector.<name> are flags of `xpuwatch serve`")
    args.collectors = collectors
    try:
        level, fmt = logs.resolve(args.log_level, args.log_format, os.environ)
    except logs.LogSettingsError as exc:
        sys.exit(logs.config_error(exc))
    logs.configure(level, fmt)
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
