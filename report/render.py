"""Baseline -> one self-contained HTML page: matplotlib plots inlined as SVG, tables, no external assets.

Pure apart from matplotlib's rendering: ``html(baseline)`` returns the page as a string. matplotlib runs on
its Agg backend (no display needed); every figure is closed after rendering so a long run does not grow.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import re
from collections.abc import Sequence
from pathlib import Path

import jinja2
import matplotlib
import matplotlib.dates

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from xpuwatch.report import chargeback
from xpuwatch.report.baseline import Baseline, CardHours, SliceAdvice, span, wait_sentence
from xpuwatch.report.compare import Change, Comparison, duration
from xpuwatch.report.config import Prices

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


# Where the card-hours went: one color per part, the same in every picture and table.
HOURS_PARTS = (
    ("held_busy", "held and busy", "#1f77b4"),
    ("held_idle", "held but idle", "#ff7f0e"),
    ("unheld", "held by nobody", "#c7c7c7"),
)


def hours_bars(b: Baseline, cmp: Comparison | None = None) -> str:
    """The page's first picture: each pool's and the fleet's card-hours split into held and busy, held but
    idle, and held by nobody, as shares of its card-hours (one bar each; with ``cmp`` a before and an after
    bar), the card-hours written at the end of each bar."""
    windows = [(cmp.before, "before"), (b, "after")] if cmp is not None else [(b, "")]
    names = sorted({(p.vendor, p.model) for w, _ in windows for p in w.card_hours})
    rows: list[tuple[str, CardHours | None, float]] = []  # (label, hours, y)
    y0 = 0.0
    for key in [*names, ("all", "fleet")]:
        for w, label in windows:
            pools = {(p.vendor, p.model): p for p in w.card_hours}
            h = w.fleet_hours if key == ("all", "fleet") else pools.get(key)
            model = "fleet" if key == ("all", "fleet") else key[1]
            rows.append((f"{model} ({label})" if label else model, h, y0))
            y0 -= 1.0
        y0 -= 0.4 if cmp is not None else 0.0  # a gap between pools when each has two bars
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.34 * len(rows)))
    y = [pos for _, _, pos in rows]
    left = [0.0] * len(rows)
    for part, label, color in HOURS_PARTS:
        widths = [h.share(part) if h is not None else 0.0 for _, h, _ in rows]
        ax.barh(y, widths, left=left, height=0.7, color=color, label=label, edgecolor="white", linewidth=0.5)
        for i, wdt in enumerate(widths):
            if wdt >= 0.06:
                ax.text(left[i] + wdt / 2, y[i], _share(wdt), ha="center", va="center", fontsize=7)
        left = [a + wdt for a, wdt in zip(left, widths, strict=True)]
    for _, h, pos in rows:
        text = "no data" if h is None or not h.total else f"{_hours(h.total)} card-h"
        ax.text(1.01, pos, text, va="center", fontsize=7, color="#555")
    ax.set_yticks(y, [name for name, _, _ in rows], fontsize=8)
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_xlabel("share of the pool's card-hours (devices present x hours)", fontsize=8)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, fontsize=8, frameon=False)
    ax.set_title("Where the card-hours went" + (": before and after" if cmp else ""), loc="left", pad=22)
    return _svg(fig)


def _share(x: float) -> str:
    """``62.5%``, ``25%``: a share to one decimal, without a trailing ``.0``."""
    return f"{100 * x:.1f}".removesuffix(".0") + "%"


def _hours(h: float) -> str:
    """Card-hours: ``10,752``, ``6.4``."""
    return f"{h:,.0f}" if h >= 10 else f"{h:.1f}"


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
    ax.set_xlabel(
        "utilization: the share of time the device was busy (average and P95 over the window)", fontsize=8
    )
    ax.set_title("Utilization per pool: average and P95 against the healthy band")
    return _svg(fig)


def _times(points: tuple[tuple[float, float], ...], tz: dt.tzinfo) -> list[float]:
    """Unix seconds as matplotlib date numbers (days since 1970), so the axis shows dates."""
    return [float(matplotlib.dates.date2num(dt.datetime.fromtimestamp(t, tz))) for t, _ in points]


def _time_axis(ax: plt.Axes, tz: dt.tzinfo, start: float, end: float) -> None:
    """The x axis spans the window from ``start`` to ``end`` (Unix seconds) whatever part of it holds data, in
    the reader's time zone, named in the axis label; tick labels only as precise as the ticks are apart
    (matplotlib's ConciseDateFormatter), so no two read the same (``%H:%M`` under ticks 30 s apart did)."""
    ax.xaxis_date(tz)
    locator = matplotlib.dates.AutoDateLocator(tz=tz, minticks=4, maxticks=9)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(
        matplotlib.dates.ConciseDateFormatter(
            locator,
            tz=tz,
            # ticks a year, month, day, hour, minute or second apart; at the start of the larger unit the
            # tick names that unit; the date the axis is in at its right end
            formats=["%Y", "%b", "%b %d", "%H:%M", "%H:%M", "%H:%M:%S"],
            zero_formats=["", "%Y", "%b", "%b %d", "%H:%M", "%H:%M"],
            offset_formats=["", "%Y", "%Y-%m", "%Y-%m-%d", "%Y-%m-%d", "%Y-%m-%d %H:%M"],
        )
    )
    ax.set_xlim(_num(start, tz), _num(end, tz))
    ax.set_xlabel(f"time ({zone_name(tz)})", fontsize=8)


def _num(t: float, tz: dt.tzinfo) -> float:
    return float(matplotlib.dates.date2num(dt.datetime.fromtimestamp(t, tz)))


def pool_curves(b: Baseline, tz: dt.tzinfo = dt.UTC) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for name, pts in sorted(b.curves.items()):
        ax.plot(_times(pts, tz), [v for _, v in pts], label=name, linewidth=1)
    _band(ax, b)
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _time_axis(ax, tz, b.window.start, b.window.end)
    ax.set_ylabel("mean utilization of the pool's devices", fontsize=8)
    ax.set_title("Mean utilization per pool over the window")
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
    """Each pool's devices as points of (mean memory used, mean SM occupancy); devices within ``GRID`` of each
    other drawn as one point sized by their count. The count is written once per point beside it (several
    pools at one point, e.g. free cards at 0 %, share one label with their total; ``_label_counts`` keeps
    labels off each other), and the legend sits outside the axes so it covers no point."""
    fig, ax = plt.subplots(figsize=(8.5, 5))
    ax.set_xlim(-3, 103)
    ax.set_ylim(-3, 103)
    totals: dict[tuple[float, float], int] = {}
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
            totals[x, y] = totals.get((x, y), 0) + k
    _label_counts(ax, fig, totals)
    ax.axvline(90, color="grey", linestyle=":", linewidth=1)
    ax.axhline(40, color="grey", linestyle=":", linewidth=1)
    ax.text(91, 95, "short of\nmemory", fontsize=7, color="grey", va="top")
    ax.text(2, 95, "short of compute (if memory low)", fontsize=7, color="grey", va="top")
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(100))
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(100))
    ax.set_xlabel("device memory used, % of capacity (mean over the window)")
    ax.set_ylabel("SM occupancy, % (mean; utilization where not reported)")
    if b.devices:
        ax.legend(
            fontsize=7,
            title="pool (devices); a number:\ndevices drawn as that point",
            title_fontsize=7,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
        )
    ax.set_title("Memory allocated vs SM occupancy per device")
    return _svg(fig)


