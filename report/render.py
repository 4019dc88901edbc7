"""Baseline -> one self-contained HTML page: matplotlib plots inlined as SVG, tables, no external assets.

Pure apart from matplotlib's rendering: ``html(baseline)`` returns the page as a string. matplotlib runs on
its Agg backend (no display needed); every figure is closed after rendering so a long run does not grow.
"""

from __future__ import annotations

import datetime as dt
import io
import math
from collections.abc import Sequence
from pathlib import Path

import jinja2
import matplotlib
import matplotlib.dates

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from xpuwatch.report import chargeback
from xpuwatch.report.baseline import Baseline, SliceAdvice, span
from xpuwatch.report.compare import Change, Comparison, duration

TEMPLATES = Path(__file__).parent / "templates"
BAND_COLOR = "#2ca02c"
TABLE_ROWS = 50
"""Rows of a per-pod or per-slice table (idle notebooks, slice right-sizing), worst first; the rest are
counted under it. A fleet of 16,384 devices has ~2,000 idle notebooks and ~1,000 slices: a page of 3,000 rows
is not read (``Baseline`` keeps every one)."""


def _svg(fig: plt.Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: the SVG is inlined in HTML


def _band(ax: plt.Axes, b: Baseline, axis: str = "y") -> None:
    lo, hi = b.band
    (ax.axhspan if axis == "y" else ax.axvspan)(
        lo, hi, color=BAND_COLOR, alpha=0.15, label=f"healthy {lo:.0%}-{hi:.0%}"
    )


def pool_bars(b: Baseline) -> str:
    pools = [*b.pools, b.fleet]
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * len(pools)))
    names = [f"{p.model} ({p.devices})" for p in pools]
    y = range(len(pools))
    ax.barh([i + 0.2 for i in y], [p.avg for p in pools], height=0.4, label="average", color="#1f77b4")
    ax.barh([i - 0.2 for i in y], [p.p95 for p in pools], height=0.4, label="P95", color="#ff7f0e")
    _band(ax, b, axis="x")
    ax.set_yticks(list(y), names)
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Utilization per pool: average and P95 against the healthy band")
    return _svg(fig)


def _times(points: tuple[tuple[float, float], ...], tz: dt.tzinfo) -> list[float]:
    """Unix seconds as matplotlib date numbers (days since 1970), so the axis shows dates."""
    return [float(matplotlib.dates.date2num(dt.datetime.fromtimestamp(t, tz))) for t, _ in points]


def _time_axis(ax: plt.Axes, tz: dt.tzinfo, seconds: float) -> None:
    """Dates on the x axis in the reader's time zone, named in the axis label."""
    ax.xaxis_date(tz)
    fmt = "%m-%d %H:%M" if seconds > 86400 else "%H:%M"
    ax.xaxis.set_major_formatter(matplotlib.dates.DateFormatter(fmt, tz=tz))
    ax.set_xlabel(f"time ({zone_name(tz)})", fontsize=8)


def pool_curves(b: Baseline, tz: dt.tzinfo = dt.UTC) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for name, pts in sorted(b.curves.items()):
        ax.plot(_times(pts, tz), [v for _, v in pts], label=name, linewidth=1)
    _band(ax, b)
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.legend(fontsize=7, ncol=2)
    _time_axis(ax, tz, b.window.seconds)
    ax.set_title("Mean utilization per pool over the window")
    fig.autofmt_xdate()
    return _svg(fig)


GRID = 0.02  # scatter points closer than 2 points of % on both axes are drawn as one, sized by count


def overlaps(b: Baseline) -> dict[tuple[str, str], list[tuple[float, float, int]]]:
    """Per pool (vendor, model): (memory %, compute %, devices) of the scatter's points, devices closer than
    ``GRID`` on both axes merged into one point at their cell (64 devices of a few shapes are ~14 points)."""
    out: dict[tuple[str, str], dict[tuple[int, int], int]] = {}
    for d in b.devices:
        if math.isnan(d.compute_ratio) or math.isnan(d.memory_ratio):
            continue
        cell = (round(d.memory_ratio / GRID), round(d.compute_ratio / GRID))
        cells = out.setdefault((d.vendor, d.model), {})
        cells[cell] = cells.get(cell, 0) + 1
    return {
        pool: [(x * GRID * 100, y * GRID * 100, n) for (x, y), n in sorted(cells.items())]
        for pool, cells in sorted(out.items())
    }


