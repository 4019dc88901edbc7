"""The report's own config (``xpuwatch report --config FILE``, YAML): the price table that turns the chargeback's
card-hours and kWh into money. Parsed strictly at the edge into frozen dataclasses; pure apart from reading.

The format (every key optional but ``currency`` once any price is given)::

    prices:
      currency: CNY                  # printed with every cost; the report converts nothing
      card_hour:                     # one card held for one hour
        NVIDIA H100 80GB HBM3: 28.0  # by model, as the exporter's ``model`` label writes it
        nvidia.com/gpu: 16.0         # by resource name: every model of that resource's vendor not named above
        huawei.com/Ascend910: 12.0
      kwh: 0.85                      # one kWh of device energy (the chargeback's kWh, metered or power x time)

A resource name (it has a ``/``) stands for the vendor that alerts/spec.yaml ``recording.queue_resources``
maps it to, the mapping the queue alerts use; two resource names of one vendor, or one no vendor matches,
are an error (price the models instead). OpenCost prices GPU-hours per node the same way (a price per
GPU-hour, by node type); here the card is the unit because the chargeback charges cards.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import re2  # google-re2: the regex syntax Prometheus compiles, as alerts/spec.py checks the resource regexes

from xpuwatch.alerts.spec import Spec
from xpuwatch.exporter import validation


class ConfigError(ValueError):
    """The report config is malformed; the message names the file's key (``prices.card_hour.X``)."""


@dataclass(frozen=True)
class Prices:
    """Prices in ``currency``: per card-hour by model and by vendor (from a resource name), per kWh."""

    currency: str
    by_model: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    by_vendor: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    vendor_keys: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # vendor -> its key
    kwh: float | None = None

    @property
    def has_card_prices(self) -> bool:
        return bool(self.by_model or self.by_vendor)

    def card_hour(self, vendor: str, model: str) -> float | None:
        """The price of one card-hour of ``model``: its own, else its vendor's; None when neither is given."""
        if model in self.by_model:
            return self.by_model[model]
        return self.by_vendor.get(vendor)

    def source(self, vendor: str, model: str) -> str | None:
        """Which key of the table prices ``model``: the model itself or a resource name; None: none."""
        if model in self.by_model:
            return model
        return self.vendor_keys.get(vendor)


@dataclass(frozen=True)
class ReportConfig:
    prices: Prices | None = None


def ksm_resource(name: str) -> str:
    """A resource name as kube-state-metrics writes it in a label: ``nvidia.com/gpu`` -> ``nvidia_com_gpu``."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _price(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{path}: expected a price (a number >= 0), got {value!r}")
    return float(value)


def _mapping(node: Any, path: str, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise ConfigError(f"{path}: expected a mapping, got {type(node).__name__}")
    if keys is not None:
        unknown = [str(k) for k in node if k not in keys]
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(keys)})")
    return node


def _prices(node: Any, spec: Spec) -> Prices:
    node = _mapping(node, "prices", ("currency", "card_hour", "kwh"))
    currency = node.get("currency")
    if not isinstance(currency, str) or not currency.strip():
        raise ConfigError("prices.currency: name the currency the prices are in, e.g. CNY, USD or EUR")
    by_model: dict[str, float] = {}
    by_vendor: dict[str, float] = {}
    vendor_keys: dict[str, str] = {}
    resources: Mapping[str, str] = spec.rec("queue_resources")
    for key, value in _mapping(node.get("card_hour") or {}, "prices.card_hour").items():
        path = f"prices.card_hour.{key}"
        price = _price(value, path)
        if "/" not in str(key):
            by_model[str(key)] = price
            continue
        vendors = [v for v, regex in resources.items() if re2.fullmatch(regex, ksm_resource(str(key)))]
        if not vendors:
            raise ConfigError(
                f"{path}: no vendor's resource (alerts/spec.yaml recording.queue_resources) is named "
                f"{key}; price the models instead"
            )
        vendor = vendors[0]
        if vendor in vendor_keys:
            raise ConfigError(
                f"{path}: {vendor_keys[vendor]} already prices the {vendor} cards; price the models instead"
            )
        by_vendor[vendor], vendor_keys[vendor] = price, str(key)
    kwh = node.get("kwh")
    prices = Prices(
        currency.strip(),
        MappingProxyType(by_model),
        MappingProxyType(by_vendor),
        MappingProxyType(vendor_keys),
        None if kwh is None else _price(kwh, "prices.kwh"),
    )
    if not prices.has_card_prices and prices.kwh is None:
        raise ConfigError("prices: give card_hour prices, a kwh price, or both")
    return prices


def parse_config(data: Any, spec: Spec) -> ReportConfig:
    """The decoded YAML (None: an empty file) -> ReportConfig; ConfigError names the first bad key."""
    if data is None:
        return ReportConfig()
    data = _mapping(data, "config", ("prices",))
    return ReportConfig(prices=_prices(data["prices"], spec) if data.get("prices") is not None else None)


def load_config(path: Path, spec: Spec) -> ReportConfig:
    """Read and parse ``path``. Raises ConfigError (unreadable, not YAML, bad content: `validation.yaml_file`)."""
    return parse_config(validation.yaml_file(path, "--config", ConfigError), spec)
