"""`xpuwatch demo`: the local demo stack (hooked into the CLI by xpuwatch/entry.py)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from xpuwatch.alerts.spec import DEFAULT_SPEC_PATH


def add_commands(sub: Any) -> None:
    demo = sub.add_parser(
        "demo",
        help="run the whole stack locally on a simulated fleet (needs Debian's prometheus and alertmanager)",
        description="Start the exporter on the simulated fleet with a fault scenario, Prometheus, "
        "Alertmanager, the relay with stand-in WeCom/Feishu bots that print each message, and the "
        "remediation controller in dry-run, all on 127.0.0.1 in a temporary directory. Ctrl-C stops "
        "everything and removes the directory. See docs/demo.md.",
    )
    demo.add_argument(
        "--duration", type=float, metavar="SECONDS", help="stop this many seconds after the stack is ready"
    )
    demo.add_argument(
        "--until",
        action="append",
        default=[],
        metavar="REGEX",
        help="stop once a printed line (source, then the text; a chat message whole) has matched each REGEX "
        "(repeatable; --duration bounds the wait): scripted runs that end when the story is told",
    )
    demo.add_argument(
        "--scenario", type=Path, metavar="FILE", help="simulator scenario YAML (default: packaged)"
    )
    for name in ("exporter", "prometheus", "alertmanager", "relay", "remediation"):
        demo.add_argument(
            f"--{name}-port", type=int, default=0, metavar="PORT", help=f"{name} port (default: a free one)"
        )
    demo.add_argument(
        "--prometheus-bin", metavar="PATH", help="Prometheus binary (default: prometheus on PATH)"
    )
    demo.add_argument(
        "--alertmanager-bin",
        metavar="PATH",
        help="Alertmanager binary (default: prometheus-alertmanager on PATH)",
    )
    demo.add_argument(
        "--spec", type=Path, default=DEFAULT_SPEC_PATH, help="alert spec (default: %(default)s)"
    )
    demo.add_argument(
        "--keep-workdir", action="store_true", help="keep the working directory (configs, logs)"
    )
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from xpuwatch.deploy.demo import (  # imported here: every `xpuwatch` subcommand imports this module
        Options,
        main,
    )

    if args.duration is not None and args.duration <= 0:
        print("xpuwatch demo: --duration must be positive", file=sys.stderr)
        return 2
    for pattern in args.until:
        try:
            re.compile(pattern)
        except re.error as exc:
            print(f"xpuwatch demo: --until {pattern!r}: not a regular expression: {exc}", file=sys.stderr)
            return 2
    return main(
        Options(
            scenario=args.scenario,
            duration=args.duration,
            exporter_port=args.exporter_port,
            prometheus_port=args.prometheus_port,
            alertmanager_port=args.alertmanager_port,
            relay_port=args.relay_port,
            remediation_port=args.remediation_port,
            prometheus_bin=args.prometheus_bin,
            alertmanager_bin=args.alertmanager_bin,
            spec=args.spec,
            keep_workdir=args.keep_workdir,
            until=tuple(args.until),
        )
    )