def scatter(b: Baseline) -> str:
    fig, ax = plt.subplots(figsize=(6.5, 5))
    for (_vendor, model), pts in overlaps(b).items():
        n = sum(k for _, _, k in pts)
        ax.scatter(
            [x for x, _, _ in pts],
            [y for _, y, _ in pts],
            s=[18 + 14 * (k - 1) for _, _, k in pts],
            label=f"{model} ({n})",
            alpha=0.6,
            edgecolors="black",
            linewidths=0.4,
        )
        for x, y, k in pts:
            if k > 1:
                ax.annotate(str(k), (x, y), fontsize=7, ha="center", va="center")
    ax.axvline(90, color="grey", linestyle=":", linewidth=1)
    ax.axhline(40, color="grey", linestyle=":", linewidth=1)
    ax.text(92, 2, "short of\nmemory", fontsize=7, color="grey")
    ax.text(2, 92, "short of compute\n(if memory low)", fontsize=7, color="grey")
    ax.set_xlim(0, 102)
    ax.set_ylim(0, 102)
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(100))
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(100))
    ax.set_xlabel("device memory used, % of capacity (mean)")
    ax.set_ylabel("SM occupancy, % (mean; utilization where not reported)")
    if b.devices:
        ax.legend(fontsize=7, title="pool (devices); a number = devices at one point", title_fontsize=7)
    ax.set_title("Memory allocated vs SM occupancy per device")
    return _svg(fig)


def pending_curve(b: Baseline, tz: dt.tzinfo = dt.UTC) -> str | None:
    if not b.pending_curve:
        return None
    fig, ax = plt.subplots(figsize=(9, 2.4))
    ax.step(_times(b.pending_curve, tz), [v for _, v in b.pending_curve], where="post", color="#d62728")
    ax.set_ylabel("accelerators requested")
    _time_axis(ax, tz, b.window.seconds)
    ax.set_title("Accelerators requested by pods waiting to be scheduled")
    fig.autofmt_xdate()
    return _svg(fig)


def zone_name(tz: dt.tzinfo) -> str:
    """``Asia/Shanghai``, ``UTC``, or the system zone's abbreviation when it has no IANA key."""
    key = getattr(tz, "key", None)
    return str(key) if key else (dt.datetime.now(tz).tzname() or "UTC")


def when(t: float, tz: dt.tzinfo) -> str:
    """Unix seconds as the reader reads them: ``2026-12-01 21:00 CST (UTC+08:00)``."""
    local = dt.datetime.fromtimestamp(t, tz)
    offset = local.strftime("%z")
    sign_hours = f"{offset[:3]}:{offset[3:]}" if offset else "+00:00"
    name = local.tzname() or ""
    return local.strftime("%Y-%m-%d %H:%M") + (
        " UTC" if sign_hours == "+00:00" and name in ("UTC", "") else f" {name} (UTC{sign_hours})"
    )


def compare_bars(cmp: Comparison) -> str:
    """P95 and average utilization per pool and for the fleet, before and after."""
    b = cmp.after
    scopes = [*sorted({p.model for p in (*cmp.before.pools, *b.pools)}), "fleet"]
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.6 * len(scopes)))
    y = range(len(scopes))
    for offset, window, color in ((0.2, "before", "#9ecae1"), (-0.2, "after", "#ff7f0e")):
        p95 = [getattr(cmp.get(sc, "P95 utilization"), window) or 0.0 for sc in scopes]
        avg = [getattr(cmp.get(sc, "average utilization"), window) or 0.0 for sc in scopes]
        ax.barh([i + offset for i in y], p95, height=0.38, color=color, label=f"P95 {window}")
        ax.scatter(avg, [i + offset for i in y], marker="|", s=120, color="black", zorder=3)
    ax.scatter([], [], marker="|", color="black", label="average")
    _band(ax, b, axis="x")
    ax.set_yticks(list(y), scopes)
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.legend(loc="lower right", fontsize=7)
    ax.set_title("Utilization per pool before and after")
    return _svg(fig)


