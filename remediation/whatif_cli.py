"""``xpuwatch remediate --what-if``: read a window of history from Prometheus (or VictoriaMetrics), replay it
through ``whatif.replay`` and print (or write as JSON/HTML) what ``--apply`` would have done.

Reads only, through alerts/promapi.py's client (every answer bounded in size and time), never Kubernetes:

- ``ALERTS{alertstate="firing",action=~"<the config's actions>"}`` as RAW samples (an instant query of a
  range selector, one day per query), so episodes start and end at the rule evaluations that saw them
  (a range query would stretch each end by the 5-minute lookback on backfilled data without stale markers);
- ``accelerator_allocated == 1`` of the devices and notebooks those alerts name (a range query at the
  replay's step, one day per query): the holders a drain would evict and how long a reclaimed notebook
  would otherwise have kept its devices;
- the number of nodes: ``count(count by (node) (last_over_time(accelerator_info[<range>])))`` (``--nodes``
  overrides it, e.g. to count nodes without accelerators, which the blast-radius ratio also counts).

Errors: one line ``xpuwatch: what-if: <reason>`` and exit 1 (Prometheus unreachable or slower than
``--timeout`` per query, a query refused, an answer that cannot be read, the exporter's series absent from
the window). ``-o`` replaces its file without following a symbolic link planted there.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import jinja2

from xpuwatch.alerts.promapi import PromError, Prometheus
from xpuwatch.exporter.catalog import ALLOCATED, INFO
from xpuwatch.vendors.untrusted import write_output

from .recheck import quote
from .settings import Settings
from .whatif import Episode, Holding, WhatIf, episodes_of, replay, text

DAY = 86400


class WhatIfError(Exception):
    """The replay cannot be made; the message is the one line printed."""


def _chunks(start: float, end: float) -> Iterable[tuple[float, float]]:
    t = start
    while t < end:
        yield t, min(end, t + DAY)
        t += DAY


def _alternation(values: Iterable[str]) -> str:
    return "|".join(quote(re.escape(v)) for v in sorted(set(values)))


def fetch_episodes(
    prom: Prometheus, actions: Sequence[str], start: float, end: float, gap: float
) -> list[Episode]:
    sel = f'ALERTS{{alertstate="firing",action=~"{"|".join(actions)}"}}'
    samples: dict[tuple[tuple[str, str], ...], list[float]] = defaultdict(list)
    for a, b in _chunks(start, end):
        for series in prom.raw(sel, b, int(b - a)):
            labels, times = series.labels, series.values
            key = tuple(sorted((k, v) for k, v in labels.items() if k not in ("__name__", "alertstate")))
            samples[key] += [t for t, _ in times if start <= t <= end]
    return episodes_of(samples, gap, end)


def fetch_holdings(
    prom: Prometheus, episodes: Sequence[Episode], start: float, end: float, gap: float
) -> list[Holding]:
    """Raw ``accelerator_allocated == 1`` samples of the devices (drain, resize) and notebook pods (reclaim)
    the alerts name; samples more than ``gap`` apart are two holdings."""
    uuids = {
        e.labels["uuid"] for e in episodes if e.labels.get("action") != "reclaim" and e.labels.get("uuid")
    }
    pods = {e.labels["pod"] for e in episodes if e.labels.get("action") == "reclaim" and e.labels.get("pod")}
    selectors = []
    if uuids:
        selectors.append(f'{ALLOCATED}{{uuid=~"{_alternation(uuids)}"}}')
    if pods:
        selectors.append(f'{ALLOCATED}{{pod=~"{_alternation(pods)}"}}')
    runs: dict[tuple[str, str, str, str], set[float]] = defaultdict(set)
    for sel in selectors:
        for a, b in _chunks(start, end):
            # a range selector cannot filter by value: keep the samples of 1 (held)
            for series in prom.raw(sel, b, int(b - a)):
                m, values = series.labels, series.values
                key = (m.get("node", ""), m.get("uuid", ""), m.get("namespace", ""), m.get("pod", ""))
                runs[key] |= {t for t, v in values if v == 1 and start <= t <= end}
    out = []
    for (node, uuid, ns, pod), times in runs.items():
        ts = sorted(times)
        first = prev = ts[0]
        for x in [*ts[1:], None]:
            if x is not None and x - prev <= gap:
                prev = x
                continue
            out.append(Holding(node, uuid, ns, pod, _utc(first), _utc(prev)))
            if x is not None:
                first = prev = x
    return out


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def count_nodes(prom: Prometheus, window: int, end: float) -> int:
    """Nodes with an ``accelerator_info`` series in the window. Raises PromError, WhatIfError for a count
    that is no count (NaN, infinite, negative or fractional)."""
    found = prom.query(f"count(count by (node) (last_over_time({INFO}[{window}s])))", end)
    if not found:
        return 0
    value = found[0].values[0][1]
    if not (math.isfinite(value) and value >= 0 and value == int(value)):
        raise WhatIfError(f"Prometheus at {prom.url} answered a node count of {value!r}: not a count")
    return int(value)


def what_if(
    settings: Settings,
    url: str,
    window: int,
    step: float,
    end: float | None = None,
    nodes: int | None = None,
    repeat_interval: float = 4 * 3600.0,
    gap: float | None = None,
    timeout: float = 120.0,
) -> WhatIf:
    """Read ``window`` seconds up to ``end`` (default now) from ``url`` and replay them. Raises WhatIfError."""
    end = float(end if end is not None else time.time())
    start = end - window
    try:
        prom = Prometheus(url, timeout=timeout)
        total = nodes if nodes is not None else count_nodes(prom, window, end)
        if nodes is None and total == 0:
            raise WhatIfError(
                f"Prometheus at {url} has no {INFO} series in the window: not the Prometheus scraping the "
                "xpuwatch exporter, or no data for it (give --nodes to replay anyway)"
            )
        actions = sorted({r.action for r in settings.rules}) or ["drain", "reclaim", "resize"]
        gap = gap if gap is not None else max(step, 300.0)
        episodes = fetch_episodes(prom, actions, start, end, gap)
        holdings = fetch_holdings(prom, episodes, start, end, gap)
    except PromError as exc:
        raise WhatIfError(str(exc)) from None
    return replay(episodes, holdings, total, settings, _utc(start), _utc(end), step, repeat_interval)


_HTML = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(
    """<!doctype html><html><head><meta charset="utf-8"><title>xpuwatch what-if</title>
