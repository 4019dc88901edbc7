"""Before/after: two baselines (the window before a change and the window after it) -> the changes that
prove what the change bought, per pool and for the fleet, and one headline sentence (pure).

The field report: take a one-week baseline, change one thing, and "quantify every step: how many cards, how
many jobs, how much shorter the queue, how much higher the utilization". ``compare(before, after)`` lines
up the figures of two :class:`report.baseline.Baseline` windows; ``Comparison.headline`` says it in one line
("P95 up 12 points, queue P95 down from 3h 00m to 25m, 9 fewer free or idle cards while jobs waited,
card-hours held idle down from 25% to 12%").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xpuwatch.report.baseline import Baseline, PoolUtil

COULD_HAVE_RUN = "cards that could have run waiting jobs"


@dataclass(frozen=True)
class Change:
    """One figure in both windows. ``unit``: "%" (ratios 0..1, compared in points), "devices", "cards", "jobs",
    "GiB", "s" (seconds) or "alerts". ``before``/``after`` None: not measured in that window (no
    kube-state-metrics data, or no device of the pool reporting it)."""

    scope: str  # "fleet" or a pool's model
    figure: str
    unit: str
    before: float | None
    after: float | None

    @property
    def delta(self) -> float | None:
        """after - before (ratios in 0..1: x100 for points), None when either is missing."""
        if self.before is None or self.after is None:
            return None
        return self.after - self.before


@dataclass(frozen=True)
class Comparison:
    before: Baseline
    after: Baseline
    changes: tuple[Change, ...]

    def get(self, scope: str, figure: str) -> Change:
        """The change of ``figure`` in ``scope``; KeyError when there is none."""
        for c in self.changes:
            if (c.scope, c.figure) == (scope, figure):
                return c
        raise KeyError((scope, figure))

    @property
    def headline(self) -> str:
        """Fleet P95 in points, the queue's P95 wait, the cards that could have run the waiting jobs and the
        share of card-hours held idle, in one sentence (each left out when unchanged or unknown)."""
        parts = [_points("P95", self.get("fleet", "P95 utilization"))]
        wait = self.get("fleet", "P95 wait")
        if wait.before is not None and wait.after is not None and (wait.before or wait.after):
            if round(wait.after / 60) == round(wait.before / 60):
                parts.append(f"queue P95 unchanged at {duration(wait.after)}")
            else:
                way = "down" if wait.after < wait.before else "up"
                parts.append(f"queue P95 {way} from {duration(wait.before)} to {duration(wait.after)}")
        idle = self.get("fleet", COULD_HAVE_RUN)
        if idle.delta is not None and round(idle.delta, 1):
            way = "fewer" if idle.delta < 0 else "more"
            parts.append(f"{count(abs(idle.delta))} {way} free or idle cards while jobs waited")
        held_idle = self.get("fleet", "card-hours held idle")
        if held_idle.delta is not None and round(100 * held_idle.delta):
            parts.append(
                f"card-hours held idle {'down' if held_idle.delta < 0 else 'up'} from "
                f"{held_idle.before or 0.0:.0%} to {held_idle.after or 0.0:.0%}"
            )
        return ", ".join(parts)


def _points(name: str, c: Change) -> str:
    d = round(100 * (c.delta or 0.0))
    if d == 0:
        return f"{name} unchanged at {100 * (c.after or 0.0):.0f}%"
    return f"{name} {'up' if d > 0 else 'down'} {abs(d)} points"


def duration(seconds: float) -> str:
    """``3h 00m``, ``25m``, ``0m``: the queue's wording."""
    h, rest = divmod(round(seconds), 3600)
    return f"{h}h {rest // 60:02d}m" if h else f"{rest // 60}m"


def count(x: float) -> str:
    """Cards to one decimal, a whole number without one: ``9``, ``2.5``."""
    r = round(x, 1)
    return f"{r:.0f}" if r == int(r) else f"{r:.1f}"


def _nan_none(x: float) -> float | None:
    return None if math.isnan(x) else x


def _pool_changes(scope: str, b: PoolUtil | None, a: PoolUtil | None) -> list[Change]:
    def v(p: PoolUtil | None, attr: str) -> float | None:
        return None if p is None else _nan_none(float(getattr(p, attr)))

    return [
        Change(scope, "devices", "devices", v(b, "devices"), v(a, "devices")),
        Change(scope, "average utilization", "%", v(b, "avg"), v(a, "avg")),
        Change(scope, "P95 utilization", "%", v(b, "p95"), v(a, "p95")),
        Change(scope, "SM occupancy", "%", v(b, "sm_occupancy"), v(a, "sm_occupancy")),
    ]


def compare(before: Baseline, after: Baseline) -> Comparison:
    """Line up two windows' figures: per pool (pools in either window) and for the fleet."""
    changes: list[Change] = []
    pools_b = {(p.vendor, p.model): p for p in before.pools}
    pools_a = {(p.vendor, p.model): p for p in after.pools}
    for key in sorted(pools_b.keys() | pools_a.keys()):
        changes += _pool_changes(key[1], pools_b.get(key), pools_a.get(key))
    changes += _pool_changes("fleet", before.fleet, after.fleet)
    hb, ha = before.fleet_hours, after.fleet_hours
    changes += [
        Change("fleet", f"card-hours {part.replace('_', ' ')}", "%", hb.share(part), ha.share(part))
        for part in ("unheld", "held_idle", "held_busy")
    ]

    def queue(b: Baseline, value: float | None) -> float | None:
        return None if b.pods_waited is None else value

    changes += [
        Change(
            "fleet",
            "memory held by idle notebooks",
            "GiB",
            before.notebook_memory_gib,
            after.notebook_memory_gib,
        ),
        Change("fleet", COULD_HAVE_RUN, "cards", before.could_have_run, after.could_have_run),
        Change(
            "fleet",
            "jobs that waited",
            "jobs",
            queue(before, float(before.pods_waited or 0)),
            queue(after, float(after.pods_waited or 0)),
        ),
        Change(
            "fleet",
            "P95 wait",
            "s",
            queue(before, before.wait_p95_seconds),
            queue(after, after.wait_p95_seconds),
        ),
        Change(
            "fleet",
            "longest wait",
            "s",
            queue(before, before.max_wait_seconds),
            queue(after, after.max_wait_seconds),
        ),
    ]
    cats_b, cats_a = before.alerts_by_category, after.alerts_by_category
    for cat in sorted(cats_b.keys() | cats_a.keys()):
        changes.append(
            Change(
                "fleet",
                f"alerts fired: {cat}",
                "alerts",
                float(cats_b.get(cat, 0)),
                float(cats_a.get(cat, 0)),
            )
        )
    return Comparison(before, after, tuple(changes))