def compare_curves(cmp: Comparison, tz: dt.tzinfo = dt.UTC) -> str:
    """Each pool's mean utilization over both windows on one time axis, the change marked."""
    fig, ax = plt.subplots(figsize=(9, 3.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = sorted(cmp.before.curves.keys() | cmp.after.curves.keys())
    for i, name in enumerate(names):
        color = colors[i % len(colors)]
        for b, style, label in ((cmp.before, ":", None), (cmp.after, "-", name)):
            pts = b.curves.get(name, ())
            ax.plot(_times(pts, tz), [v for _, v in pts], style, color=color, label=label, linewidth=1)
    ax.axvline(
        float(matplotlib.dates.date2num(dt.datetime.fromtimestamp(cmp.after.window.start, tz))),
        color="black",
        linewidth=1,
        label="before (dotted) | after",
    )
    _band(ax, cmp.after)
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.legend(fontsize=7, ncol=2)
    _time_axis(ax, tz, cmp.after.window.end - cmp.before.window.start)
    ax.set_title("Mean utilization per pool, before and after")
    fig.autofmt_xdate()
    return _svg(fig)


def value(v: float | None, unit: str) -> str:
    """One figure as the compare table shows it."""
    if v is None:
        return "n/a"
    return {
        "%": lambda: f"{v:.0%}",
        "s": lambda: duration(v),
        "cards": lambda: f"{v:.1f}",
        "GiB": lambda: f"{v:.0f} GiB",
    }.get(unit, lambda: f"{v:.0f}")()


def change(c: Change) -> str:
    """The change in words: ``+12 points``, ``-2h 35m``, ``-9.0 cards``."""
    d = c.delta
    if d is None:
        return ""
    sign = "+" if d > 0 else "-" if d < 0 else "±"
    if c.unit == "%":
        return f"{sign}{abs(100 * d):.0f} points"
    if c.unit == "s":
        return f"{sign}{duration(abs(d))}"
    return f"{sign}{value(abs(d), c.unit)}" + (
        f" {c.unit}" if c.unit in ("devices", "cards", "jobs", "alerts") else ""
    )


def _pct(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:.0%}"


def worst_slices(slices: Sequence[SliceAdvice]) -> list[SliceAdvice]:
    """Slices and partitions to resize first: every advice but "fits" (in the baseline's order), then those
    that fit."""
    return sorted(slices, key=lambda s: s.advice == "fits")


def advice_counts(slices: Sequence[SliceAdvice]) -> str:
    """``12 fits, 3 oversized``: how many of ``slices`` got each advice (its words before the colon)."""
    counts: dict[str, int] = {}
    for s in slices:
        word = s.advice.split(":")[0]
        counts[word] = counts.get(word, 0) + 1
    return ", ".join(f"{n} {word}" for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def html(b: Baseline, generated: float, tz: dt.tzinfo = dt.UTC, cmp: Comparison | None = None) -> str:
    """The page; times in ``tz`` (the reader's zone: ``--timezone``, else the system's). With ``cmp`` (``b``
    is its after window) a before/after section leads the page."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env.filters["pct"] = _pct
    env.filters["hours"] = lambda h: f"{h:.1f} h"
    env.filters["when"] = lambda t: when(t, tz)
    env.filters["span"] = span
    env.filters["wait"] = lambda s: f"{int(s) // 3600} h {int(s) % 3600 // 60:02d} m"
    env.filters["value"] = lambda v, unit: value(v, unit)
    env.filters["change"] = change
    return env.get_template("report.html.j2").render(
        b=b,
        cmp=cmp,
        teams=chargeback.by_team,
        models=chargeback.by_model,
        total=chargeback.total,
        generated=generated,
        rows=TABLE_ROWS,
        worst_slices=worst_slices,
        advice_counts=advice_counts,
        plots={
            "bars": pool_bars(b),
            "curves": pool_curves(b, tz),
            "scatter": scatter(b),
            "pending": pending_curve(b, tz),
            "compare_bars": compare_bars(cmp) if cmp is not None else None,
            "compare_curves": compare_curves(cmp, tz) if cmp is not None else None,
        },
    )
