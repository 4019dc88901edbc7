"""What would ``--apply`` have done: a PURE replay of past alerts through the controller's policy and guard.

Input (read from Prometheus by ``whatif_cli.py`` through ``alerts/promapi.py``; nothing here does I/O or talks to Kubernetes):
``Episode`` s of ``ALERTS`` (one per firing period of an alert, its labels minus ``alertstate``), the
``Holding`` s of ``accelerator_allocated`` (which pod held which device when), the number of nodes and the
window. The replay feeds the controller what it would have received and done, in time order:

- an Alertmanager send of each firing alert at its start and again every ``repeat_interval`` while it fires
  (a send held by the cap is retried at the repeat, as Alertmanager's repeats make the live controller do),
  and a resolved send at its end;
- a tick every ``step`` seconds (the live controller's ``tick``): a drain whose devices stayed healthy for
  ``drain.healthy_for_seconds`` is lifted, a reclaim whose grace period ended stops the notebook (or is
  cancelled when its alert no longer fires: the re-check), an applied resize frees its node after
  ``resize.state_timeout_seconds`` (the longest it may take).

Each send goes through ``policy.decide`` and ``guard.check`` exactly as ``Controller._handle_one`` does
(including its early cap check), with a ``TargetState`` built from the simulated progress, so the decisions
equal the live controller's for the same alerts. Assumptions, named in the report: every step succeeds,
notebooks' own activity probes agree they are idle, pods leave when evicted.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from . import guard, policy
from .alert import Alert, fingerprint_of
from .guard import FleetView
from .policy import Decision, HistoryEntry, TargetState
from .progress import Progress, stamp, unstamp
from .settings import Settings


@dataclass(frozen=True)
class Episode:
    """One firing period of an alert: ``labels`` as Alertmanager has them (``alertname`` included),
    ``start`` (UTC), ``end`` (UTC; None = still firing at the window's end)."""

    labels: Mapping[str, str]
    start: datetime
    end: datetime | None


@dataclass(frozen=True)
class Holding:
    """``accelerator_allocated == 1`` of one pod on one device from ``start`` to ``end`` (UTC)."""

    node: str
    uuid: str
    namespace: str
    pod: str
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Record:
    """One decision of the replay: at ``at``, the send or tick for ``alert_key`` gave ``step`` on ``target``;
    ``allowed`` by the guard or refused with ``refusal`` (a guard reason)."""

    at: datetime
    alert_key: str
    alertname: str
    action: str
    step: str
    target: str
    allowed: bool
    refusal: str = ""


@dataclass(frozen=True)
class ActionSummary:
    """Per action. ``runs``: initiating steps allowed (drain: taints incl. extends; reclaim: owner notices;
    resize: recommendations or cordons); ``targets``: nodes/notebooks it ran on; ``held_by_cap``: alert
    episodes refused by the cap at least once (``held_then_ran`` of them ran at a later repeat);
    ``refusals``: refused sends by guard reason; ``evicted``: pods a drain would evict; ``reclaimed``:
    notebooks stopped; ``gpu_hours_freed``: device-hours from each stop to when the history shows the
    notebook gave the device back (or the window's end)."""

    action: str
    runs: int = 0
    targets: tuple[str, ...] = ()
    held_by_cap: int = 0
    held_then_ran: int = 0
    refusals: Mapping[str, int] = field(default_factory=dict)
    evicted: tuple[str, ...] = ()
    reclaimed: tuple[str, ...] = ()
    gpu_hours_freed: float = 0.0


@dataclass(frozen=True)
class WhatIf:
    """The replay's answer. ``max_disrupted``: the most nodes tainted or cordoned at once, at
    ``max_disrupted_at``, namely ``max_disrupted_nodes``; ``records``: every decision in time order."""

    start: datetime
    end: datetime
    step_seconds: float
    nodes_total: int
    cap: int
    episodes: int
    actions: tuple[ActionSummary, ...]
    max_disrupted: int
    max_disrupted_at: datetime | None
    max_disrupted_nodes: tuple[str, ...]
    records: tuple[Record, ...]
    assumptions: tuple[str, ...] = (
        "every step succeeds (API writes, evictions, Hub stops)",
        "notebooks' own activity probes agree that an idle-GPU notebook is idle",
        "an applied resize keeps its node cordoned for resize.state_timeout_seconds",
    )

    def to_json(self) -> dict[str, Any]:
        def t(x: datetime | None) -> str | None:
            return stamp(x) if x else None

        return {
            "window": {"start": t(self.start), "end": t(self.end), "step_seconds": self.step_seconds},
            "nodes_total": self.nodes_total,
            "cap": self.cap,
            "alert_episodes": self.episodes,
            "max_disrupted": {
                "nodes": self.max_disrupted,
                "at": t(self.max_disrupted_at),
                "which": list(self.max_disrupted_nodes),
            },
            "actions": [
                {
                    "action": a.action,
                    "runs": a.runs,
                    "targets": list(a.targets),
                    "held_by_cap": a.held_by_cap,
                    "held_then_ran": a.held_then_ran,
                    "refusals": dict(a.refusals),
                    "evicted": list(a.evicted),
                    "reclaimed": list(a.reclaimed),
                    "gpu_hours_freed": round(a.gpu_hours_freed, 3),
                }
                for a in self.actions
            ],
            "assumptions": list(self.assumptions),
            "decisions": [
                {
                    "at": t(r.at),
                    "alert": r.alert_key,
                    "alertname": r.alertname,
                    "action": r.action,
                    "step": r.step,
                    "target": r.target,
                    "allowed": r.allowed,
                    "refusal": r.refusal,
                }
                for r in self.records
            ],
        }


def episodes_of(
    samples: Mapping[tuple[tuple[str, str], ...], Sequence[float]], gap_seconds: float, window_end: float
) -> list[Episode]:
    """Episodes from raw ``ALERTS`` sample times (Unix seconds) per label set (sorted label pairs, without
    ``__name__`` and ``alertstate``): samples more than ``gap_seconds`` apart start a new episode; an
    episode whose last sample lies within ``gap_seconds`` of ``window_end`` is still firing (end None)."""
    out = []
    for labels, times in samples.items():
        ts = sorted(set(times))
        runs: list[list[float]] = []
        for x in ts:
            if runs and x - runs[-1][-1] <= gap_seconds:
                runs[-1].append(x)
            else:
                runs.append([x])
        for run in runs:
            end = None if window_end - run[-1] <= gap_seconds else _utc(run[-1])
            out.append(Episode(dict(labels), _utc(run[0]), end))
    return sorted(out, key=lambda e: (e.start, sorted(e.labels.items())))


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def alert_of(e: Episode, status: str) -> Alert:
    """The Alertmanager alert of an episode (fingerprint: a hash of its labels, stable across sends)."""
    return Alert(status, dict(e.labels), {}, e.start, fingerprint_of(e.labels))  # type: ignore[arg-type]


@dataclass
class _Sim:
    settings: Settings
    nodes_total: int
    holdings: Sequence[Holding]
    history: deque[HistoryEntry] = field(default_factory=lambda: deque(maxlen=10000))
    progress: dict[tuple[str, str], Progress] = field(default_factory=dict)  # (action, target key)
    last_finished: dict[tuple[str, str], datetime] = field(default_factory=dict)
    disrupted: dict[str, str] = field(default_factory=dict)  # node -> action holding it
    records: list[Record] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    reclaimed: list[str] = field(default_factory=list)
    freed_hours: float = 0.0
    cap_held: set[str] = field(default_factory=set)
    ran: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    max_disrupted: int = 0
    max_at: datetime | None = None
    max_nodes: tuple[str, ...] = ()
    episode_end: dict[str, datetime] = field(default_factory=dict)  # alert key -> end (or window end)

    def state(self, d: Decision) -> TargetState:
        if d.target is None:
            return TargetState()
        k = (d.action, d.target.key)
        return TargetState(self.progress.get(k), self.last_finished.get(k))

    def view(self, now: datetime) -> FleetView:
        return FleetView(self.nodes_total, frozenset(self.disrupted), now)

    def note_disruption(self, now: datetime) -> None:
        if len(self.disrupted) > self.max_disrupted:
            self.max_disrupted, self.max_at = len(self.disrupted), now
            self.max_nodes = tuple(sorted(self.disrupted))

    def record(self, now: datetime, alert: Alert, d: Decision, allowed: bool, refusal: str = "") -> None:
        tkey = d.target.key if d.target else ""
        self.records.append(Record(now, d.alert_key, alert.name, d.action, d.step, tkey, allowed, refusal))

    # -- one Alertmanager send, as Controller._handle_one (apply mode) ----------------------------
    def send(self, alert: Alert, now: datetime) -> None:
        s = self.settings
        probe = policy.decide(alert, TargetState(), tuple(self.history), now, s)
        if probe.action == "none":
            return
        if probe.disrupts_node:
            early = guard.check(
                probe, alert, TargetState(), self.view(now), tuple(self.history), now, s.guard
            )
            if early.reason == "cap":
                self.record(now, alert, probe, False, "cap")
                self.cap_held.add(probe.alert_key)
                return
        d = policy.decide(alert, self.state(probe), tuple(self.history), now, s)
        if d.step in ("ignore", "wait"):
            return
        v = guard.check(d, alert, self.state(d), self.view(now), tuple(self.history), now, s.guard)
        self.record(now, alert, d, v.allowed, v.reason or "")
        if not v.allowed:
            if v.reason == "cap":
                self.cap_held.add(d.alert_key)
            return
        self.execute(d, alert, now)
        self.history.append(
            HistoryEntry(d.alert_key, d.action, d.step, d.target.key if d.target else "", now, "apply")
        )

    def execute(self, d: Decision, alert: Alert, now: datetime) -> None:
        assert d.target is not None
        k = (d.action, d.target.key)
        p = self.progress.get(k)
        if d.step in guard.INITIATING_STEPS:
            self.ran[d.action].add(d.target.key)
        if d.action == "drain":
            uuid = str(d.params["uuid"])
            if d.step in ("start", "extend"):
                self.evicted += self._evictions(d, now, p)
            if d.step == "start":
                self.progress[k] = Progress("drain", d.alert_key, "draining", now, {"uuids": [uuid]})
                self.disrupted[d.target.node] = "drain"
                self.note_disruption(now)
            elif d.step == "extend" and p:
                uuids = list(dict.fromkeys([*p.data.get("uuids", []), uuid]))
                healthy = {u: t for u, t in p.data.get("healthy", {}).items() if u != uuid}
                self.progress[k] = p.with_("draining", uuids=uuids, healthy=healthy)
            elif d.step == "healthy" and p:
                self.progress[k] = p.with_(healthy={**p.data.get("healthy", {}), uuid: stamp(now)})
        elif d.action == "reclaim":
            if d.step == "notify":
                self.progress[k] = Progress("reclaim", d.alert_key, "notified", now, dict(d.params))
            elif d.step == "stop" and p:
                self._stop(k, now)
            elif d.step == "cancel":
                self.progress.pop(k, None)
        elif d.action == "resize" and d.step == "start":
            self.progress[k] = Progress("resize", d.alert_key, "evicting", now, {})
            self.disrupted[d.target.node] = "resize"
            self.note_disruption(now)

    def _evictions(self, d: Decision, now: datetime, p: Progress | None) -> list[str]:
        assert d.target is not None
        found = set(d.params.get("holders", []))
        uuid = str(d.params["uuid"])
        found |= {
            f"{h.namespace}/{h.pod}"
            for h in self.holdings
            if h.node == d.target.node and h.uuid == uuid and h.start <= now <= h.end
        }
        protected = self.settings.guard.protected_namespaces
        return sorted(f"{d.target.node}: {h}" for h in found if h.split("/", 1)[0] not in protected)

    def _stop(self, k: tuple[str, str], now: datetime) -> None:
        p = self.progress.pop(k)
        self.last_finished[k] = now
        ns_name = k[1].split("/", 1)[1]  # "pod/ns/name" or "notebook/ns/name"
        ns, name = ns_name.split("/", 1)
        pod = name if k[1].startswith("pod/") else f"{name}-0"
        self.reclaimed.append(f"{ns}/{name}")
        held = [h for h in self.holdings if h.namespace == ns and h.pod == pod and h.end > now >= h.start]
        if held:
            self.freed_hours += sum((h.end - now).total_seconds() for h in held) / 3600
        elif (end := self.episode_end.get(p.alert_key)) is not None:
            self.freed_hours += max(0.0, (end - now).total_seconds()) / 3600

    # -- the controller's tick -------------------------------------------------------------------
    def tick(self, now: datetime, firing: Mapping[str, Episode]) -> None:
        s = self.settings
        for k, p in list(self.progress.items()):
            action, tkey = k
            if action == "drain":
                healthy = p.data.get("healthy", {})
                uuids = p.data.get("uuids", [])
                if uuids and all(u in healthy for u in uuids):
                    since = max(unstamp(healthy[u]) or now for u in uuids)
                    if now - since >= timedelta(seconds=s.drain.healthy_for_seconds):
                        del self.progress[k]
                        self.last_finished[k] = now
                        self.disrupted.pop(tkey.split("/", 1)[1], None)
            elif action == "reclaim" and p.phase == "notified":
                grace = float(p.data.get("grace_seconds", s.reclaim.grace_seconds))
                if now >= p.started_at + timedelta(seconds=grace):
                    if p.alert_key in firing:  # the re-check: the alert must still fire
                        self._stop(k, now)
                    else:
                        del self.progress[k]
            elif action == "resize" and now - p.started_at >= timedelta(
                seconds=s.resize.state_timeout_seconds
            ):
                del self.progress[k]
                self.last_finished[k] = now
                self.disrupted.pop(tkey.split("/", 1)[1], None)


def replay(
    episodes: Sequence[Episode],
    holdings: Sequence[Holding],
    nodes_total: int,
    settings: Settings,
    start: datetime,
    end: datetime,
    step_seconds: float,
    repeat_interval_seconds: float = 4 * 3600.0,
) -> WhatIf:
    """Replay ``episodes`` (alerts of ``[start, end]``) through policy and guard as ``--apply`` would.
    ``step_seconds``: the tick; ``repeat_interval_seconds``: Alertmanager's repeat of a firing alert
    (its default, 4h). Pure and deterministic."""
    settings = replace(settings, guard=replace(settings.guard, dry_run=False))
    sim = _Sim(settings, nodes_total, holdings)
    # events: (time, order, seq, kind, episode); at one time: tick first, then sends in episode order
    events: list[tuple[datetime, int, int, str, Episode | None]] = []
    seq = 0
    for e in episodes:
        t = e.start
        stop_at = e.end or end
        while t <= end and t < stop_at:
            events.append((t, 1, seq, "firing", e))
            seq += 1
            t += timedelta(seconds=repeat_interval_seconds)
        if e.end is not None and e.end <= end:
            events.append((e.end, 1, seq, "resolved", e))
            seq += 1
    t = start
    while t <= end:
        events.append((t, 0, seq, "tick", None))
        seq += 1
        t += timedelta(seconds=step_seconds)
    heapq.heapify(events)
    firing: dict[str, Episode] = {}
    while events:
        now, _, _, kind, ev = heapq.heappop(events)
        if ev is None:
            sim.tick(now, firing)
            continue
        alert = alert_of(ev, kind)
        if kind == "firing":
            firing[alert.key] = ev
            sim.episode_end[alert.key] = ev.end or end
        else:
            firing.pop(alert.key, None)
        sim.send(alert, now)
    return _summary(sim, episodes, nodes_total, settings, start, end, step_seconds)


def _summary(
    sim: _Sim,
    episodes: Sequence[Episode],
    nodes_total: int,
    settings: Settings,
    start: datetime,
    end: datetime,
    step_seconds: float,
) -> WhatIf:
    actions = []
    names = sorted({r.action for r in sim.records} | {r.action for r in settings.rules})
    for a in names:
        recs = [r for r in sim.records if r.action == a]
        runs = sum(1 for r in recs if r.allowed and r.step in guard.INITIATING_STEPS)
        refusals = Counter(r.refusal for r in recs if not r.allowed)
        held = {r.alert_key for r in recs if r.refusal == "cap"}
        ran = {r.alert_key for r in recs if r.allowed and r.step in guard.INITIATING_STEPS}
        actions.append(
            ActionSummary(
                a,
                runs,
                tuple(sorted(sim.ran.get(a, ()))),
                len(held),
                len(held & ran),
                dict(sorted(refusals.items())),
                tuple(sim.evicted) if a == "drain" else (),
                tuple(sim.reclaimed) if a == "reclaim" else (),
                sim.freed_hours if a == "reclaim" else 0.0,
            )
        )
    return WhatIf(
        start,
        end,
        step_seconds,
        nodes_total,
        guard.cap(settings.guard, nodes_total),
        len(episodes),
        tuple(actions),
        sim.max_disrupted,
        sim.max_at,
        sim.max_nodes,
        tuple(sim.records),
    )


def text(w: WhatIf) -> str:
    """The report as plain text, one line per fact."""
    lines = [
        f"what --apply would have done {stamp(w.start)} .. {stamp(w.end)} "
        f"({w.episodes} alert episodes, {w.nodes_total} nodes, cap {w.cap})"
    ]
    for a in w.actions:
        line = f"{a.action}: would run {a.runs} times on {len(a.targets)} targets"
        if a.targets:
            line += f" ({', '.join(a.targets[:10])}{', ...' if len(a.targets) > 10 else ''})"
        line += f"; {a.held_by_cap} alerts held by the cap ({a.held_then_ran} ran at a later repeat)"
        other = {k: v for k, v in a.refusals.items() if k != "cap"}
        if other:
            line += "; refused: " + ", ".join(f"{k} {v}" for k, v in other.items())
        if a.action == "drain":
            line += f"; {len(a.evicted)} pods evicted"
        if a.action == "reclaim":
            line += f"; {len(a.reclaimed)} notebooks reclaimed, {a.gpu_hours_freed:.1f} GPU-hours freed"
        lines.append(line)
    at = f" at {stamp(w.max_disrupted_at)} ({', '.join(w.max_disrupted_nodes)})" if w.max_disrupted_at else ""
    lines.append(f"largest number of nodes disrupted at once: {w.max_disrupted}{at}")
    lines.append("assuming: " + "; ".join(w.assumptions))
    return "\n".join(lines)
