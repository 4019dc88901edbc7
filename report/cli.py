"""`xpuwatch report` (baseline HTML from a Prometheus) and `xpuwatch report-history` (a synthetic week as
OpenMetrics for promtool backfill). Edge of the report package: argument parsing, files, the progress bar."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
import zoneinfo
from collections.abc import Mapping
from pathlib import Path

from xpuwatch.alerts.promapi import duration
from xpuwatch.alerts.spec import DEFAULT_SPEC_PATH, SpecError, load_spec
from xpuwatch.exporter import validation
from xpuwatch.vendors.untrusted import replace_file, write_output, writing


def positive(text: str) -> float:
    """A number > 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0")
    return value


def count(text: str) -> int:
    """A whole number >= 1 (argparse type)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def zone(name: str) -> dt.tzinfo:
    """An IANA zone name -> tzinfo (argparse type): ``Asia/Shanghai``, ``UTC``."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"{name!r} is not an IANA time zone like Asia/Shanghai or UTC"
        ) from exc


def system_zone(env: Mapping[str, str] = os.environ, localtime: Path = Path("/etc/localtime")) -> dt.tzinfo:
    """The system's time zone: $TZ when it names an IANA zone, else the zone /etc/localtime links to,
    else the current UTC offset (without daylight-saving rules)."""
    for name in (env.get("TZ", "").lstrip(":"), _linked_zone(localtime)):
        if name:
            try:
                return zoneinfo.ZoneInfo(name)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                pass
    return dt.datetime.now().astimezone().tzinfo or dt.UTC


def _linked_zone(localtime: Path) -> str:
    try:
        target = str(localtime.resolve(strict=True))
    except OSError:
        return ""
    _, sep, key = target.partition("/zoneinfo/")
    return key if sep else ""


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "report",
        help="baseline report (HTML) of a fleet from its Prometheus",
        description="Query a Prometheus that scrapes xpuwatch (and kube-state-metrics) and write a self-contained "
        "HTML baseline: pool P95 vs the healthy band, memory vs SM occupancy, hoarders, idle notebooks, slice "
        "right-sizing, queue time and alerts.",
    )
    p.add_argument(
        "--prometheus", required=True, metavar="URL", help="Prometheus base URL, e.g. http://prometheus:9090"
    )
    p.add_argument(
        "--range", dest="range_", type=duration, default=duration("7d"), help="window length (default 7d)"
    )
    p.add_argument("--end", type=float, default=None, help="window end, Unix seconds (default: now)")
    p.add_argument(
        "--step", type=duration, default=None, help="subquery resolution (default: range/2016, at least 1m)"
    )
    p.add_argument(
        "--compare",
        type=duration,
        default=None,
        metavar="DURATION",
        help="also report the window of this length before the report's window and compare the two "
        "(--range 7d --compare 7d: this week against the week before)",
    )
    p.add_argument(
        "--compare-end",
        type=float,
        default=None,
        metavar="UNIX",
        help="end of the before window, Unix seconds (default: the start of the report's window)",
    )
    p.add_argument(
        "--csv",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write the chargeback as CSV for finance: DIR/usage_by_team.csv and DIR/usage_by_model.csv "
        "(device-hours, idle share, memory GiB-hours, kWh metered and from power; costs with --config prices)",
    )
    p.add_argument("--spec", type=Path, default=DEFAULT_SPEC_PATH, help="alert spec whose thresholds to use")
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="the report's config (YAML): a price table (prices: currency, card_hour by model or resource "
        "name, kwh) that adds costs to the chargeback tables and CSV; see docs/report.md",
    )
    p.add_argument(
        "--timezone",
        type=zone,
        default=None,
        metavar="ZONE",
        help="IANA time zone the page's times and plot axes are written in, e.g. Asia/Shanghai "
        "(default: the system's, from $TZ or /etc/localtime)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("report.html"),
        help="HTML file to write (default report.html)",
    )
    p.add_argument(
        "--timeout",
        type=positive,
        default=120.0,
        help="seconds per query, the whole answer and its decoding included (default 120)",
    )
    p.add_argument(
        "--concurrency",
        type=count,
        default=4,
        metavar="N",
        help="queries in flight at once (default 4; 1: one after another, for a Prometheus with no core to spare)",
    )
    p.add_argument(
        "--max-answer-mib",
        type=positive,
        default=64.0,
        metavar="MIB",
        help="largest answer read from Prometheus per query, in MiB (default 64)",
    )
    p.set_defaults(func=run_report)

    h = sub.add_parser(
        "report-history",
        help="write a synthetic week of fleet history as OpenMetrics (for promtool tsdb create-blocks-from openmetrics)",
    )
    h.add_argument("--devices", type=int, default=64)
    h.add_argument("--range", dest="range_", metavar="DURATION", type=duration, default=duration("7d"))
    h.add_argument("--step", type=duration, default=duration("5m"))
    h.add_argument(
        "--end", type=int, default=None, help="Unix seconds (default: now, rounded down to the step)"
    )
    h.add_argument("-o", "--output", type=Path, required=True)
    h.set_defaults(func=run_history)


