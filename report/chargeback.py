"""Chargeback: who used what over the report's window, in device-hours, memory GiB-hours, energy and, with a
price table, money (pure).

Finance and team leads ask "who used what". From the raw series (``report.baseline`` runs the queries):
a card held by N containers is charged 1/N to each for every step it is held (``accelerator_allocated``);
memory is the card's ``accelerator_memory_used_bytes`` times that share; energy is the card's
``accelerator_energy_joules_total`` rate times that share (``energy_kwh_counter``), or, for cards with no
energy counter (Ascend's npu-smi, Hygon, Cambricon, ...), its ``accelerator_power_watts`` times the step
(``energy_kwh_from_power``): two parts that add up to the energy, never one inside the other. Idle hours are
the held hours with utilization at most the IdleNotebook alert's ``utilization_max`` at the step. With a
price table (``report.config.Prices``) each row costs device-hours x its model's card-hour price and kWh x
the kWh price.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace

from xpuwatch.report.config import Prices

# CSV columns. No column contains another (the parts of a figure are separate columns that add up, a share
# is not a quantity), so any column can be summed down without counting anything twice: idle hours are
# device_hours x idle_share; energy is energy_kwh_counter + energy_kwh_from_power; a row's cost is
# card_cost + energy_cost.
FIGURE_COLUMNS = (
    "device_hours",
    "idle_share",
    "memory_gib_hours",
    "energy_kwh_counter",
    "energy_kwh_from_power",
)
TEAM_COLUMNS = ("namespace", "owner", *FIGURE_COLUMNS)
MODEL_COLUMNS = ("vendor", "model", *FIGURE_COLUMNS)


def cost_columns(prices: Prices | None) -> tuple[str, ...]:
    """The cost columns a price table gives: ``card_cost`` with card-hour prices, ``energy_cost`` with a kWh
    price, and ``currency``; none without prices (no price, no cost column)."""
    if prices is None:
        return ()
    return (
        *(("card_cost",) if prices.has_card_prices else ()),
        *(("energy_cost",) if prices.kwh is not None else ()),
        "currency",
    )


@dataclass(frozen=True)
class Usage:
    """One team's use of one pool over the window. Hours are device-hours (a card held all week = 168);
    energy in two parts that add up (``energy_kwh``): from the energy counter, and power x time for cards
    with no counter. Costs (``priced``) in the price table's currency: ``card_cost`` None when a model of
    the row has no card-hour price, ``energy_cost`` None without a kWh price."""

    namespace: str
    owner: str
    vendor: str
    model: str
    device_hours: float
    idle_hours: float
    memory_gib_hours: float
    energy_kwh_counter: float
    energy_kwh_from_power: float
    card_cost: float | None = None
    energy_cost: float | None = None

    @property
    def energy_kwh(self) -> float:
        """All the row's energy: metered plus estimated from power."""
        return self.energy_kwh_counter + self.energy_kwh_from_power

    @property
    def idle_share(self) -> float:
        """Idle hours / held hours (0 when nothing was held)."""
        return self.idle_hours / self.device_hours if self.device_hours else 0.0

    @property
    def cost(self) -> float | None:
        """card_cost + energy_cost, those that are priced; None when neither is."""
        parts = [c for c in (self.card_cost, self.energy_cost) if c is not None]
        return sum(parts) if parts else None


def priced(rows: Sequence[Usage], prices: Prices | None) -> tuple[Usage, ...]:
    """``rows`` with their costs: device-hours x the model's card-hour price (None: no price for it), kWh x
    the kWh price. Without prices, the rows as they are."""
    if prices is None:
        return tuple(rows)
    out = []
    for r in rows:
        card = prices.card_hour(r.vendor, r.model) if prices.has_card_prices else None
        out.append(
            replace(
                r,
                card_cost=None if card is None else r.device_hours * card,
                energy_cost=None if prices.kwh is None else r.energy_kwh * prices.kwh,
            )
        )
    return tuple(out)


def unpriced(rows: Sequence[Usage], prices: Prices | None) -> dict[tuple[str, str], float]:
    """(vendor, model) -> device-hours of the models the table gives no card-hour price (empty without card
    prices)."""
    out: dict[tuple[str, str], float] = {}
    if prices is None or not prices.has_card_prices:
        return out
    for r in rows:
        if prices.card_hour(r.vendor, r.model) is None:
            out[r.vendor, r.model] = out.get((r.vendor, r.model), 0.0) + r.device_hours
    return out


def _cost_sum(costs: list[float | None]) -> float | None:
    """A group's cost: None when any row's is unknown (a partial sum would read as the whole)."""
    if not costs or any(c is None for c in costs):
        return None
    return sum(c for c in costs if c is not None)


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
        sum(r.energy_kwh_counter for r in rows),
        sum(r.energy_kwh_from_power for r in rows),
        _cost_sum([r.card_cost for r in rows]),
        _cost_sum([r.energy_cost for r in rows]),
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


def to_csv(rows: Sequence[Usage], columns: Sequence[str], currency: str = "") -> str:
    """CSV text with a header row: ``columns`` of ``TEAM_COLUMNS`` / ``MODEL_COLUMNS`` and ``cost_columns``;
    hours, GiB-hours and kWh to 3 decimals, idle_share 0..1 to 4, costs to 2 (empty: no price for a model
    of the row), ``currency`` in its column."""
    names = {f.name for f in fields(Usage)} | {"idle_share", "currency"}
    unknown = set(columns) - names
    if unknown:
        raise ValueError(f"unknown chargeback column(s): {', '.join(sorted(unknown))}")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        out = []
        for col in columns:
            v = currency if col == "currency" else getattr(r, col)
            if v is None:
                out.append("")
            elif col in ("card_cost", "energy_cost"):
                out.append(f"{v:.2f}")
            else:
                out.append(f"{v:.4f}" if col == "idle_share" else f"{v:.3f}" if isinstance(v, float) else v)
        w.writerow(out)
    return buf.getvalue()
