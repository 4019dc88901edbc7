"""Baseline -> one self-contained HTML page: matplotlib plots inlined as SVG, tables, no external assets.

Pure apart from matplotlib's rendering: ``html(baseline)`` returns the page as a string. matplotlib runs on
its Agg backend (no display needed); every figure is closed after rendering so a long run does not grow.
"""

from __future__ import annotations

import datetime as dt
import io
import math
from pathlib import Path

import jinja2
import matplotlib
import matplotlib.dates

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from report.baseline import Baseline

TEMPLATES = Path(__file__).parent / "templates"
BAND_COLOR = "#2ca02c"


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


def _times(points: tuple[tuple[float, float], ...]) -> list[float]:
    """Unix seconds as matplotlib date numbers (days since 1970), so the axis shows dates."""
    return [float(matplotlib.dates.date2num(dt.datetime.fromtimestamp(t, dt.UTC))) for t, _ in points]


def pool_curves(b: Baseline) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for name, pts in sorted(b.curves.items()):
        ax.plot(_times(pts), [v for _, v in pts], label=name, linewidth=1)
    _band(ax, b)
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.legend(fontsize=7, ncol=2)
    ax.xaxis_date()
    ax.set_title("Mean utilization per pool over the window")
    fig.autofmt_xdate()
    return _svg(fig)


def scatter(b: Baseline) -> str:
    fig, ax = plt.subplots(figsize=(6.5, 5))
    pools = sorted({(d.vendor, d.model) for d in b.devices})
    for vendor, model in pools:
        pts = [
            d for d in b.devices if (d.vendor, d.model) == (vendor, model) and not math.isnan(d.compute_ratio)
        ]
        ax.scatter(
            [d.memory_ratio for d in pts], [d.compute_ratio for d in pts], label=model, s=18, alpha=0.8
        )
    ax.axvline(0.9, color="grey", linestyle=":", linewidth=1)
    ax.axhline(0.4, color="grey", linestyle=":", linewidth=1)
    ax.text(0.92, 0.02, "short of\nmemory", fontsize=7, color="grey")
    ax.text(0.02, 0.92, "short of compute\n(if memory low)", fontsize=7, color="grey")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("framebuffer memory used (mean)")
    ax.set_ylabel("SM occupancy (mean; utilization where not reported)")
    ax.legend(fontsize=7)
    ax.set_title("Memory allocated vs SM occupancy per device")
    return _svg(fig)


def pending_curve(b: Baseline) -> str | None:
    if not b.pending_curve:
        return None
    fig, ax = plt.subplots(figsize=(9, 2.4))
    ax.step(_times(b.pending_curve), [v for _, v in b.pending_curve], where="post", color="#d62728")
    ax.set_ylabel("accelerators requested")
    ax.xaxis_date()
    ax.set_title("Accelerators requested by pods waiting to be scheduled")
    fig.autofmt_xdate()
    return _svg(fig)


def _pct(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:.0%}"


def html(b: Baseline, generated: float) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env.filters["pct"] = _pct
    env.filters["hours"] = lambda h: f"{h:.1f} h"
    env.filters["utc"] = lambda t: dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    env.filters["wait"] = lambda s: f"{int(s) // 3600} h {int(s) % 3600 // 60:02d} m"
    return env.get_template("report.html.j2").render(
        b=b,
        generated=generated,
        plots={
            "bars": pool_bars(b),
            "curves": pool_curves(b),
            "scatter": scatter(b),
            "pending": pending_curve(b),
        },
    )