def run_report(args: argparse.Namespace) -> int:
    try:
        from tqdm import tqdm

        from xpuwatch.report.render import html
    except ModuleNotFoundError as exc:
        print(
            f"xpuwatch report: {exc.name} is missing; install the report extra: pip install 'xpuwatch[report]'",
            file=sys.stderr,
        )
        return 2
    from xpuwatch.alerts.promapi import PromError, Prometheus
    from xpuwatch.report.baseline import ReportError, Window, collect, figures, queries, range_queries
    from xpuwatch.report.compare import compare
    from xpuwatch.report.config import ConfigError, ReportConfig, load_config

    try:
        spec = load_spec(args.spec)
    except (SpecError, OSError) as exc:
        print(f"xpuwatch report: {validation.naming_once(exc, '--spec', str(args.spec))}", file=sys.stderr)
        return 2
    try:
        config = ReportConfig() if args.config is None else load_config(args.config, spec)
    except (ConfigError, OSError) as exc:
        print(
            f"xpuwatch report: {validation.naming_once(exc, '--config', str(args.config))}", file=sys.stderr
        )
        return 2
    end = time.time() if args.end is None else args.end
    window = Window.ending(end, args.range_, args.step)
    before: Window | None = None
    if args.compare is not None:
        b_end = window.start if args.compare_end is None else args.compare_end
        before = Window.ending(b_end, args.compare, args.step)
    elif args.compare_end is not None:
        print("xpuwatch report: --compare-end needs --compare DURATION", file=sys.stderr)
        return 2
    windows = [window] if before is None else [before, window]
    total = sum(len(queries(spec, w)) + len(range_queries(spec)) for w in windows)
    bar = tqdm(total=total, unit="query", file=sys.stderr, leave=False, disable=None)

    def progress(title: str) -> None:
        bar.set_description(title)
        bar.update(1)

    try:
        prom = Prometheus(args.prometheus, args.timeout, int(args.max_answer_mib * 2**20))
        baselines = [figures(collect(prom, spec, w, progress, args.concurrency), spec, w) for w in windows]
    except (PromError, ReportError) as exc:
        bar.close()
        print(f"xpuwatch report: {exc}", file=sys.stderr)
        return 1
    bar.close()
    baseline = baselines[-1]
    comparison = compare(baselines[0], baseline) if before is not None else None
    try:
        tz = args.timezone or system_zone()
        write_output(args.output, html(baseline, time.time(), tz, comparison, config.prices))
    except OSError as exc:
        print(f"xpuwatch report: cannot write {args.output}: {exc}", file=sys.stderr)
        return 1
    if args.csv is not None:
        from xpuwatch.report import chargeback as cb

        usage = cb.priced(baseline.usage, config.prices)
        costs = cb.cost_columns(config.prices)
        currency = config.prices.currency if config.prices else ""
        try:
            args.csv.mkdir(parents=True, exist_ok=True)
            for name, rows, columns in (
                ("usage_by_team.csv", cb.by_team(usage), (*cb.TEAM_COLUMNS, *costs)),
                ("usage_by_model.csv", cb.by_model(usage), (*cb.MODEL_COLUMNS, *costs)),
            ):
                replace_file(
                    args.csv / name, cb.to_csv(rows, columns, currency)
                )  # never through a planted link
        except OSError as exc:
            print(f"xpuwatch report: cannot write CSV to {args.csv}: {exc}", file=sys.stderr)
            return 1
    from xpuwatch.report.chargeback import unpriced

    for (_vendor, model), hours in sorted(unpriced(baseline.usage, config.prices).items()):
        print(
            f"xpuwatch report: no card-hour price for {model} ({hours:,.1f} device-hours): its cost is n/a",
            file=sys.stderr,
        )
    if comparison is not None:
        print(comparison.headline)
    print(f"{baseline.headline}\nwrote {args.output}")
    return 0


def run_history(args: argparse.Namespace) -> int:
    from xpuwatch.report.history import openmetrics

    if args.devices < 1:
        print("xpuwatch report-history: --devices must be at least 1", file=sys.stderr)
        return 2
    end = int(time.time()) if args.end is None else args.end
    end -= end % args.step
    start = end - args.range_ + args.step
    try:
        with writing(args.output) as f:
            for line in openmetrics(args.devices, start, end, args.step):
                f.write(line + "\n")
    except OSError as exc:
        print(f"xpuwatch report-history: cannot write {args.output}: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}: {args.devices} devices, {start} to {end} every {args.step}s")
    return 0