<style>body{font-family:sans-serif;margin:2em}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
table{border-collapse:collapse;margin:1em 0}</style></head><body>
<h1>What <code>--apply</code> would have done</h1>
<p>{{ w.window.start }} to {{ w.window.end }}: {{ w.alert_episodes }} alert episodes, {{ w.nodes_total }} nodes,
blast-radius cap {{ w.cap }}. Largest number of nodes disrupted at once: <b>{{ w.max_disrupted.nodes }}</b>
{% if w.max_disrupted.at %}at {{ w.max_disrupted.at }} ({{ w.max_disrupted.which | join(", ") }}){% endif %}.</p>
<table><tr><th>action</th><th>runs</th><th>targets</th><th>held by the cap</th><th>refused</th>
<th>pods evicted</th><th>notebooks reclaimed</th><th>GPU-hours freed</th></tr>
{% for a in w.actions %}<tr><td>{{ a.action }}</td><td>{{ a.runs }}</td><td>{{ a.targets | join(", ") }}</td>
<td>{{ a.held_by_cap }} ({{ a.held_then_ran }} ran later)</td>
<td>{% for k, v in a.refusals.items() %}{{ k }} {{ v }} {% endfor %}</td><td>{{ a.evicted | length }}</td>
<td>{{ a.reclaimed | join(", ") }}</td><td>{{ a.gpu_hours_freed }}</td></tr>{% endfor %}</table>
<p>Assuming: {{ w.assumptions | join("; ") }}.</p>
<h2>Decisions</h2><table><tr><th>at</th><th>alert</th><th>action</th><th>step</th><th>target</th><th>verdict</th></tr>
{% for d in w.decisions %}<tr><td>{{ d.at }}</td><td>{{ d.alertname }}</td><td>{{ d.action }}</td><td>{{ d.step }}</td>
<td>{{ d.target }}</td><td>{{ "allowed" if d.allowed else "refused: " + d.refusal }}</td></tr>{% endfor %}</table>
</body></html>
"""
)


def write(w: WhatIf, output: str | None) -> None:
    """Text to stdout; ``output`` ending in .json or .html also gets that form. Raises WhatIfError."""
    print(text(w))
    if not output:
        return
    doc = w.to_json()
    try:
        if output.endswith(".json"):
            write_output(Path(output), json.dumps(doc, indent=1) + "\n")
        elif output.endswith((".html", ".htm")):
            write_output(Path(output), _HTML.render(w=doc))
        else:
            raise WhatIfError(f"-o {output}: expected a file name ending in .json or .html")
    except OSError as exc:
        raise WhatIfError(f"-o {output}: {exc.strerror or exc}") from None


def run(settings: Settings, args: argparse.Namespace) -> int:
    """CLI entry: 0 on success, 1 with one line on stderr when the replay cannot be made."""
    try:
        if not args.prometheus:
            raise WhatIfError("--what-if needs --prometheus URL (the Prometheus evaluating the alert rules)")
        if args.range <= 0 or args.step <= 0 or args.repeat_interval <= 0:
            raise WhatIfError("--range, --step and --repeat-interval must be longer than 0s")
        if args.step > args.range:
            raise WhatIfError(f"--step {args.step}s is longer than --range {args.range}s")
        if args.nodes is not None and args.nodes < 1:
            raise WhatIfError(f"--nodes {args.nodes}: expected at least 1")
        if not (0 < args.timeout <= 86400):
            raise WhatIfError(f"--timeout {args.timeout:g}: expected seconds more than 0, at most a day")
        if args.output and not args.output.endswith((".json", ".html", ".htm")):
            raise WhatIfError(f"-o {args.output}: expected a file name ending in .json or .html")
        w = what_if(
            settings,
            args.prometheus,
            args.range,
            float(args.step),
            nodes=args.nodes,
            repeat_interval=float(args.repeat_interval),
            timeout=args.timeout,
        )
        write(w, args.output)
    except WhatIfError as exc:
        print(f"xpuwatch: what-if: {exc}", file=sys.stderr)
        return 1
    return 0
