"""Chargeback: who used what over the report's window, in device-hours, memory GiB-hours and energy (pure).

Finance and team leads ask "who used what". From the raw series (``report.baseline`` runs the queries):
a card held by N containers is charged 1/N to each for every step it is held (``accelerator_allocated``);
memory is the card's ``accelerator_memory_used_bytes`` times that share; energy is the card's
``accelerator_energy_joules_total`` rate times that share, or, for cards with no energy counter (Ascend's
npu-smi, Hygon, Cambricon, ...), its ``accelerator_power_watts`` times the step, counted apart so the page
can say which part is estimated from power. Idle hours are the held hours with utilization at most the
IdleNotebook alert's ``utilization_max``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

TEAM_COLUMNS = (
    "namespace",
    "owner",
    "device_hours",
    "idle_hours",
    "idle_share",
    "memory_gib_hours",
    "energy_kwh",
    "energy_kwh_from_power",
)
MODEL_COLUMNS = (
    "vendor",
    "model",
    "device_hours",
    "idle_hours",
    "idle_share",
    "memory_gib_hours",
    "energy_kwh",
    "energy_kwh_from_power",
)


@dataclass(frozen=True)
class Usage:
    """One team's use of one pool over the window. Hours are device-hours (a card held all week = 168);
    ``energy_kwh`` includes ``energy_kwh_from_power`` (power x time, for cards with no energy counter)."""

    namespace: str
    owner: str
    vendor: str
    model: str
    device_hours: float
    idle_hours: float
    memory_gib_hours: float
    energy_kwh: float
    energy_kwh_from_power: float

    @property
    def idle_share(self) -> float:
        """Idle hours / held hours (0 when nothing was held)."""
        return self.idle_hours / self.device_hours if self.device_hours else 0.0


def _sum(rows: Iterable[Usage], namespace: str, owner: str, vendor: str, model: str) -> Usage:
    rows = list(rows)
    return Usage(
        namespace,
        owner,
        vendor,
        model,
        sum(r.device_hours for r in rows),
        sum(r.idle_hours for r in rows),
        sum(r.memory_gib_hours for r in rows),
        sum(r.energy_kwh for r in rows),
        sum(r.energy_kwh_from_power for r in rows),
    )


def by_team(rows: Sequence[Usage]) -> tuple[Usage, ...]:
    """Per (namespace, owner), every pool summed (vendor/model ""), most device-hours first."""
    keys = sorted({(r.namespace, r.owner) for r in rows})
    out = [_sum((r for r in rows if (r.namespace, r.owner) == k), k[0], k[1], "", "") for k in keys]
    return tuple(sorted(out, key=lambda u: -u.device_hours))


def by_model(rows: Sequence[Usage]) -> tuple[Usage, ...]:
    """Per (vendor, model), every team summed (namespace/owner "")."""
    keys = sorted({(r.vendor, r.model) for r in rows})
    return tuple(_sum((r for r in rows if (r.vendor, r.model) == k), "", "", k[0], k[1]) for k in keys)


def total(rows: Sequence[Usage]) -> Usage:
    """Everything summed."""
    return _sum(rows, "", "", "", "")


def to_csv(rows: Sequence[Usage], columns: Sequence[str]) -> str:
    """CSV text with a header row: ``columns`` of ``TEAM_COLUMNS`` / ``MODEL_COLUMNS``; hours, GiB-hours and
    kWh to 3 decimals, idle_share 0..1 to 4."""
    names = {f.name for f in fields(Usage)} | {"idle_share"}
    unknown = set(columns) - names
    if unknown:
        raise ValueError(f"unknown chargeback column(s): {', '.join(sorted(unknown))}")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        out = []
        for col in columns:
            v = getattr(r, col)
            out.append(f"{v:.4f}" if col == "idle_share" else f"{v:.3f}" if isinstance(v, float) else v)
        w.writerow(out)
    return buf.getvalue()
