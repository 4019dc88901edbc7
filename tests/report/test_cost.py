"""The report's price table (report.config) and the costs it gives the chargeback (report.chargeback): each
cost is the price table times the chargeback's figures, a model with no price costs "n/a" (never a partial
sum read as the whole), no price table means no cost column, and no CSV column contains another."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from xpuwatch.alerts.spec import load_spec
from xpuwatch.report import chargeback as cb
from xpuwatch.report.chargeback import Usage
from xpuwatch.report.config import ConfigError, load_config, parse_config
from xpuwatch.report.render import html

SPEC = load_spec()
A100, H100, ASCEND, MI300 = (
    ("nvidia", "NVIDIA A100-SXM4-80GB"),
    ("nvidia", "NVIDIA H100 80GB HBM3"),
    ("huawei", "Ascend910B"),
    ("amd", "AMD Instinct MI300X"),
)
PRICES = {
    "currency": "CNY",
    "card_hour": {"NVIDIA H100 80GB HBM3": 28.0, "nvidia.com/gpu": 16.0, "huawei.com/Ascend910": 12.0},
    "kwh": 0.85,
}


def _row(ns: str, pool: tuple[str, str], hours: float, kwh: float, from_power: float = 0.0) -> Usage:
    return Usage(ns, ns, pool[0], pool[1], hours, hours / 4, hours * 10, kwh, from_power)


ROWS = (
    _row("ml", A100, 168.0, 40.0),
    _row("ml", H100, 336.0, 90.0),
    _row("nlp", ASCEND, 100.0, 0.0, 25.0),
    _row("nlp", A100, 10.5, 2.5),
)


def test_prices_by_model_then_by_the_vendor_a_resource_name_stands_for() -> None:
    prices = parse_config({"prices": PRICES}, SPEC).prices
    assert prices is not None and prices.currency == "CNY" and prices.kwh == 0.85
    assert prices.card_hour(*H100) == 28.0  # its own price before its vendor's
    assert prices.card_hour(*A100) == 16.0  # nvidia.com/gpu: every NVIDIA model not named
    assert prices.source(*A100) == "nvidia.com/gpu" and prices.source(*H100) == "NVIDIA H100 80GB HBM3"
    assert prices.card_hour(*ASCEND) == 12.0  # huawei.com/Ascend910 -> huawei (queue_resources)
    assert prices.card_hour(*MI300) is None


def test_every_cost_is_the_price_table_times_the_chargeback() -> None:
    prices = parse_config({"prices": PRICES}, SPEC).prices
    rows = cb.priced(ROWS, prices)
    want_card = {"ml": 168.0 * 16 + 336.0 * 28, "nlp": 100.0 * 12 + 10.5 * 16}
    want_energy = {"ml": (40.0 + 90.0) * 0.85, "nlp": (25.0 + 2.5) * 0.85}
    teams = {t.namespace: t for t in cb.by_team(rows)}
    assert {k: t.card_cost for k, t in teams.items()} == pytest.approx(want_card)
    assert {k: t.energy_cost for k, t in teams.items()} == pytest.approx(want_energy)
    models = {(m.vendor, m.model): m for m in cb.by_model(rows)}
    assert models[A100].card_cost == pytest.approx((168.0 + 10.5) * 16)
    assert models[H100].card_cost == pytest.approx(336.0 * 28)
    # the CSV's cost columns sum to the same, team by team and in all, with the currency named
    columns = (*cb.TEAM_COLUMNS, *cb.cost_columns(prices))
    table = list(csv.DictReader(io.StringIO(cb.to_csv(cb.by_team(rows), columns, "CNY"))))
    assert {r["namespace"]: float(r["card_cost"]) for r in table} == pytest.approx(want_card, abs=0.005)
    assert {r["namespace"]: float(r["energy_cost"]) for r in table} == pytest.approx(want_energy, abs=0.005)
    assert {r["currency"] for r in table} == {"CNY"}
    total = cb.total(rows)
    assert total.cost == pytest.approx(sum(want_card.values()) + sum(want_energy.values()))


def test_a_model_without_a_price_costs_n_a_not_a_partial_sum() -> None:
    prices = parse_config({"prices": {**PRICES, "card_hour": {"nvidia.com/gpu": 16.0}}}, SPEC).prices
    rows = cb.priced(ROWS, prices)
    teams = {t.namespace: t for t in cb.by_team(rows)}
    assert teams["ml"].card_cost == pytest.approx((168.0 + 336.0) * 16)
    assert teams["nlp"].card_cost is None  # 100 h of Ascend have no price: the team's card cost is unknown
    assert teams["nlp"].energy_cost == pytest.approx(27.5 * 0.85)
    assert cb.unpriced(ROWS, prices) == {ASCEND: 100.0}
    text = cb.to_csv(cb.by_team(rows), (*cb.TEAM_COLUMNS, *cb.cost_columns(prices)), "CNY")
    assert list(csv.DictReader(io.StringIO(text)))[1]["card_cost"] == ""
    page = _page(rows=ROWS, prices=prices)
    assert "No card-hour price for Ascend910B (100.0 h)" in page


def test_no_price_no_cost_column() -> None:
    assert cb.cost_columns(None) == ()
    assert cb.priced(ROWS, None) == ROWS
    page = _page(rows=ROWS, prices=None)
    assert "cost (" not in page and "No price table" in page
    kwh_only = parse_config({"prices": {"currency": "EUR", "kwh": 0.3}}, SPEC).prices
    assert cb.cost_columns(kwh_only) == ("energy_cost", "currency")
    assert "card cost" not in _page(rows=ROWS, prices=kwh_only)


def test_csv_columns_are_parts_that_add_up_never_one_inside_another() -> None:
    """energy_kwh included energy_kwh_from_power, so summing both counted power x time twice (issue 34); idle
    hours are part of device_hours. Now energy is two disjoint parts, idle a share; the sum of the kWh
    columns is the energy, once."""
    assert "energy_kwh" not in cb.TEAM_COLUMNS and "idle_hours" not in cb.TEAM_COLUMNS
    assert cb.TEAM_COLUMNS[2:] == cb.MODEL_COLUMNS[2:] == cb.FIGURE_COLUMNS
    table = list(csv.DictReader(io.StringIO(cb.to_csv(cb.by_team(ROWS), cb.TEAM_COLUMNS))))
    kwh = sum(float(r["energy_kwh_counter"]) + float(r["energy_kwh_from_power"]) for r in table)
    assert kwh == pytest.approx(sum(r.energy_kwh for r in ROWS)) == 157.5
    idle = sum(float(r["device_hours"]) * float(r["idle_share"]) for r in table)
    assert idle == pytest.approx(sum(r.idle_hours for r in ROWS), rel=1e-4)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"prices": {"card_hour": {"A100": 1}}}, "prices.currency: name the currency"),
        ({"prices": {"currency": "CNY"}}, "give card_hour prices, a kwh price, or both"),
        ({"prices": {"currency": "CNY", "kwh": -1}}, r"prices.kwh: expected a price \(a number >= 0\)"),
        ({"prices": {"currency": "CNY", "card_hour": {"A100": "cheap"}}}, "prices.card_hour.A100: expected"),
        ({"prices": {"currency": "CNY", "card_hour": {"A100": True}}}, "prices.card_hour.A100: expected"),
        ({"prices": {"currency": "CNY", "kwh": 1, "gpu_hour": 2}}, "unknown key.*gpu_hour"),
        ({"price": {}}, "config: unknown key.*price"),
        (
            {"prices": {"currency": "CNY", "card_hour": {"example.com/widget": 1}}},
            "prices.card_hour.example.com/widget: no vendor's resource",
        ),
        (
            {"prices": {"currency": "CNY", "card_hour": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2}}},
            "nvidia.com/gpu already prices the nvidia cards",
        ),
    ],
)
def test_a_bad_price_table_names_its_key(data: object, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_config(data, SPEC)


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "report.yaml"
    path.write_text("prices:\n  currency: USD\n  card_hour:\n    amd.com/gpu: 2.5\n")
    prices = load_config(path, SPEC).prices
    assert prices is not None and prices.card_hour(*MI300) == 2.5 and prices.kwh is None
    path.write_text("")
    assert load_config(path, SPEC).prices is None
    path.write_text("prices: [")
    with pytest.raises(ConfigError, match="not valid YAML: line 1"):
        load_config(path, SPEC)


def _page(rows: tuple[Usage, ...], prices: object) -> str:
    from tests.report.test_render import _baseline

    b = _baseline()
    return html(type(b)(**{**vars(b), "usage": rows}), 0.0, prices=prices)  # type: ignore[arg-type]


def test_report_cli_refuses_a_bad_price_table_before_asking_prometheus(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "report.yaml"
    bad.write_text("prices:\n  currency: CNY\n  card_hour:\n    example.com/widget: 3\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "xpuwatch",
            "report",
            "--prometheus",
            "http://127.0.0.1:9",
            "--config",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        f"xpuwatch report: {bad}: prices.card_hour.example.com/widget: no vendor's resource (alerts/spec.yaml "
        "recording.queue_resources) is named example.com/widget; price the models instead"
    ]
