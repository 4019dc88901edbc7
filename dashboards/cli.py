"""Dashboard subcommands: `xpuwatch dashboards generate [--check]` writes (or verifies) dashboards/generated/
and the Grafana sidecar ConfigMaps of deploy/kustomize/components/grafana-dashboards/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from xpuwatch.dashboards.configmap import render_configmaps
from xpuwatch.dashboards.generator import READS, render_all, render_reads, stale_files
from xpuwatch.vendors.untrusted import replace_file


def add_commands(sub: Any) -> None:
    dash = sub.add_parser("dashboards", help="Grafana dashboards")
    dash_sub = dash.add_subparsers(dest="dashboards_command", metavar="SUBCOMMAND")
    gen = dash_sub.add_parser(
        "generate", help="write dashboards/generated/<uid>.json from the dashboard modules"
    )
    # Relative to the current directory (the repository root), never into an installed package.
    gen.add_argument(
        "--out", type=Path, default=Path("dashboards/generated"), help="output folder (default: %(default)s)"
    )
    gen.add_argument(
        "--configmaps",
        type=Path,
        default=Path("deploy/kustomize/components/grafana-dashboards/dashboards.yaml"),
        help="the Grafana sidecar ConfigMaps file (default: %(default)s)",
    )
    gen.add_argument("--check", action="store_true", help="write nothing; exit 1 if any output is stale")
    gen.set_defaults(func=generate)
    dash.set_defaults(func=lambda args: (dash.print_help(), 2)[1])


def generate(args: argparse.Namespace) -> int:
    """Write (or with ``args.check`` verify) ``args.out`` and ``args.configmaps``; exit code 0 ok, 1 stale,
    2 generation failed."""
    try:
        files = render_all()
        configmaps = render_configmaps(files)
        reads = render_reads(files)
    except (OSError, ValueError, KeyError) as exc:
        print(f"xpuwatch dashboards generate: {exc}", file=sys.stderr)
        return 2
    cm_path: Path = args.configmaps
    cm_stale = not cm_path.is_file() or cm_path.read_text("utf-8") != configmaps
    reads_path = args.out / READS
    reads_stale = not reads_path.is_file() or reads_path.read_text("utf-8") != reads
    if args.check:
        stale = [args.out / name for name in stale_files(args.out, files)] + ([cm_path] if cm_stale else [])
        stale += [reads_path] if reads_stale else []
        for path in stale:
            print(f"stale: {path} (run `xpuwatch dashboards generate`)", file=sys.stderr)
        if not stale:
            print(f"{args.out}: {len(files)} dashboards up to date; {cm_path} up to date")
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in stale_files(args.out, {}):
        (args.out / name).unlink()
        print(f"removed {args.out / name}")
    for name, text in {**files, READS: reads}.items():
        replace_file(args.out / name, text)
        print(f"wrote {args.out / name}")
    try:
        cm_path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(cm_path, configmaps)
    except OSError as exc:
        print(f"xpuwatch dashboards generate: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {cm_path}")
    return 0