# Where a count label may go around its point, in points (x, y) of the label's lower-left corner, tried in
# this order: upper right, lower right, upper left, lower left, then further out.
_LABEL_SPOTS = ((4, 3), (4, -10), (-10, 3), (-10, -10), (4, 10), (-10, 10), (4, -17), (-10, -17))


def _label_counts(ax: plt.Axes, fig: plt.Figure, counts: dict[tuple[float, float], int]) -> None:
    """Write each count above 1 beside its point at the first of ``_LABEL_SPOTS`` where its box overlaps
    neither a label already placed nor a point (boxes in display units: 7-point digits, points as 6-point
    squares); where every spot is taken, at the first."""
    scale = fig.dpi / 72.0
    points = [ax.transData.transform(xy) for xy in counts]
    taken: list[tuple[float, ...]] = [
        (px - 3 * scale, py - 3 * scale, px + 3 * scale, py + 3 * scale) for px, py in points
    ]
    for (x, y), k in sorted(counts.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        if k < 2:
            continue
        px, py = ax.transData.transform((x, y))
        w, h = (4.2 * len(str(k)) + 1) * scale, 8 * scale

        def box(
            dx: float, dy: float, px: float = px, py: float = py, w: float = w, h: float = h
        ) -> tuple[float, ...]:
            return (px + dx * scale, py + dy * scale, px + dx * scale + w, py + dy * scale + h)

        def free(b: tuple[float, ...]) -> bool:
            return all(b[2] <= t[0] or t[2] <= b[0] or b[3] <= t[1] or t[3] <= b[1] for t in taken)

        dx, dy = next((spot for spot in _LABEL_SPOTS if free(box(*spot))), _LABEL_SPOTS[0])
        taken.append(box(dx, dy))
        ax.annotate(str(k), (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7, color="#333")


def pending_curve(b: Baseline, tz: dt.tzinfo = dt.UTC) -> str | None:
    if not b.pending_curve:
        return None
    fig, ax = plt.subplots(figsize=(9, 2.4))
    ax.step(_times(b.pending_curve, tz), [v for _, v in b.pending_curve], where="post", color="#d62728")
    ax.set_ylabel("accelerators requested", fontsize=8)
    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_ylim(bottom=0)
    _time_axis(ax, tz, b.window.start, b.window.end)
    ax.set_title("Accelerators requested by pods waiting to be scheduled")
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
    ax.set_xlabel("utilization: P95 over each window (bars), average (ticks)", fontsize=8)
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
    ax.axvline(_num(cmp.after.window.start, tz), color="black", linewidth=1, label="before (dotted) | after")
    _band(ax, cmp.after)
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _time_axis(ax, tz, cmp.before.window.start, cmp.after.window.end)
    ax.set_ylabel("mean utilization of the pool's devices", fontsize=8)
    ax.set_title("Mean utilization per pool, before and after")
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
    """The change in words: ``+12 points``, ``-2h 35m``, ``-9.0 cards``; ``±0 points`` when it rounds to nothing
    at the table's precision (never ``-0``: before and after differ by less than the last digit shown)."""
    d = c.delta
    if d is None:
        return ""
    if c.unit == "%":
        text = f"{abs(100 * d):.0f} points"
    elif c.unit == "s":
        text = duration(abs(d))
    else:
        text = value(abs(d), c.unit) + (
            f" {c.unit}" if c.unit in ("devices", "cards", "jobs", "alerts") else ""
        )
    zero = re.search(r"[1-9]", text) is None
    return ("±" if zero else "+" if d > 0 else "-") + text


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


COVERAGE_NOTE = 0.9
"""Below this share of the window's steps with readings the page says how much of the window the data cover."""


def money(v: float | None) -> str:
    """A cost to whole units with thousands separators; "n/a" when a model of the row has no price."""
    return "n/a" if v is None else f"{v:,.0f}"


def html(
    b: Baseline,
    generated: float,
    tz: dt.tzinfo = dt.UTC,
    cmp: Comparison | None = None,
    prices: Prices | None = None,
) -> str:
    """The page; times in ``tz`` (the reader's zone: ``--timezone``, else the system's). It opens with where
    the card-hours went (``hours_bars``; with ``cmp``, whose after window ``b`` is, before and after side by
    side) and the headline; with ``prices`` the chargeback tables gain cost columns in their currency."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env.filters["pct"] = _pct
    env.filters["hours"] = lambda h: f"{h:,.1f} h"
    env.filters["when"] = lambda t: when(t, tz)
    env.filters["span"] = span
    env.filters["wait"] = lambda s: f"{int(s) // 3600} h {int(s) % 3600 // 60:02d} m"
    env.filters["value"] = lambda v, unit: value(v, unit)
    env.filters["change"] = change
    env.filters["money"] = money
    usage = chargeback.priced(b.usage, prices)
    return env.get_template("report.html.j2").render(
        b=b,
        cmp=cmp,
        usage=usage,
        prices=prices,
        unpriced=chargeback.unpriced(b.usage, prices),
        teams=chargeback.by_team,
        models=chargeback.by_model,
        total=chargeback.total,
        generated=generated,
        rows=TABLE_ROWS,
        coverage_note=COVERAGE_NOTE,
        worst_slices=worst_slices,
        advice_counts=advice_counts,
        wait_sentence=wait_sentence,
        plots={
            "hours": hours_bars(b, cmp),
            "bars": pool_bars(b),
            "curves": pool_curves(b, tz),
            "scatter": scatter(b),
            "pending": pending_curve(b, tz),
            "compare_bars": compare_bars(cmp) if cmp is not None else None,
            "compare_curves": compare_curves(cmp, tz) if cmp is not None else None,
        },
    )
